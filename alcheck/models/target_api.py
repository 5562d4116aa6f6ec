"""What the runner calls on any target besides its forward: embed, compute_logits, attention_layers.

Shared by alcheck's own Llama target and the transformers adapter (models/hf_target.py), whose
decoders both hold `model.embed_tokens`, `model.layers[i].self_attn` and an `lm_head`.
"""

from __future__ import annotations

import torch


class CausalTarget:
    @property
    def attention_layers(self):
        return [layer.self_attn for layer in self.model.layers]

    def compute_logits(self, hidden):
        return self.lm_head(hidden)

    def embed(self, input_ids):
        return self.model.embed_tokens(input_ids)

    @staticmethod
    def with_aux(hidden, aux: list, aux_layers):
        """forward's result: hidden alone, or (hidden, aux states concatenated [T, n * H]) when the
        caller named aux_layers (EAGLE-3)."""
        if aux_layers is None:
            return hidden
        return hidden, torch.cat(aux, dim=-1)
