"""Bad --tensor-parallel-size input, found from config.json and the flags before any weight loads.

One AlcheckError line each (the CLI exits 2):
- the target's attention heads or KV heads not divisible by N (names both and the sizes that work);
- N greater than the number of visible GPUs with --device cuda;
- --devices together with N: allowed only as one device per rank (len(devices) == N), which then
  places rank r on devices[r]; tensor parallelism and --devices worker processes do not mix.
The MLP's intermediate size and the vocabulary need not divide: they are split unevenly
(parts differ by one row). The draft head is replicated, so it puts no condition on N.
"""

from __future__ import annotations

import torch

from alcheck.errors import AlcheckError
from alcheck.options import check_count


def valid_sizes(num_heads: int, num_kv_heads: int) -> list[int]:
    """The tensor-parallel sizes that divide both head counts."""
    return [n for n in range(1, num_kv_heads + 1) if num_heads % n == 0 and num_kv_heads % n == 0]


def check_tensor_parallel(
    size,
    target_raw: dict,
    device: str = "cpu",
    devices: list[str] | None = None,
    num_visible_gpus: int | None = None,
) -> None:
    """Refuse a tensor-parallel size that cannot work for this target and these devices."""
    flag = f"--tensor-parallel-size {size}"
    check_count("--tensor-parallel-size", size, note=" (1 = no tensor parallelism)")
    if size == 1:
        return
    heads = target_raw.get("num_attention_heads")
    kv_heads = target_raw.get("num_key_value_heads") or heads
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or heads < 1 or kv_heads < 1:
        raise AlcheckError(
            f"{flag}: the target's config.json has no usable num_attention_heads: pass a complete config.json"
        )
    if heads % size or kv_heads % size:
        sizes = ", ".join(map(str, valid_sizes(heads, kv_heads)))
        raise AlcheckError(
            f"{flag}: the target has {heads} attention heads and {kv_heads} KV heads, and each rank "
            f"needs a whole share of both: use one of {sizes}"
        )
    if devices:
        if len(devices) != size:
            raise AlcheckError(
                f"{flag} with --devices {','.join(devices)}: with tensor parallelism --devices names "
                f"one device per rank: list {size} devices, or drop --devices"
            )
        return
    if str(device).startswith("cuda"):
        if str(device) != "cuda":
            raise AlcheckError(
                f"{flag} with --device {device}: the ranks need one GPU each: pass --device cuda "
                f"(ranks on cuda:0..{size - 1}) or --devices with {size} GPUs"
            )
        visible = torch.cuda.device_count() if num_visible_gpus is None else num_visible_gpus
        if size > visible:
            raise AlcheckError(
                f"{flag} with --device cuda: each rank needs its own GPU but {visible} "
                f"{'is' if visible == 1 else 'are'} visible: use --tensor-parallel-size {max(visible, 1)} "
                "or fewer, or make more GPUs visible (CUDA_VISIBLE_DEVICES)"
            )
