"""`alcheck ablate kv-lookahead`: the same sweep with and without lookahead KV slots.

Both sweeps audit every KV write and (greedy) check losslessness, then per K `alcheck
compare`'s rule (report/compare.py, paired over questions) says whether the AL difference is
more than noise; the CI shown is the paired bootstrap over questions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from alcheck.config import RunConfig
from alcheck.report.compare import compare_runs
from alcheck.report.run_io import load_run
from alcheck.rundir.folder import write_json_atomic
from alcheck.runner.table import DEFAULT_RUNNER

ABLATION_SCHEMA = "alcheck.diagnostics.ablation/1"
ABLATION_FILE = "ablation.json"
ARMS = {"with": "with-lookahead", "without": "without-lookahead"}


def arm_configs(cfg: RunConfig, out_dir: Path) -> dict[str, RunConfig]:
    greedy = cfg.temperature == 0
    # the default runner is the paged one, whose lookahead slots the arms toggle (RunConfig refuses others)
    return {
        arm: replace(
            cfg,
            kv_lookahead=(arm == "with"),
            audit_slots=True,
            check_lossless=greedy,
            runner=DEFAULT_RUNNER,
            out=str(out_dir / sub),
        )
        for arm, sub in ARMS.items()
    }


def summarize_ablation(out_dir: Path, cfg: RunConfig) -> dict:
    runs = {arm: load_run(out_dir / sub) for arm, sub in ARMS.items()}
    # the arms differ on purpose (kv_lookahead), so compare them as `alcheck compare --force` would
    compared = {
        row.k: row for row in compare_runs(runs["without"], runs["with"], force=True, seed=cfg.seed).rows
    }
    rows = []
    for k in cfg.ks:
        row = compared.get(k)
        if row is None or row.ci95 is None:
            continue
        s_with, s_without = runs["with"].summary_for(k), runs["without"].summary_for(k)
        ci = row.ci_questions if getattr(row, "ci_questions", None) is not None else row.ci95
        rows.append(
            {
                "k": k,
                "al_with": row.al_b,
                "al_without": row.al_a,
                "al_diff": row.diff,  # with - without, paired over questions
                "al_diff_ci95": list(ci),
                "verdict": {"A higher": "without higher", "B higher": "with higher"}.get(
                    row.verdict, row.verdict
                ),
                "lossless_rate_with": s_with.get("lossless_rate"),
                "lossless_rate_without": s_without.get("lossless_rate"),
                "slot_violations_with": s_with.get("slot_violations"),
                "slot_violations_without": s_without.get("slot_violations"),
            }
        )
    meta = {
        "schema": ABLATION_SCHEMA,
        "ablation": "kv-lookahead",
        "config": cfg.to_dict(),
        "runs": dict(ARMS),
        "environment": runs["with"].meta.get("environment", {}),
        "summary": rows,
    }
    write_json_atomic(out_dir / ABLATION_FILE, meta)
    return meta
