import json
import sys
import time
import types
from collections import Counter
from dataclasses import FrozenInstanceError

import pytest

from alcheck import paths
from alcheck.errors import AlcheckError
from alcheck.prompts import dataset as ds
from alcheck.prompts.dataset import Question, file_sha256, load_questions

MT_BENCH_SHA256 = "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def q(qid, turns=("hello",), category="writing", **extra):
    return {"question_id": qid, "category": category, "turns": list(turns), **extra}


@pytest.fixture
def no_hub(monkeypatch):
    """Fail the test if anything tries to reach the Hub."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(ds, "hub_reachable", lambda timeout=ds.HUB_PROBE_TIMEOUT_S: False)


# --------------------------------------------------------------------------- MT-Bench


def test_mt_bench_shipped_file():
    questions = load_questions("mt_bench")
    assert len(questions) == 80
    assert [x.question_id for x in questions] == list(range(81, 161))
    assert all(isinstance(x, Question) and len(x.turns) == 2 for x in questions)
    assert all(isinstance(t, str) and t for x in questions for t in x.turns)
    assert Counter(x.category for x in questions) == {
        c: 10
        for c in ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
    }
    assert questions[0].turns[0].startswith("Compose an engaging travel blog post")
    assert file_sha256(paths.MT_BENCH_FILE) == MT_BENCH_SHA256
    assert (paths.MT_BENCH_FILE.parent / "LICENSE-FastChat").is_file()


def test_question_is_frozen_and_hashable():
    x = Question(1, "math", ("a", "b"))
    with pytest.raises(FrozenInstanceError):
        x.category = "other"
    assert hash(x) == hash(Question(1, "math", ("a", "b")))


def test_limit_keeps_first_n_in_file_order(tmp_path):
    assert [x.question_id for x in load_questions("mt_bench", limit=3)] == [81, 82, 83]
    f = write_jsonl(tmp_path / "q.jsonl", [q(30), q(10), q(20)])
    assert [x.question_id for x in load_questions(str(f), limit=2)] == [30, 10]
    assert len(load_questions(str(f), limit=100)) == 3
    for bad in (0, -1):
        with pytest.raises(AlcheckError, match="limit"):
            load_questions("mt_bench", limit=bad)


def test_local_jsonl_same_format(tmp_path):
    f = write_jsonl(
        tmp_path / "spec.jsonl",
        [
            q(1, ["t1", "t2"], "translation", reference=["ref"]),
            "",  # blank lines are skipped
            q(2, ["only one turn"], "qa", extra={"x": 1}),
        ],
    )
    got = load_questions(str(f))
    assert got == [
        Question(1, "translation", ("t1", "t2")),
        Question(2, "qa", ("only one turn",)),
    ]
    assert ds.dataset_name(str(f)) == str(f)


def test_string_question_ids(tmp_path):
    f = write_jsonl(tmp_path / "s.jsonl", [q("a1"), q("b2", ["x", "y"])])
    assert [x.question_id for x in load_questions(str(f))] == ["a1", "b2"]


def test_copy_of_mt_bench_is_named_mt_bench(tmp_path):
    copy = tmp_path / "question.jsonl"
    copy.write_bytes(paths.MT_BENCH_FILE.read_bytes())
    assert ds.dataset_name(str(copy)) == "mt_bench"
    assert ds.dataset_name("mt_bench") == "mt_bench"
    assert ds.dataset_name("philschmid/mt-bench") == "mt_bench"


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"question_id": 2, "category": "x", "turns": ["a"]', "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"category": "x", "turns": ["a"]}', "missing field 'question_id'"),
        ('{"question_id": 2, "turns": ["a"]}', "missing field 'category'"),
        ('{"question_id": 2, "category": "x"}', "missing field 'turns'"),
        ('{"question_id": 2, "category": "x", "turns": []}', "turns must be a non-empty list of strings"),
        ('{"question_id": 2, "category": "x", "turns": "a"}', "turns must be a non-empty list of strings"),
        (
            '{"question_id": 2, "category": "x", "turns": ["a", 3]}',
            "turns must be a non-empty list of strings",
        ),
        ('{"question_id": null, "category": "x", "turns": ["a"]}', "question_id must be"),
        ('{"question_id": true, "category": "x", "turns": ["a"]}', "question_id must be"),
        ('{"question_id": 2, "category": 5, "turns": ["a"]}', "category must be a string"),
        (
            '{"question_id": 1, "category": "x", "turns": ["a"]}',
            r"duplicate question_id 1 \(first on line 1\)",
        ),
        ('{"question_id": "2", "category": "x", "turns": ["a"]}', "use one type for all question_ids"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    f = write_jsonl(tmp_path / "bad.jsonl", [q(1), bad_line, q(3)])
    with pytest.raises(AlcheckError, match=message) as info:
        load_questions(str(f))
    text = info.value.message
    assert str(f) in text and "line 2" in text
    assert "\n" not in text and ": " in text


def test_not_utf8(tmp_path):
    f = tmp_path / "latin.jsonl"
    f.write_bytes(
        json.dumps(q(1)).encode() + b"\n" + b'{"question_id": 2, "category": "\xe9", "turns": ["a"]}\n'
    )
    with pytest.raises(AlcheckError, match="line 2: not valid UTF-8"):
        load_questions(str(f))


def test_missing_unreadable_empty_and_directory(tmp_path):
    with pytest.raises(AlcheckError, match="not found") as info:
        load_questions(str(tmp_path / "nope.jsonl"))
    assert info.value.exit_code == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(AlcheckError, match="no questions"):
        load_questions(str(empty))
    with pytest.raises(AlcheckError, match="is a directory"):
        load_questions(str(tmp_path))
    with pytest.raises(AlcheckError, match="cannot read"):
        file_sha256(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- hub ids


def test_hub_id_without_hub_fails_fast(no_hub, monkeypatch):
    def boom():
        raise AssertionError("must not touch the datasets library without a hub")

    monkeypatch.setattr(ds, "import_datasets", boom)
    start = time.monotonic()
    with pytest.raises(AlcheckError, match="local question .jsonl file") as info:
        load_questions("philschmid/mt-bench")
    assert time.monotonic() - start < 2
    assert "Hub is unreachable" in info.value.message


def test_hub_probe_times_out(monkeypatch):
    import socket

    def slow(*args, **kwargs):
        time.sleep(2)
        raise OSError("too late")

    monkeypatch.setattr(socket, "create_connection", slow)
    start = time.monotonic()
    assert ds.hub_reachable(timeout=0.2) is False
    assert time.monotonic() - start < 1.5


def test_hub_probe_unresolvable_endpoint(monkeypatch):
    import socket

    def fail(*args, **kwargs):
        raise socket.gaierror("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", fail)
    assert ds.hub_reachable(timeout=1) is False


class FakeDatasets(types.ModuleType):
    """Stands in for the `datasets` library in hub tests (no network)."""

    def __init__(self, rows=None, error=None):
        super().__init__("datasets")
        self.__file__ = "/fake/datasets/__init__.py"
        self.rows, self.error, self.calls = rows, error, []
        self._bars = True

    def load_dataset(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.error:
            raise self.error
        return {"train": self.rows}

    def is_progress_bar_enabled(self):
        return self._bars

    def disable_progress_bars(self):
        self._bars = False

    def enable_progress_bars(self):
        self._bars = True


def test_hub_offline_mode_error_is_wrapped(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(ds, "hub_reachable", lambda timeout=0: pytest.fail("offline mode must not probe"))
    fake = FakeDatasets(error=ConnectionError("Couldn't reach 'x/y' on the Hub (LocalEntryNotFoundError)"))
    monkeypatch.setattr(ds, "import_datasets", lambda: fake)
    with pytest.raises(AlcheckError, match="could not load dataset 'x/y'.*local question .jsonl"):
        load_questions("x/y")
    assert fake._bars is True  # progress bars restored


def test_hub_dataset_rows(monkeypatch):
    monkeypatch.setattr(ds, "hub_reachable", lambda timeout=0: True)
    fake = FakeDatasets(rows=[q(81, ["a", "b"]), q(82, ["c"])])
    monkeypatch.setattr(ds, "import_datasets", lambda: fake)
    assert load_questions("philschmid/mt-bench", limit=1) == [Question(81, "writing", ("a", "b"))]
    assert fake.calls[0][0] == ("philschmid/mt-bench",)
    # HuggingFaceH4/mt_bench_prompts layout: prompt (list of turns), prompt_id
    fake.rows = [{"prompt": ["p1", "p2"], "prompt_id": 123, "category": "math", "reference": []}]
    assert load_questions("HuggingFaceH4/mt_bench_prompts") == [Question(123, "math", ("p1", "p2"))]
    fake.rows = [{"prompt_id": 1}]
    with pytest.raises(AlcheckError, match="row 1: missing field"):
        load_questions("org/broken")


# --------------------------------------------------------------------------- datasets library missing


def test_repo_datasets_folder_imported_as_namespace(monkeypatch):
    # What `import datasets` yields from the repo root when the library is missing.
    namespace = types.ModuleType("datasets")
    namespace.__path__ = [str(paths.DATASETS_DIR)]
    namespace.__file__ = None
    monkeypatch.setitem(sys.modules, "datasets", namespace)
    with pytest.raises(AlcheckError) as info:
        load_questions("mt_bench")
    msg = info.value.message
    assert "`datasets` library is not installed" in msg
    assert "repo's datasets/ data folder" in msg and msg.endswith("pip install datasets")


def test_datasets_library_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(AlcheckError, match="pip install datasets"):
        ds.import_datasets()


def test_real_datasets_library_is_used():
    lib = ds.import_datasets()
    assert lib.__file__ and hasattr(lib, "load_dataset")


def test_local_file_library_failures_are_wrapped(tmp_path, monkeypatch):
    f = write_jsonl(tmp_path / "q.jsonl", [q(1), q(2)])
    fake = FakeDatasets(error=RuntimeError("arrow exploded\nsecond line"))
    monkeypatch.setattr(ds, "import_datasets", lambda: fake)
    with pytest.raises(AlcheckError, match="could not load .*RuntimeError: arrow exploded\\)") as info:
        load_questions(str(f))
    assert "\n" not in info.value.message
    assert fake.calls[0] == (("json",), {"data_files": str(f), "split": "train"})
    fake.error, fake.rows = None, [q(1)]  # the library dropped a line
    with pytest.raises(AlcheckError, match="read .* differently"):
        load_questions(str(f))
