"""SGLang's native server: POST /generate with `input_ids`, GET /get_model_info and
/get_server_info (ENGINES.md 2.1, 2.5).

Per-request counts come from `meta_info` on finish: `spec_verify_ct` = verification steps and
`spec_correct_drafts_histogram` (0.5.15 on; h[j] = steps that accepted exactly j drafts, grown to
the largest j seen), with `spec_num_correct_drafts` checked against it. Never
`spec_accept_length`: it is completion_tokens / spec_verify_ct, which counts the token sampled at
prefill. SGLang leaves the keys out for a request that ran no verification step (0.5.23).
SGLang reports no per-step counts, so its runs are totals only; `alcheck serve`'s SGLang dialect adds
`alcheck_per_step_accepted`, read here as the per-step trace when present.

K: SGLang reports its speculative settings in /get_server_info. A chain of K drafts is
speculative_num_steps K, speculative_eagle_topk 1 and speculative_num_draft_tokens K + 1; a tree
(EAGLE-2) has topk > 1, and the run's --topk / --num-draft-tokens must then be the server's.
"""

from __future__ import annotations

from alcheck.backends.base import RequestCounts
from alcheck.backends.engines.http import EngineAnswer
from alcheck.backends.engines.steps import steps_from_tokens
from alcheck.backends.engines.table import SGLANG
from alcheck.backends.engines.vllm import NEUTRAL  # explicit whatever the server's own sampling defaults
from alcheck.errors import AlcheckError
from alcheck.methods.table import method_for_sglang_algorithm
from alcheck.metrics.histograms import from_histogram, per_step

WHAT = SGLANG.what
NO_METRICS_FIX = SGLANG.no_metrics_fix


