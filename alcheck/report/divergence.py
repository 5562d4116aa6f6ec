"""Where two runs' acceptance diverges, step by step (issue 23), from their per-step traces
(alcheck/rundir/traces.py).

Per question turn measured by both runs (same K, repeat, question, turn):
- both have traces: identical, or the first verification step whose accepted count differs, the
  output position where that step starts (the tokens before it are common to both runs), the
  sequence length there, its offset inside the KV block, and, when the outputs were recorded, the
  first differing token and the text around it;
- a side without a trace: the totals of questions.csv (steps, accepted, per position), and the
  report says which side lacked traces.

The divergence map counts first divergences by sequence length mod block size, per K, against how
many steps of run A sat at each offset. The lookahead-slot bug class (the seed thread's: the draft
writes KV for positions past the slots a step allocated, when no lookahead slots are reserved) has a
signature that needs no knowledge of the engine beyond its block size: a step is *exposed* when the
proposal it verifies wrote draft KV past the blocks that verification alone needed. With n tokens
committed before step s-1 and a drafts accepted there, that step allocated positions up to
n + K - 1, rounded up to whole blocks, and its proposal wrote positions up to n + a + K - 2:

    exposed(s) = n + a + K - 2 >= B * ceil((n + K) / B)        (s >= 1)
    exposed(0) = P + K - 2 >= B * ceil(P / B)                   (the proposal after the prompt's P tokens)

(never at K = 1). When first divergences fall on exposed steps far more often than exposed steps
occur (one-sided binomial test against run A's share of exposed steps, p < 0.01, at least 3
divergences), the report names the bug class. Pure Python (pandas for questions.csv only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import pandas as pd

from alcheck.rundir.traces import Trace

MIN_DIVERGENCES = 3
BUG_P = 0.01
LOOKAHEAD_CLASS = (
    "lookahead slots: divergences cluster at steps whose drafts were written past the KV slots the "
    "step allocated (no lookahead slots reserved), the seed thread's bug class"
)
CONTEXT_TOKENS = 8


def step_lengths(prompt_tokens: int, accepted: list[int]) -> list[int]:
    """Committed tokens (prompt + output) when each verification step starts: the prefill token, then
    each step's 1 + a."""
    lengths, n = [], prompt_tokens + 1
    for a in accepted:
        lengths.append(n)
        n += 1 + a
    return lengths


def exposed(step: int, prompt_tokens: int, accepted: list[int], k: int, block_size: int) -> bool:
    """Did the proposal verified at `step` write draft KV past the slots allocated without lookahead?
    (accepted: at least the counts of the steps before it)."""
    b = block_size
    if step == 0:
        p = prompt_tokens
        return p + k - 2 >= b * math.ceil(p / b)
    n = step_lengths(prompt_tokens, accepted[:step])[step - 1]
    a = accepted[step - 1]
    return n + a + k - 2 >= b * math.ceil((n + k) / b)


@dataclass
class TurnDivergence:
    k: int
    repeat: int
    question_id: str
    turn: int
    basis: str  # "traces" | "totals"
    identical: bool
    step: int | None = None  # first step whose accepted count differs
    accepted_a: int | None = None  # at that step (None: that run had no such step)
    accepted_b: int | None = None
    position: int | None = None  # output token index where that step starts
    seq_len: int | None = None  # prompt + output tokens when it starts
    block_offset: int | None = None  # seq_len mod block size
    slots_left: int | None = None  # free slots in the last block at seq_len
    exposed: bool | None = None
    first_token_diff: int | None = None  # first differing output token (outputs recorded on both sides)
    context: str | None = None  # the text around it: "...before⟦A | B⟧"
    totals_a: str | None = None  # "steps/accepted" when compared on totals
    totals_b: str | None = None


def _first_difference(x: list[int], y: list[int]) -> int | None:
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def _context(ids_a: list[int], ids_b: list[int], at: int, decode) -> str | None:
    if decode is None:
        return None
    before = decode(ids_a[max(0, at - CONTEXT_TOKENS) : at])
    after_a, after_b = decode(ids_a[at : at + CONTEXT_TOKENS]), decode(ids_b[at : at + CONTEXT_TOKENS])
    return f"...{before}⟦{after_a} | {after_b}⟧"


