"""KV pool sizing from GPU memory (--gpu-memory-utilization), the weights-fit check, and the
options' bad input, all on the CPU: the device's memory figures are stood in by fake numbers
(kv_budget.sizes_from_memory / device_memory are the only places that ask CUDA)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from conftest import run_spec

from alcheck.errors import AlcheckError
from alcheck.runner import kv_budget

GIB, MIB = 1 << 30, 1 << 20


# -- the pure sizing --------------------------------------------------------------------------


def test_pool_blocks_follows_vllm_arithmetic():
    # 80 GiB card, 20 GiB in use after the weights, 0.9 of it ours, 2 GiB of activations:
    # 72 - 20 - 2 = 50 GiB of 2 MiB blocks
    assert kv_budget.pool_blocks(60 * GIB, 80 * GIB, 2 * MIB, 0.9, 2 * GIB) == 50 * 512
    # partial blocks are dropped
    assert kv_budget.pool_blocks(60 * GIB, 80 * GIB, 3 * MIB, 0.9, 2 * GIB) == (50 * GIB) // (3 * MIB)
    # other processes' memory counts as used: the same card with 30 GiB free leaves 20 GiB
    assert kv_budget.pool_blocks(30 * GIB, 80 * GIB, 2 * MIB, 0.9, 2 * GIB) == 20 * 512
    # nothing left: 0, never negative
    assert kv_budget.pool_blocks(5 * GIB, 80 * GIB, 2 * MIB, 0.9) == 0
    assert kv_budget.pool_blocks(80 * GIB, 80 * GIB, 2 * MIB, 1.0) == 40 * 1024


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, float("nan"), True])
def test_pool_blocks_rejects_utilization_outside_unit_interval(bad):
    with pytest.raises(AlcheckError, match="--gpu-memory-utilization"):
        kv_budget.pool_blocks(GIB, 2 * GIB, MIB, bad)


def test_pool_blocks_rejects_impossible_figures():
    with pytest.raises(ValueError):
        kv_budget.pool_blocks(3 * GIB, 2 * GIB, MIB, 0.9)  # more free than total
    with pytest.raises(ValueError):
        kv_budget.pool_blocks(GIB, 2 * GIB, 0, 0.9)


def test_block_bytes_equals_what_bind_kv_cache_allocates(pair):
    from alcheck.models.attention import bind_kv_cache

    layers = pair[0].model.attention_layers
    a = layers[0]
    cache = bind_kv_cache(layers, 7, 4, torch.float32, torch.device("cpu"))
    per_block = kv_budget.block_bytes(len(layers), 4, a.num_kv_heads, a.head_dim, 4)
    assert cache.numel() * cache.element_size() == 7 * per_block


# -- weights, before loading ------------------------------------------------------------------


def test_weight_estimate_of_llama31_8b_is_its_published_parameter_count():
    # 8,030,261,248 parameters (the model card's 8.03B), 2 bytes each in bfloat16
    from alcheck.models.sizes import target_weight_bytes
    from alcheck.testing.tiny import LLAMA31_8B_CONFIG

    assert target_weight_bytes(LLAMA31_8B_CONFIG, 2) == 8_030_261_248 * 2


def _heads(tmp_path, tied=False):
    """A tiny target and one head of every method in every on-disk format: {(method, format): dir}."""
    from alcheck.testing.tiny import make_tiny_eagle, make_tiny_eagle3, make_tiny_target

    target_dir = make_tiny_target(tmp_path / "t", num_layers=5, tie_word_embeddings=tied)
    heads = {("eagle", "eagle-repo"): make_tiny_eagle(tmp_path / "e1", target_dir, bias=True)}
    for fmt in ("eagle-repo", "speculators"):
        heads[("eagle3", fmt)] = make_tiny_eagle3(tmp_path / f"e3-{fmt}", target_dir, fmt=fmt)
    from alcheck.testing.tiny_draft import make_tiny_draft_lm

    heads[("draft_model", "causal-lm")] = make_tiny_draft_lm(tmp_path / "lm", target_dir, num_layers=2)
    from alcheck.testing.tiny_medusa import make_tiny_medusa

    heads[("medusa", "vllm-layout")] = make_tiny_medusa(tmp_path / "m", target_dir, 3, num_layers=2)
    heads[("medusa", "faster-decoding")] = make_tiny_medusa(tmp_path / "mfd", target_dir, 2, legacy=True)
    return target_dir, heads


@pytest.mark.parametrize("tied", [False, True])
def test_weight_estimate_equals_the_loaded_pair_for_every_method_and_format(tmp_path, tied):
    """The GPU weight check's figure (methods/pair.plan_pair), from config.json alone, equals the
    loaded modules' parameter bytes; the speculators EAGLE-3 config once raised KeyError here."""
    from alcheck.methods.table import all_methods, detect, get_method
    from alcheck.models.loading import load_target
    from alcheck.models.sizes import module_bytes, target_weight_bytes

    target_dir, heads = _heads(tmp_path, tied)
    # a new method with a checkpoint brings its formats here (a model-free one has no weights; MTP
    # layers live in their own MiMo target: tests/test_mtp_cli.py checks their estimate)
    assert {name for name, _ in heads} == {
        m.name for m in all_methods() if m.needs_checkpoint and not m.draft_in_target
    }
    target = load_target(str(target_dir))
    target_raw = json.loads((target_dir / "config.json").read_text())
    assert target_weight_bytes(target_raw, 4) == module_bytes(target.model)
    assert target_weight_bytes(target_raw, 2) == module_bytes(target.model) // 2
    for (name, fmt), head_dir in heads.items():
        method = get_method(name)
        assert detect(head_dir)[0] == name, fmt
        head = method.load(head_dir, target, torch.float32, "cpu")
        draft_raw = json.loads((head_dir / "config.json").read_text())
        assert method.weight_bytes(target_raw, draft_raw, 4) == module_bytes(head), (name, fmt)
        assert method.weight_bytes(target_raw, draft_raw, 2) == module_bytes(head) // 2, (name, fmt)


