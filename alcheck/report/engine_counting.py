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

TAIL = "counting difference (tail past EOS / max_tokens)"


@dataclass
class CountingDifference:
    kind: str
    units: int  # (question, turn, repeat) rows whose accepted counts differ
    higher: str  # "A" or "B": the run that counts the tail

    def note(self, k: int) -> str:
        lower = "B" if self.higher == "A" else "A"
        return (f"K={k}: {self.units} question turn{'s' * (self.units != 1)} produced the same tokens in the same "
                f"steps in both runs; {self.higher} also counts the drafts its last step accepted past EOS / "
                f"max_tokens (alcheck, vLLM), {lower} does not (SGLang): a counting difference, not a regression")


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
    same_path = ((differ["generated_tokens_a"] == differ["generated_tokens_b"])
                 & (differ["steps_a"] == differ["steps_b"])).all()
    if not same_path:
        return None
    cut = differ["generated_tokens_a"] - 1 - differ["steps_a"]
    a_higher = differ["accepted_a"] > differ["accepted_b"]
    if a_higher.all() and (differ["accepted_b"] == cut).all():
        return CountingDifference(TAIL, len(differ), "A")
    if (~a_higher).all() and (differ["accepted_a"] == cut).all():
        return CountingDifference(TAIL, len(differ), "B")
    return None
