"""`alcheck serve`: the built-in runner behind HTTP, in vLLM's or SGLang's dialect (a server whose
AL is known, for testing engine clients and harnesses)."""

from __future__ import annotations

import click

from alcheck.backends.engines.table import ENGINE_NAMES
from alcheck.cli.help_panels import SERVE, panelled
from alcheck.cli.option_specs import shared_option
from alcheck.errors import AlcheckError
from alcheck.serve.config import LOSSY_MODES


def check_extra():
    """The server's libraries live in the `serve` extra, not in the base install."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        raise AlcheckError(f"alcheck serve needs {', '.join(missing)}: pip install 'alcheck[serve]'")


@click.command(
    "serve", short_help="Serve the built-in runner over HTTP (vLLM or SGLang dialect).", **panelled(SERVE)
)
@click.option(
    "--target",
    help="Target model: HF folder or hub id. With neither --target nor --draft: the embedded demo pair.",
)
@click.option(
    "--draft",
    default="",
    help="EAGLE-1 or EAGLE-3 head, or a draft model: folder or hub id (none for --method ngram).",
)
@click.option("--k", "k", type=int, help="Draft tokens per verification step (one K per server).")
@click.option(
    "--dialect",
    default=ENGINE_NAMES[0],
    show_default=True,
    type=click.Choice(ENGINE_NAMES),
    help="vllm: /v1/completions, /v1/models, /metrics; sglang: /generate, /server_info, /get_model_info.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 picks a free port (printed).")
@shared_option("method")
@shared_option("dtype")
@shared_option("device")
@click.option(
    "--max-batch-size",
    default=1,
    show_default=True,
    type=int,
    help="Up to N waiting greedy requests with the same max tokens share one runner call.",
)
@shared_option("block_size")
@shared_option("num_blocks", help="KV blocks per runner call (default: enough for the call's requests).")
@click.option(
    "--no-per-request-metrics",
    is_flag=True,
    help="vLLM dialect: no metrics.speculative_decoding in responses (as vLLM < 0.29).",
)
@click.option("--model-name", help="The served model id (default: --target as given).")
@shared_option(
    "topk", help="SGLang dialect: tree drafting with this branching (--speculative-eagle-topk); 1 = chain."
)
@shared_option("num_draft_tokens")
@shared_option("draft_sampling")
@shared_option("prompt_lookup_min")
@shared_option("prompt_lookup_max")
@shared_option(
    "no_kv_lookahead",
    help="Serve the seed's bug: no lookahead KV slots (an engine for `alcheck compare` to diagnose).",
)
@click.option(
    "--speculative-config",
    "speculative_config",
    help="vLLM's --speculative-config JSON (or @FILE): method, model, num_speculative_tokens, prompt lookup.",
)
@click.option(
    "--lossy",
    type=click.Choice(LOSSY_MODES),
    hidden=True,
    help="Tests only: a deliberately lossy sampler (recovered tokens from the wrong distribution).",
)
@click.pass_context
def serve_cmd(ctx, **_):
    """Serve TARGET + DRAFT (or --method ngram) over HTTP; report each request's counts the engine's way.

    Prints `alcheck serve: listening on http://HOST:PORT` once it accepts connections; SIGINT or
    SIGTERM stops it (exit 0).
    """
    from alcheck.cli.speculative_config import serve_params

    params = serve_pair(serve_params(ctx, dict(ctx.params)))  # bad JSON, --k or pair before the extra check
    check_extra()
    from alcheck.serve.listen import bind

    cfg = serve_config(params)
    sock = bind(cfg.host, cfg.port)  # a port in use fails before the weights load
    try:
        from alcheck.serve.app import create_app
        from alcheck.serve.listen import serve_forever
        from alcheck.serve.pair import load_served_pair

        pair = load_served_pair(cfg)
        if params["lossy"]:  # the lossless check's negative control (alcheck/serve/lossy.py)
            from alcheck.serve.lossy import LossyPair

            pair = LossyPair(pair, params["lossy"])
    except BaseException:
        sock.close()
        raise
    serve_forever(create_app(pair, cfg), cfg.host, sock)


def serve_pair(params: dict) -> dict:
    """params with the pair `run` would use: with neither --target nor --draft the embedded demo
    target and its head of --method (the target alone for a method without a checkpoint); MTP
    layers draft from the target's own checkpoint."""
    from alcheck.cli.run_options import demo_pair
    from alcheck.methods.table import DEMO_CHECKPOINTS, METHOD_NAMES, get_method

    target, draft, method = params["target"], params["draft"], params["method"]
    entry = get_method(method) if method in METHOD_NAMES else None
    if not target and draft:
        raise AlcheckError(
            f"--draft {draft} without --target: pass the target it drafts for with --target, or neither "
            "for the embedded demo pair"
        )
    if not target:
        if entry is not None and entry.needs_checkpoint and method not in DEMO_CHECKPOINTS:
            raise AlcheckError(
                f"--method {method}: the embedded demo has no {entry.title}: pass --target and --draft"
            )
        target, demo_draft = demo_pair(method)
        draft = demo_draft if entry is None or entry.needs_checkpoint else ""
    elif not draft and entry is not None and entry.draft_in_target:
        draft = target  # MTP layers: the target's own checkpoint is the draft
    return {**params, "target": target, "draft": draft}


def serve_config(params: dict):
    """The ServeConfig of serve's params (after --speculative-config)."""
    from alcheck.serve.config import ServeConfig

    plain = ("target", "draft", "k", "dialect", "host", "port", "method", "dtype", "device", "max_batch_size")
    return ServeConfig(
        **{name: params[name] for name in plain},
        block_size=params["block_size"],
        num_blocks=params["num_blocks"],
        per_request_metrics=not params["no_per_request_metrics"],
        model_name=params["model_name"],
        topk=params["topk"],
        num_draft_tokens=params["num_draft_tokens"],
        draft_sampling=params["draft_sampling"],
        kv_lookahead=not params["no_kv_lookahead"],
        prompt_lookup_min=params["prompt_lookup_min"],
        prompt_lookup_max=params["prompt_lookup_max"],
    )
