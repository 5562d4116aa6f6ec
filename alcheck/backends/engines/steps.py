"""A request's verification steps from the tokens it emitted, not from an engine's draft count.

vLLM counts a step only when it carried drafts (num_drafts; its per-request histogram sums to the
same): for EAGLE that is every step, for n-gram or suffix decoding a step whose context matched
nothing is a plain decoding step vLLM does not count (METHODS-NOTES §3: an answer of 67 tokens
read as 8 steps). The tokens say how many steps there were:

    generated = 1 + Σ over steps (accepted + 1) - cut

The first token comes from the prefill (no step); each verification step emits its accepted
drafts plus the bonus token; `cut` is what the last step emitted past EOS or max_tokens, which
the output drops while the accepted count keeps it (vLLM counts before its stop check, as the
built-in runner does). So steps = generated - 1 - accepted + cut, with 0 <= cut <= K.

The cut is not in the answer. It is as small as the drafted steps allow: steps are at least the
steps that drafted, so cut = max(0, drafted_steps - (generated - 1 - accepted)). For EAGLE that
gives steps = drafted_steps exactly, as before. For a method that skips steps it is exact unless
the last step was a drafted one whose accepted run crossed EOS or max_tokens AND other steps drafted
nothing; then steps read low by the drafts past the stop (at most K, once per request).

`most_steps` is the other end: every token the last step could have emitted past the stop (at
most its accepted drafts: the last drafted step's when the server lists them per step, K, and all
accepted drafts) counted as a plain step more. Where the two ends meet the steps are certain;
where they do not, the client settles them by the method (engines/served_method.py): a head or a
draft model drafts at every step (the fewest), n-gram is replayed over the answer
(engines/replay.py), and anything else is refused, never printed.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.backends.base import RequestCounts
from alcheck.errors import AlcheckError


@dataclass
class EngineCounts(RequestCounts):
    """A request's counts as an engine reported them, with the one fact the steps may still need."""

    # the last drafted step's accepted drafts, from a per-step list of the drafted steps (vLLM's
    # `detailed` metrics); None without one
    last_drafted_accepted: int | None = None


def steps_from_tokens(
    generated: int, accepted: int, drafted_steps: int, k: int, where: str, last_accepted: int | None = None
) -> int:
    """Verification steps of one request; counts no stop can explain are one line, exit 2.

    last_accepted: the last drafted step's accepted drafts when the server gave per-step counts
    (a cut is at most that, when every step drafted)."""
    plain = generated - 1 - accepted  # the steps if nothing was emitted past the stop
    steps = max(drafted_steps, plain, 0)
    cut = steps - plain
    bound = k if last_accepted is None or steps != drafted_steps else last_accepted
    if generated < 1 and (drafted_steps or accepted):
        bound = -1  # no token at all, yet steps were counted
    if cut > bound:
        raise AlcheckError(
            f"{where}: the server counts {drafted_steps} drafted steps accepting {accepted} drafts for "
            f"an answer of {generated} tokens: those steps emit at least "
            f"{drafted_steps + accepted + 1 - bound} "
            "(the prefill token, then each step's accepted drafts plus one, at most "
            f"{bound if bound >= 0 else 0} past EOS / max_tokens): its counts do not belong to this answer"
        )
    return steps


def most_steps(
    generated: int, accepted: int, drafted_steps: int, k: int, last_accepted: int | None = None
) -> int:
    """The most verification steps these counts allow (steps_from_tokens gives the fewest): the last
    step emitted past the stop at most its accepted drafts, so at most min(K, accepted,
    last_accepted) tokens were cut, each one a plain step the fewest count leaves out."""
    cut = min(k, accepted, k if last_accepted is None else last_accepted)
    return max(drafted_steps, generated - 1 - accepted + max(cut, 0), 0)
