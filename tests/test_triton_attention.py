"""The Triton paged-attention kernel (issue 22): which kernel each device and batch gets, that
alcheck imports without triton, and the kernel's own cases (tests/triton_cases.py) in a child
process: on the CPU under TRITON_INTERPRET=1, which has to be set before triton is first imported
and which this process must not carry into other tests; on a GPU compiled, as it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alcheck.errors import AlcheckError
from alcheck.models import attention
from alcheck.models.attention import FORCE_ENV, pick_attention

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.fixture
def installed(monkeypatch):
    """(triton importable, flash-attn importable) as the test says, whatever this machine has."""
    monkeypatch.delenv(FORCE_ENV, raising=False)

    def set_(triton: bool, flash: bool):
        monkeypatch.setattr(attention, "triton_available", lambda: triton)
        monkeypatch.setattr(attention, "flash_attn_varlen_func", object() if flash else None)

    return set_


def test_the_cpu_runs_torch_even_with_triton_installed(installed):
    installed(True, True)
    for static in (False, True):
        for dtype in (torch.float32, torch.bfloat16):
            assert pick_attention(CPU, 256, dtype, static=static) == "torch"


def test_cuda_picks_flash_attn_for_eager_chains_and_triton_for_the_static_runner(installed):
    installed(True, True)
    assert pick_attention(CUDA, 256, torch.bfloat16) == "flash-attn"
    assert pick_attention(CUDA, 256, torch.bfloat16, static=True) == "triton"  # static chains and trees
    assert pick_attention(CUDA, 256, torch.float32, static=True) == "triton"
    # the eager runner keeps the reference path where flash-attn does not apply, and for trees
    assert pick_attention(CUDA, 16, torch.bfloat16) == "torch"  # flash-attn's paged kernel needs % 256
    assert pick_attention(CUDA, 256, torch.float32) == "torch"  # flash-attn has no float32 kernels
    assert pick_attention(CUDA, 256, torch.bfloat16, tree=True) == "torch"
    installed(False, True)
    assert pick_attention(CUDA, 256, torch.float32) == pick_attention(CUDA, 16, torch.float16) == "torch"
    assert pick_attention(CUDA, 256, torch.float16, static=True) == "torch"


def test_the_environment_forces_a_kernel(installed, monkeypatch):
    installed(False, False)
    monkeypatch.setenv(FORCE_ENV, "triton")
    assert (
        pick_attention(CPU, 4, torch.float32)
        == pick_attention(CPU, 4, torch.float32, static=True)
        == "triton"
    )
    monkeypatch.setenv(FORCE_ENV, "flash-attn")  # static batches have no flash-attn form: the usual pick
    assert pick_attention(CUDA, 256, torch.float16) == "flash-attn"
    assert pick_attention(CUDA, 256, torch.float16, static=True) == "torch"
    monkeypatch.setenv(FORCE_ENV, "cutlass")
    with pytest.raises(AlcheckError, match=FORCE_ENV):
        pick_attention(CPU, 4)


def test_tree_batches_leave_flash_attn_for_the_reference_path(installed):
    installed(True, True)
    batch = attention.AttnBatch.build(
        [3, 4],
        torch.tensor([3, 4]),
        torch.zeros(1, 2, dtype=torch.int32),
        [2],
        [5],
        4,
        "flash-attn",
        tree_masks=torch.ones(1, 2, 2, dtype=torch.bool),
    )
    assert batch.kernel == "torch" and batch.mask is not None  # the CPU: torch builds the additive mask


def test_alcheck_runs_without_triton():
    """triton made unimportable: the runner's modules import, and pick nothing that needs it."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, alcheck.cli.main, alcheck.runner.static.runner\n"
        "from alcheck.models.attention import pick_attention, triton_available\n"
        "assert not triton_available()\n"
        "assert pick_attention(torch.device('cuda'), 16, torch.float16, static=True) == 'torch'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != FORCE_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.skipif(not attention.triton_available(), reason="triton not installed")
def test_the_kernel_cases_in_a_child_process():
    tests = Path(__file__).parent
    env = {k: v for k, v in os.environ.items() if k not in (FORCE_ENV, "TRITON_INTERPRET")}
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"  # kernels run on CPU tensors, in numpy
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(tests / "triton_cases.py"),
        ],
        cwd=tests.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_run_json_names_the_static_runners_step_kernel(installed):
    """A resumed run compares this name: the static runner's steps and prefill may differ on CUDA."""
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.static.runner import StaticRunner

    installed(True, False)
    assert StaticRunner.attention_name(CUDA, 16, torch.bfloat16) == "triton (steps), torch-sdpa (prefill)"
    assert PagedRunner.attention_name(CUDA, 16, torch.bfloat16) == "torch-sdpa"
    assert StaticRunner.attention_name(CPU, 16, torch.float32) == "torch-sdpa"
