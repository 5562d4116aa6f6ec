"""A readable name for the machine a run used (the GPU's name, or the CPU model): for run.json,
benches and gpu-check. Imports only torch, so gpu-check can use it on a bare machine."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def device_name(device) -> str:
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
