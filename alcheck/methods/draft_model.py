"""Draft language models (`--method draft_model --draft DIR`, vLLM's draft_model): a smaller causal
LM of the target table (Llama, Qwen2/3, Mistral, ...) with the target's vocabulary and tokenizer
drafts K tokens greedily, with its own paged KV (models/draft_lm.py, runner/proposers/draft_model.py)."""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.methods.base import DraftMethod


class DraftModel(DraftMethod):
    name = "draft_model"
    title = "a draft language model"
    sglang_algorithm = "STANDALONE"  # SGLang's name for drafting with a separate model

    def check_run_config(self, cfg) -> None:
        super().check_run_config(cfg)
        if getattr(cfg, "topk", 1) != 1:
            raise AlcheckError(
                f"--topk {cfg.topk} with --method draft_model: a draft model drafts one chain per step "
                "(vLLM's draft_model): drop --topk and --num-draft-tokens"
            )

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        # asked last (methods/table.py): a whole decoder with its embedding and final norm, no head parts
        if "fc.weight" in tensor_names or any(n.startswith("midlayer.") for n in tensor_names):
            return None
        layers = any(n.startswith("layers.") for n in tensor_names)
        if layers and {"embed_tokens.weight", "norm.weight"} <= tensor_names:
            kind = config.get("model_type") or ",".join(config.get("architectures") or []) or "causal"
            return f"a whole {kind} causal LM (embed_tokens, layers.*, norm)"
        return None

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        from alcheck.models.draft_lm import check_draft_lm

        check_draft_lm(target_raw, draft_raw, target_dir, draft_dir)

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        return draft_raw.get("vocab_size")

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        from alcheck.models.draft_lm import draft_lm_bytes

        return draft_lm_bytes(draft_raw, Path("draft"), dtype_bytes)

    def kv_bytes_per_token(self, target_raw: dict, draft_raw: dict | None, itemsize: int) -> int:
        from alcheck.models.compat import layer_kv_bytes

        if draft_raw is None:
            return super().kv_bytes_per_token(target_raw, draft_raw, itemsize)
        return draft_raw["num_hidden_layers"] * layer_kv_bytes(draft_raw, itemsize)  # its own layers

    def load(self, draft_dir: Path, target, dtype, device, tp=None):
        from alcheck.models.draft_lm import load_draft_lm

        return load_draft_lm(draft_dir, dtype, device)

    def owns(self, head) -> bool:
        from alcheck.models.draft_lm import DraftLM

        return isinstance(head, DraftLM)

    def proposer(self, head):
        from alcheck.runner.proposers.draft_model import DraftModelProposer

        return DraftModelProposer(head)


DRAFT_MODEL = DraftModel()
