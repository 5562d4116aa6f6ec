"""The table of drafting methods: which exist, how a head folder's kind is detected, and which
entry a name or a loaded head belongs to. The only module (with each entry's own file) that
spells a method's name.

Importing this module is cheap (no torch): `alcheck --help` and the run config read METHOD_NAMES.
Entries load on first use.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from alcheck import paths
from alcheck.errors import AlcheckError

if TYPE_CHECKING:  # types only
    from alcheck.methods.base import DraftMethod

# name -> "module:attribute" of its DraftMethod instance. Detection asks them in this order: the
# more specific first (a speculators EAGLE-3 head also has EAGLE-1's fc.weight and layers.0.*).
ENTRIES = {
    "eagle3": "alcheck.methods.eagle3:EAGLE3",
    "eagle": "alcheck.methods.eagle:EAGLE",
    "medusa": "alcheck.methods.medusa:MEDUSA",  # no fc.weight, no decoder layers: blocks.* and lm_heads.*
    "mtp": "alcheck.methods.mtp:MTP_METHOD",  # a whole LM too, with mtp_layers.*: before draft_model
    "draft_model": "alcheck.methods.draft_model:DRAFT_MODEL",  # the most general: asked after the heads
    "ngram": "alcheck.methods.ngram:NGRAM",
    "suffix": "alcheck.methods.suffix:SUFFIX",
}
METHOD_NAMES = tuple(sorted(ENTRIES))  # what --method takes besides "auto"
DEFAULT_METHOD = "eagle"  # the demo's head, and what `--method auto` means with no head to read
# the embedded demo target's EAGLE heads (gpu-check's CPU reference and engine-check iterate these)
DEMO_HEADS = {"eagle": paths.DEMO_DRAFT_DIR, "eagle3": paths.DEMO_EAGLE3_DIR}
# what `--method X` runs with no --draft: the heads, the demo's draft model and its MTP target (a
# target of its own that drafts itself; chains only, so not among the heads gpu-check compares)
DEMO_CHECKPOINTS = {**DEMO_HEADS, "draft_model": paths.DEMO_DRAFT_LM_DIR, "mtp": paths.DEMO_MTP_DIR}


@cache
def get_method(name: str) -> DraftMethod:
    if name not in ENTRIES:
        raise AlcheckError(f"--method {name}: use one of auto, {', '.join(METHOD_NAMES)}")
    module, attr = ENTRIES[name].split(":")
    return getattr(importlib.import_module(module), attr)


def all_methods() -> list[DraftMethod]:
    return [get_method(name) for name in ENTRIES]


def method_for_sglang_algorithm(algorithm) -> DraftMethod | None:
    """The entry an SGLang server's speculative_algorithm (any case) runs, or None (NGRAM, one alcheck
    lacks)."""
    name = str(algorithm).upper()
    return next(
        (m for m in all_methods() if m.sglang_algorithm is not None and m.sglang_algorithm == name), None
    )


def speculators_types() -> list[str]:
    """The speculators_model_type values of the heads alcheck runs."""
    return [m.speculators_type for m in all_methods() if m.speculators_type is not None]


def method_for_speculators_type(kind) -> DraftMethod | None:
    """The entry whose heads carry speculators_model_type `kind`, or None (a speculators model alcheck cannot
    run)."""
    return next(
        (m for m in all_methods() if m.speculators_type is not None and m.speculators_type == kind), None
    )


def demo_head(method: str) -> Path:
    """The demo target's head for --method (auto: the default method's)."""
    return DEMO_CHECKPOINTS.get(method, DEMO_CHECKPOINTS[DEFAULT_METHOD])


def detect(directory: Path) -> tuple[str, str]:
    """(method name, the evidence in words) for the head in directory."""
    from alcheck.models.checkpoint_files import read_config, tensor_names

    raw = read_config(directory, "draft")
    kind = raw.get("speculators_model_type")
    if kind is not None and method_for_speculators_type(kind) is None:  # before the tensors:
        # another speculators model can hold EAGLE-1's fc.weight and layers.0.* too
        raise AlcheckError(
            f"draft {directory}: speculators_model_type {kind!r}: alcheck runs EAGLE-1 heads in the "
            "EAGLE repo format and EAGLE-3 heads in either format"
        )
    names = {n.removeprefix("model.") for n in tensor_names(directory, "draft")}
    for method in all_methods():
        evidence = method.detect(raw, names)
        if evidence:
            return method.name, evidence
    raise AlcheckError(
        f"draft {directory}: neither an EAGLE-1 nor an EAGLE-3 head (no fc.weight with layers.0.* or "
        "midlayer.*) nor a whole causal LM (embed_tokens, layers.*, norm): pass an EAGLE head or a "
        "draft model checkpoint"
    )


def resolve_method(method: str, draft: str) -> str:
    """--method auto -> the detected kind; an explicit --method must agree with the files."""
    from alcheck.models.hub import resolve_checkpoint

    if method != "auto":
        get_method(method)  # an unknown name fails here, before any file is read
    directory = resolve_checkpoint(draft, "draft")
    entry = None if method == "auto" else get_method(method)
    if entry is not None and entry.draft_in_target:  # --method mtp: the folder must hold MTP layers
        entry.refuse_other(directory)
    found, evidence = detect(directory)
    if method not in ("auto", found):
        raise AlcheckError(
            f"--method {method}: {draft} is {get_method(found).title} ({evidence}): "
            f"pass --method {found} or --method auto"
        )
    return found


def method_of(head) -> DraftMethod:
    """The entry a loaded head belongs to."""
    for method in all_methods():
        if method.owns(head):
            return method
    raise TypeError(f"no drafting method owns a {type(head).__name__}")


def proposer_for(head):
    """The proposer for a loaded head (None: target-only decoding)."""
    return None if head is None else method_of(head).proposer(head)
