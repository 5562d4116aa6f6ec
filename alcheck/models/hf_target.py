"""A target built from transformers' own modeling code, presented as the runner's target.

`HFTarget` holds a transformers `*ForCausalLM`'s decoder (`model`) and `lm_head` under the same
attribute names, so its parameter names are the checkpoint's and the strict loader fills it
directly. It runs the decoder layers itself rather than the model's forward: one flat row of
every request's new tokens ([1, T, H]), RoPE from the model's own rotary module at the runner's
positions, no transformers mask or cache. Attention goes through alcheck's paged KV, registered in
transformers' attention registry (models/hf_attention.py), so the interface is the native Llama
target's: `target(ids, batch, aux_layers=...)`, `embed`, `compute_logits`, `attention_layers`.

Everything but attention mixes no tokens (norms, MLPs, per-token expert routing), so running
all requests as one row computes what transformers computes for each request alone.
"""

from __future__ import annotations

from torch import nn

from alcheck.models.attention import AttnBatch
from alcheck.models.target_api import CausalTarget


class HFTarget(CausalTarget, nn.Module):
    def __init__(self, causal_lm: nn.Module):
        super().__init__()
        self.model = causal_lm.model  # the decoder: embed_tokens, layers, norm, rotary_emb
        self.lm_head = causal_lm.lm_head
        self.config = causal_lm.config  # transformers' config: vocab_size, hidden_size, ...
        self.tp = None  # tensor parallelism runs the native Llama target only (models/targets.py)
        for attn in self.attention_layers:  # what bind_kv_cache reads, and where it binds the caches
            attn.num_kv_heads = self.config.num_key_value_heads
            attn.k_cache = attn.v_cache = None

    def forward(self, input_ids, batch: AttnBatch, aux_layers: tuple[int, ...] | None = None):
        """Hidden states after the final norm, [T, hidden]. With aux_layers (ascending ids, id i =
        the residual stream entering layer i; i = num_layers: the last layer's output, pre-norm):
        (hidden, aux [T, len(aux_layers) * hidden])."""
        x = self.model.embed_tokens(input_ids)[None]  # [1, T, H]
        rope = self.model.rotary_emb(x, batch.positions[None])  # (cos, sin), shared by every layer
        wanted, aux = aux_layers or (), []
        for i, layer in enumerate(self.model.layers):
            if i in wanted:  # EAGLE-3: the pre-norm residual stream entering layer i
                aux.append(x[0])
            out = layer(
                x, attention_mask=None, position_ids=None, position_embeddings=rope, alcheck_batch=batch
            )
            x = out[0] if isinstance(out, tuple) else out
        if len(self.model.layers) in wanted:  # MTP: the last layer's output, before the final norm
            aux.append(x[0])
        return self.with_aux(self.model.norm(x)[0], aux, aux_layers)
