"""vLLM's OpenAI-compatible dialect: POST /v1/completions, GET /v1/models, GET /version.

What each number equals (K = --k; the runner's counts for this request):
- `usage.completion_tokens` = output tokens, the one sampled at prefill and EOS included, cut at
  EOS / max_tokens; `usage.prompt_tokens` = prompt tokens.
- `metrics.speculative_decoding` (vLLM >= 0.29 with --per-request-spec-decode-metrics; left out
  with --no-per-request-metrics): `acceptance_histogram[j]` = steps that accepted exactly j drafts
  (length K + 1); `num_spec_steps` = steps; `num_accepted_draft_tokens` = accepted;
  `num_draft_tokens` = K * steps; `num_spec_tokens` = K; `mean_acceptance_length` =
  1 + accepted / steps (1.0 without steps); `draft_acceptance_rate` = accepted / (K * steps)
  (0.0 without drafts). As in vLLM, drafts accepted past EOS in the last step count. "steps"
  here are vLLM's num_drafts, the steps that carried drafts: for --method ngram the plain steps
  (no match) are left out of every number, and num_draft_tokens is the drafts proposed.
- `choices[0].token_ids` / `prompt_token_ids` only with `return_token_ids: true` (vLLM >= 0.10.2).
- `/v1/models` `data[0].max_model_len` = the target's max_position_embeddings - (K - 1): the
  longest prompt + max_tokens that fits a last verification step. `vocab_size` there is an
  alcheck extra that vLLM does not report.
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from alcheck.errors import AlcheckError
from alcheck.metrics.histograms import acceptance_length, exact_histogram
from alcheck.serve.common import VERSION, read_body
from alcheck.serve.jobs import Job, ServerStopping
from alcheck.serve.params import (
    BadRequest,
    check_prompt,
    get_bool,
    get_float,
    get_int,
    get_seed,
    reject_unsupported,
    token_ids,
    tokenize,
)

DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default
# sampling options the runner lacks, with the values that mean "off"
NEUTRAL = {
    "n": (1,),
    "best_of": (1,),
    "stream": (False,),
    "echo": (False,),
    "logprobs": (None,),
    "top_p": (1, 1.0),
    "top_k": (-1, 0),
    "min_p": (0, 0.0),
    "stop": ([], ""),
    "stop_token_ids": ([],),
    "ignore_eos": (False,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_tokens": (0,),
    "logit_bias": ({},),
    "use_beam_search": (False,),
    "suffix": ("",),
    "prompt_logprobs": (None,),
    "response_format": (None,),
}


def error(message: str, status: int = 400, param: str | None = None) -> JSONResponse:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
        status, "InternalServerError"
    )
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}, status_code=status
    )


def drafted_steps_only(result) -> tuple[list[int] | None, list[int] | None]:
    """The per-step accepted and drafted counts of the steps that carried drafts: vLLM counts a step
    only then (num_drafts), so a model-free method's plain steps are in none of its numbers."""
    accepted, drafted = result.per_step_accepted, getattr(result, "per_step_drafted", None)
    if accepted is None or drafted is None:
        return accepted, drafted
    kept = [i for i, d in enumerate(drafted) if d > 0]
    return [accepted[i] for i in kept], [drafted[i] for i in kept]


def spec_decoding(result, k: int) -> dict:
    per_step, per_step_drafted = drafted_steps_only(result)
    steps = result.drafted_steps if result.drafted_steps is not None else result.steps
    # a head carries K drafts every step (vLLM: num_drafts * K); a model-free method what it found
    drafts = sum(per_step_drafted) if per_step_drafted is not None else steps * k
    return {
        "mean_acceptance_length": acceptance_length(steps, result.accepted),
        "draft_acceptance_rate": result.accepted / drafts if drafts else 0.0,
        "acceptance_histogram": exact_histogram(steps, result.accepted_per_pos),
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": result.accepted,
        "num_draft_tokens": drafts,
        "num_spec_tokens": k,
        # as vLLM's `detailed` metrics: null when not recorded (vLLM's `summary`)
        "per_step_accepted": list(per_step) if per_step is not None else None,
        "per_step_drafted": list(per_step_drafted) if per_step_drafted is not None else None,
    }


