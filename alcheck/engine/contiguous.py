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

EAGLE-3 heads (EAGLE3-NOTES section 4): the target also returns the auxiliary states of the layers
the head names; step 0 maps them through the head's fc, and drafts come from the head's own
lm_head, mapped to target ids through d2t.
"""

from __future__ import annotations

import torch

from alcheck.engine.request import GenerationResult
from alcheck.models.attention import AttnBatch, bind_kv_cache


class _Contiguous:
    """One request's contiguous KV for the target and the draft (separate tensors, same slots)."""

    def __init__(self, target, head, max_len: int):
        param = next(target.parameters())
        self.device, self.dtype, self.max_len = param.device, param.dtype, max_len
        self.target, self.head = target, head
        self.aux_layers = getattr(head, "aux_layers", None)  # None: an EAGLE-1 head
        bind_kv_cache(target.attention_layers, 1, max_len, param.dtype, param.device)
        if head is not None:
            bind_kv_cache(head.attention_layers, 1, max_len, param.dtype, param.device)

    def batch(self, start: int, n: int) -> AttnBatch:
        """n tokens at positions start..start+n-1; the whole cache is block 0."""
        if start + n > self.max_len:
            raise RuntimeError(f"position {start + n - 1} past the contiguous cache of {self.max_len}")
        positions = torch.arange(start, start + n, device=self.device)
        table = torch.zeros(1, 1, dtype=torch.int32, device=self.device)
        return AttnBatch.build(positions, positions.clone(), table, [n], [start + n], self.max_len, "torch", self.dtype)

    def run_target(self, tokens: list[int], start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(final-norm hidden, the draft's features: the same hidden for EAGLE-1, aux states for EAGLE-3)."""
        ids = torch.tensor(tokens, device=self.device)
        if self.aux_layers:
            return self.target(ids, self.batch(start, len(tokens)), aux_layers=self.aux_layers)
        hidden = self.target(ids, self.batch(start, len(tokens)))
        return hidden, hidden

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
    engine/sampling.py explains "onehot" and "sampled")."""

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
                        draft_sampling: str = "onehot") -> list[GenerationResult]:
    """Each prompt to EOS or max_tokens (the prefill token counts), one at a time, in order."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if k > 0 and head is None:
        raise ValueError("k > 0 needs a draft head")
    eos = frozenset(eos_ids)
    picker = _Picker(temperature, seed, next(target_model.parameters()).device, draft_sampling)
    return [_generate_one(target_model, head, eos, i, list(p), max_tokens, k, picker) for i, p in enumerate(prompts)]


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
