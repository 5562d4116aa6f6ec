"""Tiny checkpoints in the exact on-disk format of real ones, for tests, benchmarks and the demo.

Target: an HF Llama directory (config.json, model.safetensors, generation_config.json, tokenizer
files with a Llama-3 style chat template). EAGLE-1 head: config.json + pytorch_model.bin with
the tensor names of yuhuili/EAGLE-LLaMA3.1-Instruct-8B.
"""

from __future__ import annotations

import json
import math
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
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_SAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding lets a small draft model "
    "propose tokens that a large target model verifies in one pass. Acceptance length counts the "
    "tokens emitted per verification step. Write a short poem about the sea and the sky. "
    "Explain how a paged key value cache stores blocks of slots for every request. "
    "What is the capital of France? Paris is the capital, and it is known for art and food. "
)


def train_tokenizer(
    texts: list[str],
    vocab_size: int,
    out_dir: str | Path,
    *,
    special_tokens=SPECIAL_TOKENS,
    bos: str | None = BOS,
    eos: str = EOT,
    pad: str = END_TEXT,
    chat_template: str = LLAMA3_CHAT_TEMPLATE,
):
    """Train a byte-level BPE tokenizer and save it as an HF fast tokenizer with a chat template
    (Llama-3's special tokens by default; alcheck/testing/tiny_arch.py passes other families')."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad)
    fast.chat_template = chat_template
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
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "rms_norm_eps",
        "max_position_embeddings",
        "bos_token_id",
        "eos_token_id",
    ]
    cfg = {k: target_config[k] for k in keys if target_config.get(k) is not None}
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
    (out / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False))
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
    qkv_bias: bool | None = None,
) -> Path:
    """A random EAGLE-1 head for the target in target_dir.

    qkv_bias (default: whether the target's q_proj has a bias, as Qwen2's does) adds q/k/v biases
    and the EAGLE repo's `"qkv_bias": true` to the head's config.

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
    if qkv_bias is None:
        qkv_bias = "model.layers.0.self_attn.q_proj.bias" in target_state
    if qkv_bias:
        cfg["qkv_bias"] = True
        for proj in ("q_proj", "k_proj", "v_proj"):
            rows = state[f"layers.0.self_attn.{proj}.weight"].shape[0]
            state[f"layers.0.self_attn.{proj}.bias"] = _scaled_randn(g, std, rows)
    if copy_target_layer is not None:
        prefix = f"model.layers.{copy_target_layer}."
        for name in list(state):
            if name.startswith("layers.0."):
                state[name] = target_state[prefix + name[len("layers.0.") :]].clone()
        state["fc.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)
        if noise:
            for name in list(state):
                if name != "embed_tokens.weight":
                    state[name] = state[name] + noise * torch.randn(state[name].shape, generator=g)
    return save_eagle_head(out_dir, cfg, state)


# -- EAGLE-3 heads (EAGLE3-NOTES section 1) -----------------------------------------------------

EAGLE3_LAYER_TENSORS = [
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "hidden_norm.weight",
    "post_attention_layernorm.weight",
]


def eagle3_config_from_target(
    target_config: dict,
    *,
    draft_vocab_size: int,
    aux_layer_ids=None,
    aux_key: str = "top",
    norm_before_residual: bool = False,
    **layer,
) -> dict:
    """An EAGLE-repo-format EAGLE-3 config.json for a target: one layer, the target's width,
    vocab_size = the target's vocabulary, draft_vocab_size = the head's. `layer` overrides the
    layer shape (num_attention_heads, num_key_value_heads, intermediate_size, rope_theta).
    aux_layer_ids are in alcheck's convention (input of layer i); aux_key "top" writes them as
    `eagle_aux_hidden_state_layer_ids`, "eagle_config" as SpecForge does (output of layer i, -1)."""
    keys = [
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "rms_norm_eps",
        "max_position_embeddings",
        "bos_token_id",
        "eos_token_id",
    ]
    cfg = {k: target_config[k] for k in keys if target_config.get(k) is not None}
    cfg.update(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        num_hidden_layers=1,
        hidden_act="silu",
        draft_vocab_size=draft_vocab_size,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    cfg.update(layer)
    if norm_before_residual:
        cfg["norm_before_residual"] = True
    if aux_layer_ids is not None and aux_key == "top":
        cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_layer_ids)
    elif aux_layer_ids is not None:
        cfg["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": [i - 1 for i in aux_layer_ids],
            "use_aux_hidden_state": True,
        }
    return cfg


def eagle3_vocab_tensors(draft_ids: list[int], vocab_size: int) -> dict[str, torch.Tensor]:
    """d2t (offsets: target id = draft id + d2t[draft id]) and t2d for ascending target ids."""
    ids = torch.tensor(sorted(draft_ids))
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return {"d2t": ids - torch.arange(len(ids)), "t2d": t2d}


def random_eagle3_state(cfg: dict, g: torch.Generator, std: float = 0.5) -> dict[str, torch.Tensor]:
    """Random EAGLE-3 tensors in the EAGLE repo's names (midlayer.*), without d2t/t2d."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {
        "fc.weight": (h, 3 * cfg.get("target_hidden_size", h)),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (inter, h),
        "midlayer.mlp.up_proj.weight": (inter, h),
        "midlayer.mlp.down_proj.weight": (h, inter),
        "lm_head.weight": (cfg["draft_vocab_size"], h),
    }
    state = {name: _scaled_randn(g, std, *shape) for name, shape in shapes.items()}
    for name in (
        "midlayer.input_layernorm.weight",
        "midlayer.hidden_norm.weight",
        "midlayer.post_attention_layernorm.weight",
        "norm.weight",
    ):
        state[name] = 0.5 + torch.rand(h, generator=g)
    return state


def eagle3_to_speculators(
    config: dict, state: dict[str, torch.Tensor], embed_weight: torch.Tensor | None = None
):
    """The same head in the speculators format: (config, tensors), laid out as speculators 0.9.0's
    converter writes it (tests/data/speculators-0.9.0 holds its real output; a test compares the
    keys): the draft layer's config, written by transformers' LlamaConfig, under
    transformer_layer_config; `auto_map` naming speculators' config class; midlayer.* renamed
    layers.0.*. Eagle3DraftModel also saves a frozen copy of the target's embedding, passed as
    embed_weight."""
    import transformers
    from transformers import LlamaConfig

    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
    layer = LlamaConfig(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_hidden_layers=1,
        num_attention_heads=config["num_attention_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        hidden_act=config.get("hidden_act", "silu"),
        max_position_embeddings=config.get("max_position_embeddings", 4096),
        rms_norm_eps=config.get("rms_norm_eps", 1e-6),
        head_dim=config.get("head_dim"),
        tie_word_embeddings=False,
        rope_theta=config.get("rope_theta", 10000.0),
        dtype=dtype,
    ).to_json_string(use_diff=True)
    layer = json.loads(layer)
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and "eagle_config" in config:
        ids = [i + 1 for i in config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]
    spec = {
        "architectures": ["Eagle3Speculator"],
        "auto_map": {"": "config.Eagle3SpeculatorConfig"},
        "draft_vocab_size": config["draft_vocab_size"],
        "dtype": dtype,
        "eagle_aux_hidden_state_layer_ids": ids,
        "embed_requires_grad": False,
        "fc_norm": False,
        "norm_before_fc": False,
        "norm_before_residual": bool(config.get("norm_before_residual", False)),
        "norm_output": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "accept_tolerance": 0.0,
                    "proposal_type": "greedy",
                    "speculative_tokens": 3,
                    "verifier_accept_k": 1,
                }
            ],
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "alcheck-tiny-target"},
        },
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "target_hidden_size": None,
        "tie_word_embeddings": False,
        "transformer_layer_config": layer,
        "transformers_version": transformers.__version__,
    }
    tensors = {
        ("layers.0." + k[len("midlayer.") :] if k.startswith("midlayer.") else k): v for k, v in state.items()
    }
    if embed_weight is not None:
        tensors["embed_tokens.weight"] = embed_weight.clone()
    return spec, tensors


def save_eagle3_head(
    out_dir: str | Path,
    config: dict,
    state: dict[str, torch.Tensor],
    fmt: str = "eagle-repo",
    embed_weight: torch.Tensor | None = None,
) -> Path:
    """fmt "eagle-repo": config.json + pytorch_model.bin with the EAGLE repo's names (yuhuili/EAGLE3-*);
    fmt "speculators": config.json + model.safetensors as `speculators convert` writes them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "speculators":
        from safetensors.torch import save_file

        config, state = eagle3_to_speculators(config, state, embed_weight)
        save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"))
    elif fmt == "eagle-repo":
        torch.save({k: v.contiguous() for k, v in state.items()}, out / "pytorch_model.bin")
    else:
        raise ValueError(f"unknown EAGLE-3 format {fmt!r}")
    (out / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False))
    return out


