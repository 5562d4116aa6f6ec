"""`make gpu-check` in its --dry-run form: the whole script on the CPU with tiny shapes, in a
child process where `import datasets` fails (the GPU machine has no such package)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from alcheck import paths
from alcheck.testing import real_model

RUN_WITHOUT_DATASETS = (
    "import runpy, sys; sys.modules['datasets'] = None; "  # any `import datasets` now raises ImportError
    "sys.argv = ['alcheck.gpu_check', '--dry-run']; "
    "runpy.run_module('alcheck.gpu_check', run_name='__main__', alter_sys=True)"
)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "GPU_CHECK_OUT": str(out), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_DATASETS],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, out


def test_dry_run_passes_every_piece_without_datasets(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "summary.json").read_text())
    assert result["dry_run"] and result["status"] == "pass"
    pieces = {p["key"]: p for p in result["pieces"]}
    assert list(pieces) == ["a", "b", "c", "h", "d", "e", "f", "g"]
    if not real_model.prepared():  # h needs `make real-models`; CI prepares it
        assert pieces.pop("h")["status"] == "skip"
    for piece in pieces.values():
        assert piece["status"] == "pass", (piece["key"], piece["notes"], piece["data"].get("traceback"))
        assert all(c["ok"] for c in piece["checks"])
    text = (out / "summary.md").read_text()
    assert all(f"## {key}. " in text for key in "abcdefgh") and "dry run" in text
    assert (out / "pytest-gpu.log").is_file()


def test_dry_run_records_what_each_piece_measured(dry_run):
    _, out = dry_run
    pieces = {p["key"]: p for p in json.loads((out / "summary.json").read_text())["pieces"]}
    # a: the gpu tests were collected and (on the CPU) skipped, none failed
    counts = pieces["a"]["data"]["counts"]
    assert counts.get("skipped", 0) > 0 and not counts.get("failed") and not counts["errors"]
    # b: every K was lossless, and a CPU run on other batches gave the same tokens
    b = pieces["b"]
    assert [r["k"] for r in b["data"]["rows"]] == [1, 2] and all(
        r["lossless"] == 1.0 for r in b["data"]["rows"]
    )
    assert sum("CPU float32 run" in c["name"] for c in b["checks"]) == 2
    # c: three repeats per K, spread = max - min
    for row in pieces["c"]["data"]["rows"]:
        assert len(row["al_repeats"]) == 3
        assert row["al_spread"] == pytest.approx(max(row["al_repeats"]) - min(row["al_repeats"]))
    # d: eager and static (no CUDA: no graphs) at batch 1/16/64 x K 0/3 and K=5 chain vs tree, generate() per
    # batch; medians over steady steps, the floor, the sweep and the targets
    d = pieces["d"]["data"]
    chains = {(r["runner"], r["batch"], r["k"]) for r in d["rows"] if r["shape"] == "chain"}
    assert {
        (runner, b, k) for runner in ("alcheck eager", "alcheck static") for b in (1, 16, 64) for k in (0, 3)
    } <= chains
    assert {("transformers generate()", b, 0) for b in (1, 16, 64)} <= chains
    assert {(r["runner"], r["batch"]) for r in d["rows"] if r["shape"].startswith("tree")} == {
        (runner, b) for runner in ("alcheck eager", "alcheck static") for b in (1, 16)
    }
    for r in d["rows"]:
        assert 0 < r["p10_ms"] <= r["step_ms"] <= r["p90_ms"] and r["floor_ms"] > 0 and r["steady_steps"] >= 6
        assert r["launches_per_step"] is None and r["vs_generate"] > 0  # launches are counted on CUDA only
    assert d["sweep"]["projected_s"] > d["load_s"] and d["sweep"]["measured_s"] > d["load_s"]
    assert {t["result"] for t in d["targets"]} <= {"PASS", "FAIL", "not measured"} and len(d["targets"]) == 7
    # g: the static runner equals a paged CPU run on every shape, both heads, chains and trees
    g = pieces["g"]
    assert len(g["data"]["rows"]) == 4 and all(r["equal"] == r["questions"] for r in g["data"]["rows"])
    assert sum("equals the CPU float32 run" in c["name"] for c in g["checks"]) == 4
    # e: the attention bench ran and compared flex with the gather path
    e = pieces["e"]["data"]
    assert e["rows"] and e["keep"] in ("gather", "flex") and all("gather_ms" in r for r in e["rows"])
    # f: both tree shapes lossless and above the chain of their depth; bf16 and sampled trees ran
    f = pieces["f"]["data"]
    assert [(r["k"], r["topk"], r["t"]) for r in f["rows"]] == [(3, 4, 16), (5, 8, 32)]
    assert all(r["lossless"] == 1.0 and r["al_tree"] > r["al_chain"] for r in f["rows"])
    assert "al_tree_bf16" in f and "al_tree_t1" in f
    # h: the real model's float32 rows checked per K, bfloat16's AL and moved questions recorded
    h = pieces["h"]
    if h["status"] != "skip":
        assert [r["k"] for r in h["data"]["rows"]] == [1, 3]
        assert sum("float32 rows equal the CPU's" in c["name"] for c in h["checks"]) == 2
        assert all("al_bf16" in r and "questions_moved" in r for r in h["data"]["rows"])


def test_a_non_lossless_runner_fails_the_check(tmp_path, monkeypatch):
    """The checks can fail: a speculative run that changes one token is reported, exit 1."""
    from alcheck.gpu_check import __main__ as gpu_check
    from alcheck.gpu_check import demo_pieces

    real = demo_pieces.generate

    def corrupt(model, head, eos_ids, prompts, k, max_tokens, repeat):
        results = real(model, head, eos_ids, prompts, k, max_tokens, repeat)
        if k == 2:
            results[0].output_ids[-1] += 1
        return results

    monkeypatch.setattr(demo_pieces, "generate", corrupt)
    assert gpu_check.main(["--dry-run", "--only", "b", "--out", str(tmp_path)]) == 1
    result = json.loads((tmp_path / "summary.json").read_text())
    b = result["pieces"][1]
    assert result["status"] == "fail" and b["status"] == "fail"
    failed = [c["name"] for c in b["checks"] if not c["ok"]]
    assert any(name.startswith("K=2: lossless") for name in failed)
    assert "FAILED: K=2: lossless" in (tmp_path / "summary.md").read_text()


def test_make_target_runs_the_module():
    proc = subprocess.run(["make", "-n", "gpu-check"], cwd=paths.REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "-m alcheck.gpu_check" in proc.stdout


@pytest.mark.parametrize("agree", [True, False])
def test_piece_e_checks_the_triton_kernel_against_the_gather_path(monkeypatch, tmp_path, agree):
    """On a GPU piece e runs bench/bench_triton_attention.py's cases: a disagreement fails the piece,
    and the report shows the table (the bench itself stubbed here: no CUDA)."""
    import time
    from types import SimpleNamespace

    import torch

    from alcheck.gpu_check import attention_piece
    from alcheck.gpu_check.common import Context, Piece
    from alcheck.gpu_check.report import _attention
    from alcheck.models import attention

    row = {
        "batch": 64,
        "context": 2048,
        "queries": 32,
        "tree": True,
        "torch_ms": 2.0,
        "triton_ms": 0.5,
        "max_abs_diff": 1e-3 if agree else 0.5,
        "agree": agree,
    }
    bench = SimpleNamespace(
        TOLERANCE=2e-2, shapes_for=lambda dry: [(64, 2048, 32, True)], measure=lambda *a, **kw: [row]
    )
    monkeypatch.setattr(attention_piece, "load_bench", lambda path=None: bench)
    monkeypatch.setattr(attention, "triton_available", lambda: True)
    piece = Piece("e", "attention")
    ctx = Context(False, torch.device("cuda"), tmp_path, time.perf_counter() + 60)
    attention_piece.triton_rows(ctx, piece, time.perf_counter() + 30)
    assert piece.status == ("pass" if agree else "fail"), piece.checks
    assert "4.00-4.00x as fast" in " ".join(piece.notes)
    lines = "\n".join(
        _attention({"rows": [], "dtype": "bfloat16", "compiled": True, "keep": "gather", **piece.data})
    )
    assert "| 64 | 2048 | 32 | yes | 2.000 | 0.500 | 4.00 |" in lines
