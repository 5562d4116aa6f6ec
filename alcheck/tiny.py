"""Tiny checkpoints in the exact on-disk format of real ones, for tests, benchmarks and the demo.

Target: an HF Llama directory (config.json, model.safetensors, generation_config.json, tokenizer
files with a Llama-3 style chat template). EAGLE-1 head: config.json + pytorch_model.bin with
the tensor names of yuhuili/EAGLE-LLaMA3.1-Instruct-8B.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

# Llama-3 instruct layout, with our own special-token names kept identical to Meta's.
BOS, EOT, START_HEADER, END_HEADER, END_TEXT = (
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|end_of_text|>",
)
SPECIAL_TOKENS = [BOS, END_TEXT, START_HEADER, END_HEADER, EOT]
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_SAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding lets a small draft model "
    "propose tokens that a large target model verifies in one pass. Acceptance length counts the "
    "tokens emitted per verification step. Write a short poem about the sea and the sky. "
    "Explain how a paged key value cache stores blocks of slots for every request. "
    "What is the capital of France? Paris is the capital, and it is known for art and food. "
)


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: str | Path):
    """Train a byte-level BPE tokenizer and save it as an HF fast tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOT, pad_token=END_TEXT
    )
    fast.chat_template = LLAMA3_CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def make_tiny_target(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 320,
    rope_scaling: dict | None = None,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    init_std: float = 0.5,
    weights_format: str = "safetensors",
    max_shard_size: str | None = None,
    unit_rms_embeddings: bool = False,
) -> Path:
    """Random tiny Llama target saved by transformers itself (the real format, by construction).

    A large init_std spreads the logits so greedy argmax has no near-ties in float32.
    weights_format "bin" stores pytorch_model.bin instead of model.safetensors.
    unit_rms_embeddings scales embedding rows to RMS 1, so input_layernorm is (almost) the
    identity on them: a head copying layer 0 then drafts well (see make_tiny_eagle).
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer([_SAMPLE_TEXT] * 4, vocab_size, out)
    kwargs = dict(rope_scaling=rope_scaling) if rope_scaling else {}
    config = LlamaConfig(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        vocab_size=len(tok),
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tok.convert_tokens_to_ids(BOS),
        eos_token_id=[tok.convert_tokens_to_ids(EOT), tok.convert_tokens_to_ids(END_TEXT)],
        **kwargs,
    )
    torch.manual_seed(seed)
    config.initializer_range = init_std
    model = LlamaForCausalLM(config)
    if unit_rms_embeddings:
        with torch.no_grad():
            emb = model.model.embed_tokens.weight
            emb /= emb.pow(2).mean(-1, keepdim=True).sqrt()
    save_kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(out), **save_kwargs)
    if weights_format == "bin":  # transformers 5 writes only safetensors; older hub checkpoints are .bin
        from safetensors.torch import load_file

        single = out / "model.safetensors"
        if not single.is_file():
            raise ValueError("weights_format='bin' supports unsharded checkpoints only")
        torch.save(load_file(str(single)), out / "pytorch_model.bin")
        single.unlink()
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, do_sample=False
    ).save_pretrained(str(out))
    return out


def eagle_config_from_target(target_config: dict, *, bias: bool = False) -> dict:
    """The head's config.json: LlamaForCausalLM-style, one layer, the target's shapes."""
    keys = [
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "vocab_size", "rms_norm_eps", "max_position_embeddings", "bos_token_id", "eos_token_id",
    ]
    cfg = {k: target_config[k] for k in keys if k in target_config}
    rope = target_config.get("rope_parameters") or {}
    cfg.update(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        num_hidden_layers=1,
        hidden_act="silu",
        rope_theta=target_config.get("rope_theta", rope.get("rope_theta", 10000.0)),
        bias=bias,
        torch_dtype="float32",
    )
    return cfg


def save_eagle_head(out_dir: str | Path, config: dict, state: dict[str, torch.Tensor]) -> Path:
    """Write an EAGLE-1 head as the official checkpoints are: config.json + pytorch_model.bin."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    torch.save({k: v.contiguous() for k, v in state.items()}, out / "pytorch_model.bin")
    return out


def _scaled_randn(g: torch.Generator, std: float, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g) * std / max(1.0, shape[-1] ** 0.5) * 4


def random_eagle_state(cfg: dict, embed_weight: torch.Tensor, g: torch.Generator, std: float = 0.5) -> dict:
    """Random EAGLE-1 tensors with the official names (the 'untrained head' baseline)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    q = cfg["num_attention_heads"] * (cfg.get("head_dim") or h // cfg["num_attention_heads"])
    kv = cfg["num_key_value_heads"] * (cfg.get("head_dim") or h // cfg["num_attention_heads"])
    shapes = {
        "fc.weight": (h, 2 * h),
        "layers.0.self_attn.q_proj.weight": (q, h),
        "layers.0.self_attn.k_proj.weight": (kv, h),
        "layers.0.self_attn.v_proj.weight": (kv, h),
        "layers.0.self_attn.o_proj.weight": (h, q),
        "layers.0.mlp.gate_proj.weight": (inter, h),
        "layers.0.mlp.up_proj.weight": (inter, h),
        "layers.0.mlp.down_proj.weight": (h, inter),
    }
    state = {"embed_tokens.weight": embed_weight.clone()}
    state.update({name: _scaled_randn(g, std, *shape) for name, shape in shapes.items()})
    state["layers.0.post_attention_layernorm.weight"] = torch.ones(h)
    return state


def make_tiny_eagle(
    out_dir: str | Path,
    target_dir: str | Path,
    *,
    seed: int = 1,
    std: float = 0.5,
    bias: bool = False,
    copy_target_layer: int | None = None,
    noise: float = 0.0,
) -> Path:
    """A random EAGLE-1 head for the target in target_dir.

    copy_target_layer=i makes the head's decoder layer a copy of the target's layer i and its fc
    pass the token embedding through (fc = [I | 0]). For a one-layer target with unit-RMS
    embeddings the head then computes nearly what the target computes one position later (it
    only misses token 0), so acceptance is high; `noise` perturbs it towards partial acceptance.
    """
    from safetensors.torch import load_file

    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    cfg = eagle_config_from_target(target_config, bias=bias)
    target_state = {}
    for f in sorted(Path(target_dir).glob("*.safetensors")):
        target_state.update(load_file(str(f)))
    g = torch.Generator().manual_seed(seed)
    state = random_eagle_state(cfg, target_state["model.embed_tokens.weight"], g, std)
    h = cfg["hidden_size"]
    if bias:
        state["fc.bias"] = _scaled_randn(g, std, h)
    if copy_target_layer is not None:
        prefix = f"model.layers.{copy_target_layer}."
        for name in list(state):
            if name.startswith("layers.0."):
                state[name] = target_state[prefix + name[len("layers.0."):]].clone()
        state["fc.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)
        if noise:
            for name in list(state):
                if name != "embed_tokens.weight":
                    state[name] = state[name] + noise * torch.randn(state[name].shape, generator=g)
    return save_eagle_head(out_dir, cfg, state)
