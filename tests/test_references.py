import json

import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.errors import AlcheckError
from alcheck.references.tables import (
    FIELDS,
    Reference,
    load_references,
    mismatches,
    model_matches,
    select_references,
    short_source,
)

L31, L3 = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct"
E31, E3, EA3 = (
    "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "yuhuili/EAGLE-LLaMA3-Instruct-8B",
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
)

# EAGLE-NOTES section 7, name -> (target, draft, method, {K: AL})
PUBLISHED = {
    "seed-eagle-repo-llama31-8b": (L31, E31, "eagle", {1: 1.71, 2: 2.13, 3: 2.32, 4: 2.42, 5: 2.48}),
    # METHODS-NOTES 6: Spec-Bench's leaderboard, PLD on Vicuna-7B (A100), its 10-token drafts
    "spec-bench-pld-vicuna-7b": ("lmsys/vicuna-7b-v1.3", "", "ngram", {10: 1.75}),
    "seed-vllm-v0-llama31-8b": (L31, E31, "eagle", {1: 1.70, 2: 2.06, 3: 2.20, 4: 2.29, 5: 2.32}),
    "seed-vllm-v1-llama31-8b": (L31, E31, "eagle", {1: 1.71, 2: 2.09, 3: 2.30, 4: 2.38, 5: 2.43}),
    "seed-vllm-v1-no-lookahead-llama3-8b": (L3, E3, "eagle", {2: 1.89, 4: 2.08}),
    "seed-vllm-v1-lookahead-llama3-8b": (L3, E3, "eagle", {2: 1.90, 4: 2.09}),
    "seed-eagle-repo-llama3-8b": (L3, E3, "eagle", {2: 2.0, 4: 2.25}),
    "vllm-issue20780-eagle-llama31-8b": (
        L31,
        E31,
        "eagle",
        {2: 2.10, 3: 2.29, 4: 2.39, 5: 2.43, 6: 2.45, 7: 2.47},
    ),
    "vllm-issue20780-eagle3-llama31-8b": (
        L31,
        EA3,
        "eagle3",
        {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54},
    ),
    "vllm-ci-eagle-llama31-8b": (L31, E31, "eagle", {3: 2.296}),
    "vllm-ci-eagle3-llama31-8b": (L31, EA3, "eagle3", {3: 2.811}),
    "vllm-pr23563-specbench-eagle-llama31-8b": (L31, E31, "eagle", {3: 2.19}),
    # EAGLE-3 paper Table 1 (TREE-NOTES 6.1): tree numbers, K = the repo's --depth + 1
    "eagle3-paper-eagle2-llama31-8b": (L31, E31, "eagle", {6: 4.05}),
    "eagle3-paper-eagle2-llama31-8b-t1": (L31, E31, "eagle", {6: 3.16}),
    "eagle3-paper-eagle3-llama31-8b": (L31, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3", {8: 6.13}),
    "eagle3-paper-eagle3-llama31-8b-t1": (L31, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3", {8: 4.24}),
    "eagle3-paper-eagle2-vicuna-13b": (
        "lmsys/vicuna-13b-v1.3",
        "yuhuili/EAGLE-Vicuna-13B-v1.3",
        "eagle",
        {6: 4.83},
    ),
    "eagle3-paper-eagle3-vicuna-13b": (
        "lmsys/vicuna-13b-v1.3",
        "yuhuili/EAGLE3-Vicuna1.3-13B",
        "eagle3",
        {8: 6.65},
    ),
}


def make_ref(**overrides) -> dict:
    d = {
        "name": "demo",
        "source": "alcheck demo",
        "target": "alcheck/demo/models/target",
        "draft": "alcheck/demo/models/eagle",
        "method": "eagle",
        "protocol": "vllm-example",
        "dataset": "mt_bench",
        "max_tokens": 64,
        "temperature": 0.0,
        "notes": "",
        "values": {"1": 1.5, "2": 1.8},
    }
    d.update(overrides)
    return d


def write_ref(directory, filename, data):
    (directory / filename).write_text(data if isinstance(data, str) else json.dumps(data))


# --------------------------------------------------------------------------- shipped files


def test_added_keys_are_optional_and_round_trip(tmp_path):
    """Files written before limit / draft_sampling / noise existed still load (as null)."""
    old = {k: v for k, v in make_ref().items() if k not in ("limit", "draft_sampling", "noise")}
    write_ref(tmp_path, "old.json", old)
    write_ref(tmp_path, "new.json", make_ref(name="new", limit=8, draft_sampling="sampled", noise=0.01))
    old_ref, new_ref = sorted(load_references(tmp_path), key=lambda r: r.name != "demo")
    assert (old_ref.limit, old_ref.draft_sampling, old_ref.noise) == (None, None, None)
    assert (new_ref.limit, new_ref.draft_sampling, new_ref.noise) == (8, "sampled", 0.01)
    assert list(new_ref.to_dict()) == list(FIELDS)


def test_shipped_noise_only_where_the_source_states_it():
    """The seed thread's ±0.01 run-to-run (wwl2755, Llama-3-8B vLLM V1) and the demo's
    identical repeats; every other source states none."""
    noise = {r.name: r.noise for r in load_references()}
    assert noise.pop("seed-vllm-v1-lookahead-llama3-8b") == 0.01
    assert noise.pop("seed-vllm-v1-no-lookahead-llama3-8b") == 0.01
    assert noise.pop("demo") == 0.0
    assert noise.pop("demo-eagle3") == 0.0  # the demo's EAGLE-3 head, also measured by alcheck
    assert noise.pop("demo-draft_model") == 0.0  # the demo's draft model, likewise
    assert set(noise.values()) == {None}
    assert {r.draft_sampling for r in load_references()} == {"onehot"}


def test_shipped_files_have_exact_keys_and_published_values():
    files = sorted(paths.REFERENCES_DIR.glob("*.json"))
    by_name = {}
    for f in files:
        data = json.loads(f.read_text())
        assert list(data) == list(FIELDS), f.name
        assert f.stem == data["name"]
        if data["name"] not in (
            "demo",
            "demo-eagle3",
            "demo-draft_model",
        ):  # alcheck's own measurements (tests/test_demo.py, test_eagle3_demo.py)
            tree_paper = (
                data["topk"] > 1 and data["source"] == "https://arxiv.org/abs/2503.01840"
            )  # TREE-NOTES 6.1
            spec_bench = data["source"].startswith("https://github.com/hemingkx/Spec-Bench")
            assert (
                data["source"].startswith("https://github.com/vllm-project/vllm/") or tree_paper or spec_bench
            )
        assert (data["temperature"] == 0.0 or data["topk"] > 1) and data["notes"]
        by_name[data["name"]] = data
    for name, (target, draft, method, values) in PUBLISHED.items():
        d = by_name[name]
        assert (d["target"], d["draft"], d["method"]) == (target, draft, method), name
        assert d["values"] == {str(k): v for k, v in values.items()}, name
    assert by_name["seed-vllm-v1-llama31-8b"]["protocol"] == "vllm-example"
    assert by_name["seed-vllm-v1-llama31-8b"]["max_tokens"] == 256
    assert "pull/16370" in by_name["seed-vllm-v1-llama31-8b"]["source"]
    assert "pull/24531" in by_name["vllm-ci-eagle3-llama31-8b"]["source"]
    assert "2%" in by_name["vllm-ci-eagle3-llama31-8b"]["notes"]
    assert "issues/20780" in by_name["vllm-issue20780-eagle3-llama31-8b"]["source"]
    assert by_name["vllm-pr23563-specbench-eagle-llama31-8b"]["dataset"] == "spec_bench"
    pld = by_name["spec-bench-pld-vicuna-7b"]  # its rule and counting are stated where it is read
    assert "--ngram-rule spec-bench" in pld["notes"] and "every step counted" in pld["notes"]


def test_load_references_default_dir_sorted_and_round_trip():
    refs = load_references()
    names = [r.name for r in refs]
    assert names == sorted(names) and set(PUBLISHED) <= set(names)
    for r in refs:
        on_disk = json.loads((paths.REFERENCES_DIR / f"{r.name}.json").read_text())
        assert r.to_dict() == on_disk
        assert list(r.to_dict()) == list(FIELDS)


def test_value_and_ks():
    ref = {r.name: r for r in load_references()}["seed-vllm-v1-llama31-8b"]
    assert ref.value(1) == 1.71 and ref.value("5") == 2.43
    assert ref.value(6) is None
    assert ref.ks == [1, 2, 3, 4, 5]
    assert isinstance(ref, Reference)


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (make_ref(values=None), "'values' must be a non-empty object"),
        (make_ref(values={}), "'values' must be a non-empty object"),
        (make_ref(values={"0": 1.5}), "not a positive integer K"),
        (make_ref(values={"k1": 1.5}), "not a positive integer K"),
        (make_ref(values={"1": 0.5}), "not a possible AL at K=1"),
        (make_ref(values={"1": "1.5"}), "is '1.5', not a finite number"),
        (make_ref(max_tokens="256"), "'max_tokens' must be a positive integer or null"),
        (make_ref(temperature=None), "'temperature' must be a number"),
        (make_ref(target=None), "'target' must be a string"),
        ({k: v for k, v in make_ref().items() if k != "notes"}, "missing key\\(s\\) notes"),
        (make_ref(per_position=[0.5]), "unknown key\\(s\\) per_position"),
        (make_ref(noise=-0.01), "'noise' must be a number >= 0"),
        (make_ref(noise="0.01"), "'noise' must be a number >= 0"),
        (make_ref(limit=0), "'limit' must be a positive integer"),
        (make_ref(draft_sampling="greedy"), "'draft_sampling' must be one of onehot, sampled"),
    ],
)
def test_malformed_reference_file_is_named(tmp_path, content, message):
    write_ref(tmp_path, "good.json", make_ref(name="good"))
    write_ref(tmp_path, "broken.json", content)
    with pytest.raises(AlcheckError, match=message) as info:
        load_references(tmp_path)
    assert str(tmp_path / "broken.json") in info.value.message
    assert info.value.exit_code == 2