def parse(ctx, body: dict) -> tuple[Job, bool]:
    pair, name = ctx.pair, ctx.cfg.served_name
    model = body.get("model")
    if model is not None and model != name:
        raise BadRequest(f"The model `{model}` does not exist.", "model", status=404)
    reject_unsupported(body, NEUTRAL)
    if "prompt" not in body:
        raise BadRequest("prompt is required: a list of token ids or a string", "prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]  # a batch of one
    ids = token_ids(prompt, "prompt")
    if ids is None:
        if isinstance(prompt, list):
            raise BadRequest(
                f"prompt: one prompt per request, got a batch of {len(prompt)}: "
                "send them as separate requests",
                "prompt",
            )
        ids = tokenize(pair, prompt, "prompt")
        if get_bool(body, "add_special_tokens", False) and pair.tokenizer.bos_token_id is not None:
            ids = [pair.tokenizer.bos_token_id, *ids]
    max_tokens = get_int(body, "max_tokens", DEFAULT_MAX_TOKENS, minimum=1)
    temperature = get_float(body, "temperature", 1.0)
    if temperature < 0:
        raise BadRequest(f"temperature must be >= 0, got {temperature}", "temperature")
    seed = get_seed(body, ("seed",))
    check_prompt(pair, ids, max_tokens, "prompt", "max_tokens")
    return Job(ids, max_tokens, temperature, seed), get_bool(body, "return_token_ids", False)


def completion(ctx, job: Job, result, return_token_ids: bool) -> dict:
    tokenizer, k = ctx.pair.tokenizer, ctx.pair.k
    choice = {
        "index": 0,
        "text": tokenizer.decode(result.output_ids, skip_special_tokens=True),
        "logprobs": None,
        "finish_reason": "stop" if result.finish_reason == "eos" else "length",
        "stop_reason": None,
    }
    if return_token_ids:
        choice["prompt_token_ids"] = list(job.prompt_ids)
        choice["token_ids"] = list(result.output_ids)
    out = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": ctx.cfg.served_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(job.prompt_ids),
            "completion_tokens": len(result.output_ids),
            "total_tokens": len(job.prompt_ids) + len(result.output_ids),
        },
    }
    if ctx.cfg.per_request_metrics:
        out["metrics"] = {"speculative_decoding": spec_decoding(result, k)}
    return out


def make_router(ctx) -> APIRouter:
    router = APIRouter()
    pair, cfg = ctx.pair, ctx.cfg

    @router.post("/v1/completions")
    async def completions(request: Request):
        try:
            job, return_ids = parse(ctx, await read_body(request))
            result = await ctx.jobs.run(job)
        except BadRequest as exc:
            return error(exc.message, exc.status, exc.param)
        except ServerStopping as exc:
            return error(str(exc), 503)
        except AlcheckError as exc:  # e.g. non-finite logits: the run is meaningless, say why
            return error(exc.message, 500)
        except Exception as exc:  # noqa: BLE001 - a bug: still the dialect's error JSON, naming it
            return error(f"internal error in alcheck serve: {type(exc).__name__}: {exc}", 500)
        return JSONResponse(completion(ctx, job, result, return_ids))

    @router.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": cfg.served_name,
                    "object": "model",
                    "created": int(ctx.started),
                    "owned_by": "alcheck",
                    "root": str(pair.target.path),
                    "parent": None,
                    "max_model_len": pair.max_model_len,
                    "permission": [],
                    "vocab_size": pair.vocab_size,  # vocab_size: alcheck's extra
                }
            ],
        }

    @router.get("/version")
    async def version():  # speculative_config: alcheck's extra, shaped as vLLM's --speculative-config
        return {
            "version": VERSION,
            "speculative_config": {
                "method": pair.method,
                "model": cfg.draft,
                "num_speculative_tokens": pair.k,
                # n-gram's sizes, as vLLM's config names them: a client replays the rule with these
                **{k: v for k, v in cfg.method_options.items() if k.startswith("prompt_lookup_")},
            },
        }

    return router
