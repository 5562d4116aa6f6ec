"""The datasets --dataset knows by name (alcheck/prompts/catalog.py), the field shapes other
question files use, and reference matching by dataset (issue 20).

Oracles: the shipped files' bytes (sha256 against the upstream files they copy), the licence
files beside them, and reference selection computed from the files' labels.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import expect_error

from alcheck import paths
from alcheck.errors import AlcheckError
from alcheck.prompts import catalog
from alcheck.prompts import dataset as ds
from alcheck.prompts.dataset import Question, dataset_name, default_protocol, file_sha256, load_questions
from alcheck.references.tables import hard_mismatches, load_references, select_references

SHIPPED = {  # name -> (questions, ids, categories, licence files beside it)
    "humaneval": (80, range(0, 80), {"code": 80}, {"LICENSE-EAGLE", "LICENSE-human-eval"}),
    "gsm8k": (80, range(0, 80), {"math": 80}, {"LICENSE-EAGLE", "LICENSE-grade-school-math"}),
    "qa": (80, range(321, 401), {"qa": 80}, {"LICENSE-EAGLE", "LICENSE-natural-questions.md"}),
    "spec_bench_open": (
        320,
        None,
        None,
        {
            "LICENSE-Spec-Bench",
            "LICENSE-FastChat",
            "LICENSE-grade-school-math",
            "LICENSE-wikipedia-natural-questions.md",
        },
    ),
}


@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_file_is_the_upstream_one_with_its_licences(name):
    count, ids, categories, licences = SHIPPED[name]
    entry = catalog.named(name)
    assert entry.shipped and file_sha256(entry.path) == entry.sha256  # byte-identical to what SOURCE.md names
    folder = entry.path.parent
    assert licences <= {f.name for f in folder.iterdir()} and (folder / "SOURCE.md").is_file()
    questions = load_questions(name)
    assert len(questions) == count
    if ids is not None:
        assert [q.question_id for q in questions] == list(ids)
        assert Counter(q.category for q in questions) == categories
        assert all(len(q.turns) == 1 for q in questions)  # single turn: the EAGLE repo's files


def test_spec_bench_open_leaves_out_what_may_not_ship():
    questions = load_questions("spec_bench_open")
    cats = Counter(q.category for q in questions)
    assert "summarization" not in cats and "translation" not in cats
    assert cats["qa"] == cats["math_reasoning"] == cats["rag"] == 80
    assert (
        sum(n for c, n in cats.items() if c not in ("qa", "math_reasoning", "rag")) == 80
    )  # MT-Bench's 8 x 10
    # its MT-Bench part is FastChat's (the shipped mt_bench file), its qa part the EAGLE repo's qa file
    by_id = {q.question_id: q for q in questions}
    assert [by_id[q.question_id] for q in load_questions("mt_bench")] == load_questions("mt_bench")
    assert [by_id[q.question_id].turns for q in load_questions("qa")] == [
        q.turns for q in load_questions("qa")
    ]


@pytest.mark.parametrize(
    "name, alias", [("alpaca", "alpaca"), ("sum", "cnn_dm"), ("spec_bench", "spec_bench")]
)
def test_unshipped_name_says_how_to_run_it_locally(name, alias):
    entry = catalog.named(alias)
    assert entry.name == name and not entry.shipped and not entry.path.exists()
    message = expect_error(
        lambda: load_questions(alias), f"dataset '{name}' is not shipped", "--dataset path/to/", entry.source
    )
    if name == "spec_bench":
        assert "spec_bench_open" in message


def test_local_copies_are_labelled_by_content(tmp_path, monkeypatch):
    copy = tmp_path / "mine.jsonl"
    copy.write_bytes(catalog.named("gsm8k").path.read_bytes())
    assert dataset_name(str(copy)) == "gsm8k" and default_protocol(str(copy)) == "eagle-repo"
    # an upstream file alcheck does not ship is recognised by its sha256 alone
    alpaca = tmp_path / "question.jsonl"
    alpaca.write_text(json.dumps({"question_id": 0, "category": "", "turns": ["Give three tips."]}) + "\n")
    monkeypatch.setitem(catalog._BY_SHA, file_sha256(alpaca), catalog.named("alpaca"))
    assert dataset_name(str(alpaca)) == "alpaca" and load_questions(str(alpaca))[0].turns == (
        "Give three tips.",
    )
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(catalog.named("gsm8k").path.read_bytes() + b"\n")
    assert dataset_name(str(edited)) == str(edited)  # not the same bytes: its own label


@pytest.mark.parametrize(
    "name, protocol",
    [
        ("mt_bench", "vllm-example"),
        ("humaneval", "eagle-repo"),
        ("gsm8k", "eagle-repo"),
        ("qa", "eagle-repo"),
        ("alpaca", "eagle-repo"),
        ("cnn_dm", "eagle-repo"),
        ("spec_bench_open", "vllm-example"),
        ("some/hub-id", "vllm-example"),
    ],
)
def test_default_protocol(name, protocol):
    assert default_protocol(name) == protocol


# -- field shapes --------------------------------------------------------------------------------


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_question_field_gsm8k_shape(tmp_path):
    f = _write(
        tmp_path / "gsm8k_test.jsonl",
        [{"question": "2+2?", "answer": "4"}, {"question": "3+3?", "answer": "6"}],
    )
    assert load_questions(f) == [Question(0, "gsm8k_test", ("2+2?",)), Question(1, "gsm8k_test", ("3+3?",))]


def test_prompt_field_humaneval_shape(tmp_path):
    f = _write(
        tmp_path / "HumanEval.jsonl", [{"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f"}]
    )
    assert load_questions(f) == [Question("HumanEval/0", "HumanEval", ("def f():\n",))]


def test_instruction_field_alpaca_shape(tmp_path):
    folder = tmp_path / "alpaca"
    folder.mkdir()
    f = _write(
        folder / "question.jsonl",
        [
            {"instruction": "Summarise.", "input": "A text.", "output": "x"},
            {"instruction": "Name a colour.", "input": "", "output": "red"},
        ],
    )
    assert load_questions(f) == [
        Question(0, "alpaca", ("Summarise.\n\nA text.",)),
        Question(1, "alpaca", ("Name a colour.",)),
    ]


def test_prompt_list_with_ids_and_category(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{"prompt_id": 7, "category": "math", "prompt": ["a", "b"]}])
    assert load_questions(f) == [Question(7, "math", ("a", "b"))]


def test_no_question_field_names_the_fields_found(tmp_path):
    f = _write(tmp_path / "odd.jsonl", [{"text": "hello", "label": 1}])
    expect_error(
        lambda: load_questions(f),
        f,
        "line 1",
        "missing field 'turns'",
        "question, prompt or instruction",
        "its fields are label, text",
    )


def test_later_record_must_have_the_first_records_fields(tmp_path):
    f = _write(tmp_path / "mixed.jsonl", [{"question": "a"}, {"prompt": "b"}])
    expect_error(lambda: load_questions(f), "line 2", "missing field 'question'")


def test_hub_rows_map_the_same_shapes(monkeypatch):
    class Fake:
        def __init__(self, rows):
            self.rows = rows

        def is_progress_bar_enabled(self):
            return False

        def disable_progress_bars(self):
            pass

        def load_dataset(self, *args, **kwargs):
            return self.rows

    monkeypatch.setattr(ds, "hub_reachable", lambda timeout=0: True)
    monkeypatch.setattr(ds, "import_datasets", lambda: Fake([{"question": "q1", "answer": "a"}]))
    assert load_questions("openai/gsm8k") == [Question(0, "openai/gsm8k", ("q1",))]
    monkeypatch.setattr(ds, "import_datasets", lambda: Fake([{"text": "t"}]))
    expect_error(lambda: load_questions("org/other"), "row 1", "its fields are text")


# -- reference matching knows the dataset --------------------------------------------------------

TARGET, DRAFT = "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
PAPER = {"mt_bench": 6.13, "humaneval": 6.74, "gsm8k": 6.23, "alpaca": 6.70, "sum": 5.34}


def test_eagle3_paper_rows_per_dataset():
    refs = [
        r
        for r in load_references()
        if r.name.startswith("eagle3-paper-eagle3-llama31-8b") and r.temperature == 0
    ]
    assert {r.dataset: r.value(8) for r in refs} == PAPER
    for r in refs:  # the same shape uncertainty as the MT-Bench row
        assert (r.topk, r.num_draft_tokens, r.protocol, r.method) == (10, 60, "eagle-repo", "eagle3")
        assert "UNCERTAIN tree config" in r.notes


@pytest.mark.parametrize("spec", ["gsm8k", "mt_bench", "humaneval", "qa"])
def test_auto_selection_matches_the_runs_dataset(spec):
    chosen = select_references(
        load_references(), "auto", TARGET, DRAFT, "eagle3", dataset_name(spec), topk=10
    )
    paper = [r for r in chosen if r.name.startswith("eagle3-paper-eagle3-llama31-8b")]
    assert {r.dataset for r in paper} == ({spec} if spec in PAPER else set())


def test_a_gsm8k_row_never_gets_a_verdict_against_mt_bench():
    gsm8k = next(r for r in load_references() if r.name == "eagle3-paper-eagle3-llama31-8b-gsm8k")
    config = {
        "target": TARGET,
        "draft": DRAFT,
        "method": "eagle3",
        "dataset": "mt_bench",
        "protocol": "eagle-repo",
        "limit": None,
        "max_tokens": 512,
        "temperature": 0.0,
        "topk": 10,
        "num_draft_tokens": 60,
    }
    assert any("dataset gsm8k (this run: mt_bench)" in m for m in hard_mismatches(gsm8k.to_dict(), config))
    assert not any("dataset" in m for m in hard_mismatches(gsm8k.to_dict(), {**config, "dataset": "gsm8k"}))
    # the shipped file passed by path is the same dataset
    path = str(paths.DATASETS_DIR / "gsm8k" / "question.jsonl")
    assert not any("dataset" in m for m in hard_mismatches(gsm8k.to_dict(), {**config, "dataset": path}))


def test_unknown_dataset_file_is_its_own_label(tmp_path):
    f = _write(tmp_path / "x.jsonl", [{"question": "a"}])
    assert dataset_name(f) == f and default_protocol(f) == "vllm-example"
    with pytest.raises(AlcheckError, match="not found"):
        load_questions(str(tmp_path / "missing.jsonl"))