def test_duplicate_names_and_missing_dir(tmp_path):
    write_ref(tmp_path, "a.json", make_ref(name="same"))
    write_ref(tmp_path, "b.json", make_ref(name="same"))
    with pytest.raises(AlcheckError, match="'same' is used by both"):
        load_references(tmp_path)
    with pytest.raises(AlcheckError, match="not found"):
        load_references(tmp_path / "missing")


def test_any_file_name_is_accepted(tmp_path):
    write_ref(tmp_path, "demo.json", make_ref(max_tokens=None, values={"3": 2.0, "1": 1.5}))
    (tmp_path / "README.txt").write_text("ignored")
    [ref] = load_references(tmp_path)
    assert ref.name == "demo" and ref.max_tokens is None
    assert list(ref.values) == ["1", "3"]  # sorted by K
    assert ref.value(3) == 2.0


# --------------------------------------------------------------------------- selection


@pytest.mark.parametrize(
    "ref_id, run_id, expected",
    [
        (L31, L31, True),
        (L31, L31.upper(), True),
        (L31, "/models/Llama-3.1-8B-Instruct", True),
        (L31, "/models/llama-3.1-8b-instruct/", True),
        (L31, "meta-llama/Meta-Llama-3.1-8B-Instruct", True),  # Meta's old repo name
        (L31, "/hf/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/0e9e39f2", True),
        (L31, "RedHatAI/Llama-3.1-8B-Instruct", False),  # another org's hub repo
        (L31, "meta-llama/Llama-3.1-70B-Instruct", False),
        (L3, "/data/Meta-Llama-3-8B-Instruct", True),
        (L3, L31, False),
        (E31, "/ckpt/EAGLE-LLaMA3.1-Instruct-8B", True),
        (E31, EA3, False),
        ("alcheck/demo/models/eagle", "/work/main/alcheck/demo/models/eagle", True),
    ],
)
def test_model_matches(ref_id, run_id, expected):
    assert model_matches(ref_id, run_id) is expected


