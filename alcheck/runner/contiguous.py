"""A deliberately plain reference runner (`--runner contiguous`): one request at a time.

No block manager, no batching, no preemption: each request gets its own contiguous KV cache of
`max_len` positions (bound as ONE block of size max_len, block table [[0]], slot = position),
and the speculative loop is written out step by step from EAGLE-NOTES section 4, gpt-fast style:

    prefill:  target over the prompt (positions 0..n-1) -> first token; the draft runs over
              tokens x_1..x_n with target features h_0..h_{n-1} and chains K drafts
    step:     verify [x_{m-1}, d_1..d_K] at positions m-1..m-1+K; accept the longest agreeing
              prefix a (or rejection sampling); emit d_1..d_a + the target's token;
              draft step 0 re-runs the a+1 emitted tokens with the TARGET's hidden states at
              positions m-1..m-1+a, then K-1 single-token steps feed its own output back.

Counting matches the paged runner: a step emits 1 + a, counted before truncation at EOS /
max_tokens; the prefill token is not a step. In float32 greedy decoding both runners must give
identical per-question counts and tokens.

Trees (topk > 1, TREE-NOTES section 5): the same drafting loop as the paged runner
(runner/drafting.py, with scratch positions after the committed tokens in this cache) and the same
tree functions (runner/tree.py); the target verifies the T nodes at positions m-1.. with RoPE at
their depth and a tree mask, and the accepted path's target KV is copied into place.

EAGLE-3 heads (EAGLE3-NOTES section 4): the target also returns the auxiliary states of the layers
the head names; step 0 maps them through the head's fc, and drafts come from the head's own
lm_head, mapped to target ids through d2t.
"""

from __future__ import annotations

import torch

from alcheck.runner.proposer import make_proposer
from alcheck.runner.request import GenerationResult
from alcheck.runner.tree import ancestor_mask, greedy_tree_accept, sample_tree_accept
from alcheck.models.attention import AttnBatch, bind_kv_cache


class _Contiguous:
    """One request's contiguous KV for the target and the draft (separate tensors, same slots)."""

    def __init__(self, target, head, max_len: int):
        param = next(target.parameters())
        self.device, self.dtype, self.max_len = param.device, param.dtype, max_len
        self.target, self.head = target, head
        self.aux_layers = getattr(head, "aux_layers", None)  # None: an EAGLE-1 head
        self.target_cache = bind_kv_cache(target.attention_layers, 1, max_len, param.dtype, param.device)
        if head is not None:
            bind_kv_cache(head.attention_layers, 1, max_len, param.dtype, param.device)

    def batch(self, start: int, n: int, rope_positions=None, tree_masks=None) -> AttnBatch:
        """n tokens at positions start..start+n-1; the whole cache is block 0 (trees: RoPE and mask)."""
        if start + n > self.max_len:
            raise RuntimeError(f"position {start + n - 1} past the contiguous cache of {self.max_len}")
        positions = torch.arange(start, start + n, device=self.device)
        table = torch.zeros(1, 1, dtype=torch.int32, device=self.device)
        return AttnBatch.build(positions, positions.clone(), table, [n], [start + n], self.max_len, "torch", self.dtype,
                               rope_positions=rope_positions, tree_masks=tree_masks)

    def attn_batch(self, reqs, starts, lens, layer, rope_positions=None, tree_masks=None) -> AttnBatch:
        """What runner/drafting.py asks a runner for (one request here)."""
        return self.batch(starts[0], lens[0], rope_positions, tree_masks)

    def run_target(self, tokens: list[int], start: int, rope_positions=None, tree_masks=None):
        """(final-norm hidden, the draft's features: the same hidden for EAGLE-1, aux states for EAGLE-3)."""
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

    def run_draft(self, tokens: list[int], features: torch.Tensor, start: int, first: bool = False) -> torch.Tensor:
        """first: step 0, whose features are the target's (EAGLE-3 maps them through fc first)."""
        ids = torch.tensor(tokens, device=self.device)
        if self.aux_layers:
            hidden = self.head.combine(features) if first else features
            return self.head(self.head.embed(self.target, ids), hidden, self.batch(start, len(tokens)))
        return self.head(self.target.embed(ids), features, self.batch(start, len(tokens)))

    def draft_logits(self, h) -> torch.Tensor:
        """Over the target vocabulary (EAGLE-3: -inf outside the ids d2t maps to)."""
        return self.head.compute_logits(h) if self.aux_layers else self.target.compute_logits(h)


class _Picker:
    """Greedy argmax, or seeded sampling at a temperature (both acceptance rules written out:
    runner/sampling.py explains "onehot" and "sampled")."""

    def __init__(self, temperature: float, seed: int, device, draft_sampling: str = "onehot"):
        self.temperature = temperature
        self.onehot = draft_sampling == "onehot"
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


