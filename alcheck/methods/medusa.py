"""Medusa heads (`--method medusa --draft DIR`, vLLM's medusa): N residual heads over the target's
final-norm hidden state, head i drafting position i+1 of the chain (models/medusa.py,
runner/proposers/medusa.py). Chains only (vLLM's top-1 Medusa), K at most the number of heads."""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.methods.base import DraftMethod


def _local_config(draft) -> dict | None:
    """The head's config.json when --draft is a local folder (a hub id is checked once loaded)."""
    from alcheck.models.checkpoint_files import read_json

    file = Path(str(draft)) / "config.json"
    return read_json(file, "draft") if draft and file.is_file() else None


class Medusa(DraftMethod):
    name = "medusa"
    title = "Medusa heads"
    sglang_algorithm = None  # SGLang serves no Medusa

    def check_run_config(self, cfg) -> None:
        from alcheck.models.medusa import _count, check_k, is_medusa_config

        super().check_run_config(cfg)
        if getattr(cfg, "topk", 1) != 1:
            raise AlcheckError(
                f"--topk {cfg.topk} with --method medusa: alcheck drafts Medusa chains (vLLM's top-1 "
                "Medusa): drop --topk and --num-draft-tokens"
            )
        raw = _local_config(getattr(cfg, "draft", None))
        heads = _count(raw, "heads") if raw is not None and is_medusa_config(raw) else None
        if isinstance(heads, int) and heads >= 1:  # a count that is no count: medusa_spec names it
            ks = getattr(cfg, "ks", None) or [getattr(cfg, "k", 0)]
            check_k(max(ks), heads, cfg.draft)

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        from alcheck.models.medusa import is_medusa_config, medusa_tensor_names

        if is_medusa_config(config) or medusa_tensor_names(tensor_names):
            heads = config.get("num_heads", config.get("medusa_num_heads", "?"))
            return f"{heads} Medusa head(s) (residual blocks and lm_heads)"
        return None

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        from alcheck.models.checkpoint_files import tensor_names
        from alcheck.models.compat import check_target_config
        from alcheck.models.medusa import check_medusa_names, medusa_spec

        check_target_config(target_raw, target_dir)
        spec = medusa_spec(draft_raw, target_raw, draft_dir)
        check_medusa_names(spec, Path(draft_dir), tensor_names(Path(draft_dir), "draft"))

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        return target_raw.get("vocab_size")

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        from alcheck.models.medusa import config_bias, medusa_bytes, medusa_spec

        spec = medusa_spec(draft_raw, target_raw, Path("draft"))
        return medusa_bytes(spec, dtype_bytes, bias=config_bias(draft_raw))

    def kv_bytes_per_token(self, target_raw: dict, draft_raw: dict | None, itemsize: int) -> int:
        return 0  # no attention: the heads keep no KV

    def load(self, draft_dir: Path, target, dtype, device, tp=None):
        from alcheck.models.checkpoint_files import read_config
        from alcheck.models.medusa import load_medusa

        return load_medusa(draft_dir, read_config(Path(target.path), "target"), dtype, device)

    def owns(self, head) -> bool:
        from alcheck.models.medusa import MedusaHeads

        return isinstance(head, MedusaHeads)

    def proposer(self, head):
        from alcheck.runner.proposers.medusa import MedusaProposer

        return MedusaProposer(head)


MEDUSA = Medusa()
