"""Turn-1 answer texts of an import against another run's, question by question.

Turn 1 sees only the question, so two greedy runs of the same model on the same prompt write the
same answer; texts that differ mean the prompts or the model differ (or decoding was not
lossless). Later turns carry the earlier answers and may rightly differ. A run directory keeps its
texts in answers.jsonl (alcheck/rundir/answers.py).
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.rundir.answers import ANSWERS_FILE, read_answers


def run_answers(run_dir: Path, what: str) -> dict[str, str]:
    """question id -> turn-1 text of the run's first (K, repeat) that has it; in a run of several
    datasets (whose ids overlap) the id is "dataset:question_id"."""
    if not (Path(run_dir) / ANSWERS_FILE).is_file():
        raise AlcheckError(
            f"{what} {run_dir} has no {ANSWERS_FILE}: pass a run directory that holds its answer texts "
            "(an imported run with texts, or a run made by alcheck 2026-12-02 or later)"
        )
    out: dict[str, str] = {}
    for row in read_answers(run_dir):
        if int(row["turn"]) == 1:
            key = f"{row['dataset']}:{row['question_id']}" if row.get("dataset") else str(row["question_id"])
            out.setdefault(key, str(row["text"]))
    return out


def compare_texts(mine: dict[str, str], theirs: dict[str, str], against: str) -> dict:
    common = sorted(set(mine) & set(theirs), key=lambda q: (len(q), q))
    differ = [q for q in common if mine[q].strip() != theirs[q].strip()]
    if not common:
        verdict = "no common questions: the question ids do not match"
    elif differ:
        verdict = (
            f"turn-1 answers differ on {len(differ)} of {len(common)} common questions: the prompts or the "
            "model differ (or decoding was not lossless)"
        )
    else:
        verdict = f"turn-1 answers identical on all {len(common)} common questions"
    return {
        "against": against,
        "common": len(common),
        "identical": len(common) - len(differ),
        "differ": differ[:20],
        "verdict": verdict,
    }


def first_turn_texts(answers: list[dict]) -> dict[str, str]:
    out: dict[str, str] = {}
    for row in answers:
        if row["turn"] == 1:
            out.setdefault(str(row["question_id"]), row["text"])
    return out
