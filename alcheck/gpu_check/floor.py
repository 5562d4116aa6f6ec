"""What a step cannot go below, the sweep time a step time implies, and the issue's speed targets.

floor = max(bytes read / copy bandwidth, FLOPs / matmul peak), both measured on the device: the
weights a step reads once (the target without its embedding table, which decode reads a row of;
per draft step the head and the lm_head), the KV it reads, and 2 FLOPs per weight per token row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from alcheck import paths
from alcheck.gpu_check.common import timed

PUBLISHED_AL = paths.REFERENCES_DIR / "seed-eagle-repo-llama31-8b.json"
SWEEP = {"questions": 80, "ks": (1, 2, 3, 4, 5), "repeats": 3, "max_tokens": 256}


@dataclass
class Sizes:
    target_bytes: int  # every target weight
    embed_bytes: int
    head_bytes: int
    lm_head_bytes: int
    kv_bytes_per_token: int  # K and V of every target layer, one position
    dtype_bytes: int

    def floor_s(
        self, batch: int, k: int, verify: int, context: int, bandwidth: float, peak_flops: float
    ) -> float:
        reads = (
            self.target_bytes
            - self.embed_bytes
            + k * (self.head_bytes + self.lm_head_bytes)
            + batch * context * self.kv_bytes_per_token
        )
        weights = lambda n: n / self.dtype_bytes  # noqa: E731 - parameters from bytes
        flops = (
            2 * weights(self.target_bytes - self.embed_bytes) * batch * verify
            + 2 * weights(self.head_bytes) * batch * (2 * k)
            + 2 * weights(self.lm_head_bytes) * batch * k
        )
        return max(reads / bandwidth, flops / peak_flops)


def matmul_peak(device: torch.device, dry_run: bool) -> float:
    """FLOP/s of the best of five square matmuls (bfloat16 on CUDA, float32 on the CPU)."""
    if device.type == "cuda":
        n, dtype = (256, torch.float32) if dry_run else (8192, torch.bfloat16)
    else:
        n, dtype = (256 if dry_run else 1024), torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = min(timed(lambda: a @ b, device)[0] for _ in range(5))
    return 2 * n**3 / best


def published_al() -> dict[int, float]:
    return {int(k): v for k, v in json.loads(PUBLISHED_AL.read_text())["values"].items()}


def projected_sweep_s(
    load_s: float, prefill_s: float, step_ms: dict[int, float], al: dict[int, float]
) -> float:
    """Load, then per K and repeat one prefill and max_tokens / AL steps of the batch of 80."""
    per_repeat = sum(prefill_s + SWEEP["max_tokens"] / al[k] * step_ms[k] / 1e3 for k in SWEEP["ks"])
    return load_s + SWEEP["repeats"] * per_repeat


def targets(rows: list[dict], sweep: dict) -> list[dict]:
    """The issue's targets on one H200 with an 8B-shaped bf16 target, each PASS / FAIL / not measured."""

    def row(runner, batch, k, shape="chain"):
        return next(
            (
                r
                for r in rows
                if (r["runner"], r["batch"], r["k"], r.get("shape", "chain")) == (runner, batch, k, shape)
            ),
            None,
        )

    out = []

    def target(name, value, limit, measured_on):
        ok = None if value is None else value <= limit
        out.append(
            {
                "target": name,
                "value": value,
                "limit": limit,
                "on": measured_on,
                "result": "not measured" if ok is None else ("PASS" if ok else "FAIL"),
            }
        )

    for batch, limit in ((1, 1.5), (64, 2.0)):
        for k in (0, 3):
            r = row("alcheck graphs", batch, k)
            target(f"batch {batch}, K={k}: step / floor", r and r["step_ms"] / r["floor_ms"], limit, "graphs")
    gen, fast = row("transformers generate()", 1, 0), row("alcheck graphs", 1, 3)
    al3 = published_al().get(3)
    speedup = gen and fast and al3 and (al3 / fast["step_ms"]) / (1 / gen["step_ms"])
    target(
        "batch 1: generate() tokens/s over alcheck's (K=3 at the published AL, inverted: <= 0.25)",
        speedup and 1 / speedup,
        0.25,
        "graphs",
    )
    target(
        "full MT-Bench sweep seconds, projected at the published AL",
        sweep.get("projected_s"),
        120.0,
        "graphs",
    )
    tree, chain = row("alcheck graphs", 1, 5, "tree topk 8 T 32"), row("alcheck graphs", 1, 5)
    target(
        "tree step (topk 8, T 32) / chain step at K=5, batch 1",
        tree and chain and tree["step_ms"] / chain["step_ms"],
        2.0,
        "graphs",
    )
    return out
