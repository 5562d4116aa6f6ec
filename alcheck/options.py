"""Option values and defaults that more than one command takes (`alcheck run` / `ablate` through
RunConfig, `alcheck serve` through ServeConfig, `alcheck import`, `compare`, `gate`): each value,
default and check is defined here once, so the commands accept the same spellings with the same
messages. Their click declarations are in cli/option_specs.py, which reads these.

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
ONEHOT, SAMPLED = DRAFT_SAMPLING
DEFAULT_DRAFT_SAMPLING = ONEHOT  # at temperature 0 both rules draft alike
DEFAULT_BLOCK_SIZE = 16  # KV block size in tokens (vLLM's default)
MIN_NUM_BLOCKS = 2  # the null block and one real block
DEFAULT_TIMEOUT_S = 900.0  # --request-timeout, --engine-start-timeout: one request of a big model
DEFAULT_TOLERANCE = 0.02  # AL: a gate's or comparison's largest difference that still passes


def is_tree(topk) -> bool:
    """Tree drafting: a branching above 1 per expanded node (1 and None, unstated, are the chain)."""
    return (topk or 1) > 1


def is_gpu_index(spec) -> bool:
    """cuda:N, one GPU by index."""
    return re.fullmatch(r"cuda:\d+", str(spec)) is not None


def parse_ks(text: str) -> list[int]:
    """--ks of run, ablate and gate: '1-5' -> [1..5]; '1,2,4' -> [1, 2, 4]; mixed '1-3,5' too;
    sorted. A K given twice ('1,1', '1-3,2') is refused: it reads as a typo, not as more repeats."""
    ks: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise AlcheckError(
                f"--ks {text!r}: cannot read {part!r}: write a range like 1-5 or a list like 1,2,4"
            )
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if min(lo, hi) < 1:
            raise AlcheckError(f"--ks {text!r}: K must be >= 1 (K drafted tokens per step): drop the 0")
        if hi < lo:
            raise AlcheckError(f"--ks {text!r}: range {part} runs backwards: write it as {hi}-{lo}")
        twice = sorted(set(ks) & set(range(lo, hi + 1)))
        if twice:
            raise AlcheckError(
                f"--ks {text!r}: K={twice[0]} is given twice: list each K once (--repeats runs a K again)"
            )
        ks.extend(range(lo, hi + 1))
    return sorted(ks)


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


def is_count(value, minimum: int = 1) -> bool:
    """An integer of at least `minimum`; a bool is no count, nor is 2.0. The one integer check:
    check_count below for a flag, and checks of files and settings that word their own message."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_count(flag: str, value, minimum: int = 1, note: str = "") -> None:
    """A flag's integer of at least `minimum`: --max-batch-size, --block-size, --k, --repeats, ...
    `note` follows the message as given (" (why)" or ": what to pass instead")."""
    if not is_count(value, minimum):
        raise AlcheckError(f"{flag} {value}: must be an integer >= {minimum}{note}")


def check_num_blocks(num_blocks) -> None:
    """--num-blocks: None sizes the KV cache automatically."""
    if num_blocks is not None:
        check_count(
            "--num-blocks",
            num_blocks,
            MIN_NUM_BLOCKS,
            ": leave it out to size the cache automatically",
        )
