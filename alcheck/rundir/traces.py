"""Per-step traces: `traces.csv` beside questions.csv (docs/reference/run-directory.md, "traces.csv").

One row per K x repeat x question x turn that has per-step data, columns in this order:
`k, repeat, question_id, turn, prompt_tokens, accepted, output_ids`
- `accepted`: the accepted drafts of each verification step, in step order, joined by ";"
  (empty for a generation that ended at its prefill token). len = questions.csv's `steps`,
  sum = its `accepted`.
- `output_ids`: the generated token ids joined by ";", or empty when not recorded; they locate the
  first differing token and the text around a divergence.
- `prompt_tokens`: empty in an imported run (other tools' files do not record it): its divergences
  are located by step and output position, not by KV block.
A turn without a row (or a run without the file) has totals only: questions.csv's counts.
Readers treat `output_ids` as optional. Pure Python and pandas-free: csv module only.

Runs imported before imports wrote this file hold the same counts as `steps.csv`, one row per step
(`k, repeat, question_id, turn, step, accepted`); read_traces reads it as traces.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from alcheck.errors import AlcheckError

TRACES_FILE = "traces.csv"
LEGACY_STEPS_FILE = "steps.csv"  # what `alcheck import` wrote before: one row per step
COLUMNS = ["k", "repeat", "question_id", "turn", "prompt_tokens", "accepted", "output_ids"]
# run.json's `traces` (and each cell's): every turn has a row, none has (an engine without per-step data),
# some have
PER_STEP, TOTALS_ONLY, PARTIAL = "per-step", "totals-only", "partial"
Key = tuple[int, int, str, int]  # (k, repeat, question_id as text, turn): datasets may use string ids


@dataclass
class Trace:
    k: int
    repeat: int
    question_id: str  # as questions.csv writes it (MT-Bench's are integers, other datasets' may be text)
    turn: int
    prompt_tokens: int | None  # None: not recorded (an imported run)
    accepted: list[int]  # per verification step
    output_ids: list[int] | None = None

    def __post_init__(self):
        self.question_id = str(self.question_id)

    @property
    def key(self) -> Key:
        return (self.k, self.repeat, self.question_id, self.turn)

    @property
    def steps(self) -> int:
        return len(self.accepted)

    def per_position(self) -> list[int]:
        """questions.csv's accepted_per_pos: steps that accepted more than i drafts, i < K."""
        return [sum(a > i for a in self.accepted) for i in range(self.k)]

    def row(self) -> dict:
        return {
            "k": self.k,
            "repeat": self.repeat,
            "question_id": self.question_id,
            "turn": self.turn,
            "prompt_tokens": "" if self.prompt_tokens is None else self.prompt_tokens,
            "accepted": _join(self.accepted),
            "output_ids": "" if self.output_ids is None else _join(self.output_ids),
        }


def _join(values) -> str:
    return ";".join(str(int(v)) for v in values)


def _split(text: str, where: str) -> list[int]:
    try:
        return [int(v) for v in text.split(";")] if text else []
    except ValueError:
        raise AlcheckError(
            f"{where}: {text[:40]!r} is not ';'-joined integers: the traces file is damaged; "
            "rerun, or delete it to compare on totals"
        ) from None


def append_traces(run_dir: Path | str, traces: list[Trace]) -> None:
    """Append rows to DIR/traces.csv, writing the header when the file is new."""
    path = Path(run_dir) / TRACES_FILE
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(t.row() for t in traces)


def has_traces(run_dir: Path | str) -> bool:
    return any((Path(run_dir) / name).exists() for name in (TRACES_FILE, LEGACY_STEPS_FILE))


def read_traces(run_dir: Path | str) -> dict[Key, Trace] | None:
    """DIR/traces.csv (else an old import's steps.csv) by (k, repeat, question_id, turn); None when
    the run has neither."""
    path = Path(run_dir) / TRACES_FILE
    if not path.exists():
        legacy = Path(run_dir) / LEGACY_STEPS_FILE
        return _read_steps(legacy) if legacy.exists() else None
    out: dict[Key, Trace] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS[:-1] if c not in (reader.fieldnames or [])]
        if missing:
            raise AlcheckError(
                f"{path}: no column {missing[0]!r}: not an alcheck traces file; delete it to "
                "compare on totals"
            )
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            k, repeat, turn = _ints(row, ("k", "repeat", "turn"), where)
            prompt = _ints(row, ("prompt_tokens",), where)[0] if row["prompt_tokens"] else None
            ids = row.get("output_ids") or ""
            trace = Trace(
                k,
                repeat,
                row["question_id"],
                turn,
                prompt,
                _split(row["accepted"] or "", where),
                _split(ids, where) if ids else None,
            )
            _check_counts(trace, where)
            out[trace.key] = trace  # a resumed cell's rows replace the interrupted ones
    return out


def _read_steps(path: Path) -> dict[Key, Trace]:
    """An old import's steps.csv: one row per step, in step order within each turn."""
    out: dict[Key, Trace] = {}
    with path.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            where = f"{path}:{line}"
            k, repeat, turn, accepted = _ints(row, ("k", "repeat", "turn", "accepted"), where)
            key = (k, repeat, str(row["question_id"]), turn)
            out.setdefault(key, Trace(k, repeat, row["question_id"], turn, None, [])).accepted.append(
                accepted
            )
    for trace in out.values():
        _check_counts(trace, str(path))
    return out


def _ints(row: dict, columns: tuple[str, ...], where: str) -> list[int]:
    try:
        return [int(row[c]) for c in columns]
    except (KeyError, TypeError, ValueError):
        raise AlcheckError(
            f"{where}: {', '.join(columns)} must be integers: the traces file is damaged; rerun, "
            "or delete it to compare on totals"
        ) from None


def _check_counts(trace: Trace, where: str) -> None:
    if any(not 0 <= a <= trace.k for a in trace.accepted):
        raise AlcheckError(f"{where}: an accepted count outside 0..K={trace.k}: the traces file is damaged")
