"""Counting conventions: the one table of what an "acceptance length" number means (METHODS-NOTES §3).

alcheck's AL is tokens per verification step, pooled: 1 + Σ accepted / Σ steps, every verification
step counted (a step that proposed nothing is a plain decoding step, and still a step). Other tools
print numbers that look the same and are not:
- vLLM's "mean acceptance length" is 1 + Σ accepted / Σ drafted_steps, where drafted_steps counts
  only the steps that proposed at least one token. For EAGLE every step drafts and the two agree;
  for n-gram and suffix decoding vLLM's reads high (PR #24344: 4.59 against 2.96).
- TensorRT-LLM reports AL − 1 (accepted drafts per step, no bonus token).
- Training-time "simulated AL" (SpecForge, speculators) leaves out the bonus token too: AL − 1 in
  form, measured under teacher forcing.
- SpecForge's benchmark and vLLM's acceptance-rates test average per-request ALs (a mean of ratios)
  where engines pool (a ratio of sums).

Every report, compare, import and reference reads this table: a number is computed in a convention
from counts (`from_counts`), converted from a bare published number only where the arithmetic
allows it (`from_number`), and refused in one line otherwise (`convert`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from alcheck.errors import AlcheckError

DRAFTED_STEPS = "drafted_steps"  # questions.csv: verification steps that proposed >= 1 token


@dataclass(frozen=True)
class Convention:
    name: str
    label: str  # what a column or a reference cell calls it
    formula: str
    who: str  # whose numbers use it
    steps: str  # "steps" (every verification step) or "drafted_steps"
    bonus: bool  # the bonus/recovered token counted (+1 per step)
    pooled: bool  # ratio of sums (True) or mean of per-request ratios (False)

    def line(self) -> str:
        return f"{self.name}: {self.formula} ({self.who})"


ALCHECK = "alcheck"
VLLM_DRAFTED = "vllm-drafted"
TRTLLM = "trtllm"
NO_BONUS = "training-no-bonus"
REQUEST_MEAN = "request-mean"

CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention(
            ALCHECK,
            "alcheck AL",
            "1 + Σ accepted / Σ steps, every verification step counted, pooled over requests",
            "alcheck, Spec-Bench, the EAGLE papers (steps = idx + 1), SGLang's histogram",
            "steps",
            True,
            True,
        ),
        Convention(
            VLLM_DRAFTED,
            "vLLM drafted-steps AL",
            "1 + Σ accepted / Σ drafted_steps, only the steps that proposed a token counted, pooled",
            "vLLM's 'mean acceptance length', its /metrics and per-request metrics",
            "drafted_steps",
            True,
            True,
        ),
        Convention(
            TRTLLM,
            "TensorRT-LLM AL − 1",
            "Σ accepted / Σ steps (AL − 1: no bonus token), pooled",
            "TensorRT-LLM's reported acceptance length",
            "steps",
            False,
            True,
        ),
        Convention(
            NO_BONUS,
            "training-time AL without bonus",
            "Σ accepted / Σ steps (AL − 1: no bonus token), simulated under teacher forcing",
            "SpecForge's and speculators' training-time 'simulated AL'",
            "steps",
            False,
            True,
        ),
        Convention(
            REQUEST_MEAN,
            "mean of per-request AL",
            "mean over requests of 1 + accepted / steps (a mean of ratios, not pooled)",
            "SpecForge's benchmark, vLLM's acceptance-rates test (one prompt at a time)",
            "steps",
            True,
            False,
        ),
    )
}
NAMES = tuple(CONVENTIONS)


def get(name: str | None, where: str = "convention") -> Convention:
    """The convention named (None: alcheck's); an unknown name is one line, exit 2."""
    if name is None:
        return CONVENTIONS[ALCHECK]
    found = CONVENTIONS.get(str(name))
    if found is None:
        raise AlcheckError(f"{where} {name!r} is not a counting convention: use one of {', '.join(NAMES)}")
    return found


def drafted_steps_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's drafted steps: its column, or its steps for rows written before the column
    existed (they were all EAGLE-style methods, whose every step drafts)."""
    if DRAFTED_STEPS in frame.columns:
        return pd.to_numeric(frame[DRAFTED_STEPS]).fillna(pd.to_numeric(frame["steps"]))
    return frame["steps"]


def from_counts(name: str, frame: pd.DataFrame) -> float | None:
    """The number a convention gives for questions.csv rows (None: no steps to divide by)."""
    conv = get(name)
    accepted = pd.to_numeric(frame["accepted"]).astype(float)
    steps = (
        drafted_steps_of(frame) if conv.steps == DRAFTED_STEPS else pd.to_numeric(frame["steps"])
    ).astype(float)
    bonus = 1.0 if conv.bonus else 0.0
    if conv.pooled:
        total = float(steps.sum())
        return None if total <= 0 else bonus + float(accepted.sum()) / total
    mine = steps > 0
    if not mine.any():
        return None
    return float((bonus + accepted[mine] / steps[mine]).mean())


def from_summary(name: str, entry: dict) -> float | None:
    """The number a convention gives for a run.json summary entry (no rows): None where the entry
    does not hold what it needs (a mean of per-request ratios needs the rows)."""
    conv = get(name)
    al = entry.get("al_mean")
    if conv.name == VLLM_DRAFTED:
        # a summary older than the key: its rows were EAGLE-style, every step drafted
        return entry["al_drafted_steps"] if "al_drafted_steps" in entry else al
    if conv.name == REQUEST_MEAN:
        return entry.get("al_request_mean")
    if al is None:
        return None
    return float(al) if conv.bonus else float(al) - 1.0


def from_number(value: float, source: str, target: str) -> float | None:
    """A bare number (no counts) of convention `source` in convention `target`, when arithmetic
    alone converts it (the bonus token: ±1); None when it needs counts (drafted steps, per-request
    ratios)."""
    a, b = get(source), get(target)
    if a.name == b.name:
        return float(value)
    if (a.steps, a.pooled) != (b.steps, b.pooled):
        return None  # another denominator or another average: only the counts can say
    return float(value) + (1.0 if b.bonus else 0.0) - (1.0 if a.bonus else 0.0)


def convert(value: float, source: str, target: str, what: str) -> float:
    """from_number, or one line (exit 2) saying why the number cannot be compared."""
    out = from_number(value, source, target)
    if out is None:
        a, b = get(source), get(target)
        raise AlcheckError(
            f"{what} is a {a.label} ({a.formula}) and cannot be converted to a {b.label} ({b.formula}) "
            "without its per-request counts: compare numbers of one convention, or import the source's "
            "counts (alcheck import)"
        )
    return out
