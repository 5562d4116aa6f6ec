"""The pair, loaded once, and the runner it serves: the same planner and loader as `alcheck run`
(methods/pair.py).

`load_served_pair` checks everything it can from the config files first (method, draft against
target, context, device), so a bad pair exits 2 in seconds; then the weights load strictly.
`generate` builds a fresh PagedRunner per call, so one call's counts depend only on its prompts,
max_tokens, temperature and seed, never on earlier requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.errors import AlcheckError
from alcheck.options import DEFAULT_BLOCK_SIZE, DEFAULT_DRAFT_SAMPLING, is_tree
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner
from alcheck.runner.request import GenerationResult
from alcheck.serve.config import ServeConfig


@dataclass
class ServedPair:
    target: object  # alcheck.models.loading.Target: model, tokenizer, eos ids, path
    proposer: object  # the head's proposer (runner/proposers/)
    method: str  # an entry of methods/table.py
    k: int
    context: int  # the target's max_position_embeddings
    device: str
    dtype: str
    max_batch_size: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None  # None: enough for the call's requests
    draft_sampling: str = DEFAULT_DRAFT_SAMPLING
    topk: int = 1  # > 1: tree drafting
    num_draft_tokens: int | None = None  # T, root included; None = K + 1 (the chain)
    kv_lookahead: bool = True  # False: --no-kv-lookahead, the seed's bug

    @property
    def verify_tokens(self) -> int:
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.k + 1

    @property
    def vocab_size(self) -> int:
        return self.target.model.config.vocab_size

    @property
    def target_config(self) -> dict:
        """The target's config.json (SGLang's model info reports its model_type and architectures)."""
        from alcheck.models.checkpoint_files import read_config

        return read_config(self.target.path, "target")

    @property
    def max_model_len(self) -> int:
        """Longest prompt + max_tokens a request may ask for: a step reaches K - 1 positions past
        the last kept token (alcheck.models.compat.positions_needed), so those are held back."""
        return self.context - (self.k - 1)

    @property
    def tokenizer(self):
        return self.target.tokenizer

    def runner_config(self, temperature: float, seed: int, batch: int) -> RunnerConfig:
        tree = {"topk": self.topk, "num_draft_tokens": self.num_draft_tokens} if is_tree(self.topk) else {}
        return RunnerConfig(
            num_spec_tokens=self.k,
            **tree,
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            max_batch_size=max(batch, 1),
            temperature=temperature,
            draft_sampling=self.draft_sampling,
            seed=seed,
            device=self.device,
            kv_lookahead=self.kv_lookahead,
        )

    def generate(
        self,
        prompts: list[list[int]],
        max_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
        runner_class=PagedRunner,
    ) -> list[GenerationResult]:
        """PagedRunner.generate on these prompts, all in one batch; results in prompt order.
        runner_class: a PagedRunner subclass (serve/lossy.py's wrong acceptance rule)."""
        runner = runner_class(
            self.target.model,
            self.proposer,
            self.target.eos_token_ids,
            self.runner_config(temperature, seed, len(prompts)),
        )
        return runner.generate(prompts, max_tokens)


def load_served_pair(cfg: ServeConfig) -> ServedPair:
    from alcheck.methods.pair import load_pair, plan_pair
    from alcheck.methods.table import resolve_method
    from alcheck.models.compat import check_kv_request, context_limit
    from alcheck.models.loading import read_config, resolve_checkpoint
    from alcheck.runner.kv_budget import smallest_memory

    target_dir = resolve_checkpoint(cfg.target, "target")
    target_raw = read_config(target_dir, "target")
    method = cfg.method if cfg.method_options else resolve_method(cfg.method, cfg.draft)
    from alcheck.models.targets import window_of

    context = context_limit(target_raw, target_dir)
    window = window_of(target_raw, target_dir)
    if window is not None:  # a sliding-window target is exact only inside its window: serve no more
        context = min(context, window)
    if context - (cfg.k - 1) < 2:
        raise AlcheckError(
            f"--k {cfg.k}: the target's context of {context} positions leaves no room for a "
            "prompt and a token: lower --k"
        )
    # --block-size / --num-blocks as `alcheck run` checks them, before the weights load
    check_kv_request(cfg, target_raw, target_dir, smallest_memory([cfg.device]))
    plan = plan_pair(
        target_dir,
        target_raw,
        cfg.draft,
        method,
        topk=cfg.topk,
        device=cfg.device,
        dtype=cfg.dtype,
        method_options=cfg.method_options,
    )
    pair = load_pair(
        plan, plan.devices[0]
    )  # the weights, strictly (every tensor used or allow-listed, finite)
    return ServedPair(
        pair.target,
        pair.proposer,
        method,
        cfg.k,
        context,
        plan.devices[0],
        plan.dtype,
        max_batch_size=cfg.max_batch_size,
        block_size=cfg.block_size,
        num_blocks=cfg.num_blocks,
        draft_sampling=cfg.draft_sampling,
        topk=cfg.topk,
        num_draft_tokens=cfg.num_draft_tokens if cfg.is_tree else None,
        kv_lookahead=cfg.kv_lookahead,
    )
