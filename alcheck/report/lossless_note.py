"""`compare`'s note when a run failed the temperature > 0 lossless check at a K.

run.json's summary entry for K may carry `lossless_test` (LosslessTest.to_dict(),
alcheck/metrics/lossless.py; `run --engine --check-lossless` writes it from phase 2 of issue 23 on).
A sampler that does not draw from the target's distribution changes acceptance by itself, so when
either side failed, that is the likely cause of an AL gap, and compare says so beside its verdict.
"""

from __future__ import annotations


def lossless_note(k: int, summary_a: dict | None, summary_b: dict | None) -> str | None:
    failed = []
    for side, summary in (("A", summary_a), ("B", summary_b)):
        test = (summary or {}).get("lossless_test")
        if isinstance(test, dict) and test.get("lossless") is False:
            failed.append(f"{side} (p = {float(test.get('p_value', float('nan'))):.2g})")
    if not failed:
        return None
    return (
        f"K={k}: {' and '.join(failed)} failed the temperature "
        "> 0 lossless check: that sampler does not draw "
        "from the target's distribution, the likely cause of an AL gap between the runs"
    )
