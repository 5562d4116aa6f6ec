"""Per-question counts -> questions.csv rows (and per-step traces, as a run writes them), checked.

Each turn becomes one row in alcheck's schema (docs/reference/run-directory.md "questions.csv"): `drafted` =
steps * K, `accepted_per_pos[i]` = steps with a >= i+1 when the file has per-step counts or a
histogram (empty otherwise: the file does not say), `prompt_tokens` and `prompt_hash` empty (the
files do not record the prompt's token ids).
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.backends.engines.steps import steps_from_tokens
from alcheck.errors import AlcheckError
from alcheck.imports.records import PerQuestion, Setting, TurnCounts
from alcheck.imports.source import bad
from alcheck.options import is_tree
from alcheck.rundir.traces import Trace

PROMPT_HASH_NOTE = (
    "prompt_hash is empty: the source file does not record the prompt's token ids, so the "
    "prompt construction cannot be audited by hash (turn-1 answer texts are compared instead "
    "where the file carries them)"
)


@dataclass
class Converted:
    rows: list[dict]
    traces: list[Trace]  # one per turn with per-step counts; prompt_tokens None (not recorded)
    answers: list[dict]  # k, repeat, question_id, turn, text
    wall: dict[int, float | None]  # repeat -> Σ wall time (None when a turn has none)
    notes: list[str]


def per_position(k: int, turn: TurnCounts, data: PerQuestion) -> str:
    """'n1;n2;...' (steps with a >= i+1, i < K) from the per-step list or the histogram; '' without either."""
    if turn.step_accepted is not None:
        histogram: dict[int, int] = {}
        for a in turn.step_accepted:
            histogram[a] = histogram.get(a, 0) + 1
    elif turn.histogram is not None:
        histogram = turn.histogram
    else:
        return ""
    most = max((j for j, n in histogram.items() if n), default=0)
    if most > k:
        raise bad(
            data.path,
            turn.line,
            f"question {turn.question_id} turn {turn.turn} has a step that accepted {most} "
            f"drafts, more than K={k}",
            "check --k",
        )
    return ";".join(str(sum(n for j, n in histogram.items() if j >= i + 1)) for i in range(k))


def _check(k: int, turn: TurnCounts, data: PerQuestion):
    if turn.accepted > k * turn.steps:
        raise bad(
            data.path,
            turn.line,
            f"question {turn.question_id} turn {turn.turn} accepts {turn.accepted} drafts "
            f"in {turn.steps} steps, more than K={k} per step allows",
            "check --k",
        )


def _key(turn: TurnCounts) -> tuple:
    return str(turn.question_id), turn.turn, turn.repeat


def _same_numbers(a: TurnCounts, b: TurnCounts) -> bool:
    return (a.steps, a.accepted, a.generated_tokens, a.step_accepted, a.histogram) == (
        b.steps,
        b.accepted,
        b.generated_tokens,
        b.step_accepted,
        b.histogram,
    )


def deduplicate(data: PerQuestion) -> tuple[list[TurnCounts], int]:
    """The turns with exact repeats of a (question, turn, repeat) dropped; different numbers for
    the same one exit 2, naming both lines."""
    seen: dict[tuple, TurnCounts] = {}
    kept, dropped = [], 0
    for turn in data.turns:
        first = seen.get(_key(turn))
        if first is None:
            seen[_key(turn)] = turn
            kept.append(turn)
        elif _same_numbers(first, turn):
            dropped += 1
        else:
            raise bad(
                data.path,
                turn.line,
                f"question {turn.question_id} turn {turn.turn} again, with other numbers "
                f"than on line {first.line}",
                "keep one answer per question (or split the runs into files)",
            )
    return kept, dropped


def _steps(k: int, turn: TurnCounts, data: PerQuestion) -> int:
    """Every verification step: the source's, or for a vLLM count of a method that skips steps,
    from the tokens (at most K low, once per request, when its last step crossed the stop)."""
    if not turn.drafted_steps_only:
        return turn.steps
    where = f"{data.path} line {turn.line}"
    return steps_from_tokens(turn.generated_tokens, turn.accepted, turn.steps, k, where)


def convert(data: PerQuestion, settings: dict[str, Setting]) -> Converted:
    k = settings["k"].value
    if k is None:
        raise AlcheckError(
            f"{data.path}: {data.format} files do not record K (draft tokens per step): pass --k"
        )
    topk = settings["topk"].value or 1
    turns, dropped = deduplicate(data)
    turns.sort(key=lambda t: t.repeat)  # alcheck's order: repeat, then the file's question order and turn
    rows, traces, answers, wall = [], [], [], {}
    for turn in turns:
        _check(k, turn, data)
        steps = _steps(k, turn, data)
        row = {
            "k": k,
            "repeat": turn.repeat,
            "question_id": turn.question_id,
            "turn": turn.turn,
            "category": turn.category,
            "prompt_tokens": "",
            "prompt_hash": "",
            "generated_tokens": turn.generated_tokens,
            "steps": steps,
            "drafted_steps": turn.steps,
            "drafted": turn.drafted if turn.drafted is not None else turn.steps * k,
            "accepted": turn.accepted,
            "accepted_per_pos": per_position(k, turn, data),
        }
        if is_tree(topk):
            row.update(topk=topk, num_draft_tokens=settings["num_draft_tokens"].value)
        rows.append(row)
        if turn.step_accepted is not None and steps == turn.steps:  # a trace of drafted steps only: none
            traces.append(Trace(k, turn.repeat, turn.question_id, turn.turn, None, list(turn.step_accepted)))
        if turn.text is not None:
            answers.append(
                {
                    "k": k,
                    "repeat": turn.repeat,
                    "question_id": turn.question_id,
                    "turn": turn.turn,
                    "text": turn.text,
                }
            )
        if turn.repeat not in wall or wall[turn.repeat] is not None:
            wall[turn.repeat] = None if turn.wall_s is None else (wall.get(turn.repeat) or 0.0) + turn.wall_s
    notes = list(data.notes)
    if dropped:
        notes.append(f"{dropped} exact duplicate question turn{'s' * (dropped != 1)} dropped")
    return Converted(rows, traces, answers, wall, notes)