class SglangDialect:
    name = SGLANG.name
    what = WHAT
    counter_prefix = "sglang:"
    counting = "per request: meta_info.spec_verify_ct and spec_correct_drafts_histogram"
    has_counters = SGLANG.per_position_counters  # none: per-request meta_info only

    def probe(self, http) -> dict:
        model = http.get_json("/get_model_info", WHAT)
        if not isinstance(model, dict) or "model_path" not in model:
            raise EngineAnswer(
                f"--endpoint {http.base_url}: /get_model_info has no model_path: is this {WHAT}?"
            )
        server = http.get_json("/get_server_info", WHAT, missing_ok=True)
        if server is None:
            server = http.get_json("/server_info", WHAT)
        if not isinstance(server, dict):
            raise EngineAnswer(
                f"--endpoint {http.base_url}: /get_server_info is not a JSON object: is this {WHAT}?"
            )
        algorithm = server.get("speculative_algorithm")
        if not algorithm:
            raise AlcheckError(
                f"--endpoint {http.base_url}: the SGLang server runs no speculative decoding "
                f"(speculative_algorithm is {algorithm!r}): {NO_METRICS_FIX}"
            )
        steps, topk, tokens = (
            server.get(k)
            for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        )
        if topk in (None, 1) and isinstance(steps, int) and isinstance(tokens, int) and tokens != steps + 1:
            raise AlcheckError(
                f"--endpoint {http.base_url}: speculative_num_draft_tokens {tokens} is not "
                f"speculative_num_steps {steps} + 1: a chain of K drafts has K + 1: restart the server so"
            )
        speculative = {
            key: server.get(key)
            for key in (
                "speculative_algorithm",
                "speculative_draft_model_path",
                "speculative_num_steps",
                "speculative_eagle_topk",
                "speculative_num_draft_tokens",
                "speculative_accept_threshold_single",
                "speculative_accept_threshold_acc",
            )
            if key in server
        }
        entry = method_for_sglang_algorithm(algorithm)
        head = {
            "draft": server.get("speculative_draft_model_path"),
            "method": entry and entry.name,
            "source": "SGLang's speculative_draft_model_path and speculative_algorithm",
        }
        return {
            "engine": SGLANG.name,
            "version": server.get("version"),
            "model": model.get("model_path"),
            "reported_head": head,
            "max_model_len": model.get("max_context_length") or server.get("context_length"),
            "vocab_size": model.get("vocab_size"),
            "server_k": steps if isinstance(steps, int) else None,
            "server_tree": (topk, tokens) if isinstance(topk, int) and isinstance(tokens, int) else None,
            "speculative": speculative,
            "dtype": server.get("dtype"),
        }

    def request(self, info: dict, prompt: list[int], max_tokens: int, temperature: float, seed: int | None):
        sampling = {"max_new_tokens": max_tokens, "temperature": temperature, **NEUTRAL}
        if temperature > 0 and seed is not None:
            sampling["sampling_seed"] = seed
        return "/generate", {"input_ids": list(prompt), "sampling_params": sampling}

    def text_request(self, info: dict, text: str):
        """A text prompt of one token's answer: the server tokenizes it (the tokenizer round trip)."""
        return "/generate", {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

    def parse_text(self, answer, where: str) -> tuple[list[int] | None, int | None, int]:
        """(None: SGLang returns no prompt ids, the prompt's token count, tokens generated)."""
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        if not isinstance(meta, dict):
            raise EngineAnswer(f"{where}: the answer has no meta_info: is this {WHAT}?")
        return None, meta.get("prompt_tokens"), int(meta.get("completion_tokens") or 0)

    def parse(self, answer, prompt: list[int], k: int, where: str) -> tuple[RequestCounts, bool, int | None]:
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        if not isinstance(meta, dict):
            raise EngineAnswer(f"{where}: the answer has no meta_info: is this {WHAT}?")
        ids = answer.get("output_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise EngineAnswer(f"{where}: output_ids is not a list of token ids: is this {WHAT}?")
        finish = meta.get("finish_reason")
        counts = RequestCounts(
            prompt_tokens=int(meta.get("prompt_tokens", len(prompt))),
            output_ids=ids,
            steps=0,
            drafted=0,
            accepted=0,
            accepted_per_pos=[0] * k,
            finish_reason=str(finish.get("type") if isinstance(finish, dict) else finish or ""),
            num_output_tokens=meta.get("completion_tokens"),
            text=answer.get("text"),
        )
        steps = meta.get("spec_verify_ct")
        if steps is None:
            return counts, False, None  # no verification step, or no speculative decoding: the caller decides
        hist = meta.get("spec_correct_drafts_histogram")
        if hist is None:
            raise AlcheckError(
                f"{where}: meta_info has spec_verify_ct but no spec_correct_drafts_histogram "
                "(SGLang < 0.5.15): per-position counts need SGLang 0.5.15 or later"
            )
        h_steps, accepted, per_pos = from_histogram(hist, k, where)
        for field, value, mine in (
            ("spec_verify_ct", steps, h_steps),
            ("spec_num_correct_drafts", meta.get("spec_num_correct_drafts"), accepted),
        ):
            if value is not None and value != mine:
                raise AlcheckError(
                    f"{where}: meta_info.{field} is {value} but spec_correct_drafts_histogram "
                    f"{hist} gives {mine}: the server's counts disagree"
                )
        # drafted = steps * K (K = tree depth) as the built-in runner writes it, not SGLang's
        # spec_num_proposed_drafts ((num_draft_tokens - 1) per step on a tree)
        # every verify step drafts (NGRAM too: it pads to speculative_num_draft_tokens), so
        # drafted_steps = spec_verify_ct; the steps are checked against the tokens as vLLM's are
        traced = per_step(meta.get("alcheck_per_step_accepted"), h_steps, accepted, k, where)
        counts.drafted_steps, counts.accepted, counts.accepted_per_pos = h_steps, accepted, per_pos
        counts.steps = steps_from_tokens(
            counts.generated_tokens, accepted, h_steps, k, where, traced[-1] if traced else None
        )
        counts.drafted = h_steps * k
        counts.per_step_accepted = traced if counts.steps == h_steps else None
        return counts, True, None