@torch.inference_mode()
def generate_contiguous(target_model, head, eos_ids, prompts: list[list[int]], max_tokens: int, k: int,
                        temperature: float = 0.0, seed: int = 0,
                        draft_sampling: str = "onehot", topk: int = 1,
                        num_draft_tokens: int | None = None, proposer=None) -> list[GenerationResult]:
    """Each prompt to EOS or max_tokens (the prefill token counts), one at a time, in order.
    topk > 1: tree drafting with num_draft_tokens verified per step (root included), drafted by
    `proposer` (default: the head's own, runner/proposer.py)."""
    from alcheck.runner.config import check_tree_shape

    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if k > 0 and head is None and proposer is None:
        raise ValueError("k > 0 needs a draft head")
    check_tree_shape(k, topk, num_draft_tokens)
    eos = frozenset(eos_ids)
    picker = _Picker(temperature, seed, next(target_model.parameters()).device, draft_sampling)
    if topk > 1 and k > 0:
        drafter = proposer if proposer is not None else make_proposer(head)
        return [_generate_tree(target_model, head, drafter, eos, i, list(p), max_tokens, k, topk, num_draft_tokens,
                               picker) for i, p in enumerate(prompts)]
    return [_generate_one(target_model, head, eos, i, list(p), max_tokens, k, picker) for i, p in enumerate(prompts)]


class _Output:
    """One request's committed tokens and finish reason (EOS kept; max_tokens counts the prefill token)."""

    def __init__(self, prompt, eos, max_tokens):
        self.token_ids, self.output, self.finish = list(prompt), [], None
        self.eos, self.max_tokens = eos, max_tokens

    def commit(self, new_tokens):
        for t in new_tokens:
            self.token_ids.append(t)
            self.output.append(t)
            if t in self.eos:
                self.finish = "eos"
                return
            if len(self.output) >= self.max_tokens:
                self.finish = "length"
                return


def _generate_tree(target, head, drafter, eos, request_id, prompt, max_tokens, steps, topk, num_tokens, picker):
    if not prompt:
        raise ValueError("empty prompt")
    n = len(prompt)
    # verify writes T target slots after the committed tokens; the draft's scratch reaches
    # steps + (steps-1)*topk past them
    kv = _Contiguous(target, head, n + max_tokens + num_tokens + steps + (steps - 1) * topk + 1)
    out = _Output(prompt, eos, max_tokens)

    def propose(inputs, features, start):  # `out` stands in for the request (its token_ids)
        return drafter.propose_tree(kv, [out], [inputs], features, [start], steps, topk, num_tokens)

    hidden, features = kv.run_target(prompt, 0)
    out.commit([picker.token(target.compute_logits(hidden[-1:])[0])[0]])
    trees = propose(out.token_ids[1:], features, 0) if out.finish is None else None
    num_steps = accepted = 0
    per_depth = [0] * steps
    while out.finish is None:
        m = len(out.token_ids)
        drafts, parents = trees.tokens[0].tolist(), trees.parents[0].tolist()
        rope = [m - 1] + [m - 1 + d for d in trees.depths[0].tolist()]
        hidden, features = kv.run_target([out.token_ids[-1], *drafts], m - 1, rope, ancestor_mask(trees.parents, steps))
        logits = target.compute_logits(hidden)
        if picker.temperature == 0:
            path, bonus = greedy_tree_accept(drafts, parents, logits.argmax(-1).tolist())
        else:
            path, bonus = sample_tree_accept(drafts, parents, picker.probs(logits), picker.generator)
        a = len(path) - 1
        num_steps += 1
        accepted += a
        for i in range(a):
            per_depth[i] += 1
        kv.move_target_kv([m - 1 + node for node in path], [m - 1 + j for j in range(a + 1)])
        emitted = [drafts[node - 1] for node in path[1:]] + [bonus]
        out.commit(emitted)
        if out.finish is None:
            trees = propose(emitted, features[path], m - 1)
    return GenerationResult(request_id, n, out.output, num_steps, num_steps * steps, accepted, per_depth,
                            out.finish, 0)


def _generate_one(target, head, eos, request_id, prompt, max_tokens, k, picker) -> GenerationResult:
    if not prompt:
        raise ValueError("empty prompt")
    n = len(prompt)
    kv = _Contiguous(target, head if k else None, n + max_tokens + 2 * k + 1)
    tokens, output = list(prompt), []
    finish = None

    def commit(new_tokens):
        nonlocal finish
        for t in new_tokens:
            tokens.append(t)
            output.append(t)
            if t in eos:
                finish = "eos"
                return
            if len(output) >= max_tokens:
                finish = "length"
                return

    def propose(inputs, features, start):
        """Draft step 0 over `inputs` (x_{p+1} with target h_p, p = start..), then K-1 chained."""
        out = kv.run_draft(inputs, features, start, first=True)
        h, pos = out[-1:], start + len(inputs)
        drafts, dists = [], []
        for j in range(k):
            d, q = picker.draft(kv.draft_logits(h)[0])
            drafts.append(d)
            dists.append(q)
            if j < k - 1:
                h = kv.run_draft([d], h, pos)
                pos += 1
        return drafts, dists

    # prefill
    hidden, features = kv.run_target(prompt, 0)
    first, _ = picker.token(target.compute_logits(hidden[-1:])[0])
    commit([first])
    drafts, dists = propose(tokens[1:], features, 0) if k and finish is None else ([], [])

    steps = accepted = 0
    per_pos = [0] * k
    while finish is None:
        m = len(tokens)
        hidden, features = kv.run_target([tokens[-1], *drafts], m - 1)  # positions m-1 .. m-1+K
        a, nxt = picker.accept(drafts, dists, target.compute_logits(hidden))
        steps += 1
        accepted += a
        for i in range(a):
            per_pos[i] += 1
        emitted = drafts[:a] + [nxt]
        commit(emitted)
        if finish is None and k:
            drafts, dists = propose(emitted, features[: a + 1], m - 1)
    return GenerationResult(request_id, n, output, steps, steps * k, accepted, per_pos, finish, 0)
