"""Speedup of a speculative answer file over its baseline file (EAGLE repo, Spec-Bench).

Both tools compute it the same way (EAGLE `evaluation/speed.py`, Spec-Bench
`evaluation/speed.py`): per question, speculative tokens/s = Σnew_tokens / Σwall_time over its
turns; baseline tokens/s = Σ(len(tokenizer(answer).input_ids) - 1) / Σwall_time, the answer text
re-tokenized with BOS dropped; speedup = mean of the first / mean of the second (a ratio of
per-question means, each file's lines on their own). alcheck also reports total tokens / total
time on each side. Without --tokenizer the baseline's tokens are what its file records (EAGLE:
idxs + 1, one token per naivegenerate step; Spec-Bench: new_tokens), and the result says so.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.imports.records import PerQuestion
from alcheck.prompts.dataset import file_sha256

SOURCE_RULE = "mean over questions of tokens/s, speculative over baseline (the source's speed.py)"
TOTAL_RULE = "total tokens / total time, speculative over baseline"


def _per_question(turns) -> dict[str, tuple[float, float]]:
    """question -> (tokens, seconds) over its turns, first repeat only (the source reads choices[0])."""
    out: dict[str, tuple[float, float]] = {}
    for t in turns:
        if t.repeat != 0 or t.wall_s is None:
            continue
        tokens, seconds = out.get(str(t.question_id), (0.0, 0.0))
        out[str(t.question_id)] = (tokens + t.generated_tokens, seconds + t.wall_s)
    return out


def baseline_tokens(records: list[dict], tokenizer) -> tuple[dict[str, tuple[float, float]], str]:
    out = {}
    for r in records:
        if tokenizer is not None:
            tokens = sum(len(tokenizer(text).input_ids) - 1 for text in r["texts"])
        else:
            tokens = sum(r["tokens"])
        out[str(r["question_id"])] = (float(tokens), float(sum(r["wall_time"])))
    how = (
        "the answer text re-tokenized, BOS dropped (len(tokenizer(text).input_ids) - 1), as the source does"
        if tokenizer is not None
        else f"{records[0]['tokens_from'] if records else 'the file'}: no --tokenizer given; the source "
        "re-tokenizes the answer text instead"
    )
    return out, how


def _mean_speed(pairs: dict[str, tuple[float, float]]) -> float | None:
    speeds = [tokens / seconds for tokens, seconds in pairs.values() if seconds > 0]
    return sum(speeds) / len(speeds) if speeds else None


def _total_speed(pairs: dict[str, tuple[float, float]]) -> float | None:
    seconds = sum(s for _, s in pairs.values())
    return sum(t for t, _ in pairs.values()) / seconds if seconds > 0 else None


def _ratio(a, b):
    return None if a is None or not b else a / b


def speedup(
    data: PerQuestion,
    baseline_path: Path,
    records: list[dict],
    tokenizer=None,
    tokenizer_name: str | None = None,
) -> dict:
    spec = _per_question(data.turns)
    base, how = baseline_tokens(records, tokenizer)
    speeds = {
        "speculative_mean_of_questions": _mean_speed(spec),
        "baseline_mean_of_questions": _mean_speed(base),
        "speculative_total": _total_speed(spec),
        "baseline_total": _total_speed(base),
    }
    common = set(spec) & set(base)
    return {
        "baseline_file": str(baseline_path),
        "baseline_sha256": file_sha256(baseline_path),
        "baseline_tokens": how,
        "tokenizer": tokenizer_name,
        "questions": {"speculative": len(spec), "baseline": len(base), "common": len(common)},
        "tokens_per_s": speeds,
        "mean_of_question_speeds": _ratio(
            speeds["speculative_mean_of_questions"], speeds["baseline_mean_of_questions"]
        ),
        "total_tokens_over_total_time": _ratio(speeds["speculative_total"], speeds["baseline_total"]),
        "rules": {"mean_of_question_speeds": SOURCE_RULE, "total_tokens_over_total_time": TOTAL_RULE},
    }
