"""Server-wide counters under the engines' own Prometheus names, in a registry per app.

vLLM (`vllm/v1/spec_decode/metrics.py`): four counters labelled model_name and engine="0",
exposed with the `_total` suffix; per-position adds a `position` label "0".."K-1". Every verify
step of a head carries K drafts, so:
  num_drafts += steps, num_draft_tokens += K * steps, num_accepted_tokens += accepted,
  num_accepted_tokens_per_pos{position=i} += steps with > i accepted.
(For --method ngram: num_drafts += the steps that drafted, num_draft_tokens += the drafts.)
SGLang (`--enable-metrics`): `sglang:spec_verify_calls_total` grows by a request's verify
count when it finishes, and `sglang:generation_tokens_total` by its completion tokens.
Both dialects also keep the plain totals `/server_info` reports (avg_spec_accept_length).
"""

from __future__ import annotations

import threading

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from alcheck.backends.engines.table import get_engine
from alcheck.runner.request import GenerationResult

VLLM_LABELS = ["model_name", "engine"]


class ServeMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str, k: int, dialect: str):
        self.k, self.dialect = k, dialect
        # vLLM's per-position counter family, or SGLang's verify-call count (the engine table's fact)
        self.per_position = get_engine(dialect, "--dialect").per_position_counters
        self.registry = CollectorRegistry()  # never the global one: two apps in one process stay apart
        self._lock = threading.Lock()
        self.requests = self.steps = self.accepted = self.generated = 0
        if self.per_position:
            self._init_vllm(model_name)
        else:
            self._init_sglang(model_name)

    def _init_vllm(self, model_name: str):
        labels = {"model_name": model_name, "engine": "0"}

        def counter(name, doc, extra=()):
            return Counter(name, doc, VLLM_LABELS + list(extra), registry=self.registry)

        self.v_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(
            **labels
        )
        self.v_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.").labels(
            **labels
        )
        self.v_accepted = counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
        ).labels(**labels)
        per_pos = counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            ["position"],
        )
        self.v_per_pos = [per_pos.labels(**labels, position=str(i)) for i in range(self.k)]
        self.v_prompt = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(**labels)
        self.v_generation = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(**labels)

    def _init_sglang(self, model_name: str):
        labels = {"model_name": model_name}

        def counter(name, doc):
            return Counter(name, doc, ["model_name"], registry=self.registry).labels(**labels)

        self.s_verify = counter(
            "sglang:spec_verify_calls", "Verification forward calls in speculative decoding."
        )
        self.s_prompt = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.s_generation = counter("sglang:generation_tokens", "Number of generation tokens processed.")
        self.s_requests = counter("sglang:num_requests", "Number of requests processed.")

    def observe(self, prompt_tokens: int, result: GenerationResult):
        """One finished request (called by the runner's thread before its response is sent)."""
        with self._lock:
            self.requests += 1
            self.steps += result.steps
            self.accepted += result.accepted
            self.generated += len(result.output_ids)
        if self.per_position:
            drafts = result.drafted_steps if result.drafted_steps is not None else result.steps
            self.v_drafts.inc(drafts)  # vLLM counts the steps that carried drafts (n-gram skips some)
            self.v_draft_tokens.inc(result.drafted if result.drafted_steps is not None else drafts * self.k)
            self.v_accepted.inc(result.accepted)
            for child, count in zip(self.v_per_pos, result.accepted_per_pos):
                child.inc(count)
            self.v_prompt.inc(prompt_tokens)
            self.v_generation.inc(len(result.output_ids))
        else:
            self.s_verify.inc(result.steps)
            self.s_prompt.inc(prompt_tokens)
            self.s_generation.inc(len(result.output_ids))
            self.s_requests.inc()

    def totals(self) -> tuple[int, int, int]:
        """(requests, verify steps, accepted drafts) served so far."""
        with self._lock:
            return self.requests, self.steps, self.accepted

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
