"""`vllm bench serve --save-result` JSON (vllm/benchmarks/serve.py).

The benchmark reads the server's /metrics before and after its requests (after the warm-up) and
stores the differences: `spec_decode_num_drafts`, `spec_decode_draft_tokens`,
`spec_decode_accepted_tokens`, `spec_decode_acceptance_length` (1 + accepted / drafts),
`spec_decode_acceptance_rate` (percent of draft tokens) and
`spec_decode_per_position_acceptance_rates` (P(a >= i+1)). The top level names `model_id`,
`tokenizer_id`, `num_prompts`, `backend`, `label`, `date`; no per-request spec-decode data, and no
dataset, output length or temperature. `--append-result` appends one such object per line.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.imports.records import FILE, Aggregate, KCounts, Setting
from alcheck.imports.source import bad, count, json_documents, number
from alcheck.imports.vllm_counts import COUNTING, checked, k_of, refuse_model_free

NAME = "vllm-bench-serve"
KIND = "reference"
FIX = "pass the JSON `vllm bench serve --save-result` writes"


def _per_position(obj: dict, path: Path, line: int) -> list[float] | None:
    rates = obj.get("spec_decode_per_position_acceptance_rates")
    if rates is None:
        return None
    if not isinstance(rates, list):
        raise bad(path, line, "spec_decode_per_position_acceptance_rates is not a list", FIX)
    return [number({"rate": r}, "rate", path, line, FIX) for r in rates]


def _one(obj: dict, line: int, path: Path, given) -> KCounts:
    if "spec_decode_num_drafts" not in obj:
        other = " (a serve result without speculative decoding?)" if "output_throughput" in obj else ""
        raise bad(path, line, f"no spec_decode_num_drafts{other}", FIX)
    drafts = count(obj, "spec_decode_num_drafts", path, line, FIX)
    draft_tokens = count(obj, "spec_decode_draft_tokens", path, line, FIX)
    accepted = count(obj, "spec_decode_accepted_tokens", path, line, FIX)
    per_position = _per_position(obj, path, line)
    k = k_of(drafts, draft_tokens, len(per_position or []) or None, given.k, path, line, FIX)
    printed = obj.get("spec_decode_acceptance_length")
    counts = checked(
        k,
        drafts,
        draft_tokens,
        accepted,
        None if printed is None else number(obj, "spec_decode_acceptance_length", path, line, FIX),
        per_position,
        1e-6,
        path,
        line,
        FIX,
    )
    rate = obj.get("spec_decode_acceptance_rate")
    if (
        rate is not None
        and draft_tokens
        and abs(number(obj, "spec_decode_acceptance_rate", path, line, FIX) - 100 * accepted / draft_tokens)
        > 1e-6
    ):
        raise bad(path, line, f"spec_decode_acceptance_rate {rate} is not 100 * accepted / draft tokens", FIX)
    return counts


def read(path: Path, given) -> Aggregate:
    refuse_model_free(given, path, "vllm bench serve")
    groups: dict[str, list[KCounts]] = {}
    stated: dict[str, dict[str, Setting]] = {}
    notes: dict[str, list[str]] = {}
    documents = json_documents(path, "vllm bench serve")
    models = {str(obj.get("model_id") or "") for _, obj in documents}
    for line, obj in documents:
        counts = _one(obj, line, path, given)
        model = str(obj.get("model_id") or "")
        suffix = "" if len(models) == 1 else model.rstrip("/").split("/")[-1].lower()
        mine = stated.setdefault(suffix, {})
        if model:
            mine.setdefault("target", Setting(model, FILE, f"model_id on line {line}"))
        previous = next((c for c in groups.get(suffix, []) if c.k == counts.k), None)
        if previous is not None and previous.al != counts.al:
            raise bad(
                path,
                line,
                f"a second result at K={counts.k} with another AL (the first is on line {previous.line})",
                "import one result per K",
            )
        if previous is None:
            groups.setdefault(suffix, []).append(counts)
        prompts = obj.get("num_prompts")
        notes.setdefault(suffix, []).append(
            f"K={counts.k}: {prompts} prompts, backend {obj.get('backend')!r}, label {obj.get('label')!r}, "
            f"date {obj.get('date')!r}; counters read after the warm-up"
        )
    for suffix in groups:
        groups[suffix].sort(key=lambda c: c.k)
    return Aggregate(NAME, path, groups, stated, dict(COUNTING), notes)
