"""What a drafting method is: the one place that knows a kind of draft head.

A new method (EAGLE-1 static trees, MTP heads, n-gram with no checkpoint) is one subclass of
DraftMethod in its own file, one line in methods/table.py, and one proposer class in
runner/proposers/. Nothing in the backends, serve, tensor parallelism, the KV budget or the run
config changes: they ask the entry.

This module is a leaf: it imports nothing above it, and nothing torch-heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only
    from torch import nn

    from alcheck.models.loading import Target
    from alcheck.runner.proposers.base import Proposer


class DraftMethod:
    """One kind of draft head. Subclasses set `name` and `title` and implement every method."""

    name: str  # the --method value, and config.method in run.json
    title: str  # in messages: "an EAGLE-1 head"
    speculators_type: str | None = None  # the speculators_model_type of its heads in that format, if any
    # False: a model-free method (n-gram): no --draft, no head, no draft KV; it implements
    # model_free_proposer instead of the checkpoint methods below
    needs_checkpoint: bool = True
    sglang_algorithm: str | None = None  # SGLang's --speculative-algorithm for it, if SGLang runs it
    # True: drafts depend on other requests (suffix decoding's global tree): each cell records its
    # request order in run.json, and `history` says what the drafts depend on
    history_across_requests: bool = False
    # True: the target's own checkpoint holds the draft (MTP layers): --draft is the target folder
    draft_in_target: bool = False

    def check_run_config(self, cfg) -> None:
        """The run config's method-specific settings (a RunConfig or ServeConfig), resolved in place;
        one-line AlcheckError for what this method cannot take. A method with a head takes no
        n-gram or suffix decoding options."""
        from alcheck.methods.ngram_options import refuse_ngram_options
        from alcheck.methods.suffix_options import refuse_suffix_options

        refuse_ngram_options(cfg)
        refuse_suffix_options(cfg)

    def run_options(self, cfg) -> dict:
        """The settings a model-free method's proposer needs (PairPlan.method_options): none here."""
        return {}

    def history(self, cfg) -> str | None:
        """history_across_requests: what a run's drafts depend on besides each question, in words
        (run.json's `drafting_history`)."""
        return None

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        """The evidence, in words, that a head folder holds this kind (config.json and tensor
        names, "model." prefixes removed), or None. The table asks the entries in its order."""
        raise NotImplementedError

    def refuse_other(self, directory: Path) -> None:
        """draft_in_target: one-line AlcheckError when `directory` holds none of this kind."""
        raise NotImplementedError

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        """Config-only checks before any weight is read: does this head fit this target?
        One-line AlcheckError otherwise."""
        raise NotImplementedError

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        """How many tokens a draft position chooses from (a tree node's most children)."""
        raise NotImplementedError

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        """The head's parameter bytes in a dtype of `dtype_bytes`, counted on the meta device
        (nothing allocated): what the GPU must hold beside the target before the KV pool."""
        raise NotImplementedError

    def kv_bytes_per_token(self, target_raw: dict, draft_raw: dict | None, itemsize: int) -> int:
        """The draft's KV bytes for one position (K and V): an EAGLE head's one layer, at the
        target's KV width, by default (models/compat.kv_bytes_per_token)."""
        from alcheck.models.compat import layer_kv_bytes

        return layer_kv_bytes(target_raw, itemsize)

    def load(self, draft_dir: Path, target: Target, dtype, device, tp=None) -> nn.Module:
        """The head's weights, strictly (every tensor used or allow-listed, every value finite).
        tp: a tensor-parallel rank's TPGroup (the target is this rank's shard; the head is whole)."""
        raise NotImplementedError

    def owns(self, head: nn.Module) -> bool:
        """Whether a loaded head is this method's (tests and tools hand heads around)."""
        raise NotImplementedError

    def proposer(self, head: nn.Module) -> Proposer:
        """The per-head drafting adapter the runners call (runner/proposers/)."""
        raise NotImplementedError

    def model_free_proposer(self, options: dict, eos_ids):
        """needs_checkpoint False: the proposer (runner/proposers/model_free.py) for the run's
        method options (PairPlan.method_options) and the target's EOS ids."""
        raise NotImplementedError
