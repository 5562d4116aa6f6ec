"""The options `alcheck run` and `alcheck ablate` share, and their translation into a RunConfig."""

from __future__ import annotations

from pathlib import Path

import click

from alcheck import paths
from alcheck.backends.engines.table import ENGINE_NAMES
from alcheck.cli.option_specs import shared_option
from alcheck.config import LEGACY_DRAFT_SAMPLING, RunConfig, parse_devices
from alcheck.errors import AlcheckError
from alcheck.methods.suffix_options import DEFAULTS as SUFFIX_DEFAULTS
from alcheck.methods.table import DEMO_CHECKPOINTS, METHOD_NAMES, demo_head, get_method
from alcheck.options import DEFAULT_BLOCK_SIZE, DEFAULT_DRAFT_SAMPLING, DEFAULT_TIMEOUT_S, parse_ks
from alcheck.prompts.dataset_list import parse_datasets, shared_protocol
from alcheck.prompts.protocols import PROTOCOLS, get_protocol
from alcheck.prompts.tokenizer import check_chat_template
from alcheck.runner.table import DEFAULT_RUNNER, RUNNER_NAMES


class _RepeatableOption(click.Option):
    """A multiple option a config file may give as one string (draft = "DIR")."""

    def type_cast_value(self, ctx, value):
        return super().type_cast_value(ctx, (value,) if isinstance(value, str) else value)


RUN_OPTIONS = [
    click.option(
        "--target",
        help="Target model: HF folder or hub id. With neither --target nor --draft: the embedded demo pair.",
    ),
    click.option(
        "--draft",
        multiple=True,  # `alcheck run` ranks several (alcheck/sweep/entries.py); elsewhere one only
        cls=_RepeatableOption,
        help="Head or draft model: folder, hub id or [METHOD=]glob; repeat to rank several. Needs --target.",
    ),
    shared_option("method"),
    click.option(
        "--ngram-rule",
        help="--method ngram's matching rule: vllm (default), transformers or spec-bench.",
    ),
    shared_option("prompt_lookup_min"),
    shared_option("prompt_lookup_max"),
    click.option(
        "--suffix-decoding-max-tree-depth",
        "--suffix-max-tree-depth",
        type=int,
        help="--method suffix: the suffix trees' depth, match plus draft (default 24).",
    ),
    click.option(
        "--suffix-decoding-max-cached-requests",
        "--suffix-max-cached-requests",
        type=int,
        help="--method suffix: past responses the global tree keeps (default 10000; 0 = none).",
    ),
    click.option(
        "--suffix-decoding-max-spec-factor",
        "--suffix-max-spec-factor",
        type=float,
        help="--method suffix: a draft is at most this times the match length (default 1.0).",
    ),
    click.option(
        "--suffix-decoding-min-token-prob",
        "--suffix-min-token-prob",
        type=float,
        help="--method suffix: draft while the estimated probability is at least this (default 0.1).",
    ),
    click.option("--ks", default="1-5", show_default=True, help="K values: a range 1-5 or a list 1,2,4."),
    shared_option("topk"),
    shared_option("num_draft_tokens"),
    click.option("--repeats", default=3, show_default=True, type=int, help="Full passes per K."),
    click.option(
        "--dataset",
        default="mt_bench",
        show_default=True,
        help="A name (mt_bench, humaneval, gsm8k, qa, ...), a .jsonl or a hub id; a,b,c measures several.",
    ),
    click.option(
        "--protocol",
        help=f"Preset: {', '.join(PROTOCOLS)} (default: the dataset's).",
    ),
    click.option("--max-tokens", type=int, help="New tokens per generation (default: the protocol's)."),
    click.option("--temperature", default=0.0, show_default=True, type=float, help="0 = greedy."),
    shared_option("draft_sampling"),
    click.option(
        "--chat-template",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A Jinja chat template file that replaces the tokenizer's own.",
    ),
    click.option(
        "--skip-long", is_flag=True, help="Skip (and count) questions that do not fit the target's context."
    ),
    click.option("--limit", type=int, help="Use only the first N questions."),
    shared_option("device"),
    shared_option("dtype"),
    click.option(
        "--max-batch-size",
        default=128,
        show_default=True,
        type=int,
        help="Most requests the paged runner decodes at once (it also sizes the KV cache).",
    ),
    shared_option("block_size"),
    shared_option("num_blocks"),
    click.option(
        "--gpu-memory-utilization",
        default=0.9,
        show_default=True,
        type=float,
        help="Share of the GPU's memory for weights, activations and the KV pool (vLLM's meaning).",
    ),
    click.option(
        "--tensor-parallel-size",
        default=1,
        show_default=True,
        type=int,
        help="Split the target over N ranks (gloo on CPU, NCCL on CUDA); also runs under torchrun.",
    ),
    shared_option("no_kv_lookahead"),
    click.option("--seed", default=0, show_default=True, type=int),
    click.option(
        "--runner",
        default=DEFAULT_RUNNER,
        show_default=True,
        type=click.Choice(RUNNER_NAMES),
        help="paged (the engine), or a plain reference runner: contiguous, static.",
    ),
    click.option("--check-lossless", is_flag=True, help="Also decode target-only and compare outputs."),
    click.option("--audit-slots", is_flag=True, help="Check every KV write against block ownership."),
    click.option(
        "--no-prompt-cache",
        is_flag=True,
        help="CPU: prefill every prompt in every cell (no number changes; later cells take longer).",
    ),
]


