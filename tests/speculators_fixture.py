"""The pair behind tests/data/speculators-0.9.0 (bench/make_speculators_fixture.py writes it).

Target: four layers 32 wide, unit-RMS embeddings, layers 1..3 damped, so a head copying its layer
0 drafts well (partial acceptance). The head is stored twice in the fixture: in the EAGLE repo's
format (the converter's input) and as speculators 0.9.0's converter wrote it.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.testing.tiny import damp_target_layers, make_tiny_eagle3, make_tiny_target

FIXTURE = Path(__file__).parent / "data" / "speculators-0.9.0"
TARGET_NAME = "alcheck-speculators-fixture-target"
AUX = (1, 2, 3)


def build_fixture_target(out: Path) -> Path:
    target = make_tiny_target(
        out,
        hidden_size=32,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=64,
        unit_rms_embeddings=True,
    )
    return damp_target_layers(target, first=1, factor=0.05)


def make_fixture_head(out: Path, target: Path) -> Path:
    return make_tiny_eagle3(
        out, target, fmt="eagle-repo", copy_target_layer=0, aux_layer_ids=AUX, norm_before_residual=True
    )
