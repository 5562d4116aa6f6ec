"""The paged-KV speculative runner: prefill, then steps of verify -> accept -> propose.

Per step and request, with n committed tokens (KV final for positions 0..n-2) and K drafts:
  1. allocate_slots(num_new_tokens=1+K, num_lookahead_tokens=K)   [lookahead: the seed-thread fix]
  2. verify: the target runs on [x_{n-1}, d_1..d_K] at positions n-1..n-1+K
  3. accept the longest agreeing prefix a; emit d_1..d_a and the target's token (recovered/bonus)
  4. propose: draft step 0 over the a+1 new tokens with the target's hidden states, then K-1 more
Target and draft layers own separate KV tensors and share the block table and slot mapping.
With kv_lookahead off, step 1 allocates only 1+K and block 0 is a real block: draft writes past
the allocated blocks go through zero block-table entries into block 0, as in vLLM before the fix.

Trees (topk > 1, runner/tree.py, TREE-NOTES section 5): per step and request
  1. allocate_slots(num_new_tokens=T, num_lookahead_tokens=K + (K-1)*topk)
  2. verify: node i at slot position n-1+i, RoPE position n-1+depth(i), one forward with a tree mask
  3. accept a path root -> node p_a (greedy walk, or EAGLE's per-node sibling rejection)
  4. move the accepted nodes' target KV (every layer) from slots n-1+p_j to n-1+j; rejected
     slots lie past num_computed_tokens and are overwritten later
  5. propose: draft step 0 over the a+1 new tokens with the target's features at the path nodes,
     then K-1 expansion levels in the draft's scratch slots (runner/drafting.py)
topk 1 with T = K+1 is the chain and runs the chain code above.
"""

from __future__ import annotations

from collections import deque
from itertools import accumulate

import torch

from alcheck.errors import AlcheckError, NonFiniteLogits
from alcheck.kv.audit import SlotAuditor
from alcheck.kv.manager import KVCacheManager, cdiv
from alcheck.models.attention import AttnBatch, pick_attention
from alcheck.options import ONEHOT
from alcheck.runner import kv_budget
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.prompt_cache import PromptEntry
from alcheck.runner.proposers.model_free import is_model_free
from alcheck.runner.request import GenerationResult, Request
from alcheck.runner.sampling import (
    draft_token,
    greedy_accept,
    onehot_accept,
    probs,
    rejection_accept,
    target_token,
)
from alcheck.runner.tree import ancestor_mask, greedy_tree_accept, sample_tree_accept


def logits_finite(logits: torch.Tensor) -> torch.Tensor:
    """[rows] bool from [rows, ..., vocab]: one fused min/max reduction (both propagate NaN)."""
    low, high = torch.aminmax(logits.flatten(1), dim=-1)
    return torch.isfinite(low) & torch.isfinite(high)


def by_slot(pool: torch.Tensor) -> torch.Tensor:
    """A KV pool [2, layers, blocks, block_size, kv_heads, dim] as [2, layers, slots, kv_heads, dim]."""
    return pool.view(2, pool.shape[1], -1, *pool.shape[4:])


def check_logits_finite(finite: torch.Tensor, reqs) -> None:
    for r, ok in zip(reqs, finite.tolist()):
        if not ok:
            raise NonFiniteLogits(r.request_id, r.steps + (1 if r.num_output_tokens else 0))