# `alcheck run` only: measure a running vLLM / SGLang server instead of the built-in runner
ENGINE_OPTIONS = [
    click.option(
        "--engine",
        type=click.Choice(ENGINE_NAMES),
        help=f"Measure a running {' or '.join(ENGINE_NAMES)} server instead (--target names the tokenizer).",
    ),
    click.option(
        "--endpoint",
        "endpoints",
        multiple=True,
        help="The server's base URL, e.g. http://127.0.0.1:8000; repeat it to spread requests over servers.",
    ),
    click.option(
        "--engine-cmd",
        help="Start the server per K: a command with {k} (and {port}), e.g. 'vllm serve M --port {port}'.",
    ),
    shared_option(
        "timeout", "--engine-start-timeout", help="Seconds an --engine-cmd server may take to answer /health."
    ),
    click.option(
        "--concurrency",
        default=1,
        show_default=True,
        type=int,
        help="Requests in flight at once against the server (per-request numbers do not change).",
    ),
    shared_option(
        "timeout",
        "--request-timeout",
        help="Seconds one request may take before the server counts as hung (exit 2).",
    ),
]


def engine_options(func):
    for option in reversed(ENGINE_OPTIONS):
        func = option(func)
    return func


def run_options(func):
    for option in reversed(RUN_OPTIONS):
        func = option(func)
    return func


def demo_pair(method: str = "auto") -> tuple[str, str]:
    """The demo target with the demo head of --method (auto: the default method's)."""
    draft = demo_head(method)
    if method in METHOD_NAMES and get_method(method).draft_in_target:  # the demo MTP target drafts itself
        if not (draft / "config.json").is_file():
            raise AlcheckError(
                "the embedded demo MTP target is not built: run `make demo-models`, or pass --target"
            )
        return str(draft), str(draft)
    if not (paths.DEMO_TARGET_DIR / "config.json").is_file() or not (draft / "config.json").is_file():
        raise AlcheckError(
            "the embedded demo pair is not built: run `make demo-models`, or pass --target and --draft"
        )
    return str(paths.DEMO_TARGET_DIR), str(draft)


