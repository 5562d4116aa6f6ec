"""oneDNN linears on the CPU (models/cpu_linear.py): what packing promises, and the runner's oracles
with packed weights (alcheck run packs them in methods/pair.py; the fixtures' models do not)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import MAX_TOKENS, run_spec
from torch import nn
from torch.nn import functional as F

from alcheck.models import cpu_linear
from alcheck.models.cpu_linear import PackedLinear, pack_linears

needs_onednn = pytest.mark.skipif(not cpu_linear.available(), reason="this torch build has no oneDNN linear")


def linear(n_in=64, n_out=96, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, bias=bias)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_packed_output_is_the_linear_s_and_the_same_for_a_row_alone_or_in_a_batch(bias):
    plain = linear(bias=bias)
    packed = copy.deepcopy(plain)
    assert pack_linears(packed) == 1 and type(packed) is PackedLinear
    x = torch.randn(37, 64)
    with torch.inference_mode():
        full = packed(x)
        torch.testing.assert_close(full, plain(x), rtol=1e-5, atol=1e-5)
        for rows in (slice(0, 1), slice(3, 7), slice(10, 26), slice(0, 37)):
            assert torch.equal(packed(x[rows]), full[rows])  # row-invariant, bit for bit


@needs_onednn
def test_grad_a_rewritten_weight_or_another_dtype_take_f_linear():
    layer = linear()
    pack_linears(layer)
    x = torch.randn(5, 64)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))  # autograd on: plain math
    with torch.no_grad():
        layer.weight.mul_(2)  # written after packing: the packed copy is stale
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert set(layer.state_dict()) == {"weight", "bias"}


@needs_onednn
@pytest.mark.parametrize("how", ["new Parameter", "new storage"])
def test_a_weight_replaced_after_packing_is_used_as_it_is_now(how):
    """A Parameter swapped in (version 0 like the packed one) or new storage under the same
    Parameter (what module.to does, no version bump) is not the packed weight: F.linear."""
    layer = linear()
    pack_linears(layer)
    x = torch.randn(5, 64)
    with torch.no_grad():
        if how == "new Parameter":
            fresh = nn.Parameter(layer.weight.detach() * 2)
            while fresh._version < layer.packed_version:  # the same count as the packed weight's
                fresh.add_(0)
            layer.weight = fresh
        else:
            layer.weight.data = layer.weight.detach() * 2
        assert layer.weight._version == layer.packed_version
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert set(layer.state_dict()) == {"weight", "bias"}


@needs_onednn
def test_tied_weights_are_reordered_once_and_the_cap_and_switch_pack_nothing(monkeypatch):
    a, b = linear(), linear()
    b.weight = a.weight  # tied, as an lm_head shared with an embedding or another model
    assert pack_linears(nn.Sequential(a), nn.Sequential(b)) == 2
    assert a.packed is b.packed
    assert pack_linears(linear(), cap_bytes=100) == 0
    monkeypatch.setenv(cpu_linear.ENV_SWITCH, "mkl")
    assert pack_linears(linear()) == 0
    monkeypatch.delenv(cpu_linear.ENV_SWITCH)
    assert pack_linears(linear().half()) == 0  # float32 only: other dtypes keep F.linear


@needs_onednn
def test_speculative_greedy_equals_target_only_greedy_with_packed_weights(pair_dirs, prompts):
    from alcheck.models.loading import load_eagle, load_target

    target = load_target(str(pair_dirs[0]))
    head = load_eagle(str(pair_dirs[1]), target)
    assert pack_linears(target.model, head) > 0
    eos = target.eos_token_ids
    plain, _ = run_spec(target.model, None, eos, prompts, k=0)
    for k in (1, 3):
        spec, _ = run_spec(target.model, head, eos, prompts, k=k)
        assert [r.output_ids for r in spec] == [r.output_ids for r in plain]
    assert all(len(r.output_ids) <= MAX_TOKENS for r in plain)
