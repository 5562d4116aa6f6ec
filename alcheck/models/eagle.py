"""EAGLE-1 draft head (yuhuili/EAGLE-LLaMA3.1-Instruct-8B layout).

At draft position p: input token x_{p+1} and feature h_p (the target's final-norm hidden state,
or the head's own previous output on later draft steps), RoPE position p.
    x = fc(cat(embed(x_{p+1}), h_p));  one Llama layer without input_layernorm;  no final norm.
Logits come from the target's lm_head; embeddings are the target's.
"""

from __future__ import annotations

import torch
from torch import nn

from alcheck.models.attention import AttnBatch
from alcheck.models.config import ModelConfig
from alcheck.models.layers import DecoderLayer, Rotary


class EagleHead(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        rotary = Rotary(cfg.head_dim, cfg.rope_theta, None)  # plain RoPE, no llama3 scaling
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=bool(cfg.bias))  # loader settles None
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, rotary, input_norm=(i > 0)) for i in range(cfg.num_hidden_layers)
        )

    @property
    def attention_layers(self):
        return [layer.self_attn for layer in self.layers]

    def forward(self, token_embeds, features, batch: AttnBatch) -> torch.Tensor:
        """Draft hidden states [T, hidden]: fed to the target's lm_head and back as features."""
        x = self.fc(torch.cat([token_embeds, features], dim=-1))
        for layer in self.layers:
            x = layer(x, batch)
        return x
