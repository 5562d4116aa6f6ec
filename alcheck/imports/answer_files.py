"""What the EAGLE repo's and Spec-Bench's answer files share (both grew from FastChat's
gen_model_answer.py): one JSON line per question with `question_id`, `model_id` and `choices`,
each choice holding per-turn lists (`turns` texts, counts, `wall_time`). Each choice is one
independent generation of every turn of the question (`--num-choices`): a repeat."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from alcheck.imports.records import Setting
from alcheck.imports.source import bad, counts, json_lines, numbers


def choices_of(obj: dict, path: Path, line: int, fix: str) -> list[dict]:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise bad(path, line, "no `choices` list of objects", fix)
    return choices


def question_id_of(obj: dict, path: Path, line: int, fix: str) -> int | str:
    """The line's question_id: a number or a non-empty text (null would import as a question "None")."""
    qid = obj.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
        raise bad(path, line, f"`question_id` is {qid!r}, not a question id", fix)
    return qid


def require_choice_keys(
    obj: dict, keys: tuple[str, ...], path: Path, line: int, fix: str, other: tuple[str, str, str]
) -> None:
    """Every choice holds `keys`. other = (a key, "a <tool>" whose files have it, its import format):
    a choice with that key instead is named as that tool's file."""
    key, tool, fmt = other
    for repeat, choice in enumerate(choices_of(obj, path, line, fix)):
        if not all(k in choice for k in keys):
            hint = f" ({key}: {tool} file? use {fmt})" if key in choice else ""
            raise bad(path, line, f"choice {repeat} has no {' / '.join(keys)}{hint}", fix)


def turn_lists(choice: dict, keys: tuple[str, ...], path: Path, line: int, fix: str) -> dict[str, list]:
    """The per-turn lists of one choice, which must all have one entry per turn."""
    lists = {"turns": choice.get("turns")}
    if not isinstance(lists["turns"], list) or not all(isinstance(t, str) for t in lists["turns"]):
        raise bad(path, line, "`turns` is not a list of answer texts", fix)
    for key in keys:
        lists[key] = (
            numbers(choice, key, path, line, fix)
            if key == "wall_time"
            else counts(choice, key, path, line, fix)
        )
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        detail = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise bad(
            path,
            line,
            f"the turn count disagrees between fields ({detail})",
            "each per-turn list needs one entry per turn: restore the file",
        )
    return lists


def repeat_lists(obj: dict, keys: tuple[str, ...], path: Path, line: int, fix: str) -> list[dict[str, list]]:
    """turn_lists of every choice; choices are repeats of the whole question, so their turn counts agree."""
    out = [turn_lists(choice, keys, path, line, fix) for choice in choices_of(obj, path, line, fix)]
    for i, lists in enumerate(out[1:], start=1):
        if len(lists["turns"]) != len(out[0]["turns"]):
            raise bad(
                path,
                line,
                f"choice {i} has {len(lists['turns'])} turns but choice 0 has "
                f"{len(out[0]['turns'])}, so it cannot be a repeat of the question",
                "each choice answers every turn: restore the file or split the runs into files",
            )
    return out


def answer_lines(
    path: Path,
    tool: str,
    fix: str,
    stated: dict[str, Setting],
    model_settings: Callable[[str, int], dict[str, Setting]],
) -> Iterator[tuple[int, dict]]:
    """(line, object) of each answer line, checked; what each model_id says goes into `stated`
    (the first line that says it wins). Every line has as many choices as the first: choice i
    is repeat i of the whole question set."""
    first = None  # (line, number of choices)
    for line, obj in json_lines(path, tool):
        if "question_id" not in obj or "choices" not in obj:
            raise bad(path, line, f"not a {tool} answer line (no question_id or choices)", fix)
        question_id_of(obj, path, line, fix)
        n = len(choices_of(obj, path, line, fix))
        first = first or (line, n)
        if n != first[1]:
            raise bad(
                path,
                line,
                f"{n} choice{'s' * (n != 1)} but line {first[0]} has {first[1]}, so the "
                "choices cannot be repeats of the whole question set",
                "keep one --num-choices per file (split the runs into files)",
            )
        for key, setting in model_settings(str(obj.get("model_id", "")), line).items():
            stated.setdefault(key, setting)
        yield line, obj


def baseline_records(
    path: Path, tool: str, fix: str, token_key: str, tokens: Callable[[int], int], tokens_from: str
) -> list[dict]:
    """A baseline answer file for speedup: per question its texts, wall times and the tokens its
    file records per turn (`tokens(value of token_key)`)."""
    out = []
    for line, obj in answer_lines(path, tool, fix, {}, lambda model_id, line: {}):
        # choices[0] only: the sources' speed.py reads no other
        lists = turn_lists(choices_of(obj, path, line, fix)[0], (token_key, "wall_time"), path, line, fix)
        out.append(
            {
                "line": line,
                "question_id": obj["question_id"],
                "texts": lists["turns"],
                "wall_time": lists["wall_time"],
                "tokens": [tokens(v) for v in lists[token_key]],
                "tokens_from": tokens_from,
            }
        )
    return out