def build_config(params: dict, *, reference: str = "auto", out: str = "") -> RunConfig:
    """A RunConfig from click params; the protocol supplies defaults the flags did not set."""
    target, draft = params.get("target"), single_draft(params.get("draft"))
    engine = params.get("engine")
    method = params.get("method", "auto")
    if not engine:
        refuse_draft_of_own_layers(method, target, draft)
    if method in METHOD_NAMES and get_method(method).draft_in_target and target and not draft and not engine:
        draft = target  # MTP layers: the target's own checkpoint is the draft
    if method in METHOD_NAMES and not get_method(method).needs_checkpoint and not engine:
        # no head: the target alone (the demo's by default); a --draft is refused by RunConfig
        target, draft = target or demo_pair(method)[0], draft or ""
    elif engine:  # the server holds the draft; --target names the tokenizer, --draft is only recorded
        target, draft = target or demo_pair(params.get("method", "auto"))[0], draft or ""
    elif bool(target) != bool(draft):
        refuse_one_of_the_pair(target, draft)
    if not target:
        method = params.get("method", "auto")
        if method in METHOD_NAMES and method not in DEMO_CHECKPOINTS:  # no demo checkpoint of that kind
            raise AlcheckError(
                f"--method {method}: the embedded demo has no {get_method(method).title}: pass --target "
                "and --draft"
            )
        target, draft = demo_pair(method)
    dataset = parse_datasets(params["dataset"])  # bad lists exit before the protocol is chosen
    protocol = get_protocol(params.get("protocol") or shared_protocol(dataset))
    cfg = RunConfig(
        target=target,
        draft=draft,
        method=params["method"],
        ks=parse_ks(params["ks"]),
        topk=params.get("topk", 1),
        num_draft_tokens=params.get("num_draft_tokens"),
        repeats=params["repeats"],
        dataset=dataset,
        protocol=protocol.name,
        system_prompt=protocol.system_prompt,
        turns=protocol.num_turns,
        max_tokens=params["max_tokens"] if params.get("max_tokens") is not None else protocol.max_tokens,
        temperature=params["temperature"],
        draft_sampling=params.get("draft_sampling", DEFAULT_DRAFT_SAMPLING),
        ngram_rule=params.get("ngram_rule"),
        prompt_lookup_min=params.get("prompt_lookup_min"),
        prompt_lookup_max=params.get("prompt_lookup_max"),
        **{name: params.get(name) for name in SUFFIX_DEFAULTS},
        chat_template=check_chat_template(params.get("chat_template") or None, protocol),
        skip_long=bool(params.get("skip_long")),
        limit=params.get("limit"),
        device=params["device"],
        dtype=params["dtype"],
        max_batch_size=params["max_batch_size"],
        block_size=params["block_size"],
        num_blocks=params.get("num_blocks"),
        gpu_memory_utilization=params.get("gpu_memory_utilization", 0.9),
        devices=parse_devices(params.get("devices")),
        tensor_parallel_size=params.get("tensor_parallel_size", 1),
        kv_lookahead=not params["no_kv_lookahead"],
        seed=params["seed"],
        runner=params["runner"],
        check_lossless=params["check_lossless"],
        audit_slots=params["audit_slots"],
        prompt_cache=not params.get("no_prompt_cache"),
        reference=reference,
        out=out,
        engine=engine or None,
        endpoints=list(params.get("endpoints") or []),
        engine_cmd=params.get("engine_cmd") or None,
        engine_start_timeout=_given(params.get("engine_start_timeout"), DEFAULT_TIMEOUT_S),
        concurrency=_given(params.get("concurrency"), 1),
        request_timeout=_given(params.get("request_timeout"), DEFAULT_TIMEOUT_S),
    )
    from alcheck.methods.table import resolve_method

    if params.get("target") and not cfg.engine:  # before the draft's kind: a head there is a swap
        refuse_head_as_target(cfg.target, cfg.draft)
    if cfg.draft:  # the one place a run's method is resolved: --method auto is detected from the head's files
        cfg.method = resolve_method(cfg.method, cfg.draft)
    elif cfg.engine and cfg.method == "auto":
        cfg.method = ""  # the server's head is not known here; --method eagle/eagle3 states it
    if not cfg.engine and (cfg.num_blocks is not None or cfg.block_size != DEFAULT_BLOCK_SIZE):
        check_kv_flags(cfg)
    return cfg


def refuse_one_of_the_pair(target: str | None, draft: str | None) -> None:
    """--target or --draft alone: the folder given is checked first (a missing one is named), then
    the other flag is asked for."""
    from alcheck.models.hub import resolve_checkpoint

    flag, given, other = ("--target", target, "--draft") if target else ("--draft", draft, "--target")
    resolve_checkpoint(given, flag[2:])
    raise AlcheckError(
        f"{flag} {given} is given without {other}: pass {other} too (the embedded demo pair is used "
        "only when neither is given)"
    )


def refuse_draft_of_own_layers(method: str, target: str | None, draft: str | None) -> None:
    """A method whose drafts come from the target's own layers (MTP) reads no separate --draft:
    one naming another folder (or none, with no --target) is refused as a --draft, not as a target."""
    if method not in METHOD_NAMES or not get_method(method).draft_in_target or not draft:
        return
    if target and same_folder(target, draft):
        return
    if target:
        raise AlcheckError(
            f"--method {method} drafts with the target's own layers: --draft {draft} is not the target "
            f"{target}: drop --draft (the target's checkpoint holds them)"
        )
    raise AlcheckError(
        f"--method {method} drafts with the target's own layers, so --draft {draft} is not read: "
        f"drop --draft and pass {get_method(method).title} as --target"
    )


def same_folder(a: str, b: str) -> bool:
    """Two --target/--draft values naming one checkpoint (one folder, or one hub id)."""
    first, second = Path(a).expanduser(), Path(b).expanduser()
    if first.exists() and second.exists():
        return first.resolve() == second.resolve()
    return a == b


WHOLE_LM = "draft_model"  # the method entry whose detection means "a whole causal LM"


def _listed(spec: str, what: str) -> tuple[Path, dict, set[str]] | None:
    """(folder, config.json, tensor names without "model.") of a checkpoint whose names are cheap to
    list, else None (a legacy .bin lists them only by loading it; an unreadable folder is reported
    by the checks that read it for real)."""
    from alcheck.models.checkpoint_files import cheap_tensor_names, read_config
    from alcheck.models.hub import resolve_checkpoint

    directory = resolve_checkpoint(spec, what)
    names = cheap_tensor_names(directory)
    if names is None:
        return None
    try:
        raw = read_config(directory, what)
    except AlcheckError:
        return None
    return directory, raw, {n.removeprefix("model.") for n in names}