def test_select_auto():
    refs = load_references()
    names = lambda rs: {r.name for r in rs}  # noqa: E731
    got = names(select_references(refs, "auto", L31, E31, "eagle"))
    assert got == {
        "seed-eagle-repo-llama31-8b",
        "seed-vllm-v0-llama31-8b",
        "seed-vllm-v1-llama31-8b",
        "vllm-issue20780-eagle-llama31-8b",
        "vllm-ci-eagle-llama31-8b",
    }
    local = names(
        select_references(refs, "auto", "/m/Llama-3.1-8B-Instruct", "/m/EAGLE-LLaMA3.1-Instruct-8B", "EAGLE")
    )
    assert local == got
    assert names(select_references(refs, "auto", L31, EA3, "eagle3")) == {
        "vllm-issue20780-eagle3-llama31-8b",
        "vllm-ci-eagle3-llama31-8b",
    }
    assert names(select_references(refs, "auto", L3, E3, "eagle")) == {
        "seed-vllm-v1-no-lookahead-llama3-8b",
        "seed-vllm-v1-lookahead-llama3-8b",
        "seed-eagle-repo-llama3-8b",
    }
    assert select_references(refs, "auto", L31, E31, "eagle3") == []  # method must match
    assert select_references(refs, "auto", "/tmp/tiny/target", "/tmp/tiny/eagle", "eagle") == []
    # Spec-Bench table only for Spec-Bench runs (or when the dataset filter is off)
    assert names(select_references(refs, "auto", L31, E31, "eagle", dataset="spec_bench")) == {
        "vllm-pr23563-specbench-eagle-llama31-8b"
    }
    assert len(select_references(refs, "auto", L31, E31, "eagle", dataset=None)) == 6