NAN_MARK = 1.2345678901234567e-300  # a float copy_with_config writes as the JSON token NaN


def copy_with_config(src: str | Path, dst: str | Path, edits: dict | None = None) -> Path:
    """A copy of a checkpoint folder with config.json keys set (a value of None removes the key).
    A bad-input fixture may need NaN, which strict JSON cannot hold: pass NAN_MARK for it."""
    import shutil

    dst = Path(shutil.copytree(src, dst))
    if edits:
        raw = json.loads((dst / "config.json").read_text())
        for key, value in edits.items():
            if value is None:
                raw.pop(key, None)
            else:
                raw[key] = value
        text = json.dumps(raw, allow_nan=False)
        (dst / "config.json").write_text(text.replace(repr(NAN_MARK), "NaN"))
    return dst


def damp_target_layers(target_dir: str | Path, first: int, factor: float) -> Path:
    """Scale the residual writes (o_proj, down_proj) of layers >= first in a saved target, so the
    target computes almost what its first layers compute (make_tiny_eagle3's copy head drafts well)."""
    from safetensors.torch import load_file, save_file

    file = Path(target_dir) / "model.safetensors"
    state = load_file(str(file))
    for name in state:
        parts = name.split(".")
        if (
            len(parts) > 3
            and parts[1] == "layers"
            and int(parts[2]) >= first
            and parts[-2] in ("o_proj", "down_proj")
        ):
            state[name] = state[name] * factor
    save_file(state, str(file), metadata={"format": "pt"})
    return Path(target_dir)


