"""The pair, loaded once, and the runner it serves: the same loaders and checks as `alcheck run`.

`load_served_pair` checks everything it can from the config files first (method, draft against target,
context, device), so a bad pair exits 2 in seconds; then the weights load strictly. `generate`
builds a fresh PagedRunner per call, so one call's counts depend only on its prompts, max_tokens,
temperature and seed, never on earlier requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alcheck.runner.config import RunnerConfig
from alcheck.runner.request import GenerationResult
from alcheck.runner.paged import PagedRunner
from alcheck.errors import AlcheckError
from alcheck.serve.config import ServeConfig

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class ServedPair:
    target: object  # alcheck.models.loading.Target: model, tokenizer, eos ids, path
    head: torch.nn.Module
    method: str  # "eagle" | "eagle3"
    k: int
    context: int  # the target's max_position_embeddings
    device: str
    dtype: str
    max_batch_size: int = 1
    block_size: int = 16
    draft_sampling: str = "onehot"
    topk: int = 1  # > 1: tree drafting
    num_draft_tokens: int | None = None  # T, root included; None = K + 1 (the chain)

    @property
    def verify_tokens(self) -> int:
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.k + 1

    @property
    def vocab_size(self) -> int:
        return self.target.model.config.vocab_size

    @property
    def max_model_len(self) -> int:
        """Longest prompt + max_tokens a request may ask for: a step reaches K - 1 positions past
        the last kept token (alcheck.models.compat.positions_needed), so those are held back."""
        return self.context - (self.k - 1)

    @property
    def tokenizer(self):
        return self.target.tokenizer

    def runner_config(self, temperature: float, seed: int, batch: int) -> RunnerConfig:
        tree = {"topk": self.topk, "num_draft_tokens": self.num_draft_tokens} if self.topk > 1 else {}
        return RunnerConfig(num_spec_tokens=self.k, **tree, block_size=self.block_size, max_batch_size=max(batch, 1),
                            temperature=temperature, draft_sampling=self.draft_sampling, seed=seed,
                            device=self.device)

    def generate(self, prompts: list[list[int]], max_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> list[GenerationResult]:
        """PagedRunner.generate on these prompts, all in one batch; results in prompt order."""
        runner = PagedRunner(self.target.model, self.head, self.target.eos_token_ids,
                            self.runner_config(temperature, seed, len(prompts)))
        return runner.generate(prompts, max_tokens)


def load_served_pair(cfg: ServeConfig) -> ServedPair:
    from alcheck.runner.kv_budget import check_device_weights
    from alcheck.models.compat import check_draft_config, check_topk_fits_vocab, context_limit
    from alcheck.models.head_kind import resolve_method
    from alcheck.models.loading import load_eagle, load_target, read_config, resolve_checkpoint

    target_dir = resolve_checkpoint(cfg.target, "target")
    draft_dir = resolve_checkpoint(cfg.draft, "draft")
    method = resolve_method(cfg.method, str(draft_dir))
    target_raw, draft_raw = read_config(target_dir, "target"), read_config(draft_dir, "draft")
    if method == "eagle3":
        from alcheck.models.eagle3_loading import check_config

        check_config(target_raw, draft_raw, target_dir, draft_dir)
    else:
        check_draft_config(target_raw, draft_raw, target_dir, draft_dir)
    check_topk_fits_vocab(cfg.topk, target_raw, draft_raw, method, draft_dir)
    context = context_limit(target_raw, target_dir)
    if context - (cfg.k - 1) < 2:
        raise AlcheckError(f"--k {cfg.k}: the target's context of {context} positions leaves no room for a "
                           "prompt and a token: lower --k")
    from alcheck.backends.builtin import resolve_device, resolve_dtype  # as `alcheck run` resolves them

    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device, target_raw)
    check_device_weights(target_raw, draft_raw, dtype, device)
    # the weights, strictly (every tensor used or allow-listed, every value finite)
    target = load_target(str(target_dir), TORCH_DTYPES[dtype], device)
    if method == "eagle3":
        from alcheck.models.eagle3_loading import load_eagle3

        head = load_eagle3(str(draft_dir), target, TORCH_DTYPES[dtype], device)
    else:
        head = load_eagle(str(draft_dir), target, TORCH_DTYPES[dtype], device)
    return ServedPair(target, head, method, cfg.k, context, device, dtype, cfg.max_batch_size,
                       cfg.block_size, cfg.draft_sampling, cfg.topk, cfg.num_draft_tokens if cfg.topk > 1 else None)
