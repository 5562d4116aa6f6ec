"""Tiny targets of other architectures in the exact HF on-disk format, saved by transformers itself.

`make_tiny_arch_target(out, arch)` writes config.json, model.safetensors, generation_config.json
and tokenizer files (the family's special tokens and a chat template of the same shape) for
`arch` in ARCHS: Qwen2 (q/k/v bias), Qwen3 (per-head q/k norm, explicit head_dim unlike
hidden_size / heads), Qwen3-MoE (routed experts; layer 0 dense) and Mistral (optionally a
sliding window). Biases and q/k norm weights are random, so a loader that drops one is caught.

EAGLE heads for them come from alcheck.testing.tiny (`make_tiny_eagle`, `make_tiny_eagle3`): with
`copy_target_layer=0` on a target whose later layers are damped (`damp_target_layers`) they
draft well but not perfectly, which is what the oracle tests need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from alcheck.testing.tiny import _SAMPLE_TEXT, train_tokenizer

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


@dataclass(frozen=True)
class Family:
    """A tokenizer family: special tokens, which of them are BOS / EOS / pad, the chat template."""

    special_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str
    chat_template: str


QWEN = Family(
    ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), None, "<|im_end|>", "<|endoftext|>", CHATML_TEMPLATE
)
MISTRAL = Family(("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), "<s>", "</s>", "<unk>", MISTRAL_TEMPLATE)


@dataclass(frozen=True)
class Arch:
    config_class: str
    model_class: str
    family: Family
    extra: dict = field(default_factory=dict)  # config fields beyond the shared shapes


ARCHS = {
    "qwen2": Arch("Qwen2Config", "Qwen2ForCausalLM", QWEN, {"rope_theta": 1e6}),
    # head_dim 24 with hidden 64 and 4 heads: not hidden_size / heads, as in Qwen3-0.6B
    "qwen3": Arch("Qwen3Config", "Qwen3ForCausalLM", QWEN, {"head_dim": 24, "rope_theta": 1e6}),
    "qwen3_moe": Arch(
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        QWEN,
        {
            "head_dim": 24,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 48,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [0],
        },
    ),
    "mistral": Arch("MistralConfig", "MistralForCausalLM", MISTRAL, {"sliding_window": None}),
}


def make_tiny_arch_target(
    out_dir: str | Path,
    arch: str,
    *,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 320,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    init_std: float = 0.5,
    unit_rms_embeddings: bool = True,
    **overrides,
) -> Path:
    """A random tiny `arch` target saved by transformers (the real format, by construction).
    overrides: config fields (e.g. sliding_window=24 for Mistral, use_sliding_window for Qwen)."""
    import transformers

    spec = ARCHS[arch]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fam = spec.family
    tok = train_tokenizer(
        [_SAMPLE_TEXT] * 4,
        vocab_size,
        out,
        special_tokens=fam.special_tokens,
        bos=fam.bos,
        eos=fam.eos,
        pad=fam.pad,
        chat_template=fam.chat_template,
    )
    eos = [tok.convert_tokens_to_ids(fam.eos), tok.convert_tokens_to_ids(fam.pad)]
    bos = tok.convert_tokens_to_ids(fam.bos) if fam.bos else None
    config = getattr(transformers, spec.config_class)(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        vocab_size=len(tok),
        max_position_embeddings=2048,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=bos,
        eos_token_id=eos,
        **{**spec.extra, **overrides},
    )
    config.initializer_range = init_std  # wide logits: no near-ties for greedy argmax in float32
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):  # transformers starts biases at zero: make them matter
                param.copy_(torch.randn(param.shape, generator=g) * init_std)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.copy_(0.5 + torch.rand(param.shape, generator=g))
        if unit_rms_embeddings:  # input_layernorm is then (almost) the identity on embeddings
            emb = model.model.embed_tokens.weight
            emb /= emb.pow(2).mean(-1, keepdim=True).sqrt()
    model.save_pretrained(str(out))
    transformers.GenerationConfig(bos_token_id=bos, eos_token_id=eos, do_sample=False).save_pretrained(
        str(out)
    )
    return out


def match_qk_norms(target_dir: str | Path, layer: int = 0) -> Path:
    """Set layer `layer`'s q/k norm weights to the typical per-head RMS of its q/k projections
    of the embeddings, so the norm rescales each head by about 1. A Llama-style EAGLE layer that
    copies this layer (it has no q/k norm) then attends almost as the target does."""
    import json

    from safetensors.torch import load_file, save_file

    file = Path(target_dir) / "model.safetensors"
    state = load_file(str(file))
    head_dim = json.loads((Path(target_dir) / "config.json").read_text())["head_dim"]
    emb = state["model.embed_tokens.weight"]
    for proj in ("q", "k"):
        prefix = f"model.layers.{layer}.self_attn."
        x = (emb @ state[f"{prefix}{proj}_proj.weight"].T).view(emb.shape[0], -1, head_dim)
        state[f"{prefix}{proj}_norm.weight"] = torch.full((head_dim,), float(x.pow(2).mean(-1).sqrt().mean()))
    save_file(state, str(file), metadata={"format": "pt"})
    return Path(target_dir)


def make_tiny_arch_pair(root: str | Path, arch: str, **target_overrides) -> dict[str, Path]:
    """A four-layer `arch` target whose layers 1..3 are damped (so it computes almost what its
    layer 0 computes), with an EAGLE-1 and an EAGLE-3 head that copy layer 0: partial acceptance.
    The EAGLE-3 head reads layers 1, 2, 3 and drafts from a reduced vocabulary (d2t)."""
    from alcheck.testing.tiny import damp_target_layers, make_tiny_eagle, make_tiny_eagle3

    root = Path(root)
    target = make_tiny_arch_target(root / "target", arch, **target_overrides)
    damp_target_layers(target, first=1, factor=0.05)
    if "q_norm" in arch_tensor_names(target):
        match_qk_norms(target)
    return {
        "target": target,
        "eagle": make_tiny_eagle(root / "eagle", target, copy_target_layer=0),
        "eagle3": make_tiny_eagle3(
            root / "eagle3", target, copy_target_layer=0, aux_layer_ids=(1, 2, 3), norm_before_residual=True
        ),
    }


def arch_tensor_names(target_dir: str | Path) -> str:
    """Every tensor name of a tiny target, space-separated (for quick membership tests)."""
    from safetensors import safe_open

    with safe_open(str(Path(target_dir) / "model.safetensors"), framework="pt") as f:
        return " ".join(f.keys())
