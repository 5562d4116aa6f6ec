"""EAGLE-3 draft head (EAGLE3-NOTES sections 2-4).

Inputs at draft position p: token x_{p+1} (a TARGET id) and a hidden state g_p.
  step 0:   g_p = fc(cat(a_1, a_2, a_3)) from the target's auxiliary states at position p
            (pre-norm residual streams, ascending layer index);
  step >= 1: g = the head's own previous PRE-norm output y.
One layer:  attention input = cat(input_layernorm(embed(x)), hidden_norm(g))  (embedding first, 2H);
            y = g + o_proj(attn);  y = y + mlp(post_attention_layernorm(y))
            (with norm_before_residual the residual is hidden_norm(g) instead of g).
Logits:     lm_head(norm(y)) over the draft vocabulary; draft id d is target id d + d2t[d].

Auxiliary layer ids use ONE convention everywhere in alcheck: id i is the residual stream
entering target layer i (the output of layers 0..i-1, before any norm), as vLLM, speculators and
the EAGLE repo capture it. Configs written in the "output of layer i" spelling are converted on
load (alcheck.models.eagle3_loading).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from alcheck.models.attention import AttnBatch
from alcheck.models.config import ModelConfig
from alcheck.models.layers import MLP, Attention, RMSNorm, Rotary


def default_aux_layers(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE's, vLLM's and speculators' default: inputs of layers 2, L//2 and L-3."""
    n = num_target_layers
    return (2, n // 2, n - 3)


@dataclass(slots=True)
class Eagle3Config:
    layer: ModelConfig  # the draft decoder layer; vocab_size is the TARGET's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...]  # ascending, our convention (input of target layer i)
    norm_before_residual: bool = False
    fc_bias: bool = False
    notes: tuple[str, ...] = ()  # config keys read but ignored (auto_map naming a config class), for run.json

    @property
    def hidden_size(self) -> int:
        return self.layer.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.layer.vocab_size


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: Eagle3Config, rotary: Rotary):
        super().__init__()
        lc, h = cfg.layer, cfg.hidden_size
        self.input_layernorm = RMSNorm(h, lc.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, lc.rms_norm_eps)
        self.self_attn = Attention(lc, rotary, in_features=2 * h)
        self.post_attention_layernorm = RMSNorm(h, lc.rms_norm_eps)
        self.mlp = MLP(lc)
        self.norm_before_residual = cfg.norm_before_residual

    def forward(self, token_embeds, hidden, batch: AttnBatch):
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        x = residual + self.self_attn(torch.cat([self.input_layernorm(token_embeds), normed], dim=-1), batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Head(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.config = cfg
        h = cfg.hidden_size
        rotary = Rotary(cfg.layer.head_dim, cfg.layer.rope_theta, None)  # the draft's own plain RoPE
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * cfg.target_hidden_size, h, bias=cfg.fc_bias)
        self.layers = nn.ModuleList([Eagle3Layer(cfg, rotary)])
        self.norm = RMSNorm(h, cfg.layer.rms_norm_eps)
        self.lm_head = nn.Linear(h, cfg.draft_vocab_size, bias=False)
        # absolute target id of each draft id (arange + d2t); set by the loader
        self.register_buffer("draft_to_target", torch.arange(cfg.draft_vocab_size), persistent=False)
        self.embed_tokens: nn.Embedding | None = None  # only when the head ships its own, distinct one

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.config.aux_layer_ids

    @property
    def attention_layers(self):
        return [layer.self_attn for layer in self.layers]

    def embed(self, target, token_ids):
        """Token ids are target ids; the target's embedding unless the head brought its own."""
        return self.embed_tokens(token_ids) if self.embed_tokens is not None else target.embed(token_ids)

    def combine(self, aux_states):
        """Step 0's hidden: fc over the concatenated auxiliary target states [T, 3 * H_target]."""
        return self.fc(aux_states)

    def forward(self, token_embeds, hidden, batch: AttnBatch) -> torch.Tensor:
        """The pre-norm output y [T, H]: logits come from norm(y), later steps are fed y itself."""
        return self.layers[0](token_embeds, hidden, batch)

    def draft_logits(self, y):
        return self.lm_head(self.norm(y))

    def compute_logits(self, y):
        """Logits over the TARGET vocabulary: the draft logits at their mapped ids, -inf elsewhere.
        argmax gives the mapped greedy draft; softmax gives the draft distribution with zeros
        outside the mapped ids, so target-vocabulary sampling code needs no change."""
        draft = self.draft_logits(y)
        out = draft.new_full((*draft.shape[:-1], self.config.vocab_size), float("-inf"))
        out[..., self.draft_to_target] = draft
        return out