def compare_trace(a: Trace, b: Trace, block_size: int, decode=None) -> TurnDivergence:
    out = TurnDivergence(a.k, a.repeat, a.question_id, a.turn, "traces", identical=True)
    step = _first_difference(a.accepted, b.accepted)
    if a.output_ids is not None and b.output_ids is not None:
        token = _first_difference(a.output_ids, b.output_ids)
        if token is not None:
            out.first_token_diff, out.context = token, _context(a.output_ids, b.output_ids, token, decode)
    if step is None and out.first_token_diff is None:
        return out
    out.identical = False
    if step is not None:
        out.step = step
        out.accepted_a = a.accepted[step] if step < len(a.accepted) else None
        out.accepted_b = b.accepted[step] if step < len(b.accepted) else None
        common = a.accepted[:step]
        out.position = 1 + sum(1 + x for x in common)
        if a.prompt_tokens is not None:  # an imported run's: not recorded, so no KV block to place it in
            out.seq_len = a.prompt_tokens + out.position
            out.block_offset = out.seq_len % block_size
            out.slots_left = (-out.seq_len) % block_size
            out.exposed = exposed(step, a.prompt_tokens, a.accepted, a.k, block_size)
    return out


def _totals(row) -> str:
    steps, accepted = int(row["steps"]), int(row["accepted"])
    return f"{steps} steps / {accepted} accepted / per position {row['accepted_per_pos']}"


def compare_totals(row_a, row_b) -> TurnDivergence:
    same = all(str(row_a[c]) == str(row_b[c]) for c in ("steps", "accepted", "accepted_per_pos"))
    return TurnDivergence(
        int(row_a["k"]),
        int(row_a["repeat"]),
        str(row_a["question_id"]),
        int(row_a["turn"]),
        "totals",
        same,
        totals_a=_totals(row_a),
        totals_b=_totals(row_b),
    )


@dataclass
class LookaheadFinding:
    k: int | None  # None: all K together
    divergences: int  # first divergences located by traces
    at_exposed: int
    expected_share: float  # run A's share of exposed steps
    p_value: float
    named: bool

    def line(self) -> str:
        where = f"K={self.k}" if self.k is not None else "all K"
        share = self.at_exposed / self.divergences if self.divergences else 0.0
        text = (
            f"{where}: {self.at_exposed} of {self.divergences} first divergences at steps exposed to missing "
            f"lookahead slots ({share:.0%}; {self.expected_share:.0%} "
            f"of steps are; binomial p = {self.p_value:.2g})"
        )
        return text + (f" -> {LOOKAHEAD_CLASS}" if self.named else "")


def binomial_upper_tail(x: int, n: int, p: float) -> float:
    """P(X >= x) for X ~ Binomial(n, p)."""
    if x <= 0:
        return 1.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(x, n + 1)))


@dataclass
class DivergenceReport:
    block_size: int
    turns: list[TurnDivergence]
    without_traces: dict = field(default_factory=dict)  # "A"/"B" -> turns of that run without a trace
    exposed_share: dict = field(default_factory=dict)  # K -> run A's share of exposed steps
    steps_by_offset: dict = field(default_factory=dict)  # K -> [steps of run A at each block offset]

    def by_k(self) -> dict[int, list[TurnDivergence]]:
        out: dict[int, list[TurnDivergence]] = {}
        for t in self.turns:
            out.setdefault(t.k, []).append(t)
        return dict(sorted(out.items()))

    def divergence_map(self) -> dict[int, list[int]]:
        """K -> first divergences located by traces at each block offset 0..B-1."""
        out = {}
        for k, turns in self.by_k().items():
            row = [0] * self.block_size
            for t in turns:
                if t.block_offset is not None:
                    row[t.block_offset] += 1
            out[k] = row
        return out

    def position_map(self) -> dict[int, list[int]]:
        """K -> first divergences located by traces at each draft position 1..K: the position one
        run accepted and the other rejected, min(accepted A, accepted B) + 1."""
        out = {}
        for k, turns in self.by_k().items():
            row = [0] * k
            for t in turns:
                if t.accepted_a is not None and t.accepted_b is not None:
                    row[min(min(t.accepted_a, t.accepted_b), k - 1)] += 1
            out[k] = row
        return out

    def lookahead(self) -> list[LookaheadFinding]:
        """Per K, then all K together (the sum of per-K binomials is approximated by the pooled share)."""
        findings = []
        located = [t for t in self.turns if t.exposed is not None]
        for k in sorted({t.k for t in located}):
            findings.append(
                self._finding(k, [t for t in located if t.k == k], self.exposed_share.get(k, 0.0))
            )
        if len(findings) > 1:
            steps = {k: sum(v) for k, v in self.steps_by_offset.items()}
            total = sum(steps.values())
            share = (
                sum(self.exposed_share.get(k, 0.0) * n for k, n in steps.items()) / total if total else 0.0
            )
            findings.append(self._finding(None, located, share))
        return findings

    @staticmethod
    def _finding(k, turns, share) -> LookaheadFinding:
        x = sum(bool(t.exposed) for t in turns)
        p = binomial_upper_tail(x, len(turns), share)
        named = len(turns) >= MIN_DIVERGENCES and p < BUG_P and x / len(turns) > share
        return LookaheadFinding(k, len(turns), x, share, p, named)

    @property
    def names_lookahead(self) -> bool:
        return any(f.named for f in self.lookahead())

    def summary(self) -> dict:
        out = {}
        for k, turns in self.by_k().items():
            traced = [t for t in turns if t.basis == "traces"]
            totals = [t for t in turns if t.basis == "totals"]
            out[k] = {
                "turns": len(turns),
                "identical": sum(t.identical for t in turns),
                "traced": len(traced),
                "traced_identical": sum(t.identical for t in traced),
                "totals_only": len(totals),
                "totals_identical": sum(t.identical for t in totals),
            }
        return out

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size,
            "summary": self.summary(),
            "without_traces": self.without_traces,
            "divergence_map": self.divergence_map(),
            "position_map": self.position_map(),
            "steps_by_offset": self.steps_by_offset,
            "lookahead": [asdict(f) for f in self.lookahead()],
            "turns": [asdict(t) for t in self.turns if not t.identical],
        }


