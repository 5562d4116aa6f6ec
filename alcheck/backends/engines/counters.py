"""Counter-difference mode: per-request counts from vLLM's server-wide Prometheus counters.

For a vLLM without per-request metrics (< 0.29, or started without the flag): read /metrics,
send ONE request, read /metrics again and take the difference (vLLM's own acceptance tests do
this, ENGINES.md 1.8c). It is exact only with nothing else running on the server, so requests go
one at a time. Counters (ENGINES.md 1.1), each summed over its label sets (engines, data parallel):
  vllm:spec_decode_num_drafts_total          -> steps
  vllm:spec_decode_num_draft_tokens_total    -> drafted
  vllm:spec_decode_num_accepted_tokens_total -> accepted
  vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"} -> accepted_per_pos[i]
The per-position family has one child per draft position, so it also says the server's K.
vLLM updates the counters from its output loop, which can trail the HTTP answer: the snapshot
after a request is re-read until vllm:generation_tokens_total has grown by the request's tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from alcheck.backends.engines.http import EngineError
from alcheck.errors import AlcheckError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION = "vllm:generation_tokens"
SETTLE_S = 10.0
POLL_S = 0.02


@dataclass
class Snapshot:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation: float | None = None
    has_spec: bool = False

    @property
    def k(self) -> int | None:
        return len(self.per_pos) or None


def parse_metrics(text: str, where: str) -> Snapshot:
    """The vLLM speculative counters in a /metrics page (prometheus_client's own text parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    snap = Snapshot()
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise AlcheckError(
            f"{where}: /metrics is not Prometheus text ({' '.join(str(exc).split())[:120]}): "
            "is this a vLLM server?"
        ) from None
    for family in families:
        name = family.name[:-6] if family.name.endswith("_total") else family.name
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            value = float(sample.value)
            if name == DRAFTS:
                snap.drafts += value
                snap.has_spec = True
            elif name == DRAFT_TOKENS:
                snap.draft_tokens += value
            elif name == ACCEPTED:
                snap.accepted += value
            elif name == PER_POS:
                pos = int(sample.labels.get("position", -1))
                snap.per_pos[pos] = snap.per_pos.get(pos, 0.0) + value
            elif name == GENERATION:
                snap.generation = (snap.generation or 0.0) + value
    return snap


def read_snapshot(http) -> Snapshot:
    return parse_metrics(http.get_text("/metrics", "a vLLM server"), f"--endpoint {http.base_url}")


def settled_snapshot(http, before: Snapshot, tokens: int) -> Snapshot:
    """/metrics after a request of `tokens` output tokens, once vLLM has counted all of them."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = read_snapshot(http)
        if (
            after.generation is None
            or before.generation is None
            or after.generation - before.generation >= tokens
        ):
            return after
        if time.monotonic() > deadline:
            raise AlcheckError(
                f"--endpoint {http.base_url}: vllm:generation_tokens_total grew by "
                f"{after.generation - before.generation:g}, not {tokens}, within {SETTLE_S:g} s of the "
                "answer: is another client using this server? counter differences need it to itself"
            )
        time.sleep(POLL_S)


def check_alone(before: Snapshot, after: Snapshot, tokens: int, where: str):
    """The counters moved by more than this one request explains: another client's tokens or steps
    are in the difference, and recording it would credit them to this request."""
    grew = (
        None
        if after.generation is None or before.generation is None
        else after.generation - before.generation
    )
    steps = after.drafts - before.drafts  # each step emits at least one token: never more steps than tokens
    if (grew is not None and grew > tokens) or steps > tokens:
        what = (
            f"{GENERATION}_total grew by {grew:g}"
            if grew is not None and grew > tokens
            else f"{DRAFTS}_total grew by {steps:g}"
        )
        # an EngineError: the CLI adds which cells are saved and how to resume
        raise EngineError(
            f"{where}: another client is using the server ({what} during one request of {tokens} "
            "tokens): counter mode needs the server to itself; stop the other clients"
        )


def difference(before: Snapshot, after: Snapshot, k: int, where: str) -> tuple[int, int, int, list[int]]:
    """(steps, drafted, accepted, accepted_per_pos) of the one request between two snapshots."""

    def count(a: float, b: float, name: str) -> int:
        delta = b - a
        if delta < 0 or delta != int(delta):
            raise AlcheckError(
                f"{where}: {name}_total went from {a:g} to {b:g}: the server restarted or its "
                "counters are not counts; restart the run with --resume"
            )
        return int(delta)

    steps = count(before.drafts, after.drafts, DRAFTS)
    drafted = count(before.draft_tokens, after.draft_tokens, DRAFT_TOKENS)
    accepted = count(before.accepted, after.accepted, ACCEPTED)
    per_pos = [
        count(before.per_pos.get(i, 0.0), after.per_pos.get(i, 0.0), f'{PER_POS}{{position="{i}"}}')
        for i in range(k)
    ]
    if sum(per_pos) != accepted:
        raise AlcheckError(
            f"{where}: the per-position counters add up to {sum(per_pos)} but "
            f"{ACCEPTED}_total grew by {accepted}: is another client using this server?"
        )
    return steps, drafted, accepted, per_pos
