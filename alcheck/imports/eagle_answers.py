"""EAGLE repo answer files (`eagle/evaluation/gen_ea_answer_*.py`, `gen_baseline_answer_*.py`).

One JSON line per question: `question_id, answer_id, model_id, choices: [{index, turns,
idxs, new_tokens, wall_time}], tstamp`; `model_id` is `--model-id` + `-temperature-<T>`.

`eagenerate` loops `for idx in range(max_length)`, one target verification per iteration, and
breaks after the step is counted, so steps = idx + 1. Each step adds `accept_length + 1` to
new_token (its root, the previous bonus or the prefill token, plus the accepted drafts), so
new_tokens = Σ(a + 1) = steps + accepted: per turn AL = new_tokens / (idx + 1), alcheck's own
definition (Σnew_tokens / Σidxs drops a step per turn and reads high). The tail past EOS is
counted. The loop looks for EOS only among the tokens it appended, and the bonus token is not
appended until the next step, so a generation whose last bonus token is EOS takes one more step.

Each choice (`--num-choices`) is one repeat: choice i becomes repeat i of every question.

Baseline files (`naivegenerate`) leave new_tokens at 0: their tokens come from the text.
"""

from __future__ import annotations

import re
from pathlib import Path

from alcheck.imports.answer_files import answer_lines, baseline_records, repeat_lists, require_choice_keys
from alcheck.imports.records import FILE, TOOL, PerQuestion, Setting, TurnCounts
from alcheck.imports.source import bad
from alcheck.options import ONEHOT

NAME = "eagle-answers"
KIND = "run"
FIX = "pass an answer file written by the EAGLE repo's gen_ea_answer_*.py"
_TEMPERATURE = re.compile(r"-temperature-([0-9]+(?:\.[0-9]*)?)$")

COUNTING = {
    "source": "EAGLE repo gen_ea_answer_*.py (eagenerate)",
    "steps": "idxs + 1 (the loop counter of eagenerate is 0-based and the loop breaks after counting)",
    "accepted": "new_tokens - (idxs + 1): each step adds its accepted drafts + 1 to new_tokens",
    "prefill_token": "excluded (it is the first step's root, counted as that step's + 1)",
    "bonus_token": "counted (as the next step's root)",
    "tail_past_eos": "counted",
    "extra_eos_step": True,
    "converted": "exact: AL per turn = new_tokens / (idxs + 1), alcheck's definition",
}


def model_settings(model_id: str, line: int) -> dict[str, Setting]:
    """What `model_id` says: the temperature the script appended."""
    found = _TEMPERATURE.search(model_id)
    if not found:
        return {}
    return {"temperature": Setting(float(found.group(1)), FILE, f"model_id {model_id!r} on line {line}")}


def read(path: Path, given) -> PerQuestion:
    turns: list[TurnCounts] = []
    stated: dict[str, Setting] = {}
    for line, obj in answer_lines(path, "EAGLE repo", FIX, stated, model_settings):
        require_choice_keys(
            obj, ("idxs", "new_tokens"), path, line, FIX, ("decoding_steps", "a Spec-Bench", "spec-bench")
        )
        for repeat, lists in enumerate(
            repeat_lists(obj, ("idxs", "new_tokens", "wall_time"), path, line, FIX)
        ):
            turns += _turns(obj, repeat, lists, path, line)
    stated.setdefault("draft_sampling", Setting(ONEHOT, TOOL, "the EAGLE repo's evaluate_posterior"))
    return PerQuestion(NAME, path, turns, stated, dict(COUNTING))


def _turns(obj: dict, repeat: int, lists: dict[str, list], path: Path, line: int) -> list[TurnCounts]:
    """One choice's turns in alcheck's counts."""
    out = []
    for j, (idx, new, wall, text) in enumerate(
        zip(lists["idxs"], lists["new_tokens"], lists["wall_time"], lists["turns"])
    ):
        steps = idx + 1
        if new < steps:  # every step emits at least its root
            raise bad(
                path,
                line,
                f"turn {j + 1} has new_tokens {new} below idxs + 1 = {steps} "
                "(a baseline file? its tokens are in the text: pass it as --baseline)",
                FIX,
            )
        out.append(
            TurnCounts(
                line=line,
                question_id=obj["question_id"],
                turn=j + 1,
                repeat=repeat,
                steps=steps,
                accepted=new - steps,
                generated_tokens=new,
                text=text,
                wall_s=wall,
                category=str(obj.get("category") or ""),
            )
        )
    return out


def read_baseline(path: Path) -> list[dict]:
    """A baseline answer file for speedup (naivegenerate: one token per step, idxs + 1 tokens)."""
    return baseline_records(
        path,
        "EAGLE repo",
        FIX,
        "idxs",
        lambda idx: idx + 1,
        "idxs + 1 (naivegenerate emits one token per step)",
    )
