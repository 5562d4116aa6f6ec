"""The demo pair's CPU float32 outputs, the oracle the static runner on a GPU must equal: all 80
MT-Bench questions (turn 1, vllm-example, 256 tokens), K=1..5, chains and trees (topk 4), the
EAGLE-1 and the EAGLE-3 head, by the paged runner on the CPU. bench/bench_static_demo.py writes
it (and checks that the static runner on the CPU equals it); gpu-check piece g reads it.

Per question: [steps, accepted, generated tokens, a digest of the output ids]."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import torch

from alcheck import paths
from alcheck.methods.table import DEMO_HEADS
from alcheck.options import is_tree
from alcheck.runner.config import max_tree_tokens

REFERENCE_FILE = paths.REPO_ROOT / "results" / "gpu" / "cpu-reference.json"
HEADS = tuple(sorted(DEMO_HEADS))  # the methods with a demo head (model-free ones have none)
BLOCK_SIZE, MAX_BATCH, MAX_TOKENS, TREE_TOPK = 16, 128, 256, 4


def shapes(ks=(1, 2, 3, 4, 5)) -> list[tuple[str, int, int, int | None]]:
    """(head, K, topk, T): every K as a chain and as a tree of topk 4 and up to 16 tokens."""
    return [
        (head, k, topk, min(16, max_tree_tokens(k, TREE_TOPK)) if is_tree(topk) else None)
        for head in HEADS
        for topk in (1, TREE_TOPK)
        for k in ks
    ]


def shape_name(head: str, k: int, topk: int, t) -> str:
    return f"{head} K={k} " + (f"tree topk {topk} T {t}" if is_tree(topk) else "chain")


def digest(ids: list[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(ids)}i", *ids)).hexdigest()[:16]


def record(results) -> list[list]:
    return [[r.steps, r.accepted, len(r.output_ids), digest(r.output_ids)] for r in results]


def load_heads(target, dtype, device) -> dict:
    """Every method's demo head, by method name."""
    from alcheck.methods.table import DEMO_HEADS, get_method

    return {
        name: get_method(name).load(directory, target, dtype, str(device))
        for name, directory in DEMO_HEADS.items()
    }


def generate(runner_class, target, head, prompts, k: int, topk: int, t, max_tokens: int, engine=None, **cfg):
    """One shape over every prompt in one batch (question order); returns (results, runner)."""
    from alcheck.methods.table import proposer_for
    from alcheck.runner.config import RunnerConfig

    config = RunnerConfig(
        num_spec_tokens=k,
        topk=topk,
        num_draft_tokens=t,
        block_size=BLOCK_SIZE,
        max_batch_size=MAX_BATCH,
        **cfg,
    )
    runner = runner_class(target.model, proposer_for(head), target.eos_token_ids, config, engine=engine)
    return runner.generate(prompts, max_tokens), runner


def read(path: Path = REFERENCE_FILE) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def write(entries: dict, meta: dict, path: Path = REFERENCE_FILE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"schema": "alcheck.cpu_reference/1", **meta, "shapes": entries}, indent=1) + "\n"
    )


def torch_info() -> dict:
    return {"torch": torch.__version__, "threads": torch.get_num_threads()}
