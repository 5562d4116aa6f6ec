"""What the EAGLE repo's and Spec-Bench's answer files share (both grew from FastChat's
gen_model_answer.py): one JSON line per question with `question_id`, `model_id` and `choices`,
each choice holding per-turn lists (`turns` texts, counts, `wall_time`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from alcheck.imports.records import Setting
from alcheck.imports.source import bad, counts, json_lines, numbers


def choice_of(obj: dict, path: Path, line: int, fix: str) -> dict:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad(path, line, "no `choices` list of objects", fix)
    return choices[0]


def turn_lists(choice: dict, keys: tuple[str, ...], path: Path, line: int, fix: str) -> dict[str, list]:
    """The per-turn lists of one choice, which must all have one entry per turn."""
    lists = {"turns": choice.get("turns")}
    if not isinstance(lists["turns"], list) or not all(isinstance(t, str) for t in lists["turns"]):
        raise bad(path, line, "`turns` is not a list of answer texts", fix)
    for key in keys:
        lists[key] = numbers(choice, key, path, line, fix) if key == "wall_time" else counts(choice, key, path, line, fix)
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        detail = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise bad(path, line, f"the turn count disagrees between fields ({detail})",
                  "each per-turn list needs one entry per turn: restore the file")
    return lists


def answer_lines(path: Path, tool: str, fix: str, stated: dict[str, Setting],
                 model_settings: Callable[[str, int], dict[str, Setting]]) -> Iterator[tuple[int, dict]]:
    """(line, object) of each answer line, checked; what each model_id says goes into `stated`
    (the first line that says it wins)."""
    for line, obj in json_lines(path, tool):
        if "question_id" not in obj or "choices" not in obj:
            raise bad(path, line, f"not a {tool} answer line (no question_id or choices)", fix)
        choice_of(obj, path, line, fix)
        for key, setting in model_settings(str(obj.get("model_id", "")), line).items():
            stated.setdefault(key, setting)
        yield line, obj


def baseline_records(path: Path, tool: str, fix: str, token_key: str, tokens: Callable[[int], int],
                     tokens_from: str) -> list[dict]:
    """A baseline answer file for speedup: per question its texts, wall times and the tokens its
    file records per turn (`tokens(value of token_key)`)."""
    out = []
    for line, obj in answer_lines(path, tool, fix, {}, lambda model_id, line: {}):
        lists = turn_lists(choice_of(obj, path, line, fix), (token_key, "wall_time"), path, line, fix)
        out.append({"line": line, "question_id": obj["question_id"], "texts": lists["turns"],
                    "wall_time": lists["wall_time"], "tokens": [tokens(v) for v in lists[token_key]],
                    "tokens_from": tokens_from})
    return out
