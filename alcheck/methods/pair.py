"""The pair (target + draft head), planned and loaded the one way every consumer uses: the
built-in backend of `alcheck run`, its worker processes and tensor-parallel ranks, and `alcheck serve`.

plan_pair does everything that needs no weights, so a bad pair exits 2 in seconds: find the head,
check its config against the target's (its drafting method's rules), check that a tree's topk fits
the head's vocabulary, resolve devices and dtype, check tensor-parallel sizes, and on a GPU check
that the weights fit. load_pair then streams the weights in, strictly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.methods.table import get_method


@dataclass
class PairPlan:
    """What was decided before any weight loads. Plain data: it travels to worker processes."""

    target_dir: Path
    draft_dir: Path | None  # None: a model-free method (n-gram), no head
    method: str  # an entry of methods/table.py
    dtype: str  # float32 | float16 | bfloat16
    devices: list[str] = field(default_factory=lambda: ["cpu"])  # one per worker or rank, else one
    chat_template: str | None = None
    method_options: dict = field(default_factory=dict)  # a model-free method's settings (n-gram rule)

    @property
    def entry(self):
        return get_method(self.method)


@dataclass
class LoadedPair:
    target: object  # alcheck.models.loading.Target: model, tokenizer, eos ids, path
    head: object  # the draft head module (None: a model-free method)
    proposer: object  # runner/proposers/: what the runners call to draft


def plan_pair(
    target_dir: Path,
    target_raw: dict,
    draft: str,
    method: str,
    *,
    topk: int = 1,
    device: str = "auto",
    devices: list[str] | None = None,
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
    chat_template: str | None = None,
    method_options: dict | None = None,
) -> PairPlan:
    """devices: --devices (one worker each, or one per tensor-parallel rank); else --device.
    method_options: a model-free method's settings (it has no draft: `draft` is ignored)."""
    from alcheck.models.compat import check_topk_fits_vocab
    from alcheck.models.loading import read_config, resolve_checkpoint
    from alcheck.models.sizes import target_weight_bytes
    from alcheck.models.targets import find_target
    from alcheck.runner.kv_budget import check_device_weights
    from alcheck.sweep.placement import DTYPES, rank_devices, resolve_device, resolve_dtype

    kind = find_target(target_raw, target_dir)  # an architecture alcheck cannot run: exit 2 now
    entry = get_method(method)
    draft_dir = draft_raw = None
    if entry.needs_checkpoint:
        draft_dir = resolve_checkpoint(draft, "draft")
        draft_raw = read_config(draft_dir, "draft")
        entry.check_config(target_raw, draft_raw, target_dir, draft_dir)
        check_topk_fits_vocab(topk, entry.draft_vocab_size(target_raw, draft_raw), draft_dir)
    # --devices: one worker per device, or with --tensor-parallel-size one device per rank; the run
    # config made them all one kind, so one dtype
    placed = [resolve_device(d, "--devices") for d in devices] if devices else [resolve_device(device)]
    dtype = resolve_dtype(dtype, placed[0], target_raw)
    if tensor_parallel_size > 1:
        from alcheck.tp.checks import check_tensor_parallel

        if not kind.tensor_parallel:
            raise AlcheckError(
                f"--tensor-parallel-size {tensor_parallel_size}: a {kind.model_type!r} target runs "
                "through transformers' modeling code, which alcheck does not split over ranks; tensor "
                "parallelism runs Llama targets only: drop --tensor-parallel-size (--devices spreads "
                "the passes over devices instead)"
            )
        check_tensor_parallel(tensor_parallel_size, target_raw, placed[0], devices and placed)
        placed = rank_devices(tensor_parallel_size, placed[0], devices and placed)
    size = DTYPES[dtype].itemsize
    weight_bytes = target_weight_bytes(target_raw, size, tensor_parallel_size, Path(target_dir))
    if entry.needs_checkpoint:
        weight_bytes += entry.weight_bytes(target_raw, draft_raw, size)
    for each in dict.fromkeys(placed):  # on a GPU: exit 2 if they cannot fit
        check_device_weights(weight_bytes, dtype, each)
    return PairPlan(
        Path(target_dir), draft_dir, entry.name, dtype, placed, chat_template, dict(method_options or {})
    )


def load_pair(plan: PairPlan, device: str, *, tokenizer=None, tp=None) -> LoadedPair:
    """The weights on `device`. tokenizer: the one the caller already loaded (else loaded here);
    tp: a tensor-parallel rank's TPGroup (its shard of the target; the head is whole)."""
    from alcheck.models.cpu_linear import pack_linears
    from alcheck.models.loading import load_target
    from alcheck.sweep.placement import DTYPES

    dtype = DTYPES[plan.dtype]
    target = load_target(
        str(plan.target_dir), dtype, device, chat_template=plan.chat_template, tp=tp, tokenizer=tokenizer
    )
    head = plan.entry.load(plan.draft_dir, target, dtype, device, tp) if plan.entry.needs_checkpoint else None
    pack_linears(target.model, head)  # float32 on an x86 CPU: oneDNN, weights reordered once
    if head is None:  # model-free: no head, the proposer from the run's options
        return LoadedPair(
            target, None, plan.entry.model_free_proposer(plan.method_options, target.eos_token_ids)
        )
    return LoadedPair(target, head, plan.entry.proposer(head))
