"""Where alcheck's shipped files live (the repo is installed editable: `pip install -e .`)."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
DATASETS_DIR = REPO_ROOT / "datasets"
MT_BENCH_FILE = DATASETS_DIR / "mt_bench" / "question.jsonl"
REFERENCES_DIR = REPO_ROOT / "results" / "references"
RUNS_DIR = REPO_ROOT / "results" / "runs"
DEMO_MODELS_DIR = PACKAGE_DIR / "demo" / "models"
# folder names double as model ids: results/references/demo.json matches them
DEMO_TARGET_NAME, DEMO_DRAFT_NAME = "alcheck-demo-llama", "alcheck-demo-eagle"
DEMO_TARGET_DIR = DEMO_MODELS_DIR / DEMO_TARGET_NAME
DEMO_DRAFT_DIR = DEMO_MODELS_DIR / DEMO_DRAFT_NAME
DEMO_EAGLE3_NAME = "alcheck-demo-eagle3"  # the demo target's EAGLE-3 head (`--method eagle3` with no --draft)
DEMO_EAGLE3_DIR = DEMO_MODELS_DIR / DEMO_EAGLE3_NAME
