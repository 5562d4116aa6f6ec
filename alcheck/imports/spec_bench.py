"""Spec-Bench `model_answer` files (hemingkx/Spec-Bench, `evaluation/eval.py`).

One JSON line per question: `question_id, category, answer_id, model_id, choices: [{index,
turns, decoding_steps, new_tokens, wall_time, accept_lengths}], tstamp`. `decoding_steps`,
`new_tokens` and `wall_time` hold one entry per turn; `accept_lengths` is one flat list over all
turns of the choice, one entry (a + 1) per verification step, split per turn by the cumulative
decoding_steps. Each choice is one repeat (eval.py seeds choice i with i).

"#Mean accepted tokens" is the mean of all entries: alcheck's pooled AL. For EAGLE-1, EAGLE-2
and prompt lookup (`inference_eagle.py`, `model/eagle2/ea_model.py`, `inference_pld.py`) the
tokens past EOS are subtracted from the last entry (`invalid_len`); EAGLE-3 and the others keep
them. The method comes from `--method` or from the model_id eval.sh builds
(`<model>-eagle2-<dtype>`, `<model>-vanilla-<dtype>-temp-<T>`).
"""

from __future__ import annotations

import re
from pathlib import Path

from alcheck.imports.answer_files import answer_lines, baseline_records, repeat_lists, require_choice_keys
from alcheck.imports.records import FILE, PerQuestion, Setting, TurnCounts
from alcheck.imports.source import bad, counts

NAME = "spec-bench"
KIND = "run"
FIX = "pass a model_answer file written by Spec-Bench's evaluation/inference_*.py"
TRIMS_TAIL = ("eagle", "eagle2", "pld")  # methods whose last entry drops the tokens past EOS
# eval.sh's model ids: <model>-<method>[-...]-<dtype>[-temp-<T>]
_METHODS = (
    "eagle3",
    "eagle2",
    "eagle",
    "pld",
    "vanilla",
    "sps",
    "medusa",
    "hydra",
    "lade",
    "rest",
    "space",
    "recycling",
    "samd",
)
_DTYPES = ("float16", "bfloat16", "float32", "float64")


def method_from_model_id(model_id: str) -> str | None:
    parts = model_id.lower().split("-")
    return next((m for m in _METHODS if m in parts), None)


def model_settings(model_id: str, line: int) -> dict[str, Setting]:
    where = f"model_id {model_id!r} on line {line}"
    out = {}
    method = method_from_model_id(model_id)
    if method:
        out["method"] = Setting(method, FILE, where)
    dtype = next((d for d in _DTYPES if f"-{d}" in model_id.lower()), None)
    if dtype:
        out["dtype"] = Setting(dtype, FILE, where)
    temp = re.search(r"-temp-([0-9]+(?:\.[0-9]*)?)(?:-|$)", model_id)
    if temp:
        out["temperature"] = Setting(float(temp.group(1)), FILE, where)
    return out


# Spec-Bench's own method names whose loop is the EAGLE repo's (one more step when the last bonus token is
# EOS)
EAGLE_LOOPS = ("eagle", "eagle2", "eagle3")


def counting_for(method: str | None) -> dict:
    trims = method in TRIMS_TAIL
    return {
        "source": f"Spec-Bench evaluation/inference_{method or '<method>'}.py",
        "steps": "decoding_steps (one entry of accept_lengths per step)",
        "accepted": "Σ(accept_lengths - 1) over the turn's slice of accept_lengths",
        "prefill_token": "excluded (it is the first step's root)",
        "bonus_token": "counted (as the next step's root)",
        "tail_past_eos": ("subtracted" if trims else "counted") if method else "unknown",
        "extra_eos_step": method in EAGLE_LOOPS,
        "converted": (
            "per step a = entry - 1; the tokens past EOS that Spec-Bench subtracted from the last "
            "entry are lost, so that step reads low by them"
            if trims
            else "exact: per step a = entry - 1"
            if method
            else "per step a = entry - 1; whether the last entry dropped the tokens past EOS depends on the "
            "method (pass --method)"
        ),
    }


def _split(entries: list[int], steps: list[int], path: Path, line: int) -> list[list[int]]:
    if len(entries) != sum(steps):
        raise bad(
            path,
            line,
            f"accept_lengths has {len(entries)} entries but decoding_steps add up to {sum(steps)}",
            "one entry per verification step: restore the file",
        )
    out, start = [], 0
    for n in steps:
        out.append(entries[start : start + n])
        start += n
    return out


def read(path: Path, given) -> PerQuestion:
    turns: list[TurnCounts] = []
    stated: dict[str, Setting] = {}
    for line, obj in answer_lines(path, "Spec-Bench", FIX, stated, model_settings):
        require_choice_keys(
            obj,
            ("decoding_steps", "accept_lengths"),
            path,
            line,
            FIX,
            ("idxs", "an EAGLE repo", "eagle-answers"),
        )
        per_choice = repeat_lists(obj, ("decoding_steps", "new_tokens", "wall_time"), path, line, FIX)
        for repeat, (choice, lists) in enumerate(zip(obj["choices"], per_choice)):
            flat = counts(choice, "accept_lengths", path, line, FIX)  # one list over all turns
            per_turn = _split(flat, lists["decoding_steps"], path, line)
            for j, entries in enumerate(per_turn):
                if any(e < 1 for e in entries):
                    raise bad(
                        path,
                        line,
                        f"turn {j + 1} has an accept_lengths entry below 1",
                        "each entry is the accepted drafts + 1 of one step: restore the file",
                    )
                step_accepted = [e - 1 for e in entries]
                turns.append(
                    TurnCounts(
                        line=line,
                        question_id=obj["question_id"],
                        turn=j + 1,
                        repeat=repeat,
                        steps=len(entries),
                        accepted=sum(step_accepted),
                        generated_tokens=lists["new_tokens"][j],
                        step_accepted=step_accepted,
                        text=lists["turns"][j],
                        wall_s=lists["wall_time"][j],
                        category=str(obj.get("category") or ""),
                    )
                )
    method = given.method or (stated["method"].value if "method" in stated else None)
    return PerQuestion(NAME, path, turns, stated, counting_for(method))


def read_baseline(path: Path) -> list[dict]:
    """A vanilla (baseline) answer file for speedup (inference_baseline.py: new_tokens is the
    generated length)."""
    return baseline_records(
        path,
        "Spec-Bench",
        FIX,
        "new_tokens",
        lambda n: n,
        "new_tokens (the generated length inference_baseline.py records)",
    )