def test_the_gpu_weight_check_runs_for_every_method_and_format(tmp_path, monkeypatch):
    """plan_pair on a (fake) GPU: every head's estimate reaches the fit check, and too little
    memory is a one-line error naming how much the pair needs."""
    from alcheck.methods.pair import plan_pair
    from alcheck.methods.table import detect
    from alcheck.sweep import placement

    target_dir, heads = _heads(tmp_path)
    target_raw = json.loads((target_dir / "config.json").read_text())
    monkeypatch.setattr(placement, "resolve_device", lambda spec, flag="--device": "cuda:0")
    monkeypatch.setattr(kv_budget, "sizes_from_memory", lambda device: True)
    for head_dir in heads.values():
        monkeypatch.setattr(kv_budget, "device_memory", lambda device: (8 * GIB, 10 * GIB))
        plan = plan_pair(
            target_dir, target_raw, str(head_dir), detect(head_dir)[0], device="cuda", dtype="float32"
        )
        assert plan.devices == ["cuda:0"] and plan.dtype == "float32"
        monkeypatch.setattr(kv_budget, "device_memory", lambda device: (1000, 10 * GIB))
        with pytest.raises(AlcheckError, match="the target and draft weights need .* but cuda:0 has"):
            plan_pair(
                target_dir, target_raw, str(head_dir), detect(head_dir)[0], device="cuda", dtype="float32"
            )


def test_weights_that_do_not_fit_say_how_much_is_needed():
    with pytest.raises(
        AlcheckError, match=r"need 14\.96 GiB in bfloat16 but cuda:0 has 10\.00 GiB free of 24\.00 GiB"
    ):
        kv_budget.check_weights_fit(8_030_261_248 * 2, 10 * GIB, 24 * GIB, "cuda:0", "bfloat16")
    with pytest.raises(AlcheckError, match="--dtype bfloat16"):  # float32: the smaller dtype is a way out
        kv_budget.check_weights_fit(20 * GIB, 10 * GIB, 24 * GIB, "cuda:0", "float32")
    kv_budget.check_weights_fit(9 * GIB, 10 * GIB, 24 * GIB, "cuda:0", "bfloat16")  # fits: no error


# -- the runner, on a fake GPU ------------------------------------------------------------------


def _per_block(target, head, block_size):
    layers = list(target.model.attention_layers) + (list(head.attention_layers) if head is not None else [])
    return sum(kv_budget.block_bytes(1, block_size, a.num_kv_heads, a.head_dim, 4) for a in layers)


@pytest.fixture
def fake_gpu(monkeypatch):
    """fake_gpu(blocks): the CPU behaves as a device whose memory leaves room for `blocks` KV
    blocks of `per_block` bytes at utilization 0.9 (activations measure 0 off CUDA)."""

    def install(blocks: int, per_block: int, total: int = 10 * GIB):
        free = total - int(0.9 * total) + blocks * per_block
        monkeypatch.setattr(kv_budget, "sizes_from_memory", lambda device: True)
        monkeypatch.setattr(kv_budget, "device_memory", lambda device: (free, total))

    return install


@pytest.mark.parametrize("k", [0, 3])
def test_ample_memory_gives_the_batch_its_blocks(pair, prompts, greedy, fake_gpu, k):
    target, head = pair
    _, plain = run_spec(target.model, head, target.eos_token_ids, prompts, k=k)
    fake_gpu(10_000, _per_block(target, head if k else None, 4))
    results, runner = run_spec(target.model, head, target.eos_token_ids, prompts, k=k)
    assert runner.kv.num_blocks == plain.kv.num_blocks == runner.kv_pool["blocks_needed"]
    assert runner.kv_pool["blocks_memory_allows"] == 10_000
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]
    assert all(r.preemptions == 0 for r in results)


