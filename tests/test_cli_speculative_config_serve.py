"""`serve --speculative-config` (issue 35): vLLM's JSON read as serve's options, refusing in one line
what serve cannot map or what contradicts an option; and run's JSON against `--config FILE` values."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import one_line_error

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.cli.serve import serve_cmd, serve_config
from alcheck.cli.speculative_config import serve_params

SERVE = ["--dialect", "vllm", "--port", "0"]
TARGET, HEAD = str(paths.DEMO_TARGET_DIR), str(paths.DEMO_TARGET_DIR.parent / "alcheck-demo-eagle")


def config_of(args):
    ctx = serve_cmd.make_context("serve", [*SERVE, *args])
    return serve_config(serve_params(ctx, dict(ctx.params)))


def test_serve_json_is_the_same_server_as_the_flags():
    target, head = TARGET, HEAD
    spec = {"method": "eagle", "model": head, "num_speculative_tokens": 3}
    by_json = config_of(["--target", target, "--speculative-config", json.dumps(spec)])
    by_flags = config_of(["--target", target, "--method", "eagle", "--draft", head, "--k", "3"])
    assert by_json == by_flags and by_json.k == 3 and by_json.draft == head


def test_serve_ngram_json_sets_prompt_lookup():
    target = TARGET
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    by_json = config_of(["--target", target, "--speculative-config", json.dumps(spec)])
    flags = ["--method", "ngram", "--k", "2", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]
    assert by_json == config_of(["--target", target, *flags])


@pytest.mark.parametrize(
    "spec, extra, needles",
    [
        (
            {"method": "suffix", "suffix_decoding_max_tree_depth": 8},
            ["--k", "2"],
            ["key 'suffix_decoding_max_tree_depth' is not one alcheck maps for serve", "drop it"],
        ),
        ({"method": "eagle", "num_speculative_tokens": 3}, ["--k", "2"], ["--k 2 is given too", "once"]),
        ({"method": "ngram"}, [], ["needs --k", "pass --k K"]),
        (
            {"method": "mlp_speculator", "num_speculative_tokens": 1},
            [],
            ["method 'mlp_speculator' is not one alcheck runs"],
        ),
    ],
    ids=["unknown-key", "contradicts-k", "no-k", "unknown-method"],
)
def test_serve_refuses_in_one_line(tmp_path, spec, extra, needles):
    args = ["serve", "--target", str(tmp_path), *SERVE, "--speculative-config", json.dumps(spec), *extra]
    one_line_error(CliRunner().invoke(cli, args), *needles)


def test_serve_without_k_or_json_is_one_line():
    one_line_error(CliRunner().invoke(cli, ["serve", "--target", "t", *SERVE]), "needs --k")


# -- run: --speculative-config against the values of --config FILE --------------------------------

RUN = ["run", "--repeats", "1", "--limit", "2", "--max-tokens", "16", "--reference", "none"]


@pytest.mark.parametrize(
    "config, needles",
    [
        ('ks = "2"\n', ["--config sets --ks '2'", "give it once"]),
        ("prompt-lookup-max = 2\n", ["prompt_lookup_max 3 but --config sets --prompt-lookup-max 2"]),
        ('method = "suffix"\n', ["method 'ngram' but --config sets --method 'suffix'"]),
    ],
    ids=["ks", "prompt-lookup-max", "method"],
)
def test_run_json_refuses_what_the_config_file_contradicts(tmp_path, config, needles):
    path = tmp_path / "run.toml"
    path.write_text(config)
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})
    out = tmp_path / "r"
    args = [*RUN, "--config", str(path), "--speculative-config", spec, "--out", str(out)]
    one_line_error(CliRunner().invoke(cli, args), *needles)
    assert not out.exists()


def test_run_json_and_config_file_that_agree_run(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('ks = "3"\nprompt-lookup-max = 3\n')
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})
    out = tmp_path / "r"
    args = [*RUN, "--config", str(path), "--speculative-config", spec, "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["method"], config["ks"], config["prompt_lookup_max"]) == ("ngram", [3], 3)
