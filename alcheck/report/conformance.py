"""Row-for-row conformance of an engine run with the built-in runner's (issue 23, `make engine-check`).

At temperature 0 in float32 on the CPU, a correct engine computes what alcheck's runner computes:
every question turn must have the same prompt (prompt_hash), the same number of generated tokens,
steps, drafted steps (where the run has them), accepted drafts and per-position counts. This lists,
per K, how many rows are identical and which differ, column by column.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from alcheck.metrics.acceptance import pooled_al
from alcheck.report.run_io import load_run

KEY = ["k", "repeat", "question_id", "turn"]
COLUMNS = ["prompt_hash", "generated_tokens", "steps", "drafted_steps", "accepted", "accepted_per_pos"]


@dataclass
class KConformance:
    k: int
    rows: int  # rows both runs have
    identical: int
    only_a: int  # rows of one run the other lacks
    only_b: int
    al_a: float
    al_b: float
    per_position_a: list[float]
    per_position_b: list[float]
    wall_s_a: float  # the cells' own request time (run.json cells), not server starts
    wall_s_b: float

    @property
    def all_identical(self) -> bool:
        return self.rows > 0 and self.identical == self.rows and not self.only_a and not self.only_b


@dataclass
class Conformance:
    a: str
    b: str
    ks: list[KConformance]
    differing: list[dict] = field(default_factory=list)  # key + "column: A vs B" for each differing row

    @property
    def all_identical(self) -> bool:
        return bool(self.ks) and all(k.all_identical for k in self.ks)

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "all_identical": self.all_identical,
            "ks": [asdict(k) for k in self.ks],
            "differing": self.differing,
        }


def _per_position(frame) -> list[float]:
    steps = frame["steps"].astype(int).sum()
    if not steps:
        return []
    counts = [list(map(int, str(v).split(";"))) for v in frame["accepted_per_pos"] if str(v)]
    return [sum(c[i] for c in counts) / steps for i in range(len(counts[0]))] if counts else []


def _cell_wall(run, k: int) -> float:
    return round(sum(float(c.get("wall_s") or 0) for c in run.meta.get("cells", []) if int(c["k"]) == k), 3)


def conformance(run_a, run_b) -> Conformance:
    """run_a: the reference (the built-in runner), run_b: the engine; run directories."""
    a, b = load_run(run_a, require_questions=True), load_run(run_b, require_questions=True)
    qa, qb = (r.questions.astype({c: str for c in KEY + COLUMNS if c in r.questions.columns}) for r in (a, b))
    out = Conformance(str(a.dir), str(b.dir), [])
    for k in sorted({int(x) for x in qa["k"]} | {int(x) for x in qb["k"]}):
        fa, fb = qa[qa["k"] == str(k)], qb[qb["k"] == str(k)]
        merged = fa.merge(fb, on=KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
        both = merged[merged["_merge"] == "both"]
        identical = 0
        for row in both.to_dict("records"):
            diffs = [
                f"{c}: {row[c + '_a']} vs {row[c + '_b']}"
                for c in COLUMNS
                if c + "_a" in row and row[c + "_a"] != row[c + "_b"]
            ]
            if diffs:
                out.differing.append({**{c: row[c] for c in KEY}, "differences": diffs})
            else:
                identical += 1
        only_a = int((merged["_merge"] == "left_only").sum())
        only_b = int((merged["_merge"] == "right_only").sum())
        ia, ib = fa.astype({"steps": int, "accepted": int}), fb.astype({"steps": int, "accepted": int})
        out.ks.append(
            KConformance(
                k,
                len(both),
                identical,
                only_a,
                only_b,
                pooled_al(ia),
                pooled_al(ib),
                _per_position(ia),
                _per_position(ib),
                _cell_wall(a, k),
                _cell_wall(b, k),
            )
        )
    return out
