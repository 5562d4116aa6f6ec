"""What a format reader hands back: per-question turn counts (-> a run directory) or whole-run
counts (-> a reference table), each with the settings the file states and how its source counted.

Counts are already in alcheck's terms (docs/design.md "Acceptance length"): `steps` verification
steps, the prefill token not one of them; `accepted` drafts accepted over them, the bonus token
not counted. Each reader converts from its source's own rule and says so in `counting`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# where a setting's value comes from
FILE, TOOL, USER, UNSTATED = "file", "tool", "user", "unstated"


@dataclass
class Setting:
    value: object = None
    origin: str = UNSTATED  # file: read from the file; tool: fixed by the source tool's code
    where: str = ""  # for file values: what in the file says so (named when an option contradicts it)


@dataclass
class TurnCounts:
    """One generation: a question's turn, in one repeat (a choice of an EAGLE or Spec-Bench answer line)."""

    line: int
    question_id: int | str
    turn: int  # 1-based
    steps: int
    accepted: int
    generated_tokens: int  # the source's own output-token count (see docs/reference/import-formats.md)
    repeat: int = 0
    category: str = ""
    step_accepted: list[int] | None = None  # accepted drafts of each step, in order (a trace)
    histogram: dict[int, int] | None = None  # steps that accepted exactly j drafts
    text: str | None = None  # the answer text, when the file carries it
    wall_s: float | None = None
    # vLLM's count for a method that skips steps (n-gram): `steps` above are then only the steps
    # that drafted, and convert() derives the steps from the tokens (engines/steps.py)
    drafted_steps_only: bool = False
    drafted: int | None = None  # draft tokens proposed, when the source counts them


@dataclass
class PerQuestion:
    """A file with per-question counts: becomes a run directory."""

    format: str
    path: Path
    turns: list[TurnCounts]
    stated: dict[str, Setting]
    counting: dict
    notes: list[str] = field(default_factory=list)


@dataclass
class KCounts:
    """A whole run's counts at one K (or only its AL, when the source printed no counts)."""

    k: int
    al: float  # alcheck's AL: 1 + accepted / steps
    line: int
    steps: int | None = None
    accepted: int | None = None
    drafted: int | None = None
    per_position: list[float] | None = None  # P(a >= i+1), as the source states it


@dataclass
class Aggregate:
    """A file with whole-run counts only: becomes one reference table per group (SGLang writes
    one line per batch size and tree shape; each group is its own table)."""

    format: str
    path: Path
    groups: dict[str, list[KCounts]]  # name suffix ("" for one group) -> counts by K
    stated: dict[str, dict[str, Setting]]  # per group
    counting: dict
    notes: dict[str, list[str]] = field(default_factory=dict)  # per group
