"""Error rates of the per-position verdicts, by seeded simulation (`make bench-stats`, issue 32).

Writes results/bench-positions.md. 80 questions x 3 repeats, K = 1..5 (metrics/simulate.py: true AL
1.71 / 2.13 / 2.32 / 2.42 / 2.48, questions differ in difficulty, every repeat redraws every step).
- Null pairs: baseline and run drawn from the same arm: any report is a false alarm.
- Fault pairs: the run's conditional acceptance at draft position 3 is 12% lower (every K >= 3,
  on the same questions; positions 1-2 and 4-5 keep their conditional acceptance).
Each pair is judged as `compare` judges it (two-sided, Holm across K x positions, a family beside
the K rows) and as `gate --per-position` does (one-sided, one Holm family over the K rows and their
positions), through the functions the commands use (metrics/positions.py, report/positions.py,
metrics/noise.py, metrics/verdict.py).

    python bench/bench_positions.py [--pairs N] [--seed S] [--out results/bench-positions.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alcheck.metrics import verdict as V  # noqa: E402
from alcheck.metrics.noise import paired_noise  # noqa: E402
from alcheck.metrics.positions import DEFAULT_POSITION_TOLERANCE, position_changes  # noqa: E402
from alcheck.metrics.simulate import TRUE_AL, Arm, QuestionSet, calibrate  # noqa: E402
from alcheck.report.positions import judge  # noqa: E402

KS = sorted(TRUE_AL)
QUESTIONS, REPEATS = 80, 3
FAULT_POSITION, FAULT = 3, 0.12  # conditional acceptance at position 3 falls by 12% (the targets)
FALLS = (0.04, 0.08, FAULT)  # smaller falls too: where the power runs out
QUESTION_SETS = 25  # distinct question sets; pairs cycle through them
TARGETS = {"false_alarms": 0.05, "power": 0.9, "blame": 0.05}


def fault_scale(k: int, fall: float) -> np.ndarray | None:
    if k < FAULT_POSITION:
        return None
    scale = np.ones(k)
    scale[FAULT_POSITION - 1] = 1.0 - fall
    return scale


class Scenario:
    """One question set: per K the arm without and with the fault, built once."""

    def __init__(self, rng: np.random.Generator):
        self.questions = QuestionSet.draw(QUESTIONS, rng)
        self.null, self.fault = {}, {}
        for k in KS:
            base = float(calibrate(self.questions, k, [TRUE_AL[k]])[0])
            self.null[k] = Arm.make(self.questions, k, base)
            for fall in FALLS:
                self.fault[fall, k] = Arm.make(self.questions, k, base, fault_scale(k, fall))


def _reach(sim) -> np.ndarray:
    """Arm.simulate output -> N[r, q, j], j = 0..K (metrics/positions.reach_matrix's shape)."""
    emitted, steps, per_pos = sim
    return np.concatenate([steps[..., None], per_pos.astype(float)], axis=-1)


def judge_pair(base: dict, run: dict) -> dict:
    """Both rules on one (baseline, run) pair: which (K, position) each reports, and how."""
    changes = [position_changes(_reach(base[k]), _reach(run[k])) for k in KS]
    where = [(k, c.position) for k, cs in zip(KS, changes) for c in cs]
    compare = [
        v.verdict
        for row in judge(
            changes,
            tolerance=DEFAULT_POSITION_TOLERANCE,
            side="two-sided",
            n_questions=[QUESTIONS] * len(KS),
            word=V.compare_verdict,
        )
        for v in row
    ]
    strict = judge(  # tolerance 0: credibility alone, the Holm control itself
        changes, tolerance=0.0, side="two-sided", n_questions=[QUESTIONS] * len(KS), word=V.compare_verdict
    )
    al = [paired_noise(base[k][0], base[k][1], run[k][0], run[k][1]) for k in KS]
    judged = [c for cs in changes for c in cs]
    decided = V.decide(  # the gate's one family: the K rows, then their positions
        [d for d, _ in al] + [c.diff for c in judged],
        [n for _, n in al] + [c.noise for c in judged],
        tolerance=[V.DEFAULT_TOLERANCE] * len(KS) + [DEFAULT_POSITION_TOLERANCE] * len(judged),
        side="less",
    )
    return {
        "compare": {w: verdict for w, verdict in zip(where, compare) if verdict in (V.A_HIGHER, V.B_HIGHER)},
        "compare_drop": {w for w, verdict in zip(where, compare) if verdict == V.A_HIGHER},
        "credible": any(v.verdict in (V.A_HIGHER, V.B_HIGHER) for row in strict for v in row),
        "gate_al": {k for k, d in zip(KS, decided[: len(KS)]) if d.reported},
        "gate": {w for w, d in zip(where, decided[len(KS) :]) if d.reported},
    }


class Tally:
    def __init__(self):
        self.pairs = 0
        self.counts: dict[str, int] = {}

    def add(self, name: str, hit: bool) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(bool(hit))

    def rate(self, name: str) -> float:
        return self.counts.get(name, 0) / self.pairs if self.pairs else float("nan")


def first_changed(reported: set, k: int) -> int | None:
    positions = sorted(p for kk, p in reported if kk == k)
    return positions[0] if positions else None


def tally_fault(fault: Tally, f: dict) -> None:
    fault.pairs += 1
    drops = f["compare_drop"]
    fault.add("compare: position 3 a drop at some K", any(p == FAULT_POSITION for _, p in drops))
    for k in KS[FAULT_POSITION - 1 :]:
        fault.add(f"compare: position 3 a drop at K={k}", (k, FAULT_POSITION) in drops)
        fault.add(f"compare: first changed position at K={k} is 3", first_changed(set(f["compare"]), k) == 3)
    fault.add("compare: blame on position 1 or 2", any(p < FAULT_POSITION for _, p in f["compare"]))
    fault.add("compare: blame on position 4 or 5", any(p > FAULT_POSITION for _, p in f["compare"]))
    fault.add(
        "gate --per-position: position 3 fails at some K", any(p == FAULT_POSITION for _, p in f["gate"])
    )
    fault.add("gate --per-position: blame on position 1 or 2", any(p < FAULT_POSITION for _, p in f["gate"]))
    fault.add("gate --per-position: an AL row fails (some K)", f["gate_al"])


def run(pairs: int, seed: int) -> tuple[Tally, dict[float, Tally], list[str]]:
    rng = np.random.default_rng(seed)
    scenarios = [Scenario(rng) for _ in range(QUESTION_SETS)]
    null, faults = Tally(), {fall: Tally() for fall in FALLS}
    for i in range(pairs):
        s = scenarios[i % QUESTION_SETS]
        base = {k: s.null[k].simulate(REPEATS, rng) for k in KS}
        again = {k: s.null[k].simulate(REPEATS, rng) for k in KS}
        n = judge_pair(base, again)
        null.pairs += 1
        null.add("compare: any position", n["compare"])
        null.add("compare at tolerance 0: any position credible", n["credible"])
        null.add("gate --per-position: fails", n["gate"] or n["gate_al"])
        null.add("gate --per-position: a position fails", n["gate"])
        for fall in FALLS:
            broken = {k: s.fault[fall, k].simulate(REPEATS, rng) for k in KS}
            tally_fault(faults[fall], judge_pair(base, broken))
    s = scenarios[0]
    truth = [
        f"K={k}: "
        + " / ".join(f"{x:.3f}" for x in s.null[k].conditional())
        + " -> "
        + " / ".join(f"{x:.3f}" for x in s.fault[FAULT, k].conditional())
        + f" (AL {s.null[k].truth:.3f} -> {s.fault[FAULT, k].truth:.3f})"
        for k in KS[FAULT_POSITION - 1 :]
    ]
    return null, faults, truth


def _margin(rate_target: float, n: int) -> float:
    return 2 * math.sqrt(rate_target * (1 - rate_target) / max(n, 1))


def report(null: Tally, faults: dict[float, Tally], truth, args, cpu: float, wall: float) -> list[str]:
    fault = faults[FAULT]
    fa = null.rate("compare: any position")
    fa_gate = null.rate("gate --per-position: fails")
    power = fault.rate("compare: position 3 a drop at some K")
    blame = fault.rate("compare: blame on position 1 or 2")
    checks = [
        (
            "compare: family-wise false alarms across K × positions",
            fa,
            "≤ 0.05",
            fa <= TARGETS["false_alarms"],
        ),
        (
            "compare at tolerance 0 (credibility alone): family-wise false alarms",
            null.rate("compare at tolerance 0: any position credible"),
            "≤ 0.05",
            null.rate("compare at tolerance 0: any position credible") <= TARGETS["false_alarms"],
        ),
        (
            "gate --per-position: false fails (K rows and positions)",
            fa_gate,
            "≤ 0.05",
            fa_gate <= TARGETS["false_alarms"],
        ),
        ("compare: power, position 3 reported as a drop", power, "≥ 0.9", power >= TARGETS["power"]),
        ("compare: blame on positions 1-2 under the fault", blame, "≤ 0.05", blame <= TARGETS["blame"]),
        (
            "gate --per-position: power, position 3 fails",
            fault.rate("gate --per-position: position 3 fails at some K"),
            "≥ 0.9",
            fault.rate("gate --per-position: position 3 fails at some K") >= TARGETS["power"],
        ),
        (
            "gate --per-position: blame on positions 1-2",
            fault.rate("gate --per-position: blame on position 1 or 2"),
            "≤ 0.05",
            fault.rate("gate --per-position: blame on position 1 or 2") <= TARGETS["blame"],
        ),
    ]
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Per-position verdicts: simulated error rates (issue 32)",
        "",
        f"`python bench/bench_positions.py --pairs {args.pairs} --seed {args.seed}` on {when}: "
        f"{cpu:.0f} s CPU time ({wall:.0f} s wall) on 1 core of a shared {platform.machine()} machine "
        f"({os.cpu_count()} CPUs, {platform.system()} {platform.release()}), Python "
        f"{platform.python_version()}, numpy {np.__version__}.",
        "",
        f"Model (alcheck/metrics/simulate.py): {QUESTIONS} questions × {REPEATS} repeats, K = 1..5, true AL "
        "1.71 / 2.13 / 2.32 / 2.42 / 2.48; every repeat redraws every step of every question (run-to-run "
        f"noise as at temperature > 0). {args.pairs} null pairs (baseline and run from the same arm) and "
        f"{args.pairs} fault pairs per fall (the run's conditional acceptance at position {FAULT_POSITION} "
        f"lower by {', '.join(f'{x:.0%}' for x in FALLS)} at every K ≥ {FAULT_POSITION}; the targets "
        f"are at {FAULT:.0%}), {QUESTION_SETS} question sets. Position "
        f"tolerance {DEFAULT_POSITION_TOLERANCE:g}, AL tolerance {V.DEFAULT_TOLERANCE:g}, "
        f"{V.ALPHA:.0%} family-wise.",
        "",
        "## Targets",
        "",
        "| measure | rate | target | met |",
        "|---|---:|---|---|",
        *(
            f"| {name} | {rate:.3f} | {target} | {'yes' if ok else 'NO'} |"
            for name, rate, target, ok in checks
        ),
        "",
        f"A rate's sampling error at {args.pairs} pairs: about ±{_margin(0.05, args.pairs):.3f} at 0.05 "
        f"and ±{_margin(0.9, args.pairs):.3f} at 0.9 (two standard errors).",
        "",
        "## Every count",
        "",
        "| pairs | measure | rate |",
        "|---|---|---:|",
        *(f"| null | {name} | {null.rate(name):.3f} |" for name in null.counts),
        "",
        f"Fault pairs, by the size of the fall of conditional acceptance at position {FAULT_POSITION}:",
        "",
        "| measure | " + " | ".join(f"fall {fall:.0%}" for fall in FALLS) + " |",
        "|---|" + "---:|" * len(FALLS),
        *(
            f"| {name} | " + " | ".join(f"{faults[fall].rate(name):.3f}" for fall in FALLS) + " |"
            for name in fault.counts
        ),
        "",
        "True pooled conditional acceptance at positions 1..K on the first question set, without -> with "
        "the fault (the positions before 3 move only through which questions take more steps):",
        "",
        *(f"- {line}" for line in truth),
        "",
    ]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2032)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench-positions.md")
    args = parser.parse_args(argv)
    start, cpu = time.perf_counter(), time.process_time()
    null, faults, truth = run(args.pairs, args.seed)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    lines = report(null, faults, truth, args, cpu, wall)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    print(f"wrote {args.out} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
