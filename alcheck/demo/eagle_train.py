"""A trainable EAGLE-1 head whose forward pass is exactly the runtime's (EAGLE-NOTES section 2).

At draft position p the input is token x_{p+1} and the target's feature h_p (last layer, after
the final RMSNorm). x = fc(cat(embed(x_{p+1}), h_p)); x = x + attn(x) (no input_layernorm,
causal, plain RoPE at position p, GQA); x = x + mlp(post_attention_layernorm(x)); no final norm;
logits = target lm_head(x). x is also the feature for the next chained draft step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from alcheck.testing.tiny import random_eagle_state

EAGLE_TENSORS = {
    "fc.weight": "fc.weight",
    "layers.0.self_attn.q_proj.weight": "q_proj.weight",
    "layers.0.self_attn.k_proj.weight": "k_proj.weight",
    "layers.0.self_attn.v_proj.weight": "v_proj.weight",
    "layers.0.self_attn.o_proj.weight": "o_proj.weight",
    "layers.0.mlp.gate_proj.weight": "gate_proj.weight",
    "layers.0.mlp.up_proj.weight": "up_proj.weight",
    "layers.0.mlp.down_proj.weight": "down_proj.weight",
    "layers.0.post_attention_layernorm.weight": "post_attention_layernorm",
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class EagleHead(nn.Module):
    def __init__(self, cfg: dict, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor):
        super().__init__()
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.n_heads, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or h // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.register_buffer("embed", embed_weight.detach().float().clone(), persistent=False)
        self.register_buffer("lm_head", lm_head_weight.detach().float().clone(), persistent=False)
        inv_freq = 1.0 / (
            cfg["rope_theta"] ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))

    # -- checkpoint ------------------------------------------------------------------------
    def eagle_state_dict(self, dtype=torch.float16) -> dict[str, torch.Tensor]:
        own = dict(self.named_parameters())
        state = {"embed_tokens.weight": self.embed.to(dtype).clone()}
        for name, attr in EAGLE_TENSORS.items():
            state[name] = own[attr].detach().to(dtype).clone()
        return state

    def load_eagle_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        own = dict(self.named_parameters())
        with torch.no_grad():
            for name, attr in EAGLE_TENSORS.items():
                own[attr].copy_(state[name].float())

    # -- pieces ----------------------------------------------------------------------------
    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x: (..., T, head_dim), pos: (T,) or broadcastable (..., T)
        freqs = pos.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos() + rotate_half(x) * emb.sin()

    def _inp(self, tokens: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat((F.embedding(tokens, self.embed), feats), dim=-1))

    def _qkv(self, x: torch.Tensor, pos: torch.Tensor):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        return self._rope(q, pos), self._rope(k, pos), v

    def _rep(self, kv: torch.Tensor) -> torch.Tensor:
        return kv.repeat_interleave(self.n_heads // self.n_kv, dim=1)

    def _finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = attn.shape
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps) * self.post_attention_layernorm
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.lm_head.T

    # -- full causal pass (training, and draft step 0 over committed tokens) ---------------
    def forward(self, tokens_next: torch.Tensor, feats: torch.Tensor, return_kv: bool = False):
        """tokens_next[:, p] = x_{p+1}, feats[:, p] = h_p; returns the draft outputs at each p."""
        t = tokens_next.shape[1]
        pos = torch.arange(t, device=tokens_next.device)
        x = self._inp(tokens_next, feats)
        q, k, v = self._qkv(x, pos)
        attn = F.scaled_dot_product_attention(q, self._rep(k), self._rep(v), is_causal=True)
        out = self._finish(x, attn)
        return (out, k, v) if return_kv else out

    # -- chained drafting from every prefix at once (evaluation) ---------------------------
    @torch.no_grad()
    def chain_all(self, seq: torch.Tensor, feats: torch.Tensor, starts: torch.Tensor, k: int):
        """Chain drafts of length k for every committed prefix.

        seq: (L,) token ids; feats: (L, H) target features; starts: (n,) values c such that tokens
        seq[:c+1] are committed and target features exist for positions < c. Returns (n, k) drafts.
        """
        out, ks, vs = self.forward(seq[None, 1:], feats[None, :-1], return_kv=True)
        out, ks, vs = out[0], ks[0], vs[0]  # (L-1, H), (kv, L-1, hd)
        scale = 1.0 / math.sqrt(self.head_dim)
        prev = out[starts - 1]  # draft output at position c-1 -> d_1
        drafts = [self.logits(prev).argmax(-1)]
        key_pos = torch.arange(ks.shape[1])
        std_mask = key_pos[None, :] < starts[:, None]  # (n, L-1)
        ck, cv = [], []
        for j in range(1, k):
            pos = (starts + j - 1)[:, None]  # (n, 1)
            x = self._inp(drafts[-1][:, None], prev[:, None])  # (n, 1, H)
            q, kk, vv = self._qkv(x, pos[:, None, :])  # q (n, nh, 1, hd), kk (n, kv, 1, hd)
            ck.append(kk)
            cv.append(vv)
            kc, vc = self._rep(torch.cat(ck, 2)), self._rep(torch.cat(cv, 2))  # (n, nh, j, hd)
            s_std = torch.einsum("nhqd,hkd->nhqk", q, self._rep(ks[None])[0]) * scale
            s_std = s_std.masked_fill(~std_mask[:, None, None, :], float("-inf"))
            s_ch = torch.einsum("nhqd,nhkd->nhqk", q, kc) * scale
            p = torch.softmax(torch.cat((s_std, s_ch), -1), -1)
            l_std = ks.shape[1]
            attn = torch.einsum("nhqk,hkd->nhqd", p[..., :l_std], self._rep(vs[None])[0])
            attn = attn + torch.einsum("nhqk,nhkd->nhqd", p[..., l_std:], vc)
            prev = self._finish(x, attn)[:, 0]
            drafts.append(self.logits(prev).argmax(-1))
        return torch.stack(drafts, 1)


def random_head_state(cfg: dict, embed_weight: torch.Tensor, seed: int = 1, std: float = 0.5):
    """Random weights as alcheck.testing.tiny.make_tiny_eagle draws them (the 'untrained head' baseline)."""
    return random_eagle_state(cfg, embed_weight, torch.Generator().manual_seed(seed), std)
