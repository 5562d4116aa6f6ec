"""A served n-gram answer replayed: its exact verification steps, and a check of the server's counts.

From an engine's counts alone (num_drafts, accepted) the plain decoding steps of a method that
skips steps are uncertain by the drafts accepted past the stop (engines/steps.py: CI saw 2 of 16
requests read one step low). An n-gram drafter is a pure function of the committed tokens, and a
draft is accepted as far as it equals what the target emitted (at temperature 0 by argmax; above
it too: vLLM's drafts carry no probabilities, so a rejected draft token is resampled from the
residual p - onehot, which never gives it back). So the answer says where every step began:

    after the prefill token: draft from the context; the step emits the longest prefix of the draft
    that equals the answer's next tokens, plus one; repeat until the answer is used up

The server's own counts must agree: the steps that drafted, exactly; the accepted drafts, up to
the last step's drafts that run past the answer's end (accepted before the stop check, dropped by
it). A server that disagrees does not run the stated rule and sizes: that is an error, not a
number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from alcheck.errors import AlcheckError


@dataclass(frozen=True, slots=True)
class Replay:
    steps: int  # verification steps, plain ones included
    drafted_steps: int  # the steps that proposed at least one token (vLLM's num_drafts)
    drafted: int  # draft tokens proposed
    accepted: int  # draft tokens the answer shows accepted
    past_end: int  # the last step's draft tokens beyond the answer's end (accepted or not: unseen)


def replay(draft: Callable[[list[int]], list[int]], prompt: Sequence[int], output: Sequence[int]) -> Replay:
    """Steps of one answer under a drafter draft(context) -> tokens (prompt + output so far)."""
    output = list(output)
    context = [*prompt, *output[:1]]  # the prefill emits the first token; it is not a step
    steps = drafted_steps = drafted = accepted = past_end = 0
    i = 1
    while i < len(output):
        proposal = draft(context)
        n = 0
        while n < len(proposal) and i + n < len(output) and proposal[n] == output[i + n]:
            n += 1
        steps += 1
        drafted_steps += bool(proposal)
        drafted += len(proposal)
        accepted += n
        past_end = len(proposal) - n if i + n >= len(output) else 0
        emitted = output[i : i + n + 1]  # the accepted drafts and the target's own token
        context += emitted
        i += len(emitted)
    return Replay(steps, drafted_steps, drafted, accepted, past_end)


def check_counts(found: Replay, drafted_steps: int, accepted: int, where: str, stated: str) -> None:
    """The server's counts against the replay; one line naming both when they disagree."""
    extra = accepted - found.accepted
    if drafted_steps == found.drafted_steps and 0 <= extra <= found.past_end:
        return
    raise AlcheckError(
        f"{where}: the server drafted at {drafted_steps} steps accepting {accepted} tokens, but "
        f"{stated} drafts at {found.drafted_steps} steps of this answer accepting {found.accepted}"
        f"{f' (+ up to {found.past_end} past its end)' if found.past_end else ''}: the server does "
        "not draft by that rule; pass the --ngram-rule, --prompt-lookup-min and --prompt-lookup-max "
        "it serves"
    )
