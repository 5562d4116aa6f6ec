"""Options `alcheck run` (RunConfig) and `alcheck serve` (ServeConfig) both take: their allowed
values and their checks, so the two commands accept the same spellings with the same messages.

A leaf: it imports only the error type and the (torch-free) method table.
"""

from __future__ import annotations

import re

from alcheck.errors import AlcheckError
from alcheck.methods.table import METHOD_NAMES

DEVICES = ("auto", "cpu", "cuda")  # and cuda:N
DTYPES = ("auto", "float32", "float16", "bfloat16")
METHODS = ("auto", *METHOD_NAMES)  # auto: detected from the head's config and tensors
DRAFT_SAMPLING = ("onehot", "sampled")  # onehot: greedy drafts, accept with p(d) (vLLM, EAGLE repo)


def is_gpu_index(spec) -> bool:
    """cuda:N, one GPU by index."""
    return re.fullmatch(r"cuda:\d+", str(spec)) is not None


def check_device(device) -> None:
    if device not in DEVICES and not is_gpu_index(device):
        raise AlcheckError(f"--device {device}: use auto, cpu, cuda or cuda:N (N the GPU's index)")


def check_dtype(dtype) -> None:
    if dtype not in DTYPES:
        raise AlcheckError(f"--dtype {dtype}: use {', '.join(DTYPES[:-1])} or {DTYPES[-1]}")


def check_method(method) -> None:
    if method not in METHODS:
        raise AlcheckError(f"--method {method}: use one of {', '.join(METHODS)}")


def check_draft_sampling(rule) -> None:
    if rule not in DRAFT_SAMPLING:
        raise AlcheckError(f"--draft-sampling {rule}: use one of {', '.join(DRAFT_SAMPLING)}")


def check_count(flag: str, value) -> None:
    """A size of at least one: --max-batch-size, --block-size (a bool is no count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AlcheckError(f"{flag} {value}: must be an integer >= 1")
