"""Where the pair runs and in which dtype: `--device`, `--dtype` and tensor-parallel ranks' devices."""

from __future__ import annotations

import torch

from alcheck.errors import AlcheckError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(spec: str, flag: str = "--device") -> str:
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise AlcheckError(
            f"{flag} {spec}: no CUDA device is visible: use {flag} cpu"
            f"{' (or auto)' if flag == '--device' else ''}"
        )
    if spec.startswith("cuda:") and int(spec[5:]) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise AlcheckError(
            f"{flag} {spec}: this machine has {count} CUDA device{'s' * (count != 1)} "
            f"(cuda:0..cuda:{count - 1}): pass one of those"
        )
    return spec


def resolve_dtype(spec: str, device: str, target_config: dict) -> str:
    if spec != "auto":
        return spec
    if device == "cpu":
        return "float32"  # the lossless check is exact only in float32
    dtype = target_config.get("torch_dtype") or target_config.get("dtype") or "bfloat16"
    return dtype if dtype in DTYPES else "bfloat16"


def rank_devices(n: int, device: str, devices: list[str] | None = None) -> list[str]:
    """Tensor-parallel rank r's device: devices[r] when given (alcheck.tp.checks made
    len(devices) == n), else cuda:r for --device cuda, else cpu for every rank."""
    if devices:
        return list(devices)
    if str(device).startswith("cuda"):
        return [f"cuda:{r}" for r in range(n)]
    return ["cpu"] * n
