"""Classic EAGLE-3 bugs, injected into alcheck for the tests (EAGLE3-NOTES section 6).

BUGS maps a name to monkeypatch.setattr arguments, or to PostNormFeedback (a proposer to pass).
"""

from __future__ import annotations

import torch

from alcheck.models.eagle3 import Eagle3Head, Eagle3Layer
from alcheck.models.llama import LlamaTarget
from alcheck.runner.proposers.eagle3 import Eagle3Proposer


def _shifted_layers(self):
    return tuple(i - 1 for i in self.head.aux_layers)  # one layer early (vLLM vs SGLang's +1)


def _after_final_norm(self, input_ids, batch, aux_layers=None):
    if aux_layers is None:
        return REAL_TARGET_FORWARD(self, input_ids, batch)
    hidden, aux = REAL_TARGET_FORWARD(self, input_ids, batch, aux_layers)
    return hidden, torch.cat([aux[:, : -hidden.shape[-1]], hidden], -1)  # top feature taken post-norm


def _no_d2t(self):
    # draft ids used as target ids: every path through the mapping (the spread logits and the
    # greedy shortcut of runner/proposers/eagle3.py) reads this one buffer
    return torch.arange(self.config.draft_vocab_size, device=self.lm_head.weight.device)


def _swapped_concat(self, token_embeds, hidden, batch):
    normed = self.hidden_norm(hidden)
    residual = normed if self.norm_before_residual else hidden
    x = residual + self.self_attn(torch.cat([normed, self.input_layernorm(token_embeds)], dim=-1), batch)
    return x + self.mlp(self.post_attention_layernorm(x))


class PostNormFeedback(Eagle3Proposer):
    """Feeds the POST-norm hidden state to chained steps (logits still from the right one)."""

    def propose(self, runner, reqs, inputs, features, starts, k):
        head, target = self.head, runner.target
        lens = [len(x) for x in inputs]
        ids = torch.tensor([t for x in inputs for t in x])
        y = head(
            head.embed(target, ids), head.combine(features), runner.attn_batch(reqs, starts, lens, "draft")
        )
        h = y[torch.tensor(lens).cumsum(0) - 1]
        positions, tokens = [s + n for s, n in zip(starts, lens)], []
        for step in range(k):
            token, _ = runner.draft_sample(head.compute_logits(h))
            tokens.append(token)
            if step < k - 1:
                h = head(
                    head.embed(target, token),
                    head.norm(h),
                    runner.attn_batch(reqs, positions, [1] * len(reqs), "draft"),
                )
                positions = [p + 1 for p in positions]
        return torch.stack(tokens, 1), None


REAL_TARGET_FORWARD = LlamaTarget.forward
BUGS = {
    "aux layers one too early": (Eagle3Proposer, "aux_layers", property(_shifted_layers)),
    "aux feature after the final norm": (LlamaTarget, "forward", _after_final_norm),
    "d2t not applied": (Eagle3Head, "draft_to_target", property(_no_d2t)),
    "hidden and embedding swapped": (Eagle3Layer, "forward", _swapped_concat),
    "post-norm hidden fed back": PostNormFeedback,  # a proposer, not a patch
}
