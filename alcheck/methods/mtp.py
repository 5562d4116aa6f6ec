"""Multi-token prediction (`--method mtp`, vLLM's method "mtp"): the target's own MTP layers draft
K tokens, fed the trunk's last-layer output before the final norm. MiMo's format first
(`MiMoForCausalLM`, `num_nextn_predict_layers`, `model.mtp_layers.{i}.*`; models/mimo_mtp.py).

The "draft" folder is the target folder itself: `--draft` may be left out, or must name it.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.methods.base import DraftMethod

MTP_PREFIX = "mtp_layers."  # tensor names as detect sees them ("model." removed)


class MTP(DraftMethod):
    name = "mtp"
    title = "a target with MTP layers"
    sglang_algorithm = None  # SGLang runs MTP as EAGLE with the target's own layers: not compared here
    draft_in_target = True

    def check_run_config(self, cfg) -> None:
        super().check_run_config(cfg)
        if getattr(cfg, "topk", 1) != 1:
            raise AlcheckError(
                f"--topk {cfg.topk} with --method mtp: MTP layers draft one chain per step (vLLM's "
                "mtp): drop --topk and --num-draft-tokens"
            )

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        count = config.get("num_nextn_predict_layers") or 0
        if count and any(n.startswith(MTP_PREFIX) for n in tensor_names):
            arch = ",".join(config.get("architectures") or []) or "causal LM"
            return f"a {arch} target with {count} MTP layer(s) ({MTP_PREFIX}*)"
        return None

    def refuse_other(self, directory: Path) -> None:
        """--method mtp on a folder that is no MTP target: the one-line refusal."""
        from alcheck.models.checkpoint_files import read_config, tensor_names
        from alcheck.models.mimo_mtp import check_mimo_target

        check_mimo_target(read_config(directory, "target"), directory, set(tensor_names(directory, "target")))

    def check_config(self, target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> None:
        from alcheck.models.checkpoint_files import tensor_names
        from alcheck.models.mimo_mtp import check_mimo_target

        if Path(draft_dir).resolve() != Path(target_dir).resolve():
            raise AlcheckError(
                f"--method mtp: --draft {draft_dir} is not the target {target_dir}: MTP layers live in "
                "the target's own checkpoint: drop --draft (or pass the target folder)"
            )
        check_mimo_target(target_raw, Path(target_dir), set(tensor_names(Path(target_dir), "target")))

    def draft_vocab_size(self, target_raw: dict, draft_raw: dict) -> int | None:
        return target_raw.get("vocab_size")

    def weight_bytes(self, target_raw: dict, draft_raw: dict, dtype_bytes: int) -> int:
        from alcheck.models.mimo_mtp import mtp_head_bytes

        return mtp_head_bytes(target_raw, Path("target"), dtype_bytes)

    def kv_bytes_per_token(self, target_raw: dict, draft_raw: dict | None, itemsize: int) -> int:
        from alcheck.models.compat import layer_kv_bytes
        from alcheck.models.mimo_mtp import mtp_layer_count

        # every MTP layer gets a cache (vLLM allocates them all), at the trunk's KV width
        return max(1, mtp_layer_count(target_raw)) * layer_kv_bytes(target_raw, itemsize)

    def load(self, draft_dir: Path, target, dtype, device, tp=None):
        from alcheck.models.mimo_mtp import load_mtp_head

        return load_mtp_head(draft_dir, dtype, device)

    def owns(self, head) -> bool:
        from alcheck.models.mimo_mtp import MiMoMTPHead

        return isinstance(head, MiMoMTPHead)

    def proposer(self, head):
        from alcheck.runner.proposers.mtp import MTPProposer

        return MTPProposer(head)


MTP_METHOD = MTP()
