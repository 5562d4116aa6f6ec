"""The leaderboard of `alcheck run --draft A --draft B ...`: heads (or methods) ranked by AL per K.

One row per (entry, K). Each entry's AL is its own run's summary (the same number a separate run of
that entry gives). Per K the entries are ranked best first; every other entry gets a paired verdict
against the best one: the difference on the questions both measured, its run-to-run noise
(metrics/noise.paired_noise), and the one decision rule (metrics/verdict.decide) with Holm across
every (entry, K) tested, so the family-wise false-alarm rate over the whole board is <= 5%.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from alcheck.metrics import verdict as V
from alcheck.metrics.noise import declared_deterministic, paired_frames, paired_noise
from alcheck.report.run_io import load_run
from alcheck.report.table import fmt, fmt_ci, fmt_signed, markdown_grid

CSV_FILE, MD_FILE = "leaderboard.csv", "leaderboard.md"
BEST = "best"
BELOW_BEST = "below best"


@dataclass
class BoardRow:
    k: int
    rank: int
    entry: str
    method: str
    draft: str
    al: float | None
    ci_lo: float | None
    ci_hi: float | None
    diff_vs_best: float | None  # this entry - the best at this K, on their common questions
    p_value: float | None
    verdict: str
    n_questions: int
    run: str  # the entry's run directory, relative to the leaderboard's folder


def leaderboard(root: Path, entries: list[tuple[str, Path]], tolerance: float = V.DEFAULT_TOLERANCE):
    """BoardRows, K by K and best first, for entries (name, run dir)."""
    runs = [(name, load_run(path)) for name, path in entries]
    by_k: dict[int, list[tuple[str, object, dict]]] = {}
    for name, run in runs:
        for entry in run.summary:
            if entry.get("al_mean") is not None:
                by_k.setdefault(int(entry["k"]), []).append((name, run, entry))
    rows, tested = [], []
    for k in sorted(by_k):
        ranked = sorted(by_k[k], key=lambda x: -x[2]["al_mean"])  # stable: ties keep the entries' order
        best_name, best_run, _ = ranked[0]
        for rank, (name, run, entry) in enumerate(ranked, 1):
            ci = entry.get("al_ci95") or [None, None]
            row = BoardRow(
                k,
                rank,
                name,
                run.config.get("method") or "",
                run.config.get("draft") or "",
                entry["al_mean"],
                ci[0],
                ci[1],
                None,
                None,
                BEST if rank == 1 else "",
                int(entry.get("n_questions") or 0),
                str(Path(run.dir).relative_to(root)) if Path(run.dir).is_relative_to(root) else str(run.dir),
            )
            rows.append(row)
            if rank > 1:
                frames = paired_frames(best_run.questions_for(k), run.questions_for(k))
                if frames is None:
                    row.verdict = "no common questions"
                    continue
                diff, noise = paired_noise(
                    *frames[:4],
                    declared_a=declared_deterministic(best_run.meta),
                    declared_b=declared_deterministic(run.meta),
                )
                row.n_questions = frames[4]
                tested.append((row, diff, noise))
    decisions = V.decide([d for _, d, _ in tested], [n for _, _, n in tested], tolerance=tolerance)
    for (row, _, _), decision in zip(tested, decisions):  # Holm across every (entry, K)
        row.diff_vs_best, row.p_value = decision.diff, decision.p_value
        word = V.compare_verdict(decision, row.n_questions)
        row.verdict = BELOW_BEST if word == V.A_HIGHER else word
    return rows


def write_leaderboard(root: Path, rows: list[BoardRow]) -> None:
    fields = list(asdict(rows[0])) if rows else list(BoardRow.__dataclass_fields__)
    with open(root / CSV_FILE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})
    (root / MD_FILE).write_text(markdown_leaderboard(rows))


HEADER = ["K", "rank", "entry", "method", "AL", "95% CI", "vs best", "p", "verdict", "questions"]


def _cells(row: BoardRow) -> list[str]:
    p = "" if row.p_value is None or not math.isfinite(row.p_value) else f"{row.p_value:.3g}"
    diff = "" if row.diff_vs_best is None else fmt_signed(row.diff_vs_best, 3)
    ci = fmt_ci([row.ci_lo, row.ci_hi]) if row.ci_lo is not None else ""
    return [str(row.k), str(row.rank), row.entry, row.method, fmt(row.al, 3), ci, diff, p, row.verdict,
            str(row.n_questions)]  # fmt: skip


def markdown_leaderboard(rows: list[BoardRow]) -> str:
    note = (
        "\n\nRanked by AL per K, best first. `vs best`: this entry's AL minus the best's on the questions "
        "both measured; verdicts from run-to-run noise, Holm across every (entry, K).\n"
    )
    return "# Leaderboard\n\n" + markdown_grid(HEADER, [_cells(r) for r in rows]) + note


def rich_leaderboard(rows: list[BoardRow]) -> Table:
    table = Table(title="leaderboard: AL per K, best first")
    for name in HEADER:
        table.add_column(name, justify="left" if name in ("entry", "method", "verdict") else "right")
    last_k = None
    for row in rows:
        if last_k is not None and row.k != last_k:
            table.add_section()
        table.add_row(*_cells(row))
        last_k = row.k
    return table


PLOT_FILE = "leaderboard.png"


def plot_steps(root: Path, rows: list[BoardRow]) -> Path | None:
    """AL against the checkpoint step, one line per K, when every entry's name carries a number."""
    from alcheck.sweep.entries import step_of

    steps = {row.entry: step_of(row.entry) for row in rows}
    if len(steps) < 2 or any(s is None for s in steps.values()) or len(set(steps.values())) < len(steps):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in sorted({row.k for row in rows}):
        points = sorted((steps[r.entry], r.al) for r in rows if r.k == k and r.al is not None)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"K={k}")
    ax.set_xlabel("checkpoint step (from the entry's name)")
    ax.set_ylabel("AL")
    ax.legend()
    fig.tight_layout()
    fig.savefig(root / PLOT_FILE, dpi=100)
    plt.close(fig)
    return root / PLOT_FILE
