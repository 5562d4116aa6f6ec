"""Sliding windows: a paged full-causal runner is exact only while every position is inside the
window. A run that fits is allowed and exact; one that would cross it is refused, before loading
(models/targets.check_fits_window) and, as the guard, by the attention function at run time.
"""

from __future__ import annotations

import pytest
import torch
from conftest import expect_error, paged_batch, run_spec
from test_model_vs_hf import Req

from alcheck.errors import AlcheckError
from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache
from alcheck.models.loading import read_config
from alcheck.models.targets import check_fits_window, window_of

WINDOW = 24


@pytest.fixture(scope="module")
def windowed(tmp_path_factory):
    """A Mistral target with sliding_window 24, and transformers' reference model of it."""
    from transformers import AutoModelForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny_arch import make_tiny_arch_target

    directory = make_tiny_arch_target(
        tmp_path_factory.mktemp("win") / "mistral",
        "mistral",
        num_layers=2,
        sliding_window=WINDOW,
        init_std=0.3,
    )
    ref = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    return directory, load_target(str(directory)), ref


def _paged_logits(model, seq):
    kv, req = KVCacheManager(16, 4), Req(0)
    assert kv.allocate_slots(req, len(seq)) is not None
    bind_kv_cache(model.attention_layers, 16, 4, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        return model.compute_logits(model(torch.tensor(seq), paged_batch(kv, [req], [0], [len(seq)])))


def test_window_decided_from_config(windowed, tmp_path):
    from alcheck.testing.tiny_arch import make_tiny_arch_target

    directory, _, _ = windowed
    assert window_of(read_config(directory, "target"), directory) == WINDOW
    # Qwen2: use_sliding_window with max_window_layers puts the window on the later layers only
    qwen = make_tiny_arch_target(
        tmp_path / "q", "qwen2", num_layers=2, use_sliding_window=True, sliding_window=16, max_window_layers=1
    )
    assert window_of(read_config(qwen, "target"), qwen) == 16
    plain = make_tiny_arch_target(
        tmp_path / "p", "qwen2", num_layers=2, sliding_window=16
    )  # use_sliding_window off
    assert window_of(read_config(plain, "target"), plain) is None


def test_inside_the_window_is_exact(windowed):
    directory, target, ref = windowed
    seq = torch.randint(
        0, ref.config.vocab_size, (WINDOW,), generator=torch.Generator().manual_seed(5)
    ).tolist()
    with torch.no_grad():
        want = ref(torch.tensor([seq])).logits[0]
    torch.testing.assert_close(_paged_logits(target.model, seq), want, atol=1e-4, rtol=0)
    check_fits_window(read_config(directory, "target"), directory, WINDOW)  # allowed: no error


def test_the_window_is_real(windowed):
    """Past the window transformers' model attends differently from full causal attention."""
    _, target, ref = windowed
    seq = torch.randint(
        0, ref.config.vocab_size, (WINDOW + 8,), generator=torch.Generator().manual_seed(5)
    ).tolist()
    with torch.no_grad():
        windowed_logits = ref(torch.tensor([seq])).logits[0]
    ref.config.sliding_window = None  # the same weights with full attention
    try:
        with torch.no_grad():
            full = ref(torch.tensor([seq])).logits[0]
    finally:
        ref.config.sliding_window = WINDOW
    assert (windowed_logits[WINDOW:] - full[WINDOW:]).abs().max() > 1e-2


def test_a_run_past_the_window_is_refused_before_loading(windowed):
    directory, _, _ = windowed
    expect_error(
        lambda: check_fits_window(read_config(directory, "target"), directory, WINDOW + 1),
        directory / "config.json",
        "'mistral'",
        f"sliding window of {WINDOW}",
        str(WINDOW + 1),
    )


def test_the_attention_guard_refuses_past_the_window(windowed):
    _, target, ref = windowed
    seq = list(range(5, 5 + WINDOW + 1))
    expect_error(lambda: _paged_logits(target.model, seq), "sliding window of 24", f"position {WINDOW}")


def test_speculative_run_inside_the_window(windowed, tmp_path):
    """prompt + max_tokens + K - 1 <= 24: the whole speculative run is exact and allowed."""
    from alcheck.models.loading import load_eagle
    from alcheck.testing.tiny import make_tiny_eagle

    directory, target, _ = windowed
    head = load_eagle(str(make_tiny_eagle(tmp_path / "eagle", directory, copy_target_layer=0)), target)
    prompts = [[7, 9, 11, 13], [20, 21, 22, 23, 24, 25, 26, 27]]
    greedy, _ = run_spec(target.model, None, [], prompts, max_tokens=14, k=0)
    spec, _ = run_spec(target.model, head, [], prompts, max_tokens=14, k=3)
    assert [r.output_ids for r in spec] == [r.output_ids for r in greedy]
    with pytest.raises(AlcheckError):  # 8 + 16 + 2 = 26 positions: the guard stops it
        run_spec(target.model, head, [], prompts, max_tokens=16, k=3)
