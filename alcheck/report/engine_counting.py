"""Known counting differences between engines, recognised question by question (ENGINES.md 4).

Every AL here is 1 + accepted / steps with the prefill token excluded, but engines disagree on
the last verification step of a generation: alcheck's runner and vLLM count every draft that
step accepted, even those past EOS or max_tokens that the output drops; SGLang's per-request
counters may count only the drafts the output keeps (the table in ENGINES.md 4 marks this
uncertain). Where a generation is cut in its last step the two differ by the drafts past the cut,
with the same tokens produced in the same steps.

So a difference between two runs is a counting difference, not a regression, when every
(question, turn, repeat) whose accepted counts differ produced the same number of tokens in the
same number of steps, and the lower count is exactly the tail-cut one:
    accepted = generated_tokens - 1 - steps
(each step emits its accepted drafts plus one token; the first token comes from the prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from alcheck.metrics.keys import common_units

TAIL = "counting difference (tail past EOS / max_tokens)"


@dataclass
class CountingDifference:
    kind: str
    units: int  # (question, turn, repeat) rows whose accepted counts differ
    higher: str  # "A" or "B": the run that counts the tail

    def note(self, k: int) -> str:
        lower = "B" if self.higher == "A" else "A"
        return (
            f"K={k}: {self.units} question turn{'s' * (self.units != 1)} "
            "produced the same tokens in the same "
            f"steps in both runs; {self.higher} also counts the drafts its last step accepted past EOS / "
            f"max_tokens (alcheck, vLLM), {lower} does not (SGLang): a counting difference, not a regression"
        )


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[["question_id", "turn", "repeat", "generated_tokens", "steps", "accepted"]].copy()
    out["question_id"] = out["question_id"].astype(str)
    for column in ("turn", "repeat", "generated_tokens", "steps", "accepted"):
        out[column] = out[column].astype(int)
    return out


def tail_counting_difference(qa: pd.DataFrame, qb: pd.DataFrame) -> CountingDifference | None:
    """The questions.csv rows of one K of runs A and B -> the known difference, or None."""
    keys = ["question_id", "turn", "repeat"]
    a, b = _keyed(qa), _keyed(qb)
    if not set(a["repeat"]) & set(b["repeat"]):  # different repeats: pair each unit's first row
        keys = ["question_id", "turn"]
        a, b = (f.sort_values("repeat").drop_duplicates(keys) for f in (a, b))
    merged = a.merge(b, on=keys, suffixes=("_a", "_b"))
    differ = merged[merged["accepted_a"] != merged["accepted_b"]]
    if differ.empty:
        return None
    same_path = (
        (differ["generated_tokens_a"] == differ["generated_tokens_b"])
        & (differ["steps_a"] == differ["steps_b"])
    ).all()
    if not same_path:
        return None
    cut = differ["generated_tokens_a"] - 1 - differ["steps_a"]
    a_higher = differ["accepted_a"] > differ["accepted_b"]
    if a_higher.all() and (differ["accepted_b"] == cut).all():
        return CountingDifference(TAIL, len(differ), "A")
    if (~a_higher).all() and (differ["accepted_a"] == cut).all():
        return CountingDifference(TAIL, len(differ), "B")
    return None


# --- conventions declared by imported runs (alcheck.imports: run.json `imported.counting`) ----------
#
# An import converts its source's counts to alcheck's definition, but two things cannot be undone:
# - tail_past_eos "subtracted" (Spec-Bench for EAGLE-1/2 and prompt lookup): the drafts the last
#   step accepted past EOS are gone, at most K per generation, so accepted reads low;
# - extra_eos_step (the EAGLE repo's loops): a generation whose last bonus token is EOS takes one
#   more step (root EOS, at most K drafts accepted), so steps read high by at most one per generation.
# Under alcheck's counting the same generations would therefore have an AL within a range; when the
# two runs' ranges overlap, their difference may be the convention and compare says so.

CONVENTION = "counting convention difference"


@dataclass(frozen=True)
class Convention:
    name: str
    tail_past_eos: str  # "counted" (alcheck, vLLM) | "subtracted" | "unknown"
    extra_eos_step: bool

    def al_range(self, steps: int, accepted: int, generations: int, k: int) -> tuple[float, float]:
        """The AL these counts would have under alcheck's counting: a [lo, hi] range."""
        steps_lo = steps - generations if self.extra_eos_step else steps
        accepted_lo = max(accepted - k * generations, 0) if self.extra_eos_step else accepted
        accepted_hi = accepted + (k * generations if self.tail_past_eos != "counted" else 0)
        return 1 + accepted_lo / steps, 1 + accepted_hi / max(steps_lo, 1)

    def differs_from(self, other: Convention) -> list[str]:
        out = []
        if self.tail_past_eos != other.tail_past_eos:
            out.append(
                f"the tail past EOS: {self.tail_past_eos} by "
                f"{self.name}, {other.tail_past_eos} by {other.name}"
            )
        if self.extra_eos_step != other.extra_eos_step:
            takes = self.name if self.extra_eos_step else other.name
            out.append(f"a final bonus EOS costs {takes} one more step")
        return out


ALCHECK = Convention("alcheck", "counted", False)


def convention_of(meta: dict) -> Convention:
    """How a run counted: its import's declared rule, else alcheck's own."""
    counting = (
        (meta.get("imported") or {}).get("counting") if isinstance(meta.get("imported"), dict) else None
    )
    if not counting:
        return ALCHECK
    return Convention(
        str(counting.get("source") or "the source"),
        str(counting.get("tail_past_eos") or "unknown"),
        bool(counting.get("extra_eos_step")),
    )


def convention_difference(
    qa: pd.DataFrame, qb: pd.DataFrame, conv_a: Convention, conv_b: Convention, k: int
) -> tuple[bool, str] | None:
    """(explained, note) when A and B declare different counting conventions, else None.
    explained: the AL ranges the conventions allow on the common units overlap."""
    differs = conv_a.differs_from(conv_b)
    if not differs:
        return None
    a, b = common_units(qa, qb)
    ranges = [
        conv.al_range(int(f["steps"].sum()), int(f["accepted"].sum()), len(f), k)
        for conv, f in ((conv_a, a), (conv_b, b))
    ]
    explained = ranges[0][0] <= ranges[1][1] and ranges[1][0] <= ranges[0][1]
    shown = "; ".join(f"{side} [{lo:.3f}, {hi:.3f}]" for side, (lo, hi) in zip("AB", ranges))
    note = (
        f"K={k}: A and B count differently ({'; '.join(differs)}). "
        f"Under alcheck's counting their AL would lie in {shown}: "
        + (
            "these overlap, so the difference may be the counting convention, not a change"
            if explained
            else "these do not overlap, so the convention does not explain it"
        )
    )
    return explained, note