def _whole_lm(listed: tuple[Path, dict, set[str]] | None) -> bool:
    """A whole causal LM (embedding, layers, final norm): a model, not a head."""
    return listed is not None and bool(get_method(WHOLE_LM).detect(listed[1], listed[2]))


def refuse_head_as_target(target: str, draft: str) -> None:
    """--target naming a draft head (EAGLE-1, EAGLE-3, Medusa): the flags look swapped. One line
    saying so, before the tokenizer or any config of it is read as a target's."""
    from alcheck.methods.table import detect

    listed = _listed(target, "target")
    if listed is None or _whole_lm(listed):
        return
    try:
        found, evidence = detect(listed[0])
    except AlcheckError:  # neither a head nor a model: the target's own checks name what is wrong
        return
    try:
        swapped = bool(draft) and _whole_lm(_listed(draft, "draft"))
    except AlcheckError:  # a draft that is not there: the fix cannot name it
        swapped = False
    swap = f"--target {draft} --draft {target}" if swapped else None
    fix = f"pass {swap}" if swap else "pass the base model as --target and this head as --draft"
    raise AlcheckError(
        f"--target {target} is {get_method(found).title} ({evidence}), not a model to draft for: "
        f"--target and --draft look swapped: {fix}"
    )


def single_draft(value) -> str | None:
    """One --draft: a repeated one is an error here, never silently the last (`alcheck run` ranks several)."""
    from alcheck.sweep.entries import draft_values

    values = draft_values(value)
    if len(values) > 1:
        raise AlcheckError(
            f"--draft is given {len(values)} times: only `alcheck run` measures several heads in one "
            "command: pass one --draft"
        )
    return values[0] if values else None


def check_kv_flags(cfg: RunConfig):
    """--num-blocks / --block-size against the target's shape and the device's memory, before anything
    is claimed or allocated (a pool of hundreds of GB would fail deep in torch's allocator)."""
    from alcheck.models.compat import check_kv_request
    from alcheck.models.loading import read_config, resolve_checkpoint
    from alcheck.runner.kv_budget import smallest_memory

    target_dir = resolve_checkpoint(cfg.target, "target")
    check_kv_request(
        cfg, read_config(target_dir, "target"), target_dir, smallest_memory(cfg.devices or [cfg.device])
    )


def _given(value, default):
    return default if value is None else value


def explicit_params(ctx: click.Context) -> set[str]:
    """Names of the options the user typed (not defaults)."""
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }


def resume_params(ctx: click.Context, resume_dir: Path) -> dict:
    """For --resume: start from the stored settings; a flag typed now must agree with them."""
    import json

    from alcheck.rundir.portable import PATH_KEYS, resolved_path

    run_json = resume_dir / "run.json"
    if not run_json.is_file():
        raise AlcheckError(f"--resume {resume_dir}: no run.json there: pass a directory an earlier run wrote")
    try:
        meta = json.loads(run_json.read_text())
        stored = meta["config"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise AlcheckError(
            f"--resume {resume_dir}: run.json is corrupt: start a new run with another --out"
        ) from None
    if isinstance(meta, dict) and "imported" in meta:  # its settings are a file's, not a sweep's
        raise AlcheckError(
            f"--resume {resume_dir}: an imported run (alcheck import), which nothing here measured, "
            "so there is nothing to resume: measure with `alcheck run --out NEW_DIR`, then "
            f"`alcheck compare {resume_dir} NEW_DIR`"
        )
    stored = {"draft_sampling": LEGACY_DRAFT_SAMPLING, **stored}  # a run saved before the option existed
    params = dict(ctx.params)
    typed = explicit_params(ctx)
    for name in params:
        if name in typed:
            continue
        if name == "method" and "draft" in typed:  # the typed --draft's own kind: a copy of the run's
            params[name] = "auto"  # head resolves to the run's method, another head is named as such
            continue
        if name == "ks" and "ks" in stored:
            params["ks"] = ",".join(str(k) for k in stored["ks"])
        elif name == "no_kv_lookahead" and "kv_lookahead" in stored:
            params[name] = not stored["kv_lookahead"]
        elif name == "endpoints" and "endpoints" not in stored and stored.get("endpoint"):
            params[name] = [stored["endpoint"]]  # saved when --endpoint took one URL
        elif name in PATH_KEYS and name in stored:
            params[name] = resolved_path(stored[name])
        elif name in stored:
            params[name] = stored[name]
    return params
