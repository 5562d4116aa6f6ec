"""A deliberately plain reference runner (`--runner contiguous`): one request at a time.

No block manager, no batching, no preemption: each request gets its own contiguous KV cache of
`max_len` positions (bound as ONE block of size max_len, block table [[0]], slot = position),
and the speculative loop is written out step by step from EAGLE-NOTES section 4, gpt-fast style:

    prefill:  target over the prompt (positions 0..n-1) -> first token; the draft runs over
              tokens x_1..x_n with target features h_0..h_{n-1} and proposes K drafts
    step:     verify [x_{m-1}, d_1..d_K] at positions m-1..m-1+K; accept the longest agreeing
              prefix a (or rejection sampling); emit d_1..d_a + the target's token;
              the draft re-runs the a+1 emitted tokens with the TARGET's features at
              positions m-1..m-1+a, then K-1 single-token steps feed its own output back.

What is its own is the point of it: the KV layout and the ACCEPTANCE rule (`_Picker.accept`,
written out from the papers, sharing no code with runner/sampling.py or runner/tree.py's walks
beyond the tree walk itself). Drafting goes through the same proposer as the paged runner (this
module is its draft context), and a request commits and counts through the same Request.

Counting matches the paged runner: a step emits 1 + a, counted before truncation at EOS /
max_tokens; the prefill token is not a step. In float32 greedy decoding both runners must give
identical per-question counts and tokens.

Trees (topk > 1, TREE-NOTES section 5): the target verifies the T nodes at positions m-1.. with
RoPE at their depth and a tree mask, and the accepted path's target KV is copied into place.
"""

from __future__ import annotations

import torch

from alcheck.models.attention import AttnBatch, bind_kv_cache
from alcheck.options import DEFAULT_DRAFT_SAMPLING, ONEHOT
from alcheck.runner.config import RunnerConfig
from alcheck.runner.proposers.model_free import is_model_free
from alcheck.runner.request import GenerationResult, Request
from alcheck.runner.tree import ancestor_mask, greedy_tree_accept, sample_tree_accept


class _Contiguous:
    """One request's contiguous KV for the target and the draft (separate tensors, same slots),
    and the draft context (runner/context.py) its proposer drafts through."""

    def __init__(self, target, proposer, max_len: int, picker: _Picker | None = None):
        param = next(target.parameters())
        self.device, self.dtype, self.max_len = param.device, param.dtype, max_len
        self.target, self.proposer, self.picker = target, proposer, picker
        self.aux_layers = proposer.aux_layers if proposer is not None else ()
        self.target_cache = bind_kv_cache(target.attention_layers, 1, max_len, param.dtype, param.device)
        if proposer is not None and proposer.attention_layers:
            bind_kv_cache(proposer.attention_layers, 1, max_len, param.dtype, param.device)

    def batch(self, start: int, n: int, rope_positions=None, tree_masks=None) -> AttnBatch:
        """n tokens at positions start..start+n-1; the whole cache is block 0 (trees: RoPE and mask)."""
        if start + n > self.max_len:
            raise RuntimeError(f"position {start + n - 1} past the contiguous cache of {self.max_len}")
        positions = torch.arange(start, start + n, device=self.device)
        table = torch.zeros(1, 1, dtype=torch.int32, device=self.device)
        return AttnBatch.build(
            positions,
            positions.clone(),
            table,
            [n],
            [start + n],
            self.max_len,
            "torch",
            self.dtype,
            rope_positions=rope_positions,
            tree_masks=tree_masks,
        )

    # -- the draft context ---------------------------------------------------------------------

    def attn_batch(self, reqs, starts, lens, layer, rope_positions=None, tree_masks=None) -> AttnBatch:
        return self.batch(starts[0], lens[0], rope_positions, tree_masks)  # one request here

    def draft_sample(self, logits):
        """The picker's draft rule, row by row (one row here), in its own random stream."""
        drafts, dists = zip(*(self.picker.draft(row) for row in logits))
        q = torch.stack(dists) if dists[0] is not None else None
        return torch.tensor(drafts, device=logits.device), q

    # -- forwards --------------------------------------------------------------------------------

    def run_target(self, tokens: list[int], start: int, rope_positions=None, tree_masks=None):
        """(final-norm hidden, the draft's features: the same hidden, or the aux layers' inputs)."""
        ids = torch.tensor(tokens, device=self.device)
        batch = self.batch(start, len(tokens), rope_positions, tree_masks)
        if self.aux_layers:
            return self.target(ids, batch, aux_layers=self.aux_layers)
        hidden = self.target(ids, batch)
        return hidden, hidden

    def move_target_kv(self, src: list[int], dst: list[int]):
        """Every target layer's K/V from positions src to dst (gathered first, then scattered)."""
        if src:
            cache = self.target_cache[:, :, 0]  # [2, layers, max_len, kv_heads, dim]
            cache[:, :, dst] = cache[:, :, src].clone()

    def run_draft(
        self, tokens: list[int], features: torch.Tensor, start: int, first: bool = False
    ) -> torch.Tensor:
        """One draft forward. first: step 0, whose features are the target's (the proposer maps
        them as its head needs); later: a single step from the head's own previous output."""
        ids = torch.tensor(tokens, device=self.device)
        batch = self.batch(start, len(tokens))
        if first:
            return self.proposer.extend(self, batch, ids, features)
        return self.proposer.step(self, batch, ids, features)