class PagedRunner:
    """The engine. `proposer`: a drafting method's proposer (runner/proposers/), or None for
    target-only decoding; the runner is its draft context (runner/context.py). `engine`: the
    pair's long-lived KV pool (runner/engine.py), shared by the runners a backend makes; a runner
    built without one keeps its own across its generate() calls."""

    def __init__(self, target, proposer, eos_token_ids, config: RunnerConfig, engine: Engine | None = None):
        self.target = target
        self.cfg = config
        self.proposer = proposer
        if config.num_spec_tokens > 0 and self.proposer is None:
            raise ValueError("num_spec_tokens > 0 needs a proposer")
        if hasattr(proposer, "check_k"):
            proposer.check_k(config.num_spec_tokens)  # before any step: the static step never asks again
        # a head with no attention (Medusa) writes no draft KV: its draft batches address no slot
        self.draft_writes_kv = bool(getattr(proposer, "attention_layers", None))
        self.eos_ids = frozenset(eos_token_ids)
        param = next(target.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.attention = pick_attention(self.device, config.block_size, self.dtype)
        self.kv: KVCacheManager | None = None
        self.auditor: SlotAuditor | None = None
        self.kv_pool: dict | None = None  # on a GPU: how the pool was sized (kv_budget.gpu_pool_blocks)
        self.engine = engine if engine is not None else Engine()
        self.tree = config.is_tree  # tests may set it for topk 1 to run the tree code on a chain
        self._chain = None  # the draft chain step before, for AttnBatch.kv_reuse (_chain_reuse)
        self.model_free = is_model_free(proposer)  # ragged drafts from the tokens alone (no features)
        if self.model_free and self.tree:
            raise ValueError("a model-free proposer drafts chains: topk must be 1")

    @staticmethod
    def attention_name(device: torch.device, block_size: int, dtype: torch.dtype) -> str:
        """The attention kernel this runner uses there, as run.json names it."""
        kernel = pick_attention(device, block_size, dtype)
        return "torch-sdpa" if kernel == "torch" else kernel

    @property
    def slot_violations(self) -> int | None:
        """KV writes outside their request's blocks in the last generate() (None: not audited)."""
        return self.auditor.violations if self.auditor is not None else None

    # -- public ------------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_tokens: int, progress=None) -> list[GenerationResult]:
        """Run every prompt to EOS or max_tokens (the prefill token counts). Results in prompt order."""
        k = self.cfg.num_spec_tokens
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        requests = [
            Request(i, list(p), len(p), max_tokens, accepted_per_pos=[0] * k) for i, p in enumerate(prompts)
        ]
        if any(r.num_prompt_tokens == 0 for r in requests):
            raise ValueError("empty prompt")
        self._setup(requests, max_tokens)
        if self.model_free and k > 0:
            self.proposer.start_generation()  # request ids start again: a method's history too
        waiting, running = deque(requests), []
        done = 0
        while waiting or running:
            self._admit(waiting, running)
            if running:
                self._step(running, waiting)
            running[:] = [r for r in running if not r.finished]
            if progress is not None:
                done_now = sum(r.finished for r in requests)
                progress(done_now - done, sum(r.num_output_tokens for r in requests))
                done = done_now
        return [r.result() for r in requests]

    # -- scheduling --------------------------------------------------------------------------

    def _setup(self, requests, max_tokens):
        cfg = self.cfg
        num_blocks = cfg.num_blocks
        if num_blocks is None:  # everything in flight at once, plus the null block
            extra = cfg.num_verify_tokens + cfg.max_lookahead_tokens  # chain: 2K+1
            per_req = sorted(
                (cdiv(r.num_prompt_tokens + max_tokens + extra, cfg.block_size) for r in requests),
                reverse=True,
            )
            num_blocks = sum(per_req[: cfg.max_batch_size]) + 1
            if kv_budget.sizes_from_memory(self.device):  # a GPU pool also fits in --gpu-memory-utilization
                num_blocks = kv_budget.gpu_pool_blocks(self, requests, max_tokens, num_blocks, per_req[0])
                tp = getattr(self.target, "tp", None)
                if tp is not None and tp.size > 1:  # ranks must schedule alike: all take the smallest pool
                    num_blocks = tp.all_min(num_blocks)
        self.kv = KVCacheManager(num_blocks, cfg.block_size, reserve_null_block=cfg.kv_lookahead)
        self.kv_cache = self.engine.bind(
            "target", self.target.attention_layers, num_blocks, cfg.block_size, self.dtype, self.device
        )
        if (
            self.proposer is not None and self.proposer.attention_layers
        ):  # a proposer without a head has no draft KV
            self.draft_kv_cache = self.engine.bind(
                "draft", self.proposer.attention_layers, num_blocks, cfg.block_size, self.dtype, self.device
            )
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.auditor = SlotAuditor(cfg.block_size) if cfg.audit_slots else None

    @staticmethod
    def _prefill_len(req: Request) -> int:
        # a fresh request prefills its prompt; a preempted one recomputes all but its last token,
        # which then enters the next verification step as usual
        return len(req.token_ids) - (1 if req.num_output_tokens else 0)

    def _admit(self, waiting: deque, running: list):
        cfg = self.cfg
        batch, num_tokens = [], 0
        while waiting and len(running) + len(batch) < cfg.max_batch_size:
            req = waiting[0]
            n = self._prefill_len(req)
            if batch and num_tokens + n > cfg.max_prefill_tokens:
                break
            drafts_room = cfg.num_spec_tokens if self._drafts_at_prefill(req) else 0
            if self.kv.allocate_slots(req, n + drafts_room, cfg.num_lookahead_tokens) is None:
                if not running and not batch:
                    raise AlcheckError(
                        f"KV cache too small: {self.kv.num_blocks} blocks "
                        f"of {cfg.block_size} cannot hold one request "
                        f"of {n} tokens: raise the number of KV blocks (--num-blocks)"
                    )
                break
            batch.append(waiting.popleft())
            num_tokens += n
        if batch:
            self._prefill(batch)
            running.extend(r for r in batch if not r.finished)

    def _preempt(self, req: Request, waiting: deque):
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.draft_tokens, req.draft_probs, req.draft_parents, req.draft_depths = [], None, [], []
        req.preemptions += 1
        waiting.appendleft(req)

    # -- model passes ------------------------------------------------------------------------

    def _drafts_at_prefill(self, req: Request) -> bool:
        """Whether this request's prefill verifies drafts (a fresh request, a proposer that wants it)."""
        return (
            self.model_free
            and self.proposer.drafts_at_prefill
            and self.cfg.num_spec_tokens > 0
            and req.num_output_tokens == 0
        )

    def _prefill(self, batch: list[Request]):
        if any(self._drafts_at_prefill(r) for r in batch):
            return self._prefill_with_drafts(batch)
        lens = [self._prefill_len(r) for r in batch]
        ends = torch.tensor(lens, device=self.device).cumsum(0)
        if self.device.type == "cpu":  # one forward per request, kept in the prompt cache
            last, features = self._prefill_each(batch, lens)
        else:
            ids = torch.tensor([t for r, n in zip(batch, lens) for t in r.token_ids[:n]], device=self.device)
            hidden, features = self.run_model(ids, self.attn_batch(batch, [0] * len(batch), lens, "target"))
            last = hidden[ends - 1]
        fresh = [i for i, r in enumerate(batch) if r.num_output_tokens == 0]
        if fresh:
            logits = self.target.compute_logits(last[fresh])
            check_logits_finite(logits_finite(logits), [batch[i] for i in fresh])  # once per request: cheap
            for i, token in zip(fresh, self.sample_target(logits).tolist()):
                batch[i].commit([token], self.eos_ids)
        for r, n in zip(batch, lens):
            r.num_computed_tokens = n
        alive = [i for i, r in enumerate(batch) if not r.finished]
        for r in batch:
            if r.finished:
                self._finish(r)
        if not alive or self.proposer is None or self.cfg.num_spec_tokens == 0:
            return
        if self.model_free:  # drafts from the committed tokens alone: no features to gather
            return self._propose([batch[i] for i in alive], None, None, None)
        rows = torch.cat([torch.arange(ends[i] - lens[i], ends[i], device=self.device) for i in alive])
        inputs = [batch[i].token_ids[1 : lens[i] + 1] for i in alive]
        self._propose([batch[i] for i in alive], inputs, features[rows], [0] * len(alive))

    def _prefill_each(self, batch: list[Request], lens: list[int]):
        """The CPU prefill (runner/prompt_cache.py): each request in a forward of its own, so a
        fresh prompt's outputs are the same whatever shares its batch, and are taken from the
        engine's prompt cache when an earlier call computed them. Returns (each request's last
        final-norm row [B, H], the feature rows of every request in batch order)."""
        cache = self.engine.prompts if self.cfg.prompt_cache else None
        layers = self._feature_layers()
        weights = cache.weights_key(self.target) if cache is not None else None
        flat = by_slot(self.kv_cache)
        lasts, features = [], []
        for r, n in zip(batch, lens):
            # a preempted request recomputes its prompt and output: not a prompt to keep
            fresh = cache is not None and r.num_output_tokens == 0
            key = (tuple(r.token_ids[:n]), layers, weights) if fresh else None
            entry = cache.get(key) if key is not None else None
            if entry is None:
                ids = torch.tensor(r.token_ids[:n], device=self.device)
                hidden, feats = self.run_model(ids, self.attn_batch([r], [0], [n], "target"))
                kv = flat[:, :, self._slot_tensor(r, n)] if key is not None else None  # a copy
                entry = PromptEntry(kv, feats, hidden[-1:].clone())
                if key is not None:
                    cache.put(key, entry)
            else:  # the prompt's K/V rows into this request's own slots
                slots = self._slot_tensor(r, n)
                if self.auditor is not None:
                    self.auditor.check(
                        r.request_id, slots.tolist(), self.kv.block_ids(r.request_id), "target"
                    )
                flat[:, :, slots] = entry.kv
            lasts.append(entry.last)
            features.append(entry.features)
        return torch.cat(lasts), torch.cat(features)

    def prefill_extend(self, ctx, drafter, reqs, inputs, features, starts):
        """Step 0 at a CPU prefill (drafting.extend_last): each fresh request's extend in a forward
        of its own, kept in the engine's extend cache beside its target prefill
        (runner/prompt_cache.py). `ctx` is the draft context as the proposer sees it: every write,
        a hit's copy too, goes to the slots its attn_batch gives (audited, and seen by a wrapper).
        None (the batched extend) on a GPU, after the prefill, for a preempted request, or for a
        proposer whose features are not one row per input."""
        if (
            self.device.type != "cpu"
            or not self.draft_writes_kv
            or any(s != 0 for s in starts)
            or any(r.num_output_tokens != 1 for r in reqs)
            or features is None
            or features.shape[0] != sum(len(x) for x in inputs)
        ):
            return None
        cache = self.engine.extends if self.cfg.prompt_cache else None
        flat = by_slot(self.draft_kv_cache)
        # what the extend reads: the prompt (through its features, from the target's weights), its
        # inputs, and the head, run by its kind of proposer (two proposers of one head share
        # entries; two heads never do)
        head = getattr(drafter, "head", drafter)
        owner = (type(drafter), id(head))
        if cache is not None:
            owner += (cache.weights_key(head), cache.weights_key(self.target))
        layers, lasts, at = self._feature_layers(), [], 0
        for r, x in zip(reqs, inputs):
            n = len(x)
            key = (tuple(r.token_ids), tuple(x), layers, owner) if cache is not None else None
            entry = cache.get(key) if key is not None else None
            batch = ctx.attn_batch([r], [0], [n], "draft")
            if entry is None or entry.owner is not head:
                ids = torch.tensor(x, device=self.device)
                hidden = drafter.extend(ctx, batch, ids, features[at : at + n])
                kv = flat[:, :, batch.slot_mapping] if key is not None else None  # a copy
                entry = PromptEntry(kv, None, hidden[-1:].clone(), owner=head)
                if key is not None:
                    cache.put(key, entry)
            else:  # the extend's draft K/V rows into this request's own slots
                flat[:, :, batch.slot_mapping] = entry.kv
            lasts.append(entry.last)
            at += n
        return torch.cat(lasts)

    def _feature_layers(self) -> tuple[int, ...]:
        """The target layers whose input states run_model hands the proposer (() : final hidden)."""
        if self.proposer is None or not self.cfg.num_spec_tokens:
            return ()
        return tuple(self.proposer.aux_layers)

    def _slot_tensor(self, req: Request, n: int) -> torch.Tensor:
        """The slots of positions 0..n-1 of req, as a long tensor on the device."""
        return torch.tensor(self._slots(req, range(n)), device=self.device)

    def _allocate_step(self, running: list[Request], waiting: deque, num_new: int):
        """Slots for this step; preempt the newest requests when blocks run out."""
        cfg = self.cfg
        i = 0
        while i < len(running):
            if self.kv.allocate_slots(running[i], num_new, cfg.num_lookahead_tokens) is not None:
                i += 1
            elif len(running) == 1:  # alone with the whole pool: preempting it would only loop
                need = self.kv.num_blocks_needed(
                    running[0].num_computed_tokens + num_new + cfg.num_lookahead_tokens
                )
                raise AlcheckError(
                    f"KV cache too small: a request needs {need} "
                    f"blocks of {cfg.block_size} tokens but the pool "
                    f"has {self.kv.num_usable_blocks}: raise the number of KV blocks (--num-blocks)"
                )
            else:
                self._preempt(running.pop(), waiting)

    def _finish(self, req: Request):
        self.kv.free(req)
        if self.model_free:
            self.proposer.request_finished(req)

    def _step(self, running: list[Request], waiting: deque):
        if self.tree:
            return self._tree_step(running, waiting)
        if self.model_free:
            return self._ragged_step(running, waiting)
        cfg, k = self.cfg, self.cfg.num_spec_tokens
        self._allocate_step(running, waiting, 1 + k)
        if not running:
            return
        num = len(running)
        starts = [len(r.token_ids) - 1 for r in running]
        ids = torch.tensor(
            [t for r in running for t in (r.token_ids[-1], *r.draft_tokens)], device=self.device
        )
        hidden, features = self.run_model(ids, self.attn_batch(running, starts, [k + 1] * num, "target"))
        logits = self.target.compute_logits(hidden).view(num, k + 1, -1)
        finite = logits_finite(logits)
        if cfg.temperature > 0:  # sampling NaN probabilities fails (a device assert on CUDA): check first
            check_logits_finite(finite, running)
        drafts = torch.tensor([r.draft_tokens for r in running], dtype=torch.long, device=self.device).view(
            num, k
        )
        accepted, next_tokens = self.accept(running, drafts, logits)
        if cfg.temperature == 0:  # greedy: the argmax above was queued first, so this is the step's one sync
            check_logits_finite(finite, running)
        alive, inputs, rows, alive_starts = [], [], [], []
        for b, (r, a, nxt) in enumerate(zip(running, accepted.tolist(), next_tokens.tolist())):
            r.record_step(a, k)
            emitted = r.draft_tokens[:a] + [nxt]
            r.num_computed_tokens = starts[b] + a + 1
            r.commit(emitted, self.eos_ids)
            if r.finished:
                self.kv.free(r)
                continue
            alive.append(r)
            inputs.append(emitted)
            rows.extend(range(b * (k + 1), b * (k + 1) + a + 1))
            alive_starts.append(starts[b])
        if alive and k > 0:
            self._propose(alive, inputs, features[torch.tensor(rows, device=self.device)], alive_starts)

    def accept(self, running: list[Request], drafts, logits):
        """The chain's acceptance rule: drafts [B, K], target logits [B, K+1, V] -> (accepted a [B],
        the target's token after them [B]). A method of its own so a test can put a wrong rule in
        one runner (serve/lossy.py) without touching any other."""
        cfg, num, k = self.cfg, drafts.shape[0], drafts.shape[1]
        if cfg.temperature > 0 and k > 0 and cfg.draft_sampling == ONEHOT:  # greedy drafts, accept with p(d)
            return onehot_accept(drafts, logits, cfg.temperature, self.generator)
        if cfg.temperature > 0 and k > 0:
            q = torch.stack([r.draft_probs for r in running])
            return rejection_accept(drafts, q, logits, cfg.temperature, self.generator)
        if cfg.temperature > 0:
            return torch.zeros(num, dtype=torch.long, device=self.device), self.sample_target(logits[:, 0])
        return greedy_accept(drafts, logits)

    def _ragged_step(self, running: list[Request], waiting: deque):
        """A chain step whose requests carry 0..K drafts each (a model-free proposer): request b
        verifies 1 + n_b tokens at positions n-1.., and n_b = 0 is a plain decoding step."""
        k = self.cfg.num_spec_tokens
        self._allocate_step(running, waiting, 1 + k)  # room for a full draft: the next may be one
        if not running:
            return
        starts = [len(r.token_ids) - 1 for r in running]
        lens = [1 + len(r.draft_tokens) for r in running]
        ids = torch.tensor(
            [t for r in running for t in (r.token_ids[-1], *r.draft_tokens)], device=self.device
        )
        hidden = self.target(ids, self.attn_batch(running, starts, lens, "target"))
        logits = self.target.compute_logits(hidden)
        offsets = [0, *accumulate(lens)][:-1]
        accepted, next_tokens = [0] * len(running), [0] * len(running)
        # requests with the same number of drafts are accepted together, as a [G, n] chain
        for n in sorted(set(lens)):
            group = [b for b, length in enumerate(lens) if length == n]
            rows = torch.tensor([[offsets[b] + j for j in range(n)] for b in group], device=self.device)
            group_logits = logits[rows]  # [G, n, V]
            finite = logits_finite(group_logits)
            check_logits_finite(finite, [running[b] for b in group])
            drafts = torch.tensor(
                [running[b].draft_tokens for b in group], dtype=torch.long, device=self.device
            ).view(len(group), n - 1)
            a, nxt = self._ragged_accept(drafts, group_logits)
            for b, a_b, nxt_b in zip(group, a.tolist(), nxt.tolist()):
                accepted[b], next_tokens[b] = a_b, nxt_b
        alive = []
        for b, r in enumerate(running):
            a = accepted[b]
            r.record_step(a, lens[b] - 1)
            emitted = r.draft_tokens[:a] + [next_tokens[b]]
            r.num_computed_tokens = starts[b] + a + 1
            r.commit(emitted, self.eos_ids)
            if r.finished:
                self._finish(r)
            else:
                alive.append(r)
        if alive and k > 0:
            self._propose(alive, None, None, None)

    def _prefill_with_drafts(self, batch: list[Request]):
        """The prefill of a proposer with drafts_at_prefill: each fresh request feeds its prompt
        and the drafts proposed from it; the prompt's last row and the drafts' rows are verified
        as a chain step rooted at the last prompt token (runner/proposers/model_free.py)."""
        fresh = [r for r in batch if self._drafts_at_prefill(r)]
        for r, d in zip(fresh, self.proposer.propose_tokens(fresh, self.cfg.num_spec_tokens)):
            r.draft_tokens, r.draft_probs = list(d)[: self.cfg.num_spec_tokens], None
        lens = [self._prefill_len(r) for r in batch]
        extra = [len(r.draft_tokens) if self._drafts_at_prefill(r) else 0 for r in batch]
        ids = torch.tensor(
            [t for r, n, e in zip(batch, lens, extra) for t in (*r.token_ids[:n], *r.draft_tokens[:e])],
            device=self.device,
        )
        total = [n + e for n, e in zip(lens, extra)]
        hidden = self.target(ids, self.attn_batch(batch, [0] * len(batch), total, "target"))
        ends = [0, *accumulate(total)][1:]
        verified = [b for b, r in enumerate(batch) if self._drafts_at_prefill(r)]
        for n in sorted({extra[b] for b in verified}):
            group = [b for b in verified if extra[b] == n]
            rows = torch.tensor(
                [[ends[b] - 1 - n + j for j in range(n + 1)] for b in group], device=self.device
            )
            logits = self.target.compute_logits(hidden[rows])  # [G, n+1, V]
            check_logits_finite(logits_finite(logits), [batch[b] for b in group])
            drafts = torch.tensor(
                [batch[b].draft_tokens for b in group], dtype=torch.long, device=self.device
            )
            a, nxt = self._ragged_accept(drafts.view(len(group), n), logits)
            for b, a_b, nxt_b in zip(group, a.tolist(), nxt.tolist()):
                r = batch[b]
                r.record_step(a_b, n)
                r.num_computed_tokens = lens[b] + a_b
                r.commit(r.draft_tokens[:a_b] + [nxt_b], self.eos_ids)
        for b, r in enumerate(batch):
            if b not in verified:  # a preempted request: its prompt and output, all but the last token
                r.num_computed_tokens = lens[b]
        alive = [r for r in batch if not r.finished]
        for r in batch:
            if r.finished:
                self._finish(r)
        if alive:
            self._propose(alive, None, None, None)

    def _ragged_accept(self, drafts, logits):
        """drafts [G, n] greedy (one-hot q), logits [G, n+1, V] -> (accepted [G], next [G])."""
        cfg = self.cfg
        if cfg.temperature == 0:
            return greedy_accept(drafts, logits)
        if drafts.shape[1] == 0:
            return torch.zeros(drafts.shape[0], dtype=torch.long, device=self.device), self.sample_target(
                logits[:, 0]
            )
        return onehot_accept(drafts, logits, cfg.temperature, self.generator)

    def run_model(self, ids, batch):
        """The target forward: (final-norm hidden for the logits, the proposer's features). EAGLE-1
        reuses the hidden states; a proposer with aux_layers (EAGLE-3) gets those layers' input
        states. The one hook a graph-captured runner replaces (cf. nano-vllm's run_model)."""
        layers = self._feature_layers()
        if layers:
            return self.target(ids, batch, aux_layers=layers)
        hidden = self.target(ids, batch)
        return hidden, hidden

    def _tree_step(self, running: list[Request], waiting: deque):
        cfg, t = self.cfg, self.cfg.num_verify_tokens
        self._allocate_step(running, waiting, t)
        if not running:
            return
        num = len(running)
        starts = [len(r.token_ids) - 1 for r in running]
        parents = torch.tensor([r.draft_parents for r in running], dtype=torch.long, device=self.device)
        rope = [s + d for s, r in zip(starts, running) for d in (0, *r.draft_depths)]  # node at its depth
        ids = torch.tensor(
            [tok for r in running for tok in (r.token_ids[-1], *r.draft_tokens)], device=self.device
        )
        batch = self.attn_batch(
            running,
            starts,
            [t] * num,
            "target",
            rope_positions=rope,
            tree_masks=ancestor_mask(parents, cfg.num_spec_tokens),
        )
        hidden, features = self.run_model(ids, batch)
        logits = self.target.compute_logits(hidden).view(num, t, -1)
        finite = logits_finite(logits)
        if cfg.temperature > 0:
            check_logits_finite(finite, running)
            p = probs(logits, cfg.temperature)
            walks = [
                sample_tree_accept(r.draft_tokens, r.draft_parents, p[b], self.generator)
                for b, r in enumerate(running)
            ]
        else:
            argmax = logits.argmax(-1)
            check_logits_finite(finite, running)
            argmax = argmax.tolist()
            walks = [
                greedy_tree_accept(r.draft_tokens, r.draft_parents, argmax[b]) for b, r in enumerate(running)
            ]
        alive, inputs, rows, alive_starts, src, dst = [], [], [], [], [], []
        for b, (r, (path, bonus)) in enumerate(zip(running, walks)):
            a = len(path) - 1
            r.record_step(a, cfg.num_spec_tokens)
            emitted = [r.draft_tokens[node - 1] for node in path[1:]] + [bonus]
            r.num_computed_tokens = starts[b] + a + 1
            r.commit(emitted, self.eos_ids)
            if r.finished:
                continue
            moved = [j for j, node in enumerate(path) if node != j]  # node p_j's KV belongs at n-1+j
            src += self._slots(r, [starts[b] + path[j] for j in moved])
            dst += self._slots(r, [starts[b] + j for j in moved])
            alive.append(r)
            inputs.append(emitted)
            rows.extend(b * t + node for node in path)
            alive_starts.append(starts[b])
        if src:  # the accepted path's target KV into place: gather everything first, then scatter
            flat = by_slot(self.kv_cache)
            src_t, dst_t = (torch.tensor(x, device=self.device) for x in (src, dst))
            flat[:, :, dst_t] = flat[:, :, src_t]  # advanced indexing gathers a copy first
        for r in running:
            if r.finished:
                self.kv.free(r)
        if alive:
            self._propose(alive, inputs, features[torch.tensor(rows, device=self.device)], alive_starts)

    def _slots(self, req: Request, positions: list[int]) -> list[int]:
        bs, blocks = self.cfg.block_size, self.kv.block_ids(req.request_id)
        return [blocks[p // bs] * bs + p % bs for p in positions]

    def _propose(self, reqs, inputs, features, starts):
        cfg = self.cfg
        if self.model_free:
            drafts = self.proposer.propose_tokens(reqs, cfg.num_spec_tokens)
            for r, d in zip(reqs, drafts):
                if len(d) > cfg.num_spec_tokens:
                    raise RuntimeError(
                        f"the proposer drafted {len(d)} tokens, more than K={cfg.num_spec_tokens}"
                    )
                r.draft_tokens, r.draft_probs = list(d), None
            return
        if self.tree:
            trees = self.proposer.propose_tree(
                self, reqs, inputs, features, starts, cfg.num_spec_tokens, cfg.topk, cfg.num_verify_tokens
            )
            # one device-to-host copy: tokens, parents and depths of every request's tree
            tokens, parents, depths = torch.stack([trees.tokens, trees.parents, trees.depths]).tolist()
            for b, r in enumerate(reqs):
                r.draft_tokens, r.draft_parents, r.draft_depths = tokens[b], parents[b], depths[b]
            return
        drafts, dists = self.proposer.propose(self, reqs, inputs, features, starts, cfg.num_spec_tokens)
        rows = drafts.tolist()  # one device-to-host copy for the batch, not one per request
        for b, r in enumerate(reqs):
            r.draft_tokens = rows[b]
            r.draft_probs = dists[b] if dists is not None else None

    # -- the draft context (runner/context.py) -----------------------------------------------------------

    def attn_batch(
        self,
        reqs: list[Request],
        starts: list[int],
        lens: list[int],
        layer: str,
        rope_positions=None,
        tree_masks=None,
    ) -> AttnBatch:
        """Metadata for one forward: request b feeds lens[b] tokens at (slot) positions starts[b]..;
        trees pass RoPE positions and masks over each request's last keys (AttnBatch.build)."""
        bs = self.cfg.block_size
        seq_lens = [s + n for s, n in zip(starts, lens)]
        held = [self.kv.block_ids(r.request_id) for r in reqs]
        width = max(max(cdiv(n, bs) for n in seq_lens), max(len(h) for h in held))
        # unset entries stay 0, as in a zero-initialised block-table tensor (one flat list: a
        # nested one costs torch.tensor several times more per step)
        flat_table = []
        for h in held:
            flat_table += h
            flat_table += [0] * (width - len(h))
        table = torch.tensor(flat_table, dtype=torch.int32, device=self.device).view(len(held), width)
        positions, slot_ids = [], []
        for h, s, n in zip(held, starts, lens):
            positions.extend(range(s, s + n))
            # each slot as a kernel reads it from the zero-padded table: entry p // bs, 0 past it
            slot_ids.extend((h[p // bs] if p // bs < len(h) else 0) * bs + p % bs for p in range(s, s + n))
        slots = torch.tensor(slot_ids, device=self.device)
        if self.auditor is not None and (layer != "draft" or self.draft_writes_kv):
            at = 0
            for r, h, n in zip(reqs, held, lens):
                self.auditor.check(r.request_id, slot_ids[at : at + n], h, layer)
                at += n
        batch = AttnBatch.build(
            positions,
            slots,
            table,
            lens,
            seq_lens,
            bs,
            self.attention,
            self.dtype,
            rope_positions=rope_positions,
            tree_masks=tree_masks,
            all_stored=True,
        )  # slots come from the (zero-padded) table: never -1
        self._chain_reuse(batch, reqs, starts, layer, rope_positions is None and tree_masks is None)
        return batch

    def _chain_reuse(self, batch: AttnBatch, reqs, starts, layer: str, plain: bool):
        """A chain's single-token draft steps share their gathered draft KV (AttnBatch.kv_reuse):
        a step that follows the previous call's step (the same request list, every position one
        further) extends its buffers by the one new row. Only with the KV lookahead on, where every
        write lands in its writer's own blocks (without it, drafts write through block 0 into
        other requests' rows, which a fresh gather must see). Only on the CPU: the buffers hold
        every draft layer's keys and values for the whole chain (a second copy of the batch's
        draft KV, where a fresh gather holds one layer's at a time), which a GPU's KV budget,
        sized to fill its memory with blocks, does not count."""
        step = (
            plain
            and self.device.type == "cpu"
            and layer == "draft"
            and batch.kernel == "torch"
            and batch.dense
            and batch.max_q == 1
            and not batch.per_request
            and self.cfg.kv_lookahead
        )
        if not step:
            self._chain = None
            return
        prev = self._chain
        # the list itself is kept, so its identity cannot pass to another list meanwhile
        same = prev is not None and prev[0] is reqs and prev[1] == [s - 1 for s in starts]
        reuse = prev[2] if same else {}
        self._chain = (reqs, list(starts), reuse)
        batch.kv_reuse = reuse
        for sub in batch.chunks or ():
            sub.kv_reuse = reuse

    @property
    def greedy_drafts(self) -> bool:
        """Whether draft_sample is an argmax (a proposer may then take its shortcut)."""
        return not (self.cfg.temperature > 0 and self.cfg.draft_sampling != ONEHOT)

    def draft_sample(self, logits):
        return draft_token(logits, self.cfg.temperature, self.cfg.draft_sampling, self.generator)

    def sample_target(self, logits):
        return target_token(logits, self.cfg.temperature, self.generator)
