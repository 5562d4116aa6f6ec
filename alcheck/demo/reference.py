"""Write `results/references/demo.json` from a finished demo run (`python -m alcheck.demo.reference RUN_DIR`).

The demo pair's measured AL becomes a reference table, so a fresh user's `alcheck run` is
compared against a known-good result. The run itself is kept beside it in results/baselines/demo/.
Any other demo method's run becomes `demo-<method>.json`, its run results/baselines/demo-<method>/:
the EAGLE-3 head (`alcheck run --method eagle3`, demo-eagle3.json) and the demo draft LM
(`alcheck run --method draft_model`, demo-draft_model.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from alcheck import paths
from alcheck.errors import AlcheckError
from alcheck.methods.table import DEFAULT_METHOD
from alcheck.report.run_io import load_run


def demo_reference(run_dir: Path) -> dict:
    run = load_run(run_dir, require_questions=True)
    cfg, env = run.config, run.meta.get("environment", {})
    if run.meta.get("status") != "complete":
        raise AlcheckError(f"{run_dir} is a partial run: finish it with alcheck run --resume {run_dir}")
    return {
        "name": "demo" if cfg["method"] == DEFAULT_METHOD else f"demo-{cfg['method']}",
        "source": (
            "measured by alcheck itself: results/baselines/demo (alcheck run, no arguments)"
            if cfg["method"] == DEFAULT_METHOD
            else f"measured by alcheck itself: results/baselines/demo-"
            f"{cfg['method']} (alcheck run --method {cfg['method']})"
        ),
        "target": Path(cfg["target"]).name,
        "draft": Path(cfg["draft"]).name,
        "method": cfg["method"],
        "protocol": cfg["protocol"],
        "dataset": cfg["dataset"],
        "max_tokens": cfg["max_tokens"],
        "temperature": cfg["temperature"],
        "notes": (
            f"embedded demo pair, {cfg['repeats']} repeats over {run.questions['question_id'].nunique()} "
            f"questions, {env.get('dtype')} on {env.get('device_name')} ({env.get('cpu_count')} cores), "
            f"alcheck {env.get('alcheck')}, torch {env.get('torch')}, measured {run.meta.get('created')}"
        ),
        "values": {str(s["k"]): round(s["al_mean"], 4) for s in run.summary},
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m alcheck.demo.reference RUN_DIR")
    ref = demo_reference(Path(argv[0]))
    # under the current folder: run from the checkout's root, that is the shipped table's source
    out = paths.LOCAL_REFERENCES_DIR / f"{ref['name']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(ref, indent=2, allow_nan=False) + "\n")
    print(f"wrote {out}: {ref['values']}")


if __name__ == "__main__":
    main(sys.argv[1:])