class _Picker:
    """Greedy argmax, or seeded sampling at a temperature (both acceptance rules written out:
    runner/sampling.py explains "onehot" and "sampled")."""

    def __init__(self, temperature: float, seed: int, device, draft_sampling: str = DEFAULT_DRAFT_SAMPLING):
        self.temperature = temperature
        self.onehot = draft_sampling == ONEHOT
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def probs(self, logits):
        return torch.softmax(logits.float() / self.temperature, dim=-1)

    def draw(self, p) -> int:
        return int(torch.multinomial(p, 1, generator=self.generator))

    def token(self, logits) -> tuple[int, torch.Tensor | None]:
        if self.temperature == 0:
            return int(logits.argmax()), None
        p = self.probs(logits)
        return self.draw(p), p

    def draft(self, logits) -> tuple[int, torch.Tensor | None]:
        """A draft token: the argmax under "onehot" (q is one-hot, no probabilities kept)."""
        return (int(logits.argmax()), None) if self.onehot else self.token(logits)

    def accept(self, drafts: list[int], q: list, logits) -> tuple[int, int]:
        """logits [K+1, V] of the target at the verified positions -> (accepted a, next token)."""
        if self.temperature == 0:
            target = logits.argmax(-1).tolist()
            a = 0
            while a < len(drafts) and drafts[a] == target[a]:
                a += 1
            return a, target[a]
        for i, d in enumerate(drafts):
            p = self.probs(logits[i])
            u = float(torch.rand((), generator=self.generator, device=p.device))
            if self.onehot:
                if u < p[d]:  # accept with probability p(d)
                    continue
                residual = p.clone()
                residual[d] = 0  # the rejected draft can not be emitted; the rest renormalised
            elif u * q[i][d] <= p[d]:  # accept with probability min(1, p/q)
                continue
            else:
                residual = (p - q[i]).clamp_min(0)
            total = residual.sum()
            return i, self.draw(residual / total if total > 0 else p)
        return len(drafts), self.draw(self.probs(logits[len(drafts)]))


