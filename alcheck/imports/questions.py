"""Match an import's questions to the dataset it names, by question_id and turn.

With --dataset (or a dataset the file states) that is a local question file (mt_bench is shipped),
each imported turn is looked up by question_id: its category comes from the dataset where the file
has none, and ids or turns the dataset lacks are counted in the notes (they still import: the
comparison pairs units by question_id and turn, so they only pair with runs that have them).
"""

from __future__ import annotations

from alcheck.errors import AlcheckError
from alcheck.imports.records import TurnCounts
from alcheck.prompts.dataset import resolve_dataset_path, validate_jsonl


def match_dataset(turns: list[TurnCounts], dataset: str | None) -> list[str]:
    """Fill categories from the dataset; notes on what did not match."""
    if not dataset:
        return []
    path = resolve_dataset_path(str(dataset))
    if path is None:
        return [f"dataset {dataset!r} is not a local question file: categories and question ids not checked"]
    try:
        questions = {str(q.question_id): q for q in validate_jsonl(path)}
    except AlcheckError as exc:
        return [
            f"dataset {dataset!r} could not be read ({exc.message}): categories and question ids not checked"
        ]
    unknown, extra_turns, other_category = set(), 0, 0
    for turn in turns:
        q = questions.get(str(turn.question_id))
        if q is None:
            unknown.add(str(turn.question_id))
            continue
        if turn.turn > len(q.turns):
            extra_turns += 1
        if not turn.category:
            turn.category = q.category
        elif turn.category != q.category:
            other_category += 1
    notes = []
    if unknown:
        notes.append(
            f"{len(unknown)} question id{'s' * (len(unknown) != 1)} not in {dataset} "
            f"(e.g. {sorted(unknown)[0]}): they pair only with runs that have them"
        )
    if extra_turns:
        notes.append(
            f"{extra_turns} turn{'s' * (extra_turns != 1)} beyond the dataset's turns for their question"
        )
    if other_category:
        notes.append(
            f"{other_category} turn{'s' * (other_category != 1)} with another category than {dataset}'s"
        )
    return notes
