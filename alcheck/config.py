"""RunConfig: every setting of `alcheck run`, validated; the part that decides results is hashed
so `--resume` can refuse a directory made with different settings."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields

from alcheck.backends.engines.table import ENGINE_NAMES, TREE_ENGINES, get_engine
from alcheck.errors import AlcheckError
from alcheck.methods.table import DEFAULT_METHOD, METHOD_NAMES, get_method
from alcheck.options import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_DRAFT_SAMPLING,
    DEFAULT_TIMEOUT_S,
    check_count,
    check_device,
    check_draft_sampling,
    check_dtype,
    check_method,
    check_num_blocks,
    is_count,
    is_gpu_index,
    is_tree,
)
from alcheck.prompts.dataset_list import dataset_specs, parse_datasets
from alcheck.runner.config import check_tree_shape, check_utilization
from alcheck.runner.table import DEFAULT_RUNNER, RUNNER_NAMES, RUNNERS

# settings that do not change any number in questions.csv
NOT_RESULT_AFFECTING = {
    "out",
    "reference",
    "gate",
    "tolerance",
    "devices",
    "endpoints",
    "endpoint",  # what run.json called it before --endpoint took several
    "engine_cmd",
    "concurrency",
    "engine_start_timeout",
    "request_timeout",
    "prompt_cache",  # the CPU prefill is per prompt either way (runner/prompt_cache.py)
}  # where the engine runs, not what it computes
LEGACY_DRAFT_SAMPLING = "sampled"  # what runs saved before --draft-sampling existed used
DERIVED = ("is_tree",)  # RunConfig's fields computed from the others: not settings
MAX_SEED = 2**63  # the sweep adds K/repeat/turn offsets; torch.Generator takes seeds below 2^64


def parse_devices(value) -> list[str] | None:
    """--devices 'cuda:0,cuda:1' (or a stored list) -> ['cuda:0', 'cuda:1']; None when not given."""
    if value is None:
        return None
    parts = [str(p).strip() for p in (value.split(",") if isinstance(value, str) else value)]
    return [p for p in parts if p]


def check_devices(devices: list[str], device: str):
    """--devices: cpu or cuda:N each, all of one kind (so --dtype auto means one dtype), no GPU twice
    (each worker sizes its KV pool from its GPU's free memory), and agreeing with --device."""
    shown = ",".join(devices)
    if not devices:
        raise AlcheckError("--devices: the list is empty: name the devices, e.g. --devices cuda:0,cuda:1")
    for spec in devices:
        if spec != "cpu" and not is_gpu_index(spec):
            raise AlcheckError(
                f"--devices {shown}: cannot read {spec!r}: list cpu or cuda:N (N the GPU's index), "
                "e.g. --devices cuda:0,cuda:1"
            )
    kinds = {spec.split(":")[0] for spec in devices}
    if len(kinds) > 1:
        raise AlcheckError(
            f"--devices {shown} mixes cpu and cuda: the cells of one run must be computed alike: "
            "list only GPUs or only cpu"
        )
    gpus = [spec for spec in devices if spec != "cpu"]
    twice = sorted({spec for spec in gpus if gpus.count(spec) > 1})
    if twice:
        raise AlcheckError(
            f"--devices {shown} lists {', '.join(twice)} more than once: each GPU runs one worker "
            "(its KV pool takes --gpu-memory-utilization of the GPU): list each GPU once"
        )
    agrees = (
        device == "auto"
        or all(spec == device for spec in devices)
        or (device == "cuda" and kinds == {"cuda"})
    )
    if not agrees:
        raise AlcheckError(
            f"--devices {shown} disagrees with --device {device}: drop --device "
            "(--devices names every device)"
        )


def check_endpoints(cfg) -> None:
    """Each --endpoint an http(s) URL, none twice; several are one server per node, all alike
    (backends/engine_fleet.py checks that they are)."""
    for url in cfg.endpoints:
        if not re.match(r"https?://[^/\s]+", url):
            raise AlcheckError(
                f"--endpoint {url}: not an http(s) URL: pass e.g. --endpoint http://127.0.0.1:8000"
            )
    seen = [url.rstrip("/") for url in cfg.endpoints]
    twice = sorted({url for url in seen if seen.count(url) > 1})
    if twice:
        raise AlcheckError(
            f"--endpoint {twice[0]} is given {seen.count(twice[0])} times: each server is listed once "
            "(--concurrency sets the requests in flight per server)"
        )
    if len(cfg.endpoints) < 2:
        return
    if cfg.engine_cmd:  # it starts one server per K on this machine: several URLs say nothing it can use
        raise AlcheckError(
            f"--engine-cmd with {len(cfg.endpoints)} --endpoint: --engine-cmd starts one server here per "
            "K; to spread requests over several servers, start them yourself and pass only their "
            "--endpoint URLs"
        )
    if cfg.method in METHOD_NAMES and get_method(cfg.method).history_across_requests:
        # each server grows its own history: the drafts would depend on which server answered what
        raise AlcheckError(
            f"--method {cfg.method} with {len(cfg.endpoints)} --endpoint: its drafts depend on the "
            "requests the server saw before, so rows would depend on how requests were spread: pass "
            "one --endpoint"
        )


def check_engine_settings(cfg) -> None:
    """--engine and its options; the built-in runner's options make no sense against a server."""
    check_count("--concurrency", cfg.concurrency)
    if not cfg.engine:
        for flag, used in (
            ("--endpoint", cfg.endpoints),
            ("--engine-cmd", cfg.engine_cmd),
            ("--concurrency", cfg.concurrency != 1),
            ("--request-timeout", cfg.request_timeout != DEFAULT_TIMEOUT_S),
            ("--engine-start-timeout", cfg.engine_start_timeout != DEFAULT_TIMEOUT_S),
        ):
            if used:
                raise AlcheckError(
                    f"{flag} needs --engine {' or --engine '.join(ENGINE_NAMES)} "
                    "(the server's kind): it is a "
                    "setting of alcheck's client of a running server"
                )
        return
    engine = get_engine(cfg.engine)
    if not cfg.endpoints and not cfg.engine_cmd:
        raise AlcheckError(
            f"--engine {cfg.engine} needs --endpoint URL (a running server), or --engine-cmd "
            "to start one per K"
        )
    check_endpoints(cfg)
    if cfg.engine_cmd and "{port}" not in cfg.engine_cmd and not cfg.endpoints:
        raise AlcheckError(
            "--engine-cmd has no {port} to fill in: put {port} where the server takes its port, "
            "or pass --endpoint with the URL it listens on"
        )
    if not cfg.engine_cmd and len(cfg.ks) > 1:
        raise AlcheckError(
            f"--ks {','.join(map(str, cfg.ks))}: one server is one K: pass the server's K "
            "(e.g. --ks 3), or --engine-cmd to start a server per K"
        )
    for flag, seconds in (
        ("--engine-start-timeout", cfg.engine_start_timeout),
        ("--request-timeout", cfg.request_timeout),
    ):
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise AlcheckError(f"{flag} {seconds}: must be a number of seconds > 0")
    if cfg.check_lossless and cfg.temperature == 0:
        raise AlcheckError(
            "--check-lossless with --engine tests the server's sampling above temperature 0; at "
            "temperature 0 check its rows against the built-in runner's instead: run both on the same "
            "prompts and `alcheck compare` them (make engine-check does), or pass --temperature > 0"
        )
    for flag, used in (
        ("--audit-slots", cfg.audit_slots),
        ("--no-prompt-cache", not cfg.prompt_cache),
        ("--devices", cfg.devices),
        ("--no-kv-lookahead", not cfg.kv_lookahead),
        (f"--runner {cfg.runner}", cfg.runner != DEFAULT_RUNNER),
        ("--tensor-parallel-size", cfg.tensor_parallel_size > 1),
    ):
        if used:
            raise AlcheckError(
                f"{flag} is a setting of alcheck's built-in runner, not of a server: drop it with --engine"
            )
    if cfg.is_tree and not engine.trees:
        raise AlcheckError(
            f"--topk > 1 (tree drafting) with --engine {engine.name}: {engine.no_trees}, it drafts "
            f"chains: use --engine {' or --engine '.join(TREE_ENGINES)}"
        )


def check_method_settings(cfg) -> None:
    """The method entry's own checks of the config (n-gram's options, what it cannot take); with
    no method known yet (auto, a server's), n-gram and suffix decoding options are refused."""
    from alcheck.methods.ngram_options import refuse_ngram_options
    from alcheck.methods.suffix_options import refuse_suffix_options

    if cfg.method in METHOD_NAMES:
        get_method(cfg.method).check_run_config(cfg)
    else:
        refuse_ngram_options(cfg)
        refuse_suffix_options(cfg)


@dataclass(slots=True)
class RunConfig:
    target: str
    draft: str
    method: str = DEFAULT_METHOD  # resolved before a run starts: never "auto" in a saved run
    ks: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    topk: int = 1  # tree drafting: branching per expanded node (SGLang --speculative-eagle-topk); 1 = chain
    num_draft_tokens: int | None = None  # tree: tokens verified per step, root included; None = K+1 (chain)
    repeats: int = 3
    # one dataset: its spec, as every run.json holds it; several (--dataset a,b,c): the list
    dataset: str | list[str] = "mt_bench"
    protocol: str = "vllm-example"
    system_prompt: str | None = None  # from the protocol
    turns: int = 1  # from the protocol
    max_tokens: int = 256
    temperature: float = 0.0
    draft_sampling: str = DEFAULT_DRAFT_SAMPLING
    # --method ngram (methods/ngram.py): its matching rule and n-gram sizes, resolved (None otherwise)
    ngram_rule: str | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    # --method suffix (methods/suffix.py): vLLM's speculative_config names, resolved (None otherwise)
    suffix_decoding_max_tree_depth: int | None = None
    suffix_decoding_max_cached_requests: int | None = None  # 0: the global tree is off
    suffix_decoding_max_spec_factor: float | None = None
    suffix_decoding_min_token_prob: float | None = None
    chat_template: str | None = None  # a Jinja file overriding the tokenizer's template
    skip_long: bool = False  # skip questions that do not fit the target's context
    limit: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: int = 128
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None
    gpu_memory_utilization: float = 0.9  # vLLM's meaning: the share of GPU memory this run may use
    devices: list[str] | None = None  # --devices: one worker process per device (alcheck.executors.devices)
    # --tensor-parallel-size: ranks the target is split over (alcheck.tp). Result-affecting: the
    # row-parallel all-reduces sum partial products in another order, which changes float rounding
    tensor_parallel_size: int = 1
    kv_lookahead: bool = True
    seed: int = 0
    runner: str = DEFAULT_RUNNER
    check_lossless: bool = False
    audit_slots: bool = False
    prompt_cache: bool = True  # the CPU runner keeps each prompt's prefill for later cells
    reference: str = "auto"
    out: str = ""
    engine: str | None = (
        None  # --engine vllm|sglang: a running server decodes (alcheck.backends.engine_client)
    )
    endpoints: list[str] = field(default_factory=list)  # the servers' base URLs (one per node)
    engine_cmd: str | None = None  # or a command that starts one per K ({k}, {port} substituted)
    engine_start_timeout: float = (
        DEFAULT_TIMEOUT_S  # seconds --engine-cmd's server may take to become healthy
    )
    concurrency: int = 1  # requests in flight at once (the engine client)
    request_timeout: float = (
        DEFAULT_TIMEOUT_S  # seconds one request may take before the server counts as hung
    )
    # derived in __post_init__ from the fields above (never stored in run.json: see DERIVED)
    is_tree: bool = field(init=False, repr=False, compare=False, default=False)  # --topk > 1

    def __post_init__(self):
        if not (self.engine and self.method == ""):  # "": a server's, not stated
            check_method(self.method)
        check_draft_sampling(self.draft_sampling)
        check_method_settings(self)
        if not self.ks or any(k < 1 for k in self.ks):
            raise AlcheckError("--ks: K must be >= 1: pass e.g. --ks 1-5")
        if not is_count(self.seed, 0) or self.seed >= MAX_SEED:
            raise AlcheckError(
                f"--seed {self.seed}: must be an integer in 0..2^63-1 (torch's generator seeds are "
                "64-bit and each pass adds an offset)"
            )
        check_count("--repeats", self.repeats, note=": need at least 1 repeat")
        self.dataset = parse_datasets(self.dataset)
        if not is_count(self.max_tokens, 2):
            raise AlcheckError(
                f"--max-tokens {self.max_tokens}: need at least 2 new tokens (the first comes from the "
                "prefill, so with 1 no verification step runs and AL is undefined)"
            )
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise AlcheckError(f"--temperature {self.temperature}: must be a finite number >= 0 (0 = greedy)")
        if self.limit is not None:
            check_count("--limit", self.limit, note=": leave it out for all questions")
        check_device(self.device)
        check_dtype(self.dtype)
        if self.devices is not None:
            check_devices(self.devices, self.device)
        check_count("--tensor-parallel-size", self.tensor_parallel_size, note=" (1 = no tensor parallelism)")
        check_utilization(self.gpu_memory_utilization)
        check_num_blocks(self.num_blocks)
        check_count("--max-batch-size", self.max_batch_size)
        check_count("--block-size", self.block_size)
        if self.runner not in RUNNERS:
            raise AlcheckError(f"--runner {self.runner}: use one of {', '.join(RUNNER_NAMES)}")
        if self.check_lossless and self.temperature > 0 and not self.engine:
            raise AlcheckError(
                "--check-lossless compares the built-in runner with target-only greedy decoding: use "
                "--temperature 0 (above 0 it tests an engine's sampler: --engine)"
            )
        check_tree_shape(self.ks, self.topk, self.num_draft_tokens, self.temperature, self.draft_sampling)
        self.is_tree = is_tree(self.topk)
        runner = RUNNERS[self.runner]
        if not runner.tensor_parallel and self.tensor_parallel_size > 1:
            raise AlcheckError(
                f"--runner {self.runner} is {runner.description}, with no tensor parallelism: drop "
                "--tensor-parallel-size, or use --runner paged"
            )
        if not runner.paged_kv and not self.kv_lookahead:
            raise AlcheckError(
                f"--runner {self.runner} has no KV blocks, so --no-kv-lookahead means nothing there: "
                "use --runner paged"
            )
        for flag, used in (("--audit-slots", self.audit_slots), ("--no-kv-lookahead", not self.kv_lookahead)):
            if used and not runner.host_slots:
                raise AlcheckError(
                    f"--runner {self.runner} computes KV slots on the device, its padding rows writing "
                    f"to the null block: {flag} needs --runner paged"
                )
        if isinstance(self.endpoints, str):  # one URL, as RunConfig(endpoints=URL) or a stored str
            self.endpoints = [self.endpoints]
        self.endpoints = list(self.endpoints or [])
        check_engine_settings(self)

    @property
    def greedy_oracle(self) -> bool:
        """--check-lossless on the built-in runner: every output against target-only greedy decoding."""
        return self.check_lossless and not self.engine

    @property
    def sampler_test(self) -> bool:
        """--check-lossless on an engine (temperature > 0): per K, its samples against target-only
        sampling."""
        return self.check_lossless and bool(self.engine)

    @property
    def endpoint(self) -> str | None:
        """The first --endpoint (the only one, unless requests are spread over several servers)."""
        return self.endpoints[0] if self.endpoints else None

    @property
    def datasets(self) -> list[str]:
        return dataset_specs(self.dataset)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in DERIVED}

    def result_settings(self) -> dict:
        return {k: v for k, v in self.to_dict().items() if k not in NOT_RESULT_AFFECTING}

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        names = {f.name for f in fields(cls) if f.init}
        data = {"draft_sampling": LEGACY_DRAFT_SAMPLING, **data}
        if "endpoints" not in data and data.get("endpoint"):  # saved when --endpoint took one URL
            data["endpoints"] = [data["endpoint"]]
        return cls(**{k: v for k, v in data.items() if k in names})
