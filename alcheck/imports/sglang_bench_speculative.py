"""SGLang's `scripts/playground/bench_speculative.py` output: one JSON line per server config,
`{batch_size, steps, topk, num_draft_tokens, acc_length, step_time, speed, completion_tokens}`.

For each config the script starts a server, sends a warm-up batch and then the measured batch of
its 8 fixed "Human: ... Assistant:" prompts (512 output tokens each, padded to the number of
prompts). `acc_length` is the serving benchmark's accept length: the server's lifetime
`avg_spec_accept_length` (Σ(accepted + 1) / Σ verify steps, the prefill token not counted), read
after the run, so the warm-up batch is pooled in; rounded to 3 decimals. `completion_tokens` is the
mean output length per request. steps = 0 (with topk and num_draft_tokens 0) is the run without
speculation. `steps` is K (draft steps); topk 1 is a chain (the server sets num_draft_tokens to
steps + 1), topk > 1 a tree verifying num_draft_tokens tokens per step. Each (batch size, shape)
becomes its own reference table.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.imports.records import FILE, TOOL, Aggregate, KCounts, Setting
from alcheck.imports.source import bad, count, json_lines, number
from alcheck.options import is_tree

NAME = "sglang-bench-speculative"
KIND = "reference"
FIX = "pass the output.jsonl SGLang's scripts/playground/bench_speculative.py writes"

COUNTING = {
    "source": "SGLang bench_speculative.py: acc_length = /get_server_info avg_spec_accept_length",
    "steps": "verify steps since the server started (the warm-up batch included)",
    "accepted": "accepted drafts over those steps (acc_length - 1 per step)",
    "prefill_token": "excluded",
    "bonus_token": "counted",
    "tail_past_eos": "unknown",
    "extra_eos_step": False,
    "converted": "none: acc_length is already 1 + accepted / steps, rounded to 3 decimals, warm-up pooled in",
}


def _group(batch: int, topk: int, tokens: int) -> tuple[str, int | None]:
    """The reference's name suffix and its num_draft_tokens (None for a chain)."""
    if not is_tree(topk):
        return f"bs{batch}-chain", None
    return f"bs{batch}-topk{topk}-t{tokens}", tokens


def read(path: Path, given) -> Aggregate:
    groups: dict[str, list[KCounts]] = {}
    stated: dict[str, dict[str, Setting]] = {}
    notes: dict[str, list[str]] = {}
    baselines = 0
    for line, obj in json_lines(path, "SGLang bench_speculative.py"):
        if "acc_length" not in obj or "steps" not in obj:
            raise bad(path, line, "not a bench_speculative line (no acc_length / steps)", FIX)
        batch = count(obj, "batch_size", path, line, FIX, minimum=1)
        steps, topk, tokens = (
            count(obj, key, path, line, FIX) for key in ("steps", "topk", "num_draft_tokens")
        )
        al = number(obj, "acc_length", path, line, FIX)
        if steps == 0:
            baselines += 1  # the run without speculation: no acceptance to import
            continue
        if topk < 1 or tokens < 2 or steps * topk + 1 < tokens:
            raise bad(
                path,
                line,
                f"steps {steps}, topk {topk}, num_draft_tokens {tokens} is not a shape SGLang runs",
                "restore the file",
            )
        if not 1 <= al <= steps + 1:
            raise bad(
                path,
                line,
                f"acc_length {al} cannot be at {steps} draft steps (it lies in [1, {steps + 1}])",
                "restore the file",
            )
        suffix, shape_tokens = _group(batch, topk, tokens)
        previous = next((c for c in groups.get(suffix, []) if c.k == steps), None)
        if previous is not None:
            if previous.al != al:
                raise bad(
                    path,
                    line,
                    f"a second {suffix} result at steps {steps} with another acc_length "
                    f"(the first is on line {previous.line})",
                    "import one result per config",
                )
            continue
        groups.setdefault(suffix, []).append(KCounts(k=steps, al=al, line=line))
        where = f"line {line}"
        stated.setdefault(
            suffix,
            {
                "topk": Setting(topk, FILE, where),
                "num_draft_tokens": Setting(shape_tokens, FILE, where) if shape_tokens else Setting(None),
                "dataset": Setting("sglang-bench-speculative-prompts", TOOL, "8 fixed prompts in the script"),
                "protocol": Setting("sglang-bench-speculative", TOOL, "raw 'Human: ... Assistant:' prompts"),
                "max_tokens": Setting(512, TOOL, "the script asks 512 output tokens"),
            },
        )
        notes.setdefault(suffix, []).append(
            f"steps {steps}: batch size {batch}, step_time {obj.get('step_time')} s, speed "
            f"{obj.get('speed')} tok/s, "
            f"{obj.get('completion_tokens')} output tokens per request"
        )
    if not groups:
        raise bad(
            path,
            None,
            f"only runs without speculation (steps 0: {baselines})",
            "import a file with steps > 0",
        )
    for suffix in groups:
        groups[suffix].sort(key=lambda c: c.k)
    if given.k is not None:
        raise bad(path, None, "--k: the file states K per line (steps)", "drop --k")
    return Aggregate(NAME, path, groups, stated, dict(COUNTING), notes)