def _rows(frame: pd.DataFrame) -> dict:
    keyed = {}
    for row in frame.to_dict("records"):
        keyed[(int(row["k"]), int(row["repeat"]), str(row["question_id"]), int(row["turn"]))] = row
    return keyed


def _pairs(rows_a: dict, rows_b: dict) -> list[tuple]:
    """(key A, key B) per common unit: same (k, repeat, question, turn); a K whose repeats do not
    overlap pairs each side's lowest repeat."""
    pairs = [(key, key) for key in rows_a if key in rows_b]
    paired_ks = {key[0] for key, _ in pairs}
    for k in sorted({key[0] for key in rows_a} & {key[0] for key in rows_b} - paired_ks):
        first = {}
        for side, rows in (("a", rows_a), ("b", rows_b)):
            for key in sorted(rows):
                if key[0] == k:
                    first.setdefault((side, key[2], key[3]), key)
        pairs += [
            (first[("a", q, t)], first[("b", q, t)])
            for (side, q, t) in list(first)
            if side == "a" and ("b", q, t) in first
        ]
    return sorted(pairs)


def diverge(
    questions_a: pd.DataFrame,
    questions_b: pd.DataFrame,
    traces_a: dict | None,
    traces_b: dict | None,
    block_size: int,
    decode=None,
) -> DivergenceReport:
    """Runs A and B (their questions.csv frames and traces, None for a run without) -> the report."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    rows_a, rows_b = _rows(questions_a), _rows(questions_b)
    traces_a, traces_b = traces_a or {}, traces_b or {}
    turns, missing = [], {"A": 0, "B": 0}
    for key_a, key_b in _pairs(rows_a, rows_b):
        ta, tb = traces_a.get(key_a), traces_b.get(key_b)
        missing["A"] += ta is None
        missing["B"] += tb is None
        if ta is not None and tb is not None:
            turns.append(compare_trace(ta, tb, block_size, decode))
        else:
            turns.append(compare_totals(rows_a[key_a], rows_b[key_b]))
    report = DivergenceReport(block_size, turns, {side: n for side, n in missing.items() if n})
    for k in sorted({t.k for t in traces_a.values()}):
        offsets, hits = [0] * block_size, 0
        for t in (t for t in traces_a.values() if t.k == k and t.prompt_tokens is not None):
            for s, n in enumerate(step_lengths(t.prompt_tokens, t.accepted)):
                offsets[n % block_size] += 1
                hits += exposed(s, t.prompt_tokens, t.accepted, k, block_size)
        total = sum(offsets)
        report.steps_by_offset[k] = offsets
        report.exposed_share[k] = hits / total if total else 0.0
    return report


def has_traces(*runs) -> bool:
    """Does any of these run directories (or run.json paths) hold a traces file?"""
    from alcheck.report.run_io import resolve_run_json
    from alcheck.rundir import traces

    return any(traces.has_traces(resolve_run_json(run).parent) for run in runs)


def divergence_of_runs(run_a, run_b, block_size: int | None = None, decode=None) -> DivergenceReport:
    """Two run directories (or loaded report.run_io Runs) -> the report; block size: run A's unless given."""
    from alcheck.report.run_io import Run, load_run
    from alcheck.rundir.traces import read_traces

    a = run_a if isinstance(run_a, Run) else load_run(run_a, require_questions=True)
    b = run_b if isinstance(run_b, Run) else load_run(run_b, require_questions=True)
    size = block_size or int(a.config.get("block_size") or 16)
    return diverge(a.questions, b.questions, read_traces(a.dir), read_traces(b.dir), size, decode)
