"""`alcheck ablate kv-lookahead`: the same sweep with and without lookahead KV slots.

Both sweeps audit every KV write and (greedy) check losslessness, then per K the paired
bootstrap over questions says whether the AL difference is more than noise.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from alcheck.config import RunConfig
from alcheck.metrics.stats import paired_bootstrap
from alcheck.metrics.verdict import compare_verdict
from alcheck.report.run_io import load_run

ABLATION_SCHEMA = "alcheck.ablation/1"
ABLATION_FILE = "ablation.json"
ARMS = {"with": "with-lookahead", "without": "without-lookahead"}


def arm_configs(cfg: RunConfig, out_dir: Path) -> dict[str, RunConfig]:
    greedy = cfg.temperature == 0
    return {
        arm: replace(cfg, kv_lookahead=(arm == "with"), audit_slots=True, check_lossless=greedy,
                     runner="paged", out=str(out_dir / sub))
        for arm, sub in ARMS.items()
    }


def summarize_ablation(out_dir: Path, cfg: RunConfig) -> dict:
    runs = {arm: load_run(out_dir / sub) for arm, sub in ARMS.items()}
    rows = []
    for k in cfg.ks:
        with_q, without_q = (runs[a].questions_for(k) for a in ("with", "without"))
        if with_q.empty or without_q.empty:
            continue
        paired = paired_bootstrap(without_q, with_q, seed=[cfg.seed, k])  # diff = with - without
        s_with, s_without = runs["with"].summary_for(k), runs["without"].summary_for(k)
        rows.append({
            "k": k,
            "al_with": paired.al_b,
            "al_without": paired.al_a,
            "al_diff": paired.diff,
            "al_diff_ci95": list(paired.ci95),
            "verdict": {"A higher": "without higher", "B higher": "with higher"}.get(
                compare_verdict(paired.ci95), "no detectable change"),
            "lossless_rate_with": s_with.get("lossless_rate"),
            "lossless_rate_without": s_without.get("lossless_rate"),
            "slot_violations_with": s_with.get("slot_violations"),
            "slot_violations_without": s_without.get("slot_violations"),
        })
    meta = {
        "schema": ABLATION_SCHEMA,
        "ablation": "kv-lookahead",
        "config": cfg.to_dict(),
        "runs": dict(ARMS),
        "environment": runs["with"].meta.get("environment", {}),
        "summary": rows,
    }
    tmp = out_dir / (ABLATION_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out_dir / ABLATION_FILE)
    return meta
