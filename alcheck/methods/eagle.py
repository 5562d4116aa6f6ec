"""EAGLE-1 heads (EAGLE-NOTES): fc over [embedding; the target's final-norm hidden state], one
Llama decoder layer, the target's own embedding and lm_head. One file of the EAGLE repo's format:
config.json + pytorch_model.bin or safetensors with `fc.*` and `layers.0.*`."""

from __future__ import annotations

from pathlib import Path

from alcheck.methods.base import DraftMethod


class Eagle(DraftMethod):
    name = "eagle"
    title = "an EAGLE-1 head"
    sglang_algorithm = "EAGLE"  # SGLang runs EAGLE-2 trees of EAGLE-1 heads under this name

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        # asked after EAGLE-3 (methods/table.py): a head with these and no EAGLE-3 clue
        if "fc.weight" in tensor_names and any(n.startswith("layers.0.") for n in tensor_names):
            return "fc.weight and layers.0.* without EAGLE-3 tensors"
        return None

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        from alcheck.models.compat import check_draft_config

        check_draft_config(target_raw, draft_raw, target_dir, draft_dir)

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        return target_raw.get("vocab_size")  # drafts come from the target's own lm_head

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        from alcheck.models.config import ModelConfig
        from alcheck.models.eagle import EagleHead
        from alcheck.models.sizes import meta_bytes

        return meta_bytes(lambda: EagleHead(ModelConfig.from_dict(draft_raw)), dtype_bytes)

    def load(self, draft_dir: Path, target, dtype, device, tp=None):
        from alcheck.models.loading import load_eagle

        return load_eagle(str(draft_dir), target, dtype, device)  # a split embedding is compared rank by rank

    def owns(self, head) -> bool:
        from alcheck.models.eagle import EagleHead

        return isinstance(head, EagleHead)

    def proposer(self, head):
        from alcheck.runner.proposers.eagle import EagleProposer

        return EagleProposer(head)


EAGLE = Eagle()