class ContiguousRunner:
    """The runner table's "contiguous" entry: the paged runner's constructor and generate()."""

    def __init__(self, target, proposer, eos_token_ids, config: RunnerConfig, engine=None):
        # engine (runner/engine.py): unused, each request gets its own contiguous cache
        if config.num_spec_tokens > 0 and proposer is None:
            raise ValueError("num_spec_tokens > 0 needs a proposer")
        self.model_free = is_model_free(proposer)  # ragged drafts from the tokens alone
        if self.model_free and config.is_tree:
            raise ValueError("a model-free proposer drafts chains: topk must be 1")
        self.target, self.proposer, self.cfg = target, proposer, config
        self.eos_ids = frozenset(eos_token_ids)
        self.slot_violations = 0 if config.audit_slots else None  # one block per request: nothing to audit

    @staticmethod
    def attention_name(device: torch.device, block_size: int, dtype: torch.dtype) -> str:
        return "torch-sdpa (contiguous)"  # AttnBatch "torch" over one block per request

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_tokens: int, progress=None) -> list[GenerationResult]:
        """Each prompt to EOS or max_tokens (the prefill token counts), one at a time, in order."""
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        cfg = self.cfg
        # a model-free proposer's drafts are greedy (one-hot q): the onehot rule is its rule
        sampling = "onehot" if self.model_free else cfg.draft_sampling
        picker = _Picker(cfg.temperature, cfg.seed, next(self.target.parameters()).device, sampling)
        one = self._tree if cfg.is_tree else self._chain
        if self.model_free and cfg.num_spec_tokens > 0:
            self.proposer.start_generation()  # request ids start again: a method's history too
        results, tokens = [], 0
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError("empty prompt")
            results.append(
                one(
                    Request(
                        i, list(prompt), len(prompt), max_tokens, accepted_per_pos=[0] * cfg.num_spec_tokens
                    ),
                    picker,
                )
            )
            tokens += len(results[-1].output_ids)
            if progress is not None:
                progress(1, tokens)
        return results

    def _result(self, req: Request) -> GenerationResult:
        return req.result()  # one request at a time: never preempted

    def _chain(self, req: Request, picker: _Picker) -> GenerationResult:
        target, k, n = self.target, self.cfg.num_spec_tokens, req.num_prompt_tokens
        kv = _Contiguous(target, self.proposer if k else None, n + req.max_tokens + 2 * k + 1, picker)

        def propose(inputs, features, start):
            """Draft step 0 over `inputs` (x_{p+1} with target h_p, p = start..), then K-1 chained;
            a model-free proposer reads the committed tokens alone and may draft fewer than K."""
            if self.model_free:
                drafts = list(self.proposer.propose_tokens([req], k)[0])
                if len(drafts) > k:
                    raise RuntimeError(f"the proposer drafted {len(drafts)} tokens, more than K={k}")
                return drafts, [None] * len(drafts)
            drafts, dists = self.proposer.propose(kv, [req], [inputs], features, [start], k)
            return drafts[0].tolist(), (list(dists[0]) if dists is not None else [None] * k)

        if self.model_free and k and self.proposer.drafts_at_prefill:
            # the prefill verifies drafts proposed from the prompt, as a step rooted at its last token
            drafts, dists = propose(None, None, 0)
            hidden, _ = kv.run_target([*req.token_ids, *drafts], 0)
            a, nxt = picker.accept(drafts, dists, target.compute_logits(hidden[n - 1 :]))
            req.record_step(a, len(drafts))
            req.commit(drafts[:a] + [nxt], self.eos_ids)
            drafts, dists = propose(None, None, 0) if not req.finished else ([], [])
        else:
            hidden, features = kv.run_target(req.token_ids, 0)  # prefill
            req.commit([picker.token(target.compute_logits(hidden[-1:])[0])[0]], self.eos_ids)
            drafts, dists = propose(req.token_ids[1:], features, 0) if k and not req.finished else ([], [])
        while not req.finished:
            m = len(req.token_ids)
            hidden, features = kv.run_target([req.token_ids[-1], *drafts], m - 1)  # positions m-1 .. m-1+K
            a, nxt = picker.accept(drafts, dists, target.compute_logits(hidden))
            req.record_step(a, len(drafts))
            emitted = drafts[:a] + [nxt]
            req.commit(emitted, self.eos_ids)
            if not req.finished and k:
                drafts, dists = propose(emitted, features[: a + 1], m - 1)
        if self.model_free:
            self.proposer.request_finished(req)
        return self._result(req)

    def _tree(self, req: Request, picker: _Picker) -> GenerationResult:
        target, cfg = self.target, self.cfg
        steps, topk, num_tokens, n = (
            cfg.num_spec_tokens,
            cfg.topk,
            cfg.num_verify_tokens,
            req.num_prompt_tokens,
        )
        # verify writes T target slots after the committed tokens; the draft's scratch reaches
        # steps + (steps-1)*topk past them
        kv = _Contiguous(
            target, self.proposer, n + req.max_tokens + num_tokens + steps + (steps - 1) * topk + 1, picker
        )

        def propose(inputs, features, start):
            return self.proposer.propose_tree(kv, [req], [inputs], features, [start], steps, topk, num_tokens)

        hidden, features = kv.run_target(req.token_ids, 0)
        req.commit([picker.token(target.compute_logits(hidden[-1:])[0])[0]], self.eos_ids)
        trees = propose(req.token_ids[1:], features, 0) if not req.finished else None
        while not req.finished:
            m = len(req.token_ids)
            drafts, parents = trees.tokens[0].tolist(), trees.parents[0].tolist()
            rope = [m - 1] + [m - 1 + d for d in trees.depths[0].tolist()]
            hidden, features = kv.run_target(
                [req.token_ids[-1], *drafts], m - 1, rope, ancestor_mask(trees.parents, steps)
            )
            logits = target.compute_logits(hidden)
            if picker.temperature == 0:
                path, bonus = greedy_tree_accept(drafts, parents, logits.argmax(-1).tolist())
            else:
                path, bonus = sample_tree_accept(drafts, parents, picker.probs(logits), picker.generator)
            a = len(path) - 1
            req.record_step(a, steps)
            kv.move_target_kv([m - 1 + node for node in path], [m - 1 + j for j in range(a + 1)])
            emitted = [drafts[node - 1] for node in path[1:]] + [bonus]
            req.commit(emitted, self.eos_ids)
            if not req.finished:
                trees = propose(emitted, features[path], m - 1)
        return self._result(req)
