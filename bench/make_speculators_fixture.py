"""Regenerate tests/data/speculators-0.9.0/: a tiny EAGLE-3 head in the EAGLE repo's format and
the same head converted by speculators 0.9.0's own converter (`speculators.convert.entrypoints.
convert_model`, what `speculators convert` runs), so the tests load what the real tool writes.

speculators is not an alcheck dependency (0.9.0 pins transformers<=5.19 and pulls torchvision,
torchaudio and openai). Run this in a throwaway environment that has it, e.g.:

    python -m venv --system-site-packages /tmp/specvenv
    /tmp/specvenv/bin/pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0
    /tmp/specvenv/bin/pip install loguru openai aiohttp psutil
    PYTHONPATH=. /tmp/specvenv/bin/python bench/make_speculators_fixture.py

The converter also writes config.py, a copy of speculators' Eagle3SpeculatorConfig source that
config.json's `auto_map` points at. alcheck never reads or runs it, and it is speculators' code,
so it is not kept in the repository (fixture.json records that it was written).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "speculators-0.9.0"
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    from importlib.metadata import version

    from speculators.convert.entrypoints import convert_model
    from speculators_fixture import AUX, TARGET_NAME, build_fixture_target, make_fixture_head

    if FIXTURE.exists():
        shutil.rmtree(FIXTURE)
    FIXTURE.mkdir(parents=True)
    converted = FIXTURE / "converted"
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the converter records the verifier as given: a relative name, not a temporary path
        try:
            target = build_fixture_target(Path(TARGET_NAME))
            eagle = make_fixture_head(FIXTURE / "eagle3", target)
            convert_model(
                model=str(eagle),
                verifier=TARGET_NAME,
                algorithm="eagle3",
                output_path=str(converted),
                norm_before_residual=True,
                eagle_aux_hidden_state_layer_ids=list(AUX),
            )
        finally:
            os.chdir(here)
    wrote = sorted(p.name for p in converted.iterdir())
    (converted / "config.py").unlink()
    (FIXTURE / "fixture.json").write_text(
        json.dumps(
            {
                "speculators": version("speculators"),
                "call": f"convert_model(model='eagle3', verifier='{TARGET_NAME}', algorithm='eagle3', "
                "norm_before_residual=True, eagle_aux_hidden_state_layer_ids=[1, 2, 3])",
                "converter_wrote": wrote,
                "kept": sorted(p.name for p in converted.iterdir()),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
