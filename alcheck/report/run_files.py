"""The files alcheck's folders hold, so that `report -o` never writes over one (issue 50).

A run folder (run.json), an ablation folder (ablation.json) or a leaderboard folder
(leaderboard.json) owns the files below: a report written over one of them would destroy the run
that every later command reads.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.report.leaderboard import CSV_FILE, MD_FILE, PLOT_FILE
from alcheck.report.run_io import QUESTIONS_FILE, RUN_FILE
from alcheck.rundir.answers import ANSWERS_FILE
from alcheck.rundir.folder import LOCK_FILE
from alcheck.rundir.traces import LEGACY_STEPS_FILE, TRACES_FILE

ABLATION_FILE = "ablation.json"  # alcheck/diagnostics/ablation.py
BOARD_FILE = "leaderboard.json"  # alcheck/cli/run_board.py
FOLDER_MARKERS = (RUN_FILE, ABLATION_FILE, BOARD_FILE)
OWNED_FILES = frozenset(
    (*FOLDER_MARKERS, QUESTIONS_FILE, TRACES_FILE, LEGACY_STEPS_FILE, ANSWERS_FILE, LOCK_FILE)
    + (CSV_FILE, MD_FILE, PLOT_FILE)
)


def refuse_run_file(path, inputs=(), flag: str = "-o") -> None:
    """Refuse `path` when it is a file an alcheck folder owns, or one of `inputs` (the files read)."""
    target = Path(path).resolve()
    folder = target.parent
    owned = target.name in OWNED_FILES and any((folder / marker).is_file() for marker in FOLDER_MARKERS)
    if owned or any(target == Path(p).resolve() for p in inputs):
        raise AlcheckError(
            f"{flag} {path} is a file of the run folder {Path(path).parent} (the report would write over "
            f"it): pass another name, e.g. {flag} {Path(path).with_name('report.md')}"
        )
