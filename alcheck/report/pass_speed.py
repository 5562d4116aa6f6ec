"""Warnings about the sweep itself: passes whose speed is far from the others (other load on the
machine skews tokens/s), and sweeps so large they are likely a typo (`--ks 1-100`)."""

from __future__ import annotations

import statistics

from alcheck.report.repeat_numbers import cell_name

SPREAD = 2.0  # a pass more than this factor from the median pass speed is named
LARGE_CELLS = 50  # (K, repeat, dataset) passes
LARGE_K = 16  # draft tokens per step beyond which no published head is measured


def uneven_speed_note(meta: dict) -> str:
    """'' unless some (K, repeat) pass ran more than SPREAD x faster or slower than the median."""
    speeds = []
    for cell in meta.get("cells") or []:
        wall, tokens = cell.get("wall_s"), cell.get("generated_tokens")
        if isinstance(wall, (int, float)) and wall > 0 and isinstance(tokens, (int, float)) and tokens > 0:
            speeds.append((tokens / wall, cell))
    if len(speeds) < 3:
        return ""
    median = statistics.median(s for s, _ in speeds)
    odd = [(s, c) for s, c in speeds if s > SPREAD * median or s < median / SPREAD]
    if not odd:
        return ""
    named = ", ".join(f"{cell_name(c['k'], c['repeat'])} at {s:.0f}" for s, c in odd[:4])
    more = f" and {len(odd) - 4} more" if len(odd) > 4 else ""
    return (
        f"pass speeds are uneven: {named}{more} tokens/s against a median of {median:.0f} (more than "
        f"{SPREAD:g}x apart; other load on the machine?): tokens/s averages include them; AL does "
        "not depend on speed"
    )


def large_sweep_note(ks: list[int], repeats: int, datasets: int) -> str:
    """'' unless the sweep is implausibly large: many passes, or K beyond any published head."""
    cells = len(ks) * repeats * max(datasets, 1)
    reasons = []
    if cells > LARGE_CELLS:
        reasons.append(f"{cells} passes ({len(ks)} K x {repeats} repeats x {max(datasets, 1)} datasets)")
    if max(ks) > LARGE_K:
        reasons.append(f"K up to {max(ks)}")
    if not reasons:
        return ""
    return f"a large sweep: {' and '.join(reasons)}; Ctrl-C keeps what is done and --resume finishes it"
