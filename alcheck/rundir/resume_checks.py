"""What `--resume` compares besides the settings and the checkpoints: the conditions the stored rows
were measured under, recorded in run.json's `fingerprints` (alcheck/rundir/fingerprint.py).

- "runtime": the device kind, dtype and attention kernel as resolved, so `--device auto` that now
  finds a GPU, or another dtype, never adds rows to a CPU float32 run.
- "inputs": each dataset's contents, the --chat-template file, and the turn-1 prompts.
- and each checkpoint role ("target", "draft"): its files' fingerprints.

Each check returns the one-line reason to refuse, or None. A field a run did not record (it
predates it) is unknown, not a difference: the caller notes it once and records it from then on.
Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.rundir.fingerprint import checkpoint_fingerprint, differences
from alcheck.rundir.portable import resolved_path

CONDITIONS = ("runtime", "inputs")
CHECKPOINT_KEYS = ("target", "draft")  # config keys naming a checkpoint, fingerprinted under that role
DATASET = "dataset "  # inputs' key prefix: "dataset mt_bench", "dataset data/q.jsonl"
LABELS = {"device": "device", "dtype": "dtype", "attention": "attention kernel"}
RESTART = "or start a new --out directory"


def recorded_runtime(meta: dict) -> dict:
    """The runtime a run recorded: its fingerprint, or for a run from before that fingerprint, what
    its environment names (the built-in runner's device, dtype and attention backend)."""
    recorded = (meta.get("fingerprints") or {}).get("runtime")
    if recorded:
        return recorded
    env = meta.get("environment") or {}
    if env.get("backend") == "engine" or not {"device", "dtype", "attention_backend"} <= set(env):
        return {}
    return {
        "device": str(env["device"]).split(":")[0],
        "dtype": env["dtype"],
        "attention": env["attention_backend"],
    }


def unknown_fields(then: dict, now: dict) -> list[str]:
    """The runtime and input fields `now` has that the run never recorded."""
    return [name for role in CONDITIONS for name in now.get(role, {}) if name not in (then.get(role) or {})]


def _changed(then: dict, now: dict) -> list[str]:
    return [name for name in now if name in then and then[name] != now[name]]


def checkpoint_change(role: str, then: dict | None, now: dict) -> str | None:
    changed = differences(then, now)[:3] if then is not None else []
    if not changed:
        return None
    return (
        f"the {role} checkpoint is not the one this run measured ({'; '.join(changed)}): "
        "resume with the same checkpoints, or start a new run with another --out"
    )


def runtime_change(then: dict, now: dict) -> str | None:
    changed = _changed(then, now)
    if not changed:
        return None
    what = "; ".join(f"{LABELS.get(n, n)} {then[n]} then, {now[n]} now" for n in changed)
    if {"device", "dtype"} & set(changed):
        fix = f"pass --device {then.get('device')} --dtype {then.get('dtype')} as the run used"
    else:  # same device and dtype: another kernel is installed (flash-attn) or missing
        fix = f"resume where the {then['attention']} attention kernel is used"
    return f"this run was measured under other conditions ({what}): {fix}, {RESTART}"


def inputs_change(
    then: dict, now: dict, chat_template: str | None, rows: list[dict], prompt_hashes: dict
) -> str | None:
    """A changed dataset or chat template is named before the prompts it changed."""
    changed = _changed(then, now)
    for name in changed:
        sums = f"sha256 {then[name]} then, {now[name]} now"
        if name.startswith(DATASET):
            return (
                f"the dataset {name[len(DATASET) :]} changed since this run measured it ({sums}): "
                f"restore its file, {RESTART}"
            )
        if name == "chat_template":
            return (
                f"the --chat-template file {chat_template} changed since this run measured it ({sums}): "
                f"restore it, {RESTART}"
            )
    which = first_changed_prompt(rows, prompt_hashes)
    if which or "prompts" in changed:
        return (
            "the turn-1 prompts are not the ones this run measured "
            f"({which or 'their combined hash changed'}): "
            f"the tokenizer or its chat template changed; restore it, {RESTART}"
        )
    return None


def first_changed_prompt(rows: list[dict], prompt_hashes: dict) -> str | None:
    """The first stored turn-1 row whose prompt_hash differs from the prompt built now, in words
    (rows of runs from before prompt_hash have it empty: not compared)."""
    for row in rows:
        key = (row.get("dataset") or "", str(row["question_id"]))
        stored = row.get("prompt_hash")
        if str(row["turn"]) == "1" and stored and key in prompt_hashes and prompt_hashes[key] != stored:
            return (
                f"question {row['question_id']}: prompt_hash {stored} in questions.csv, "
                f"{prompt_hashes[key]} now"
            )
    return None


def _folder_fingerprint(spec) -> dict | None:
    """The fingerprint of a local checkpoint folder named by a --target/--draft value as run.json
    records it (alcheck/rundir/portable.py), else None."""
    path = Path(resolved_path(spec)).expanduser() if isinstance(spec, str) and spec else None
    return checkpoint_fingerprint(path) if path is not None and path.is_dir() else None


def moved_checkpoints(old: dict, new: dict, keys: list[str], recorded: dict) -> list[str]:
    """Of the settings that differ, the --target/--draft now naming another path that holds the very
    files the run measured (equal fingerprints: a copy, a move): not a different config."""
    return [
        key
        for key in keys
        if key in CHECKPOINT_KEYS and recorded.get(key) and _folder_fingerprint(new[key]) == recorded[key]
    ]


def config_change(old: dict, new: dict, keys: list[str], recorded: dict) -> str:
    """Why a resume's settings are not the run's, in words, with the fix: a checkpoint named at
    another path is said to hold other files (which ones), or to be unverifiable."""
    detail = ", ".join(f"{k}: {old.get(k)!r} there vs {new[k]!r} now" for k in keys[:3])
    for key in keys:
        if key not in CHECKPOINT_KEYS:
            continue
        now = _folder_fingerprint(new[key])
        if recorded.get(key) and now is not None:
            changed = "; ".join(differences(recorded[key], now)[:3])
            why = f"its files are not the ones this run measured ({changed})"
        elif now is not None:
            why = "this run recorded no fingerprint of its files, so a copy cannot be recognised"
        else:
            why = "a copy is recognised only as a local folder"
        return (
            f"was made with a different config ({detail}): --{key} {new[key]}: {why}: "
            f"drop --{key} to resume with {old.get(key)}, {RESTART}"
        )
    return f"was made with a different config ({detail}): resume with the same settings or use a new --out"
