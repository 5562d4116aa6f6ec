"""What an imported run or reference says about itself: its source, how the source counted, the
settings nobody stated, why prompt_hash is empty, its speedup and its turn-1 text check. The
`import` command, the markdown report and compare print these lines.
"""

from __future__ import annotations

from alcheck.references.tables import unstated_keys
from alcheck.report.table import fmt, markdown_grid

SPEEDUP_LABELS = {
    "mean_of_question_speeds": (
        "as the source computes it: mean per-question tokens/s, speculative over baseline"
    ),
    "total_tokens_over_total_time": "total tokens / total time, speculative over baseline",
}


def imported(meta: dict) -> dict | None:
    block = meta.get("imported")
    return block if isinstance(block, dict) else None


def source_line(block: dict) -> str:
    return (
        f"imported from {block.get('file')} ({block.get('format')}, sha256 {str(block.get('sha256'))[:12]}…)"
    )


def counting_line(counting: dict | None) -> str | None:
    if not counting:
        return None
    parts = [
        f"steps = {counting.get('steps')}",
        f"accepted = {counting.get('accepted')}",
        f"tail past EOS {counting.get('tail_past_eos')}",
    ]
    if counting.get("extra_eos_step"):
        parts.append("a final bonus EOS costs one more step")
    return (
        f"counting ({counting.get('source')}): "
        + "; ".join(parts)
        + f"; conversion: {counting.get('converted')}"
    )


def unstated_line(table: dict) -> str | None:
    missing = unstated_keys(table)
    if not missing:
        return None
    return (
        "⚠ not stated by the file or the options: "
        + ", ".join(missing)
        + " (comparisons warn about these; pass them as options to `alcheck import`)"
    )


def speedup_lines(speedup: dict | None) -> list[str]:
    if not speedup:
        return []
    lines = [f"speedup {fmt(speedup.get(key))}× {label}" for key, label in SPEEDUP_LABELS.items()]
    q = speedup.get("questions") or {}
    lines.append(
        f"speedup baseline: {speedup.get('baseline_file')}; its tokens: {speedup.get('baseline_tokens')}; "
        f"questions {q.get('speculative')} speculative, "
        f"{q.get('baseline')} baseline, {q.get('common')} common"
    )
    return lines


def texts_line(texts: dict | None) -> str | None:
    if not texts:
        return None
    return f"turn-1 texts against {texts.get('against')}: {texts.get('verdict')}"


def import_lines(table: dict, block: dict) -> list[str]:
    """The plain-text lines for a run's config (or a reference table) and its `imported` block."""
    lines = [
        source_line(block),
        counting_line(block.get("counting")),
        unstated_line(table),
        block.get("prompt_hash"),
        *speedup_lines(block.get("speedup")),
        texts_line(block.get("texts")),
        *(block.get("notes") or []),
    ]
    return [line for line in lines if line]


def origin_text(config: dict, name: str) -> str:
    origin = (config.get("origins") or {}).get(name)
    return f" ({origin})" if origin else ""


def import_section(meta: dict) -> str | None:
    """The report's "Imported" section, or None for a run alcheck made."""
    block = imported(meta)
    if block is None:
        return None
    config = meta.get("config") or {}
    rows = [[name, origin] for name, origin in (config.get("origins") or {}).items()]
    parts = ["## Imported", "", *(f"- {line}" for line in import_lines(config, block))]
    if rows:
        parts += [
            "",
            "Where each setting comes from (file: read from the file; tool: fixed by the source tool's "
            "code; user: an option of `alcheck import`; unstated: nobody says):",
            "",
            markdown_grid(["setting", "origin"], rows),
        ]
    return "\n".join(parts)
