"""The static runner (`--runner static`): the paged runner's scheduling, prefill and KV manager,
with each decoding step run as one device-resident function of fixed shapes.

Per step and chunk of lanes (at most the largest batch bucket):
  host:   allocate slots (as the eager runner), one int64 row per lane -> one host-to-device copy
  device: verify, accept, draft step 0 over the padded verify rows, K-1 draft steps (chain.py)
  host:   one device-to-host copy of [a, next, drafts, finite] per lane, then the bookkeeping
The step is `run_step`: eager, or on CUDA a graph captured per (K, batch bucket, width) and
replayed (graphs.py). Prefill stays eager, and so does the eager runner's own step where the
static one has no device form yet (temperature > 0 with sampled drafts, sampled trees).

Results equal the eager runner's token for token and count for count (tests/test_static_runner.py).
"""

from __future__ import annotations

from collections import deque

import torch

from alcheck.errors import AlcheckError, NonFiniteLogits
from alcheck.models.attention import pick_attention
from alcheck.options import ONEHOT
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.paged import PagedRunner
from alcheck.runner.request import Request
from alcheck.runner.static.buckets import StepBuffers, batch_buckets, bucket_for, width_for
from alcheck.runner.static.chain import chain_step
from alcheck.runner.static.graphs import StepGraphs
from alcheck.runner.static.tree import tree_step


class StaticRunner(PagedRunner):
    def __init__(self, target, proposer, eos_token_ids, config: RunnerConfig, engine: Engine | None = None):
        super().__init__(target, proposer, eos_token_ids, config, engine)
        if config.audit_slots or not config.kv_lookahead:
            raise AlcheckError(
                "the static runner computes KV slots on the device (padding rows write to the null "
                "block): --audit-slots and --no-kv-lookahead need --runner paged"
            )
        self.buckets = batch_buckets(config.max_batch_size, config.batch_buckets)
        # a test may wrap step_fn (torch.compile) to prove it traces once per bucket
        self.step_fn = tree_step if self.tree else chain_step
        tp = getattr(target, "tp", None)
        # tensor-parallel ranks run the static step eagerly: capturing their collectives in a graph
        # is untested, and a capture that failed midway could leave the ranks out of step
        self.graphs = StepGraphs.for_engine(self.engine, self.device, enabled=tp is None or tp.size == 1)
        self.static_steps = 0  # steps run by the static path (the rest fell back to the eager step)

    @staticmethod
    def attention_name(device: torch.device, block_size: int, dtype: torch.dtype) -> str:
        """The steps' kernel (static batches) and the eager prefill's, as run.json names them."""
        prefill = PagedRunner.attention_name(device, block_size, dtype)
        step = pick_attention(device, block_size, dtype, static=True)
        step = "torch-sdpa" if step == "torch" else step
        return prefill if step == prefill else f"{step} (steps), {prefill} (prefill)"

    def _static(self) -> bool:
        """Whether this run's steps have a device form (else the eager runner's step runs):
        greedy chains and trees, and chains at temperature > 0 under the onehot convention, for a
        head's proposer (a model-free one drafts from committed tokens on the host, between steps)."""
        cfg = self.cfg
        if self.model_free:  # ragged drafts proposed on the host: the eager step verifies them
            return False
        sampled_drafts = cfg.draft_sampling != ONEHOT and cfg.num_spec_tokens > 0
        return cfg.temperature == 0 or not (self.tree or sampled_drafts)

    def _step(self, running: list[Request], waiting: deque):
        if not self._static():
            return super()._step(running, waiting)
        cfg = self.cfg
        self._allocate_step(running, waiting, cfg.num_verify_tokens)
        if not running:
            return
        largest = self.buckets[-1]
        rows = []
        for at in range(0, len(running), largest):
            rows += self._run_chunk(running[at : at + largest])
        self.static_steps += 1
        finite_at = cfg.num_spec_tokens + 2  # the column after [a, next or bonus, K drafts or path nodes]
        for r, row in zip(running, rows):  # checked before anything is committed, as the eager step does
            if not row[finite_at]:
                raise NonFiniteLogits(r.request_id, r.steps + (1 if r.num_output_tokens else 0))
        for r, row in zip(running, rows):
            self._commit_lane(r, row)

    def _commit_lane(self, r: Request, row: list[int]) -> None:
        """The eager step's bookkeeping for one lane, from its output row."""
        k, a, start = self.cfg.num_spec_tokens, row[0], len(r.token_ids) - 1
        r.record_step(a, k)
        if self.tree:  # the path's nodes 1..a, then the bonus
            emitted = [r.draft_tokens[node - 1] for node in row[2 : 2 + a]] + [row[1]]
        else:
            emitted = r.draft_tokens[:a] + [row[1]]
        r.num_computed_tokens = start + a + 1
        r.commit(emitted, self.eos_ids)
        if r.finished:
            self.kv.free(r)
            return
        if self.tree:
            n = self.cfg.num_verify_tokens - 1
            at = k + 3
            r.draft_tokens, r.draft_parents, r.draft_depths = (
                row[at : at + n],
                row[at + n : at + 2 * n],
                row[at + 2 * n :],
            )
        else:
            r.draft_tokens = row[2 : 2 + k]

    def _lane_row(self, r: Request, held: list[int], width: int) -> list[int]:
        """One lane's input: root + drafts, start, (trees: parents, depths,) the padded block table."""
        table = [*held, *[0] * (width - len(held))]
        if self.tree:
            return [
                r.token_ids[-1],
                *r.draft_tokens,
                len(r.token_ids) - 1,
                *r.draft_parents,
                *r.draft_depths,
                *table,
            ]
        return [r.token_ids[-1], *r.draft_tokens, len(r.token_ids) - 1, *table]

    def _run_chunk(self, lanes: list[Request]) -> list[list[int]]:
        k = self.cfg.num_spec_tokens
        held = [self.kv.block_ids(r.request_id) for r in lanes]
        width = width_for(max(len(h) for h in held))
        bucket = bucket_for(len(lanes), self.buckets)
        rows = [self._lane_row(r, h, width) for r, h in zip(lanes, held)]
        key = self._kind() + (k, bucket, width)
        buffers = self.engine.state.get(("static", key))
        if buffers is None:
            draws = k + 1 if self.cfg.temperature > 0 else 0
            buffers = StepBuffers.make(bucket, len(rows[0]), self.device, draws)
            self.engine.state[("static", key)] = buffers
        buffers.load(rows)
        if buffers.uniforms is not None:  # drawn outside the step (and its graph): fresh numbers every step
            buffers.uniforms.uniform_(generator=self.generator)
        out = self.run_step(key, buffers)
        return out[: len(lanes)].tolist()  # the step's one device-to-host copy (and its one wait)

    def _kind(self) -> tuple:
        """What besides (K, bucket, width) selects the traced function: the chain, or a tree's shape."""
        if self.tree:
            return ("tree", self.cfg.topk, self.cfg.num_verify_tokens)
        return ("chain", "sampled") if self.cfg.temperature > 0 else ("chain",)

    def run_step(self, key: tuple, buffers: StepBuffers) -> torch.Tensor:
        """Eager against graph replay, decided here (cf. nano-vllm's run_model): on CUDA the
        first step of a key runs eagerly and captures its graph; later ones replay it."""
        k, _, width = key[-3:]
        args = (
            (buffers.meta, k, width)
            if buffers.uniforms is None
            else (buffers.meta, k, width, buffers.uniforms)
        )
        if self.graphs is None:
            return self.step_fn(self, *args)
        return self.graphs.run(key, lambda: self.step_fn(self, *args), self.engine.allocations)
