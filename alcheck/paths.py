"""Where alcheck's files live: what it ships (read through importlib.resources) and where it writes.

Shipped, read-only:
- the demo models, package data of alcheck.demo (alcheck/demo/models);
- the question files and the reference tables. Their source is the repository's top-level
  `datasets/` and `results/references/`; the wheel build copies them into the package as
  `alcheck/data/datasets` and `alcheck/data/references` (setup.py). From a checkout (an editable
  install, or PYTHONPATH) the package has no `data/`, and the sources are read in place.
  Never a top-level package `datasets`: that name is Hugging Face's.

Written: under the current folder (`results/runs/`, `results/references/`) or where --out says,
never into the install folder.
"""

from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(str(resources.files("alcheck")))
# the checkout's root (tests, bench, baselines): meaningful only when run from a checkout
REPO_ROOT = PACKAGE_DIR.parent
# package data folder under alcheck/ -> its source in the repository (setup.py copies one to the other)
SHIPPED_SOURCES = {"data/datasets": "datasets", "data/references": "results/references"}


def shipped_dir(name: str) -> Path:
    """A shipped data folder: the installed package's copy, else (a checkout) its source."""
    packaged = resources.files("alcheck").joinpath(*name.split("/"))
    if packaged.is_dir():
        return Path(str(packaged))
    return REPO_ROOT / SHIPPED_SOURCES[name]


DATASETS_DIR = shipped_dir("data/datasets")
MT_BENCH_FILE = DATASETS_DIR / "mt_bench" / "question.jsonl"
REFERENCES_DIR = shipped_dir("data/references")  # the published tables alcheck ships

# what alcheck writes, relative to the current folder
RUNS_DIR = Path("results") / "runs"
LOCAL_REFERENCES_DIR = Path("results") / "references"  # `alcheck import`'s tables; read beside the shipped


def reference_dirs() -> list[Path]:
    """Where reference tables are read by default: the shipped ones, then the current folder's
    results/references/ when it exists and is another folder (in a checkout's root it is the same)."""
    dirs = [REFERENCES_DIR]
    local = LOCAL_REFERENCES_DIR
    if local.is_dir() and not (REFERENCES_DIR.is_dir() and local.samefile(REFERENCES_DIR)):
        dirs.append(local)
    return dirs


DEMO_MODELS_DIR = Path(str(resources.files("alcheck").joinpath("demo", "models")))
# folder names double as model ids: results/references/demo.json matches them
DEMO_TARGET_NAME, DEMO_DRAFT_NAME = "alcheck-demo-llama", "alcheck-demo-eagle"
DEMO_TARGET_DIR = DEMO_MODELS_DIR / DEMO_TARGET_NAME
DEMO_DRAFT_DIR = DEMO_MODELS_DIR / DEMO_DRAFT_NAME
DEMO_EAGLE3_NAME = "alcheck-demo-eagle3"  # the demo target's EAGLE-3 head (`--method eagle3` with no --draft)
DEMO_EAGLE3_DIR = DEMO_MODELS_DIR / DEMO_EAGLE3_NAME
DEMO_DRAFT_LM_NAME = (
    "alcheck-demo-draft"  # the demo target's draft LM (`--method draft_model` with no --draft)
)
DEMO_DRAFT_LM_DIR = DEMO_MODELS_DIR / DEMO_DRAFT_LM_NAME
# the demo target in MiMo's format with a trained MTP layer (`--method mtp` with no --target)
DEMO_MTP_NAME = "alcheck-demo-mimo"
DEMO_MTP_DIR = DEMO_MODELS_DIR / DEMO_MTP_NAME


def user_cache_dir() -> Path:
    """alcheck's own cache (converted GGUF checkpoints, the real model, engine venvs):
    $ALCHECK_CACHE_DIR, else $XDG_CACHE_HOME/alcheck, else ~/.cache/alcheck."""
    import os

    if os.environ.get("ALCHECK_CACHE_DIR"):
        return Path(os.environ["ALCHECK_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "alcheck"