def test_a_tight_pool_admits_fewer_and_preempts_with_identical_output(pair, prompts, greedy, fake_gpu):
    target, head = pair
    fake_gpu(30, _per_block(target, head, 4))
    results, runner = run_spec(target.model, head, target.eos_token_ids, prompts, k=3)
    assert runner.kv.num_blocks == 30 < runner.kv_pool["blocks_needed"]
    assert sum(r.preemptions for r in results) > 0
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]
    assert all(sum(r.accepted_per_pos) == r.accepted and r.drafted == 3 * r.steps for r in results)


def test_a_pool_too_small_for_one_request_is_a_one_line_error(pair, prompts, fake_gpu):
    target, head = pair
    fake_gpu(3, _per_block(target, head, 4))
    with pytest.raises(AlcheckError, match="leaves room for 3 KV blocks .* raise --gpu-memory-utilization"):
        run_spec(target.model, head, target.eos_token_ids, prompts, k=3)


def test_warm_up_leaves_sampling_untouched(pair, prompts, fake_gpu):
    """The warm-up samples on a scratch generator: a sampled run equals one without it."""
    target, head = pair
    want, _ = run_spec(target.model, head, target.eos_token_ids, prompts, k=2, temperature=1.0, seed=5)
    fake_gpu(10_000, _per_block(target, head, 4))
    got, runner = run_spec(target.model, head, target.eos_token_ids, prompts, k=2, temperature=1.0, seed=5)
    assert runner.kv_pool is not None
    assert [(r.output_ids, r.accepted) for r in got] == [(r.output_ids, r.accepted) for r in want]


def test_explicit_num_blocks_skips_the_budget(pair, prompts, fake_gpu):
    target, head = pair
    fake_gpu(3, _per_block(target, head, 4))  # would be too small, but --num-blocks wins
    _, runner = run_spec(target.model, head, target.eos_token_ids, prompts, k=1, num_blocks=40)
    assert runner.kv.num_blocks == 40 and runner.kv_pool is None


# -- the CLI ------------------------------------------------------------------------------------


def _run(args):
    from alcheck.cli.main import cli

    return CliRunner().invoke(cli, ["run", *args], catch_exceptions=False)


def _one_line_exit_2(result, *needles):
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for needle in needles:
        assert needle in result.output


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan"])
def test_cli_utilization_outside_unit_interval_exits_2(pair_args, tmp_path, value):
    result = _run([*pair_args, "--gpu-memory-utilization", value, "--out", str(tmp_path / "r")])
    _one_line_exit_2(result, "--gpu-memory-utilization")


def test_cli_device_that_does_not_exist_exits_2(pair_args, tmp_path, monkeypatch):
    _one_line_exit_2(_run([*pair_args, "--device", "gpu0", "--out", str(tmp_path / "a")]), "--device gpu0")
    if not torch.cuda.is_available():
        _one_line_exit_2(
            _run([*pair_args, "--device", "cuda:3", "--out", str(tmp_path / "b")]),
            "--device cuda:3",
            "no CUDA device",
        )
    # one visible GPU: cuda:3 names a device that is not there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    _one_line_exit_2(
        _run([*pair_args, "--device", "cuda:3", "--out", str(tmp_path / "c")]),
        "--device cuda:3",
        "1 CUDA device",
        "cuda:0",
    )


def test_cli_weights_that_do_not_fit_exit_2_before_loading(pair_args, tmp_path, monkeypatch):
    from alcheck.models import loading

    monkeypatch.setattr(kv_budget, "sizes_from_memory", lambda device: True)
    monkeypatch.setattr(kv_budget, "device_memory", lambda device: (1000, 4 * GIB))

    def no_loading(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(loading, "load_target", no_loading)
    result = _run([*pair_args, "--device", "cpu", "--dtype", "float32", "--out", str(tmp_path / "r")])
    _one_line_exit_2(result, "weights need", "GiB in float32", "0.00 GiB free of 4.00 GiB")


def test_a_tree_run_warms_up_on_the_tree_path(pair, prompts, greedy, fake_gpu, monkeypatch):
    """A tree's verify and draft levels carry tree masks, which move attention to the torch path:
    the warm-up that measures activation memory must run those forwards with their masks."""
    target, head = pair
    seen = []
    scratch = kv_budget._scratch_batch

    def spy(runner, starts, lens, **tree):
        seen.append(tree.get("tree_masks") is not None)
        return scratch(runner, starts, lens, **tree)

    monkeypatch.setattr(kv_budget, "_scratch_batch", spy)
    fake_gpu(10_000, _per_block(target, head, 4))
    results, runner = run_spec(
        target.model, head, target.eos_token_ids, prompts, k=3, topk=2, num_draft_tokens=6
    )
    assert runner.kv_pool is not None and sum(seen) >= 3  # the verify forward and the draft levels
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]
