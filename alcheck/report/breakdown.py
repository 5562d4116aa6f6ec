"""`compare`'s per-category breakdown: AL of both runs per (dataset,) category and K, on the
questions both measured (metrics/acceptance.al_by), and the change B − A.

Descriptive only: the verdicts stay with the (dataset, K) rows. A category holds a handful of
questions (MT-Bench: 10 each), so a test per category would mostly find nothing, and would add
a family of tests no one asked for.
"""

from __future__ import annotations

from alcheck.metrics.acceptance import al_by
from alcheck.metrics.keys import common_units
from alcheck.report.table import fmt_signed


def category_changes(pairs) -> list[dict]:
    """pairs: [(dataset label or None, run A's rows of it, run B's rows of it)] (compare's
    pairing) -> one dict per (dataset, category, K): al_a, al_b, diff = al_b - al_a, questions."""
    out = []
    for label, a, b in pairs:
        if "category" not in a.questions.columns or "category" not in b.questions.columns:
            continue
        for k in sorted(
            {int(k) for k in a.questions["k"].unique()} & {int(k) for k in b.questions["k"].unique()}
        ):
            qa, qb = common_units(a.questions_for(k), b.questions_for(k))
            if not len(qa):
                continue
            both = al_by(qa, ["category"]).merge(
                al_by(qb, ["category"]), on=["k", "category"], suffixes=("_a", "_b")
            )
            for r in both.itertuples(index=False):
                out.append(
                    {
                        **({"dataset": label} if label is not None else {}),
                        "category": str(r.category),
                        "k": int(r.k),
                        "al_a": float(r.al_a),
                        "al_b": float(r.al_b),
                        "diff": float(r.al_b - r.al_a),
                        "n_questions": int(r.n_questions_a),
                    }
                )
    return out


def category_grid(changes: list[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, align): one row per (dataset,) category, B − A per K in its columns."""
    several = any("dataset" in c for c in changes)
    ks = sorted({c["k"] for c in changes})
    groups: dict[tuple, dict] = {}
    for c in changes:
        group = groups.setdefault((c.get("dataset"), c["category"]), {"n": c["n_questions"]})
        group[c["k"]] = c["diff"]
    lead = ["dataset"] if several else []
    header = [*lead, "category", "questions", *[f"K={k}" for k in ks]]
    rows = [
        [*([dataset] if several else []), category, str(g["n"]), *[fmt_signed(g.get(k)) for k in ks]]
        for (dataset, category), g in groups.items()
    ]
    return header, rows, [*["l"] * (len(lead) + 1), *["r"] * (len(ks) + 1)]