def test_select_none_and_names():
    refs = load_references()
    assert select_references(refs, "none", L31, E31, "eagle") == []
    spec = " vllm-ci-eagle-llama31-8b, seed-vllm-v1-llama31-8b,vllm-ci-eagle-llama31-8b "
    got = select_references(refs, spec, "x", "y", "eagle")
    assert [r.name for r in got] == ["vllm-ci-eagle-llama31-8b", "seed-vllm-v1-llama31-8b"]
    with pytest.raises(AlcheckError) as info:
        select_references(refs, "seed-vllm-v1-llama31-8b,nope", L31, E31, "eagle")
    msg = info.value.message
    assert "unknown reference 'nope'" in msg and "seed-vllm-v0-llama31-8b" in msg and "auto" in msg


def test_short_source():
    assert (
        short_source("https://github.com/vllm-project/vllm/pull/16370#issuecomment-1")
        == "vllm-project/vllm#16370"
    )
    assert short_source("https://github.com/vllm-project/vllm/issues/20780") == "vllm-project/vllm#20780"
    assert short_source("alcheck demo") == "alcheck demo"


# --------------------------------------------------------------------------- CLI


def test_cli_references_table():
    result = CliRunner().invoke(cli, ["references"])
    assert result.exit_code == 0, result.output
    out = result.output
    for name in PUBLISHED:
        assert name in out
    for text in (
        "2.296",
        "2.811",
        "3.54",
        "1.71",
        "vllm-example",
        "K=7",
        "vllm-project/vllm#24531",
        "eagle3",
    ):
        assert text in out
    assert "AL = 1 + accepted drafts" in out


