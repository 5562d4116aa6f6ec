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

from alcheck.rundir.fingerprint import differences

CONDITIONS = ("runtime", "inputs")
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
