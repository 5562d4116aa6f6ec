"""Speedup columns of the tables: what a run's speculative decoding gains over target-only decoding.

Two sources, both labelled where they are shown:
- an imported pair (EAGLE repo, Spec-Bench; alcheck.imports.speedup): `imported.speedup` holds the
  source's own rule (mean of per-question tokens/s, speculative over baseline) and total tokens /
  total time; both belong to the import's one K;
- a run of alcheck's with --check-lossless: each cell may record `target_only_wall_s` (seconds of
  that cell spent decoding target-only, inside its wall_s) and `target_only_tokens` (the tokens
  that decoding produced). Speedup at K = [Σ generated_tokens / Σ (wall_s - target_only_wall_s)
  over K's cells] / [Σ target_only_tokens / Σ target_only_wall_s over all cells]: total tokens
  over total time, batched as the run batched (the per-question rule needs per-question times,
  which a batched runner does not have).
"""

from __future__ import annotations

from alcheck.report.numbers import finite_number

SOURCE = "speedup (source's rule: mean of per-question tokens/s)"
TOTAL = "speedup (total tokens / total time)"
TOTAL_VS_TARGET_ONLY = "speedup vs target-only pass (total tokens / total time)"


def _target_only_speed(cells: list[dict]) -> float | None:
    mine = [
        c
        for c in cells
        if finite_number(c.get("target_only_wall_s"))
        and finite_number(c.get("target_only_tokens")) is not None
    ]
    seconds = sum(float(c["target_only_wall_s"]) for c in mine)
    return sum(float(c["target_only_tokens"]) for c in mine) / seconds if seconds > 0 else None


def _speculative_speed(cells: list[dict], k: int) -> float | None:
    mine = [c for c in cells if int(c.get("k", -1)) == k and finite_number(c.get("wall_s")) is not None]
    seconds = sum(float(c["wall_s"]) - float(finite_number(c.get("target_only_wall_s")) or 0.0) for c in mine)
    return sum(float(c.get("generated_tokens") or 0) for c in mine) / seconds if seconds > 0 else None


def speedups(meta: dict, k: int) -> dict[str, float]:
    """label -> speedup at K (empty when the run has none)."""
    block = meta.get("imported")
    if isinstance(block, dict) and isinstance(block.get("speedup"), dict):
        found = block["speedup"]
        out = {
            SOURCE: finite_number(found.get("mean_of_question_speeds")),
            TOTAL: finite_number(found.get("total_tokens_over_total_time")),
        }
        return {label: v for label, v in out.items() if v is not None}
    cells = [c for c in meta.get("cells") or [] if isinstance(c, dict)]
    base, spec = _target_only_speed(cells), _speculative_speed(cells, k)
    return {TOTAL_VS_TARGET_ONLY: spec / base} if base and spec else {}


def speedup_labels(meta: dict, ks: list[int]) -> list[str]:
    labels: list[str] = []
    for k in ks:
        labels += [label for label in speedups(meta, k) if label not in labels]
    return labels
