"""Compare with a partial run: only the (K, repeat) passes both runs recorded.

A partial run (status "partial": interrupted, not yet resumed to the end) holds its finished
passes only. Where the other run has more repeats at a K, its extra passes have no counterpart:
pooled in, they would weigh that side's AL and noise on passes the partial run never measured.
So at each K both runs measured, each side keeps the repeats both have, and one warning line
says what was left out. A K only one run has is not touched (compare skips it and says so).
"""

from __future__ import annotations

from alcheck.report.run_io import Run

PARTIAL = "partial"


def _passes(run: Run) -> set[tuple[int, int]]:
    q = run.questions
    return {(int(k), int(r)) for k, r in zip(q["k"], q["repeat"])}


def _kept(run: Run, keep: set[tuple[int, int]]) -> Run:
    q = run.questions
    mask = [(int(k), int(r)) in keep for k, r in zip(q["k"], q["repeat"])]
    return Run(meta=run.meta, questions=q[mask], dir=run.dir)


def _named(side: str, passes: list[tuple[int, int]]) -> str:
    """ "A's K=3 repeat 2, K=5 repeats 1,2"."""
    from alcheck.report.repeat_numbers import passes_text

    return f"{side}'s {passes_text(passes)}"


def common_passes(a: Run, b: Run) -> tuple[Run, Run, str | None]:
    """(A, B) cut to the passes both recorded when either run is partial, and the warning line
    (None when nothing was left out)."""
    partial = [side for side, run in (("A", a), ("B", b)) if run.meta.get("status") == PARTIAL]
    if not partial:
        return a, b, None
    pa, pb = _passes(a), _passes(b)
    both_ks = {k for k, _ in pa} & {k for k, _ in pb}
    only_a = sorted(p for p in pa - pb if p[0] in both_ks)
    only_b = sorted(p for p in pb - pa if p[0] in both_ks)
    if not only_a and not only_b:
        return a, b, None
    left_out = "; ".join(_named(side, passes) for side, passes in (("A", only_a), ("B", only_b)) if passes)
    line = (
        f"the runs are partial ({' and '.join(partial)} not finished): compared only the passes both "
        f"recorded, left out {left_out}"
    )
    return _kept(a, pa - set(only_a)), _kept(b, pb - set(only_b)), line
