"""The printout of vLLM's `examples/offline_inference/spec_decode.py` (later
`examples/features/speculative_decoding/spec_decode_offline.py`), as saved from its stdout.

Two versions print different lines:
- `total_num_output_tokens: N`, `num_drafts: N`, `num_draft_tokens: N`, `num_accepted_tokens: N`,
  `mean acceptance length: X.XX`, then `acceptance at token i: X.XX` for i = 0..K-1;
- `Number of drafts:`, `Draft tokens generated:`, `Accepted tokens:`, `Mean acceptance length:`
  (values left-aligned in a 10-wide field), with `Total output tokens:` and
  `Draft utilization rate:` around them.
Other lines (vLLM's logs) are skipped. The counts are whole-run (vllm_counts): a reference table.
The printout states no setting but K (num_draft_tokens / num_drafts, or the per-position lines).
"""

from __future__ import annotations

import re
from pathlib import Path

from alcheck.imports.records import Aggregate
from alcheck.imports.source import bad, read_text
from alcheck.imports.vllm_counts import COUNTING, checked, k_of, refuse_model_free

NAME = "vllm-spec-decode"
KIND = "reference"
FIX = "pass the saved stdout of vLLM's spec_decode.py"

# the printed label -> our key; both versions
LABELS = {
    "num_drafts": "drafts",
    "Number of drafts": "drafts",
    "num_draft_tokens": "draft_tokens",
    "Draft tokens generated": "draft_tokens",
    "num_accepted_tokens": "accepted",
    "Accepted tokens": "accepted",
    "mean acceptance length": "al",
    "Mean acceptance length": "al",
    "total_num_output_tokens": "output_tokens",
    "Total output tokens": "output_tokens",
}
_LINE = re.compile(r"^\s*(" + "|".join(re.escape(k) for k in LABELS) + r")\s*:\s*(\S*)\s*$")
_POSITION = re.compile(r"^\s*acceptance at token (\d+)\s*:\s*(\S*)\s*$")
_INTEGER = re.compile(r"^[0-9]+$")
_DECIMAL = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")


def _parse(path: Path) -> tuple[dict[str, tuple[str, int]], dict[int, tuple[str, int]]]:
    values: dict[str, tuple[str, int]] = {}
    positions: dict[int, tuple[str, int]] = {}
    for number, text in enumerate(read_text(path).splitlines(), start=1):
        found = _LINE.match(text)
        if found:
            key = LABELS[found.group(1)]
            if key in values:
                raise bad(
                    path,
                    number,
                    f"a second `{found.group(1)}` (the first is on line {values[key][1]})",
                    "save one printout per file",
                )
            values[key] = (found.group(2), number)
            continue
        found = _POSITION.match(text)
        if found:
            i = int(found.group(1))
            if i in positions:
                raise bad(path, number, f"a second `acceptance at token {i}`", "save one printout per file")
            positions[i] = (found.group(2), number)
    return values, positions


def _integer(values: dict, key: str, label: str, path: Path) -> int | None:
    if key not in values:
        return None
    text, line = values[key]
    if not _INTEGER.match(text):
        raise bad(path, line, f"`{label}` is {text!r}, not an integer count", FIX)
    return int(text)


def read(path: Path, given) -> Aggregate:
    refuse_model_free(given, path, "vLLM's spec-decode printout")
    values, positions = _parse(path)
    if "drafts" not in values and "accepted" not in values:
        raise bad(path, None, "no `num_drafts:` / `Number of drafts:` line", FIX)
    first = min(line for _, line in [*values.values(), *positions.values()])
    drafts = _integer(values, "drafts", "num_drafts", path)
    accepted = _integer(values, "accepted", "num_accepted_tokens", path)
    draft_tokens = _integer(values, "draft_tokens", "num_draft_tokens", path)
    for name, value in (("num_drafts", drafts), ("num_accepted_tokens", accepted)):
        if value is None:
            raise bad(path, first, f"the printout has no `{name}` line", FIX)
    per_position = None
    if positions:
        if sorted(positions) != list(range(len(positions))):
            raise bad(
                path, positions[max(positions)][1], "the `acceptance at token i` lines skip a position", FIX
            )
        per_position = []
        for i in range(len(positions)):
            text, line = positions[i]
            if not _DECIMAL.match(text):
                raise bad(path, line, f"`acceptance at token {i}` is {text!r}, not a rate", FIX)
            per_position.append(float(text))
    k = k_of(drafts, draft_tokens, len(positions) or None, given.k, path, first, FIX)
    printed = None
    if "al" in values:
        text, line = values["al"]
        if not _DECIMAL.match(text):
            raise bad(path, line, f"the mean acceptance length is {text!r}, not a number", FIX)
        printed = float(text)
    counts = checked(
        k, drafts, draft_tokens, accepted, printed, per_position, 0.005, path, values["accepted"][1], FIX
    )
    notes = ["per-position rates as printed (2 decimals)"] if per_position else []
    return Aggregate(NAME, path, {"": [counts]}, {"": {}}, dict(COUNTING), {"": notes})
