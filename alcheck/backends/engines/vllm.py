"""vLLM's OpenAI-compatible server: POST /v1/completions with token-id prompts, GET /v1/models
and /version (ENGINES.md 1.5).

Per-request counts come from `metrics.speculative_decoding.acceptance_histogram` (vLLM >= 0.29
with --per-request-spec-decode-metrics summary|detailed): h[j] = steps that accepted exactly j of
the K drafts, K = `num_spec_tokens` = len(h) - 1. With `detailed` the answer also carries
`per_step_accepted` (one entry per drafted step, in order): the per-step trace. The histogram
counts only the steps that drafted (vLLM's num_drafts); the steps, plain ones included, come from
the tokens emitted (engines/steps.py), and drafted_steps is the histogram's. A server
without these fields (older vLLM, or the flag left out) is measured by differencing its /metrics
counters (engines/counters.py).

vLLM's API does not name its drafting method; only /server_info does, and only on a server started
with VLLM_SERVER_DEV_MODE=1 (`served_method`, asked when nothing else names the method: it says
whether the steps that drafted are all the steps, engines/served_method.py).
"""

from __future__ import annotations

from alcheck.backends.engines.http import EngineAnswer
from alcheck.backends.engines.steps import EngineCounts, steps_from_tokens
from alcheck.backends.engines.table import VLLM
from alcheck.errors import AlcheckError
from alcheck.metrics.histograms import from_histogram, per_step

WHAT = VLLM.what


# the target's own distribution: vLLM otherwise fills unset sampling options from the model's
# generation_config.json (Llama-3.1-Instruct: top_p 0.9), which changes what T > 0 samples
NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0}


