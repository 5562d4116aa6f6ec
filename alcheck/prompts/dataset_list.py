"""Several datasets in one run (`--dataset a,b,c`): the list read and checked, each dataset's
label, the one protocol they share by default, and their questions tagged with their label.

A run of one dataset stores `dataset` as the string it always did; a run of several stores the
list. Question ids repeat across datasets (humaneval and gsm8k both number theirs 0..79), so a
question of a run of several datasets is (dataset label, question_id): the label goes on every
Question and every questions.csv row of such a run.

One run has one protocol (system prompt, turns, max tokens): the backends generate every prompt
of a cell with the run's max_tokens. Without --protocol the datasets' own defaults must agree.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.prompts import catalog
from alcheck.prompts.dataset import Question, dataset_name, default_protocol, load_questions, looks_like_file


def split_datasets(value) -> list[str]:
    """--dataset 'a,b' (or a run.json's string or list) -> ['a', 'b'], unchecked. An existing file
    whose name holds a comma stays one dataset."""
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value]
    text = str(value)
    if "," not in text or Path(text).expanduser().is_file():
        return [text.strip()]
    return [part.strip() for part in text.split(",")]


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _check_known(spec: str, shown: str):
    """In a list, each entry is a name, a file or an org/name hub id: a mistyped name exits here,
    not after a hub probe."""
    if catalog.named(spec) is not None or looks_like_file(spec) or "/" in spec:
        return
    raise AlcheckError(
        f"--dataset {shown}: unknown dataset '{spec}': use a name ({catalog.names()}), a local "
        "question .jsonl file, or a hub id (org/name)"
    )


def parse_datasets(value) -> str | list[str]:
    """The checked --dataset value: one spec as a string (as every run.json before lists held it),
    several as a list. An empty entry, an unknown name or a dataset listed twice (by label: 'sum'
    and 'cnn_dm' are one) exits 2."""
    shown = _shown(value)
    specs = split_datasets(value)
    if len(specs) == 1:
        if not specs[0]:
            raise AlcheckError("--dataset is empty: pass a dataset name, e.g. --dataset mt_bench")
        return value if isinstance(value, str) else specs[0]  # stored as given, as before lists
    seen: dict[str, str] = {}
    for i, spec in enumerate(specs, start=1):
        if not spec:
            raise AlcheckError(
                f"--dataset {shown}: entry {i} is empty: separate the datasets by single commas, "
                "e.g. --dataset mt_bench,humaneval"
            )
        _check_known(spec, shown)
        label = dataset_name(spec)
        if label.lower() in seen:
            same = "" if seen[label.lower()] == spec else f" (as {seen[label.lower()]})"
            raise AlcheckError(
                f"--dataset {shown}: {spec} is {label}, listed twice{same}: list each dataset once"
            )
        seen[label.lower()] = spec
    return specs


def dataset_specs(value) -> list[str]:
    """A run's datasets as a list, whether run.json holds one string or a list."""
    return split_datasets(value) if isinstance(value, (list, tuple)) else [str(value)]


def dataset_labels(value) -> list[str]:
    """The labels (catalog names where known) of a run's datasets, in the run's order."""
    return [dataset_name(spec) for spec in dataset_specs(value)]


def several(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 1


def shared_protocol(value) -> str:
    """The default protocol of one dataset, or of several when they agree; else one line saying
    to pass --protocol (a run has one protocol)."""
    specs = dataset_specs(value)
    by_protocol: dict[str, list[str]] = {}
    for spec in specs:
        by_protocol.setdefault(default_protocol(spec), []).append(dataset_name(spec))
    if len(by_protocol) == 1:
        return next(iter(by_protocol))
    listed = "; ".join(f"{', '.join(names)}: {protocol}" for protocol, names in by_protocol.items())
    raise AlcheckError(
        f"--dataset {_shown(value)}: the datasets' default protocols differ ({listed}) and one run "
        "measures every dataset under one protocol: pass --protocol (e.g. --protocol eagle-repo, as the "
        "EAGLE papers measure all their datasets), or run the datasets one by one"
    )


def load_run_questions(value, limit: int | None = None) -> list[Question]:
    """The questions of a run: one dataset's as load_questions gives them; several datasets' one
    after another in the list's order, each tagged with its label (`limit`: the first N of each)."""
    if not several(value):
        return load_questions(dataset_specs(value)[0], limit)
    return [replace(q, dataset=dataset_name(spec)) for spec in value for q in load_questions(spec, limit)]