def make_tiny_eagle3(
    out_dir: str | Path,
    target_dir: str | Path,
    *,
    fmt: str = "eagle-repo",
    seed: int = 1,
    aux_layer_ids=(1, 2, 3),
    aux_key: str = "top",
    drop_every: int = 7,
    copy_target_layer: int | None = None,
    norm_before_residual: bool = False,
    hidden_weight: float = 0.05,
    fc_std: float = 1.0,
    std: float = 0.5,
) -> Path:
    """An EAGLE-3 head for the target in target_dir, in format fmt ("eagle-repo" or "speculators").

    Its draft vocabulary drops every drop_every-th target id (id % drop_every == 3), so d2t is not
    the identity. With copy_target_layer=i the head's layer copies the target's layer i on the
    embedding half of its 2H-wide input (a small random part, hidden_weight, reads hidden_norm(g)),
    and its lm_head is the target's restricted to the draft vocabulary (with a random final-norm
    weight folded out). On a target whose later layers are damped (damp_target_layers) it then
    computes nearly what the target computes one position later: partial acceptance.
    Otherwise all weights are random (std).
    """
    from safetensors.torch import load_file

    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    target_state = {}
    for f in sorted(Path(target_dir).glob("*.safetensors")):
        target_state.update(load_file(str(f)))
    vocab, h = target_config["vocab_size"], target_config["hidden_size"]
    keep = [i for i in range(vocab) if drop_every < 2 or i % drop_every != 3]
    cfg = eagle3_config_from_target(
        target_config,
        draft_vocab_size=len(keep),
        aux_layer_ids=aux_layer_ids,
        aux_key=aux_key,
        norm_before_residual=norm_before_residual,
    )
    g = torch.Generator().manual_seed(seed)
    state = random_eagle3_state(cfg, g, std)
    if copy_target_layer is not None:
        prefix = f"model.layers.{copy_target_layer}."
        for name in EAGLE3_LAYER_TENSORS:
            ours = "midlayer." + name
            if name == "hidden_norm.weight":
                state[ours] = torch.full((h,), hidden_weight)
            elif name.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                w = target_state[prefix + name]
                state[ours] = torch.cat([w, torch.randn(w.shape, generator=g) * w.std()], dim=1)
            else:
                state[ours] = target_state[prefix + name].clone()
        norm = 0.5 + torch.rand(h, generator=g)
        lm_head = target_state.get("lm_head.weight", target_state["model.embed_tokens.weight"])
        state["norm.weight"] = norm * target_state["model.norm.weight"]
        state["lm_head.weight"] = lm_head[keep] / norm
        state["fc.weight"] = state["fc.weight"] * fc_std
    state.update(eagle3_vocab_tensors(keep, vocab))
    return save_eagle3_head(out_dir, cfg, state, fmt, embed_weight=target_state["model.embed_tokens.weight"])


# Llama-3.1-8B-Instruct's config.json shapes (the bench and the memory tests shrink the layer count)
LLAMA31_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


def llama_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """HF LlamaForCausalLM tensor names and shapes, in the order save_pretrained writes them."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )
    shapes["model.norm.weight"] = (h,)
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    return shapes


def make_sharded_llama(
    out_dir: str | Path,
    config: dict,
    *,
    num_shards: int = 3,
    dtype=torch.bfloat16,
    seed: int = 0,
    std: float = 0.02,
) -> Path:
    """A random Llama checkpoint in `num_shards` safetensors shards plus model.safetensors.index.json,
    written shard by shard without building a model, so real-sized shapes (the 8B vocabulary and
    hidden size) cost one shard of memory. Norm weights are 1, everything else N(0, std)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shapes = llama_tensor_shapes(config)
    sizes = {name: math.prod(shape) * dtype.itemsize for name, shape in shapes.items()}
    per_shard, groups, current = sum(sizes.values()) / num_shards, [], []
    for name in shapes:  # consecutive runs of about total / num_shards bytes, as HF splits them
        if (
            current
            and len(groups) < num_shards - 1
            and sum(sizes[n] for n in current) + sizes[name] > per_shard
        ):
            groups.append(current)
            current = []
        current.append(name)
    groups.append(current)
    g = torch.Generator().manual_seed(seed)
    weight_map = {}
    for i, names in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        state = {}
        for name in names:
            tensor = torch.empty(shapes[name], dtype=dtype)
            state[name] = (
                tensor.fill_(1.0) if name.endswith("norm.weight") else tensor.normal_(0.0, std, generator=g)
            )
        save_file(state, str(out / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, file))
        del state
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, allow_nan=False))
    (out / "config.json").write_text(
        json.dumps({**config, "torch_dtype": str(dtype).removeprefix("torch.")}, indent=2, allow_nan=False)
    )
    return out