def test_cli_references_json():
    result = CliRunner().invoke(cli, ["references", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == [r.to_dict() for r in load_references()]


def test_cli_references_dir_reports_each_bad_file_and_lists_the_rest(tmp_path):
    write_ref(tmp_path, "a-bad.json", "{oops")
    write_ref(tmp_path, "good.json", make_ref(name="good"))
    write_ref(tmp_path, "package.json", {"name": "not-a-table"})
    write_ref(tmp_path, "twin.json", make_ref(name="good"))
    result = CliRunner().invoke(cli, ["references", "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in json.loads(result.stdout)] == ["good"]
    skipped = result.stderr.splitlines()
    assert len(skipped) == 3 and all(line.startswith("skipped: ") for line in skipped), skipped
    for name, why in (
        ("a-bad.json", "not valid JSON"),
        ("package.json", "missing key"),
        ("twin.json", "used by"),
    ):
        assert any(name in line and why in line for line in skipped), (name, skipped)


def test_cli_references_missing_dir(tmp_path):
    result = CliRunner().invoke(cli, ["references", "--dir", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "not found" in result.output, result.output


# --------------------------------------------------------------------------- matching warnings


RUN = {
    "target": "meta-llama/Llama-3.1-8B-Instruct",
    "draft": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "method": "eagle",
    "dataset": "mt_bench",
    "protocol": "vllm-example",
    "limit": None,
    "max_tokens": 256,
    "temperature": 0.0,
    "draft_sampling": "onehot",
}


def test_mismatches_name_every_setting_that_moves_al():
    ref = load_references()
    seed = next(r for r in ref if r.name == "seed-vllm-v1-llama31-8b").to_dict()
    assert mismatches(seed, RUN) == []
    demo_run = {
        **RUN,
        "target": "/x/alcheck/demo/models/alcheck-demo-llama",
        "draft": "/x/alcheck-demo-eagle",
        "limit": 8,
        "max_tokens": 64,
    }
    found = mismatches(seed, demo_run)
    assert any(f.startswith("target meta-llama/Llama-3.1-8B-Instruct") for f in found)
    assert any(f.startswith("draft yuhuili/EAGLE-LLaMA3.1-Instruct-8B") for f in found)
    assert "all questions (this run: 8 questions)" in found
    assert "max_tokens 256 (this run: 64)" in found
    assert mismatches(seed, demo_run, skip=("limit",)).count("all questions (this run: 8 questions)") == 0
    unknown = next(r for r in ref if r.name == "seed-eagle-repo-llama3-8b").to_dict()
    assert "max_tokens not stated by the source" in mismatches(unknown, RUN)
    assert "protocol 'unknown' (this run: 'vllm-example')" in mismatches(unknown, RUN)


def test_a_sampled_run_against_a_greedy_reference_warns():
    seed = next(r for r in load_references() if r.name == "seed-vllm-v1-llama31-8b").to_dict()
    assert mismatches(seed, {**RUN, "temperature": 1.0}) == ["greedy (this run: temperature 1)"]
    hot = {**seed, "temperature": 1.0, "draft_sampling": "onehot"}
    assert mismatches(hot, {**RUN, "temperature": 1.0}) == []
    assert mismatches(hot, {**RUN, "temperature": 1.0, "draft_sampling": "sampled"}) == [
        "draft sampling 'onehot' (this run: 'sampled')"
    ]
    assert mismatches({**hot, "draft_sampling": None}, {**RUN, "temperature": 1.0}) == [
        "its temperature > 0 draft convention is not stated"
    ]


def test_table_and_markdown_show_the_warnings():
    from fake_runs import make_meta, make_questions
    from rich.console import Console

    from alcheck.report.table import markdown_table, reference_mismatches, reference_warnings, rich_table

    seed = next(r for r in load_references() if r.name == "seed-vllm-v1-llama31-8b").to_dict()
    meta = make_meta(
        make_questions({1: 1.71, 2: 2.09}, n_questions=20, repeats=2),
        config={"temperature": 1.0, "max_tokens": 64, "limit": 20},
        references=[seed],
    )
    [line] = reference_warnings(meta)
    for part in (
        "seed-vllm-v1-llama31-8b is not directly comparable",
        "20 questions",
        "max_tokens 256 (this run: 64)",
        "greedy (this run: temperature 1)",
    ):
        assert part in line
    assert reference_mismatches(meta)["seed-vllm-v1-llama31-8b"]
    console = Console(record=True, width=400)
    console.print(rich_table(meta))
    text = console.export_text()
    assert "greedy (this run: temperature 1)" in text and "⚠ seed-vllm-v1-llama31-8b" in text
    assert "greedy (this run: temperature 1)" in markdown_table(meta)
    assert "run-to-run noise = repeats ×2" in text
