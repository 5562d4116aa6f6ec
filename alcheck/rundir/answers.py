"""A run's answer texts, answers.jsonl: one JSON line `{k, repeat, question_id, turn, text}` per
generation (`dataset` too in a run of several), in the cells' order, as questions.csv.

`alcheck import --against RUN` compares an import's turn-1 texts with these (imports/texts.py);
later turns show what each next prompt held. Written cell by cell, as questions.csv is: a resume
drops the lines of a cell run.json does not record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from alcheck.errors import AlcheckError

ANSWERS_FILE = "answers.jsonl"


def answer_line(k: int, repeat: int, question, turn: int, text: str) -> dict:
    line = {"k": k, "repeat": repeat, "question_id": question.question_id, "turn": turn, "text": text}
    if question.dataset:  # a run of several datasets: their question ids overlap
        line["dataset"] = question.dataset
    return line


def read_answers(run_dir: Path) -> list[dict]:
    """Every line of the run's answers.jsonl ([] when it has none); a torn last line (the process
    died mid-write: no newline after it) is dropped, any other bad line is corruption. Lines end
    at "\n" only: a text may hold U+2028, U+0085 and the like, which JSON leaves unescaped."""
    path = Path(run_dir) / ANSWERS_FILE
    if not path.is_file():
        return []
    data = path.read_bytes()
    parts = data.split(b"\n")
    out = []
    for number, raw in enumerate(parts, start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw.decode("utf-8"))
            int(line["k"]), int(line["repeat"]), int(line["turn"]), line["question_id"], str(line["text"])
        except (ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
            if number == len(parts):
                break  # torn by a kill mid-write: that cell is not recorded, so it runs again
            raise AlcheckError(
                f"{path} line {number}: not an answer line ({{k, repeat, question_id, turn, text}}): "
                "restore the file, or start a new run with another --out"
            ) from None
        out.append(line)
    return out


def write_answers(run_dir: Path, lines: list[dict], append: bool) -> None:
    """Append lines, or rewrite the file from memory (temp file, then rename)."""
    path = Path(run_dir) / ANSWERS_FILE
    text = "".join(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n" for line in lines)
    if append:
        with path.open("a", encoding="utf-8") as f:
            f.write(text)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