class VllmDialect:
    name = VLLM.name
    what = WHAT
    counter_prefix = "vllm:"
    has_counters = VLLM.per_position_counters
    counting = (
        "per request: metrics.speculative_decoding.acceptance_histogram (drafted steps); steps from the "
        "tokens emitted"
    )

    def probe(self, http) -> dict:
        """The served model, its context and vLLM's version; refuses a server that is not vLLM."""
        models = http.get_json("/v1/models", WHAT)
        data = models.get("data") if isinstance(models, dict) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "id" not in data[0]:
            raise EngineAnswer(
                f"--endpoint {http.base_url}: /v1/models did not list a model: is this {WHAT}?"
            )
        version = http.get_json("/version", WHAT, missing_ok=True)
        model = data[0]
        # vLLM reports no draft head; `alcheck serve` adds its --speculative-config-shaped settings to
        # /version
        spec = version.get("speculative_config") if isinstance(version, dict) else None
        head = (
            {
                "draft": spec.get("model"),
                "method": spec.get("method"),
                "spec": spec,  # its n-gram sizes, which a replay uses
                "source": "alcheck serve's /version",
            }
            if isinstance(spec, dict)
            else None
        )
        return {
            "engine": VLLM.name,
            "version": version.get("version") if isinstance(version, dict) else None,
            "reported_head": head,
            "model": model["id"],
            "root": model.get("root"),
            "max_model_len": model.get("max_model_len"),
            "vocab_size": model.get("vocab_size"),
            "server_k": None,
        }

    def served_method(self, http) -> dict | None:
        """The speculative config a dev-mode vLLM reports at /server_info?config_format=json
        (`vllm_config.speculative_config`), as a reported head; None where it is not served."""
        try:
            found = http.get_json("/server_info?config_format=json", WHAT, missing_ok=True)
        except EngineAnswer:  # optional: an odd answer there says nothing about the method
            return None
        config = found.get("vllm_config") if isinstance(found, dict) else None
        spec = config.get("speculative_config") if isinstance(config, dict) else None
        if not isinstance(spec, dict) or not (spec.get("method") or spec.get("model")):
            return None
        model = spec.get("model")
        return {
            "draft": model if isinstance(model, str) else None,
            "method": spec.get("method"),
            "spec": spec,
            "source": "vLLM's /server_info",
        }

    def request(self, info: dict, prompt: list[int], max_tokens: int, temperature: float, seed: int | None):
        body = {
            "model": info["model"],
            "prompt": list(prompt),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "return_token_ids": True,
            **NEUTRAL,
        }
        if temperature > 0 and seed is not None:
            body["seed"] = seed
        return "/v1/completions", body

    def text_request(self, info: dict, text: str):
        """A text prompt of one token's answer: the server tokenizes it (the tokenizer round trip)."""
        return "/v1/completions", {
            "model": info["model"],
            "prompt": text,
            "max_tokens": 1,
            "temperature": 0,
            "return_token_ids": True,
            "add_special_tokens": False,
        }

    def parse_text(self, answer, where: str) -> tuple[list[int] | None, int | None, int]:
        """(the prompt's token ids if returned, its token count, tokens generated) of text_request's
        answer."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise EngineAnswer(f"{where}: the answer has no single `choices` entry: is this {WHAT}?")
        usage = answer.get("usage") or {}
        ids = choices[0].get("prompt_token_ids")  # vLLM >= 0.10.2 with return_token_ids
        ids = ids if isinstance(ids, list) and all(isinstance(t, int) for t in ids) else None
        return ids, usage.get("prompt_tokens"), int(usage.get("completion_tokens") or 0)

    def parse(self, answer, prompt: list[int], k: int, where: str) -> tuple[EngineCounts, bool, int | None]:
        """(counts, whether the answer carried per-request spec metrics, the K it reports)."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise EngineAnswer(f"{where}: the answer has no single `choices` entry: is this {WHAT}?")
        choice, usage = choices[0], answer.get("usage") or {}
        ids = choice.get("token_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise EngineAnswer(f"{where}: choices[0].token_ids is not a list of token ids: is this {WHAT}?")
        completion = usage.get("completion_tokens")
        if ids is None and not isinstance(completion, int):
            raise EngineAnswer(
                f"{where}: the answer has neither token_ids nor usage.completion_tokens: is this {WHAT}?"
            )
        counts = EngineCounts(
            prompt_tokens=int(usage.get("prompt_tokens", len(prompt))),
            output_ids=ids,
            steps=0,
            drafted=0,
            accepted=0,
            accepted_per_pos=[0] * k,
            finish_reason=str(choice.get("finish_reason") or ""),
            num_output_tokens=completion,
            text=choice.get("text"),
        )
        spec = (
            (answer.get("metrics") or {}).get("speculative_decoding")
            if isinstance(answer.get("metrics"), dict)
            else None
        )
        if not isinstance(spec, dict):
            return counts, False, None
        hist = spec.get("acceptance_histogram")
        server_k = spec.get("num_spec_tokens")
        if not isinstance(server_k, int) and isinstance(hist, list) and hist:
            server_k = len(hist) - 1
        if isinstance(server_k, int) and server_k != k:
            return counts, True, server_k  # the caller names both Ks
        steps, accepted, per_pos = from_histogram(hist, k, where)
        for field, value in (("num_spec_steps", steps), ("num_accepted_draft_tokens", accepted)):
            reported = spec.get(field)
            if reported is not None and reported != value:
                raise AlcheckError(
                    f"{where}: metrics.speculative_decoding.{field} is {reported} but its "
                    f"acceptance_histogram {hist} gives {value}: the server's counts disagree"
                )
        drafted = spec.get("num_draft_tokens")
        # the histogram counts only steps that drafted (num_drafts): the steps come from the tokens
        traced = per_step(spec.get("per_step_accepted"), steps, accepted, k, where)
        counts.drafted_steps, counts.accepted, counts.accepted_per_pos = steps, accepted, per_pos
        counts.last_drafted_accepted = traced[-1] if traced else None
        counts.steps = steps_from_tokens(
            counts.generated_tokens, accepted, steps, k, where, traced[-1] if traced else None
        )
        counts.drafted = drafted if isinstance(drafted, int) else steps * k
        # a trace of the drafted steps only cannot be placed among the plain ones: totals only then
        counts.per_step_accepted = traced if counts.steps == steps else None
        return counts, True, server_k
