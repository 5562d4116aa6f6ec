"""The Llama-family target: returns final-norm hidden states (EAGLE-1's feature) and logits, and on
request the pre-norm states entering chosen layers (EAGLE-3's auxiliary features)."""

from __future__ import annotations

from torch import nn

from alcheck.models.attention import AttnBatch
from alcheck.models.config import ModelConfig
from alcheck.models.layers import DecoderLayer, RMSNorm, Rotary
from alcheck.models.target_api import CausalTarget


class LlamaBackbone(nn.Module):
    def __init__(self, cfg: ModelConfig, tp=None):
        super().__init__()
        rotary = Rotary(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        if tp is None:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        else:
            from alcheck.tp.linear import VocabParallelEmbedding

            self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, tp)
        self.layers = nn.ModuleList(DecoderLayer(cfg, rotary, tp=tp) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids, batch: AttnBatch, aux_layers: tuple[int, ...] = ()):
        x = self.embed_tokens(input_ids)
        aux = []
        for i, layer in enumerate(self.layers):
            if i in aux_layers:  # EAGLE-3: the pre-norm residual stream entering layer i
                aux.append(x)
            x = layer(x, batch)
        return self.norm(x), aux


class LlamaTarget(CausalTarget, nn.Module):
    """Parameter names match transformers' LlamaForCausalLM, so HF state dicts load directly.

    With tp (alcheck.tp.group.TPGroup) the module is one rank's shard: Megatron-split layers and a
    vocab-parallel embedding and lm_head, so embed() and compute_logits() are collectives that
    every rank calls in lockstep; compute_logits() returns the full, gathered logits."""

    def __init__(self, cfg: ModelConfig, tp=None):
        super().__init__()
        self.config, self.tp = cfg, tp
        self.model = LlamaBackbone(cfg, tp)
        if tp is None:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        else:
            from alcheck.tp.linear import VocabParallelHead

            self.lm_head = VocabParallelHead(cfg.hidden_size, cfg.vocab_size, tp)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, batch: AttnBatch, aux_layers: tuple[int, ...] | None = None):
        """Hidden states after the final RMSNorm, [T, hidden]. With aux_layers (ascending ids, id i =
        the residual stream entering layer i): (hidden, aux [T, len(aux_layers) * hidden]), keeping
        only those layers' states (EAGLE-3's features)."""
        hidden, aux = self.model(input_ids, batch, aux_layers or ())
        return self.with_aux(hidden, aux, aux_layers)
