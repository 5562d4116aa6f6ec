"""Bad input for targets beyond Llama: one-line errors (exit 2) before any weight is read.

- an architecture alcheck cannot run exactly (local/global mixes) or at all: names it and the
  supported list; custom code (auto_map) is never run;
- a config that contradicts its weights (a projection bias absent or present, a q/k norm
  missing, an expert count or size off): names config.json and the weights file;
- tensor parallelism with a transformers-run target: refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from arch_pairs import arch_pair  # noqa: F401 - fixture
from conftest import expect_error
from safetensors.torch import load_file, save_file

SUPPORTED = "supported architectures are llama (alcheck's own model) and qwen2, qwen3, qwen3_moe, mistral"


def _copy(arch_pair, arch, tmp_path) -> Path:  # noqa: F811
    out = tmp_path / arch
    shutil.copytree(arch_pair(arch)["target"], out)
    return out


def _edit_config(directory: Path, **fields):
    file = directory / "config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **fields}))


def _drop_tensors(directory: Path, needle: str):
    file = directory / "model.safetensors"
    state = load_file(str(file))
    save_file({k: v for k, v in state.items() if needle not in k}, str(file), metadata={"format": "pt"})


def _load(directory):
    from alcheck.models.loading import load_target

    return lambda: load_target(str(directory))


@pytest.mark.parametrize(
    "model_type, arch, needle",
    [
        ("gemma2", "Gemma2ForCausalLM", "sliding-window and global attention"),
        ("gpt_oss", "GptOssForCausalLM", "attention sinks"),
        ("gpt2", "GPT2LMHeadModel", "does not run"),
    ],
)
def test_unsupported_architecture(arch_pair, tmp_path, model_type, arch, needle):  # noqa: F811
    out = _copy(arch_pair, "mistral", tmp_path)
    _edit_config(out, model_type=model_type, architectures=[arch])
    expect_error(_load(out), out / "config.json", repr(model_type), needle, SUPPORTED)


def test_custom_code_is_never_run(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen3", tmp_path)
    _edit_config(out, auto_map={"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})
    (out / "modeling_evil.py").write_text("raise SystemExit('ran custom code')\n")
    expect_error(_load(out), out / "config.json", "auto_map")


def test_qwen2_weights_without_bias(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen2", tmp_path)
    _drop_tensors(out, ".bias")
    expect_error(_load(out), out / "config.json", out / "model.safetensors", "bias", "lacks")


def test_config_claims_a_bias_the_weights_lack(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen3", tmp_path)
    _edit_config(out, attention_bias=True)
    expect_error(
        _load(out), out / "config.json", out / "model.safetensors", "attention_bias=True", "proj.bias"
    )


def test_qwen2_config_on_qwen3_weights(arch_pair, tmp_path):  # noqa: F811
    """The q/k/v bias Qwen2 implies is missing (and the q/k norms are extra)."""
    out = _copy(arch_pair, "qwen3", tmp_path)
    _edit_config(out, model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    expect_error(_load(out), out / "config.json", out / "model.safetensors", "bias")


def test_qwen3_weights_without_qk_norm(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen3", tmp_path)
    _drop_tensors(out, "q_norm")
    expect_error(_load(out), out / "config.json", out / "model.safetensors", "q_norm", "lacks")


@pytest.mark.parametrize("experts, needle", [(8, "lacks"), (2, "holds")])
def test_expert_count_off(arch_pair, tmp_path, experts, needle):  # noqa: F811
    out = _copy(arch_pair, "qwen3_moe", tmp_path)
    _edit_config(out, num_experts=experts, num_local_experts=experts, num_experts_per_tok=2)
    expect_error(_load(out), out / "config.json", out / "model.safetensors", f"num_experts={experts}", needle)


def test_expert_size_off(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen3_moe", tmp_path)
    _edit_config(out, moe_intermediate_size=40)
    expect_error(_load(out), out / "config.json", out / "model.safetensors", "experts.0", "says (64, 40)")


def test_unusable_config_value(arch_pair, tmp_path):  # noqa: F811
    out = _copy(arch_pair, "qwen3", tmp_path)
    _edit_config(out, num_attention_heads="four")
    expect_error(_load(out), out / "config.json", "qwen3")


def test_tensor_parallel_rank_refuses(arch_pair):  # noqa: F811
    from alcheck.models.loading import load_target

    directory = arch_pair("qwen3")["target"]
    expect_error(
        lambda: load_target(str(directory), tp=SimpleNamespace(size=2)),
        "--tensor-parallel-size",
        "'qwen3'",
        "Llama targets only",
    )


def test_attention_it_does_not_compute_is_never_ignored():
    """Soft-capping or attention sinks would change what attention computes: refused, not dropped."""
    import torch

    from alcheck.models.hf_attention import paged_attention_forward

    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(RuntimeError, match="softcap"):
        paged_attention_forward(SimpleNamespace(), q, q, q, None, alcheck_batch=object(), softcap=30.0)
