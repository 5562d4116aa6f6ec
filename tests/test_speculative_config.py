"""`run --speculative-config JSON` (issue 35): vLLM's own JSON gives the same run as alcheck's flags
(EAGLE-1, EAGLE-3, n-gram, suffix), reaches the server's command with --engine-cmd, and refuses in
one line what it cannot map or what contradicts a flag, writing nothing."""

from __future__ import annotations

import json
import shlex

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.cli.speculative_config import engine_command

TINY = ["--repeats", "1", "--limit", "2", "--max-tokens", "16", "--reference", "none"]
COMPARED = (
    "method",
    "ks",
    "draft",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "suffix_decoding_max_cached_requests",
)


def invoke(args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


def same_run(tmp_path, spec: dict, flags: list, target=None):
    base = ["run", *TINY, *(["--target", target] if target else [])]
    a, b = tmp_path / "json", tmp_path / "flags"
    first = invoke([*base, "--speculative-config", json.dumps(spec), "--out", a])
    assert first.exit_code == 0, first.output
    second = invoke([*base, *flags, "--out", b])
    assert second.exit_code == 0, second.output
    ca, cb = (json.loads((d / "run.json").read_text())["config"] for d in (a, b))
    assert {k: ca.get(k) for k in COMPARED} == {k: cb.get(k) for k in COMPARED}
    pd.testing.assert_frame_equal(pd.read_csv(a / "questions.csv"), pd.read_csv(b / "questions.csv"))


def test_vllms_eagle_json_is_the_same_run_as_the_flags(pair_dirs, tmp_path):
    target, head = map(str, pair_dirs)
    spec = {"method": "eagle", "model": head, "num_speculative_tokens": 2}
    same_run(tmp_path, spec, ["--method", "eagle", "--draft", head, "--ks", "2"], target=target)


def test_vllms_eagle3_json_is_the_same_run_as_the_flags(tmp_path):
    head = str(paths.DEMO_TARGET_DIR.parent / "alcheck-demo-eagle3")
    spec = {"method": "eagle3", "model": head, "num_speculative_tokens": 3}
    flags = ["--method", "eagle3", "--draft", head, "--ks", "3"]
    same_run(tmp_path, spec, flags, target=str(paths.DEMO_TARGET_DIR))


@pytest.mark.parametrize(
    "spec, flags",
    [
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
            ["--method", "ngram", "--ks", "3", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"],
        ),
        (
            {"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_cached_requests": 0},
            ["--method", "suffix", "--ks", "4", "--suffix-decoding-max-cached-requests", "0"],
        ),
    ],
    ids=["ngram", "suffix"],
)
def test_vllms_model_free_json_is_the_same_run_as_the_flags(tmp_path, spec, flags):
    same_run(tmp_path, spec, flags)


@pytest.mark.parametrize(
    "value, extra, needles",
    [
        ('{"method": "ngram", "foo": 1}', [], ["key 'foo' is not one alcheck maps", "drop it"]),
        ('{"method": "mlp_speculator"}', [], ["method 'mlp_speculator' is not one alcheck runs"]),
        ('{"num_speculative_tokens": 3}', [], ['no "method"']),
        (
            '{"method": "ngram", "num_speculative_tokens": 3}',
            ["--ks", "2"],
            ["--ks '2' is given too", "once"],
        ),
        ('{"method": "ngram", "prompt_lookup_min": 2}', ["--prompt-lookup-min", "1"], ["given too"]),
        ('{"method": "ngram", "num_speculative_tokens": 0}', [], ["not an integer >= 1"]),
        ('{"method": ', [], ["not valid JSON"]),
        ("[1, 2]", [], ["expected a JSON object"]),
        ("@/nonexistent/spec.json", [], ["no file"]),
    ],
)
def test_bad_json_is_one_line_and_writes_nothing(tmp_path, value, extra, needles):
    out = tmp_path / "r"
    result = CliRunner().invoke(cli, ["run", *TINY, "--speculative-config", value, *extra, "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()


def test_the_json_from_a_file(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"method": "ngram", "num_speculative_tokens": 1}))
    out = tmp_path / "r"
    assert invoke(["run", *TINY, "--speculative-config", f"@{spec}", "--out", out]).exit_code == 0
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["method"], config["ks"]) == ("ngram", [1])


def test_the_same_json_reaches_the_servers_command():
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    template = engine_command("python -m vllm.entrypoints.openai.api_server --model M --port {port}", spec)
    args = shlex.split(template.replace("{k}", "5"))  # as EngineProcess fills the template per K
    served = json.loads(args[args.index("--speculative-config") + 1])
    assert served == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3}
    with pytest.raises(Exception, match="give it once"):
        engine_command("vllm serve M --speculative-config '{}'", spec)
