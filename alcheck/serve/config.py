"""The server's settings: one dataclass, checked before any weight loads (bad input exits 2)."""

from __future__ import annotations

from dataclasses import dataclass, field

from alcheck.backends.engines.table import ENGINES, TREE_ENGINES, VLLM, get_engine
from alcheck.errors import AlcheckError
from alcheck.options import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_DRAFT_SAMPLING,
    ONEHOT,
    check_count,
    check_device,
    check_draft_sampling,
    check_dtype,
    check_method,
    check_num_blocks,
    is_tree,
)

LOSSY_MODES = ("recovered-from-target",)  # the hidden --lossy option (serve/lossy.py), tests only


@dataclass(slots=True)
class ServeConfig:
    target: str
    draft: str  # "" with --method ngram (no head)
    k: int  # one K per server, as in a real engine; with trees: draft steps = the longest path
    dialect: str = VLLM.name
    host: str = "127.0.0.1"
    port: int = 8000  # 0: the system picks a free port
    method: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    max_batch_size: int = 1  # 1: one request at a time; N: up to N waiting greedy requests per runner call
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None  # KV blocks per runner call; None: enough for the call's requests
    per_request_metrics: bool = True  # vLLM: metrics.speculative_decoding in each response
    model_name: str | None = None  # the served model id (default: --target as given)
    draft_sampling: str = DEFAULT_DRAFT_SAMPLING
    topk: int = 1  # > 1: EAGLE-2 tree drafting (SGLang dialect only; vLLM has had no trees since 0.21)
    num_draft_tokens: int | None = None  # T: tokens verified per step, root included; None = K + 1
    # False: the seed's bug (no lookahead slots, block 0 a real block), a buggy engine
    kv_lookahead: bool = True
    prompt_lookup_min: int | None = None  # --method ngram: vLLM's option names; resolved below
    prompt_lookup_max: int | None = None
    is_tree: bool = field(init=False, repr=False, compare=False, default=False)  # derived: --topk > 1

    def __post_init__(self):
        check_count("--k", self.k, note=": a speculative server drafts K >= 1 tokens per step")
        engine = get_engine(self.dialect, "--dialect")
        if not 0 <= self.port <= 65535:
            raise AlcheckError(f"--port {self.port}: use 0..65535 (0 picks a free port)")
        check_count("--max-batch-size", self.max_batch_size)
        check_count("--block-size", self.block_size)
        check_num_blocks(self.num_blocks)
        check_method(self.method)
        check_dtype(self.dtype)
        check_device(self.device)
        check_draft_sampling(self.draft_sampling)
        if not self.per_request_metrics and not engine.optional_per_request_metrics:
            optional = " or --dialect ".join(
                e.name for e in ENGINES.values() if e.optional_per_request_metrics
            )
            raise AlcheckError(
                "--no-per-request-metrics leaves vLLM's metrics.speculative_decoding out of responses; "
                f"the {engine.title} dialect always reports its "
                f"counts: drop the flag, or use --dialect {optional}"
            )
        self._check_tree(engine)
        self._check_method(engine)
        if self.model_name is not None and not self.model_name.strip():
            raise AlcheckError("--model-name is empty: pass a name, or leave it out to serve under --target")

    def _check_tree(self, engine):
        from alcheck.runner.config import check_tree_shape

        if is_tree(self.topk) and not engine.trees:
            raise AlcheckError(
                f"--topk {self.topk}: {engine.no_trees}, so its dialect serves chains only: use "
                f"--dialect {' or --dialect '.join(TREE_ENGINES)}, or --topk 1"
            )
        check_tree_shape([self.k], self.topk, self.num_draft_tokens)  # the runner's own rule, its message
        self.is_tree = is_tree(self.topk)
        if self.is_tree and self.draft_sampling != ONEHOT:
            # any request may ask for temperature > 0, where trees take only the onehot rule
            raise AlcheckError(
                f"--topk {self.topk} with --draft-sampling {self.draft_sampling}: tree drafting samples "
                "under the EAGLE repo's onehot rule only: use --draft-sampling onehot, or --topk 1"
            )

    def _check_method(self, engine):
        from alcheck.methods.ngram import NGRAM
        from alcheck.methods.ngram_options import refuse_ngram_options, resolve_options

        if self.method != NGRAM.name:
            refuse_ngram_options(self)
            if not self.draft:
                raise AlcheckError(
                    "--draft is missing: pass the EAGLE-1 or EAGLE-3 head to serve, or --method ngram "
                    "(drafting without a head)"
                )
            return
        if self.draft:
            raise AlcheckError(
                f"--draft {self.draft} with --method ngram: n-gram drafting copies tokens from the "
                "context and needs no head: drop --draft"
            )
        if engine.name != VLLM.name:
            raise AlcheckError(
                f"--method ngram with --dialect {engine.name}: SGLang's NGRAM is another algorithm (a "
                "shared trie drafting trees), not vLLM's rule this server runs: use --dialect vllm"
            )
        if self.draft_sampling != ONEHOT:
            raise AlcheckError(
                f"--draft-sampling {self.draft_sampling} with --method ngram: n-gram drafts are copied "
                "tokens, not samples (acceptance is the onehot rule): drop --draft-sampling"
            )
        _, self.prompt_lookup_min, self.prompt_lookup_max = resolve_options(
            None, self.prompt_lookup_min, self.prompt_lookup_max
        )

    @property
    def method_options(self) -> dict:
        """A model-free method's settings for plan_pair: vLLM's rule, the server's sizes."""
        from alcheck.methods.ngram import NGRAM
        from alcheck.methods.ngram_options import VLLM_RULE

        if self.method != NGRAM.name:
            return {}
        return {
            "rule": VLLM_RULE,
            "prompt_lookup_min": self.prompt_lookup_min,
            "prompt_lookup_max": self.prompt_lookup_max,
        }

    @property
    def served_name(self) -> str:
        return self.model_name or self.target
