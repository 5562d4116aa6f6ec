"""A tiny HF Llama folder (alcheck/testing/tiny.py) written as a real GGUF file, the way llama.cpp's
convert_hf_to_gguf.py writes one: its hyperparameters under `llama.*`, its byte-level BPE tokenizer
and chat template under `tokenizer.*`, its tensors under llama.cpp's names with the Q/K rows
permuted (the permutation transformers' LlamaTensorProcessor undoes), through gguf's own writer.

    write_tiny_gguf(make_tiny_target(tmp / "hf"), tmp / "tiny.gguf", quant="Q8_0")
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

QUANT_TYPES = ("F32", "Q8_0")  # Q8_0: the 2-D weight matrices; norms stay F32, as llama.cpp keeps them
FILE_TYPES = {"F32": 0, "Q8_0": 7}  # llama.cpp's LlamaFileType: ALL_F32, MOSTLY_Q8_0
NORMAL, CONTROL = 1, 3  # gguf.TokenType


def permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row order for q_proj / k_proj (n_head: the KV heads for k): each head's rotary
    halves interleaved, as its RoPE kernel pairs neighbouring rows."""
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_gguf(
    hf_dir: str | Path, out_file: str | Path, *, quant: str = "F32", eot_token_id: int | None = None
) -> Path:
    """The Llama checkpoint in hf_dir as one GGUF file (quant: F32, or Q8_0 for the weight matrices;
    eot_token_id: an end-of-turn id beside EOS, as Llama-3 GGUFs carry)."""
    import gguf
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    if quant not in QUANT_TYPES:
        raise ValueError(f"quant {quant!r}: one of {', '.join(QUANT_TYPES)}")
    hf_dir, out_file = Path(hf_dir), Path(out_file)
    cfg = json.loads((hf_dir / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    rope_theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]

    writer = gguf.GGUFWriter(str(out_file), "llama")
    writer.add_name(hf_dir.name)
    writer.add_file_type(FILE_TYPES[quant])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(cfg["vocab_size"])
    _add_tokenizer(writer, hf_dir, AutoTokenizer.from_pretrained(str(hf_dir)))
    if eot_token_id is not None:
        writer.add_eot_token_id(eot_token_id)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg["num_hidden_layers"])
    state = load_file(str(hf_dir / "model.safetensors"))
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    for hf_name, weight in state.items():
        weight = weight.astype(np.float32)
        if hf_name.endswith("q_proj.weight"):
            weight = permute_qk(weight, heads)
        elif hf_name.endswith("k_proj.weight"):
            weight = permute_qk(weight, kv_heads)
        name = names.get_name(hf_name, try_suffixes=(".weight",))
        if quant == "Q8_0" and weight.ndim == 2:
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(weight, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, weight)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_file


def _add_tokenizer(writer, hf_dir: Path, tok):
    """A byte-level BPE as llama.cpp writes one: model "gpt2", tokens by id in the byte alphabet,
    special tokens as CONTROL, the merges as "a b" strings, the special ids and the chat template."""
    data = json.loads((hf_dir / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tok.get_vocab().items()}
    special = {t["id"] for t in data["added_tokens"] if t["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list([by_id[i] for i in range(len(by_id))])
    writer.add_token_types([CONTROL if i in special else NORMAL for i in range(len(by_id))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]])
    writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    writer.add_pad_token_id(tok.pad_token_id)
    writer.add_add_bos_token(False)  # the chat template writes BOS itself, as the HF tokenizer expects
    writer.add_chat_template(tok.chat_template)
