"""EAGLE-3 heads (EAGLE3-NOTES): fc over three target layers' pre-norm states, one 2H-input
layer, their own lm_head over a draft vocabulary mapped to target ids by d2t. Two formats on disk:
the EAGLE repo's / SpecForge's, and speculators' (models/eagle3_loading.py reads both)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from alcheck.methods.base import DraftMethod


class Eagle3(DraftMethod):
    name = "eagle3"
    title = "an EAGLE-3 head"
    speculators_type = "eagle3"
    sglang_algorithm = "EAGLE3"

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        if config.get("speculators_model_type") == self.speculators_type:
            return f"speculators_model_type {self.speculators_type!r} in config.json"
        clues = []
        if any(n.startswith("midlayer.") for n in tensor_names):
            clues.append("midlayer.* tensors")
        if "d2t" in tensor_names:
            clues.append("a d2t tensor")
        if any(n.endswith("hidden_norm.weight") for n in tensor_names):
            clues.append("a hidden_norm")
        if "draft_vocab_size" in config:
            clues.append("draft_vocab_size in config.json")
        architectures = config.get("architectures") or []
        if any("eagle3" in str(a).lower() for a in architectures):
            clues.append(f"architecture {architectures[0]}")
        return ", ".join(clues) or None

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        from alcheck.models.eagle3_loading import check_config

        check_config(target_raw, draft_raw, target_dir, draft_dir)

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        return (
            draft_raw.get("draft_vocab_size") or draft_raw.get("vocab_size") or target_raw.get("vocab_size")
        )

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        """Either format: the config is parsed as the loader parses it (a head that ships its own
        embedding, different from the target's, adds vocab x hidden more)."""
        from alcheck.models.eagle3 import Eagle3Head
        from alcheck.models.eagle3_loading import check_config
        from alcheck.models.sizes import meta_bytes

        cfg = check_config(target_raw, draft_raw, Path("target"), Path("draft"))
        cfg.fc_bias = bool(cfg.fc_bias)  # None: the file decides; h numbers either way
        return meta_bytes(lambda: Eagle3Head(cfg), dtype_bytes)

    def load(self, draft_dir: Path, target, dtype, device, tp=None):
        from alcheck.models.eagle3_loading import load_eagle3

        if tp is not None and tp.size > 1:
            target = _full_embedding_view(target, tp, draft_dir)
        return load_eagle3(str(draft_dir), target, dtype, device)

    def owns(self, head) -> bool:
        from alcheck.models.eagle3 import Eagle3Head

        return isinstance(head, Eagle3Head)

    def proposer(self, head):
        from alcheck.runner.proposers.eagle3 import Eagle3Proposer

        return Eagle3Proposer(head)


def _full_embedding_view(target, tp, draft_dir: Path):
    """What load_eagle3 reads of the target on a tensor-parallel rank: its path, config and full
    embedding, which it compares with a head that ships its own copy. Only then is the split
    embedding gathered (every rank decides the same from the same file, so all reach the collective)."""
    from alcheck.models.checkpoint_files import open_checkpoint

    ships_embedding = any(
        n.removeprefix("model.") == "embed_tokens.weight"
        for n in open_checkpoint(Path(draft_dir), "draft").names()
    )
    embedding = target.model.model.embed_tokens
    weight = None
    if ships_embedding:
        weight = tp.all_gather_last(embedding.weight.t().contiguous(), embedding.vocab_size).t()
    inner = SimpleNamespace(
        model=SimpleNamespace(embed_tokens=SimpleNamespace(weight=weight)), config=target.model.config
    )
    return SimpleNamespace(path=target.path, model=inner, name=target.name)


EAGLE3 = Eagle3()
