"""SGLang's native dialect: POST /generate, GET /get_model_info, GET /server_info.

What each `meta_info` field equals (K = --k; the runner's counts for this request; SGLang 0.5.23,
`tokenizer_manager._calculate_spec_decoding_metrics`):
- `prompt_tokens`; `completion_tokens` = output tokens, the one sampled at prefill and EOS
  included, cut at EOS / max_new_tokens; `finish_reason` = {"type": "stop", "matched": EOS id}
  or {"type": "length", "length": max_new_tokens}.
- Only when the request ran a verification step (as in SGLang): `spec_verify_ct` = steps;
  `spec_num_correct_drafts` = accepted (bonus excluded); `spec_num_proposed_drafts` =
  (T - 1) * steps with T = speculative_num_draft_tokens (K + 1 for a chain, --num-draft-tokens
  for a tree); `spec_accept_rate` = accepted / ((T - 1) * steps);
  `spec_correct_drafts_histogram[j]` = steps that accepted exactly j drafts, grown to the
  largest j seen (length max j + 1, not K + 1); `spec_accept_length` = completion_tokens /
  steps, SGLang's own formula, which counts the prefill token and so reads above
  1 + accepted / steps.
- `/server_info` `internal_states[0].avg_spec_accept_length` = 1 + Σ accepted / Σ steps over
  every request served (prefill token excluded, as SGLang's); unlike SGLang's it never lags.
- `/get_model_info` `vocab_size` is an alcheck extra that SGLang does not report.
- `alcheck_per_step_accepted` (each step's accepted drafts, in order) is an alcheck extra too: SGLang
  has no per-step field, so its traces are totals only, but a tree served here can be traced.
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from alcheck.errors import AlcheckError
from alcheck.methods.table import get_method
from alcheck.metrics.histograms import grown_histogram
from alcheck.serve.common import VERSION, read_body
from alcheck.serve.jobs import Job, ServerStopping
from alcheck.serve.params import (
    BadRequest,
    check_prompt,
    get_float,
    get_int,
    get_seed,
    reject_unsupported,
    token_ids,
    tokenize,
)

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
NEUTRAL_SAMPLING = {
    "n": (1,),
    "top_p": (1, 1.0),
    "top_k": (-1, 0),
    "min_p": (0, 0.0),
    "stop": ([], ""),
    "stop_token_ids": ([],),
    "ignore_eos": (False,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_new_tokens": (0,),
    "json_schema": (None,),
    "regex": (None,),
    "ebnf": (None,),
    "logit_bias": ({},),
}
NEUTRAL = {"stream": (False,), "return_logprob": (False,)}


def error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


def spec_meta(result, completion_tokens: int, verify_tokens: int) -> dict:
    if result.steps == 0:
        return {}
    proposed = result.steps * (verify_tokens - 1)  # SGLang: verify_ct * (num_draft_tokens - 1)
    return {
        "spec_accept_rate": result.accepted / proposed,
        "spec_accept_length": completion_tokens / result.steps,
        "spec_verify_ct": result.steps,
        "spec_num_correct_drafts": result.accepted,
        "spec_num_proposed_drafts": proposed,
        "spec_correct_drafts_histogram": grown_histogram(result.steps, result.accepted_per_pos),
        **(
            {"alcheck_per_step_accepted": list(result.per_step_accepted)}
            if getattr(result, "per_step_accepted", None) is not None
            else {}
        ),
    }


def parse(ctx, body: dict) -> tuple[Job, str]:
    pair = ctx.pair
    reject_unsupported(body, NEUTRAL)
    has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
    if has_text == has_ids:
        raise BadRequest("Either text or input_ids should be provided (exactly one of them).")
    if has_ids:
        ids = token_ids(body["input_ids"], "input_ids")
        if ids is None:
            raise BadRequest("input_ids must be a list of token ids (integers)", "input_ids")
        key = "input_ids"
    else:
        if isinstance(body["text"], list):
            raise BadRequest(
                f"text: one prompt per request, got a batch of {len(body['text'])}: "
                "send them as separate requests",
                "text",
            )
        ids, key = tokenize(pair, body["text"], "text"), "text"
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise BadRequest("sampling_params must be a JSON object", "sampling_params")
    where = "sampling_params."
    reject_unsupported(sampling, NEUTRAL_SAMPLING, where)
    max_new = get_int(sampling, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, minimum=1, where=where)
    temperature = get_float(sampling, "temperature", 1.0, where=where)
    if temperature < 0:
        raise BadRequest(f"sampling_params.temperature must be >= 0, got {temperature}", "temperature")
    seed = get_seed(sampling, ("sampling_seed", "seed"), where)  # sampling_seed: SGLang's name
    check_prompt(pair, ids, max_new, key, "sampling_params.max_new_tokens")
    rid = body.get("rid")
    return Job(ids, max_new, temperature, seed), rid if isinstance(rid, str) and rid else uuid.uuid4().hex


def generation(ctx, job: Job, result, rid: str, latency: float) -> dict:
    eos = result.finish_reason == "eos"
    finish = (
        {"type": "stop", "matched": result.output_ids[-1]}
        if eos
        else {"type": "length", "length": job.max_tokens}
    )
    completion_tokens = len(result.output_ids)
    meta = {
        "id": rid,
        "finish_reason": finish,
        "prompt_tokens": len(job.prompt_ids),
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
        "e2e_latency": latency,
    }
    meta.update(spec_meta(result, completion_tokens, ctx.pair.verify_tokens))
    return {
        "text": ctx.pair.tokenizer.decode(result.output_ids, skip_special_tokens=True),
        "output_ids": list(result.output_ids),
        "meta_info": meta,
    }


def make_router(ctx) -> APIRouter:
    router = APIRouter()
    pair, cfg = ctx.pair, ctx.cfg

    @router.post("/generate")
    async def generate(request: Request):
        start = time.perf_counter()
        try:
            job, rid = parse(ctx, await read_body(request))
            result = await ctx.jobs.run(job)
        except BadRequest as exc:
            return error(exc.message, exc.status)
        except ServerStopping as exc:
            return error(str(exc), 503)
        except AlcheckError as exc:
            return error(exc.message, 500)
        except Exception as exc:  # noqa: BLE001 - a bug: still the dialect's error JSON, naming it
            return error(f"internal error in alcheck serve: {type(exc).__name__}: {exc}", 500)
        return JSONResponse(generation(ctx, job, result, rid, time.perf_counter() - start))

    def model_info():
        raw = pair.target_config
        return {
            "model_path": cfg.target,
            "tokenizer_path": cfg.target,
            "served_model_name": cfg.served_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": raw.get("model_type", "llama"),
            "architectures": raw.get("architectures") or [],
            "max_context_length": pair.max_model_len,
            "vocab_size": pair.vocab_size,
        }  # vocab_size: alcheck's extra

    def server_info():
        requests, steps, accepted = ctx.metrics.totals()
        state = {"served_requests": requests}
        if steps:
            state["avg_spec_accept_length"] = 1 + accepted / steps
        return {
            "version": VERSION,
            "model_path": cfg.target,
            "tokenizer_path": cfg.target,
            "served_model_name": cfg.served_name,
            "speculative_algorithm": get_method(pair.method).sglang_algorithm,
            "speculative_draft_model_path": cfg.draft,
            "speculative_num_steps": pair.k,
            "speculative_eagle_topk": pair.topk,
            "speculative_num_draft_tokens": pair.verify_tokens,
            "context_length": pair.max_model_len,
            "dtype": pair.dtype,
            "device": pair.device,
            "max_running_requests": pair.max_batch_size,
            "internal_states": [state],
        }

    router.add_api_route("/get_model_info", model_info, methods=["GET"])
    router.add_api_route("/model_info", model_info, methods=["GET"])
    router.add_api_route("/server_info", server_info, methods=["GET"])
    router.add_api_route("/get_server_info", server_info, methods=["GET"])

    @router.get("/health_generate")
    async def health_generate():
        return JSONResponse(None, status_code=200)

    return router
