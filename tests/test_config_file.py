"""`run --config FILE` (issue 35): run options from TOML or YAML give the run the same flags give;
a flag typed on the command line wins; bad files are one line, exit 2, nothing written."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli

TOML = """method = "ngram"
ks = [1, 2]
repeats = 1
limit = 2
max-tokens = 16
reference = "none"
prompt_lookup_min = 1
"""
YAML = """method: ngram
ks: [1, 2]
repeats: 1
limit: 2
max-tokens: 16
reference: none
prompt_lookup_min: 1
"""
FLAGS = ["--method", "ngram", "--ks", "1,2", "--repeats", "1", "--limit", "2", "--max-tokens", "16"]
FLAGS += ["--reference", "none", "--prompt-lookup-min", "1"]


def invoke(args):
    return CliRunner().invoke(cli, [*map(str, args)])


@pytest.fixture(scope="module")
def by_flags(tmp_path_factory):
    out = tmp_path_factory.mktemp("config") / "flags"
    result = invoke(["run", *FLAGS, "--out", out])
    assert result.exit_code == 0, result.output
    return out


def config_of(out):
    return json.loads((out / "run.json").read_text())["config"]


@pytest.mark.parametrize("name, text", [("c.toml", TOML), ("c.yaml", YAML)])
def test_a_config_file_is_the_same_run_as_the_flags(by_flags, tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "file"
    result = invoke(["run", "--config", path, "--out", out])
    assert result.exit_code == 0, result.output
    mine, theirs = config_of(out), config_of(by_flags)
    for key in ("method", "ks", "repeats", "limit", "max_tokens", "prompt_lookup_min", "prompt_lookup_max"):
        assert mine[key] == theirs[key], key
    pd.testing.assert_frame_equal(pd.read_csv(out / "questions.csv"), pd.read_csv(by_flags / "questions.csv"))


def test_a_flag_on_the_command_line_wins(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(TOML)
    out = tmp_path / "r"
    assert invoke(["run", "--config", path, "--ks", "3", "--out", out]).exit_code == 0
    assert config_of(out)["ks"] == [3]


@pytest.mark.parametrize(
    "name, text, needles",
    [
        ("c.toml", "bogus = 1\n", ["'bogus' is not an option of `alcheck run`"]),
        ("c.toml", "ks = [1\n", ["not valid TOML"]),
        ("c.yaml", "- 1\n- 2\n", ["expected a table of options"]),
        ("c.yaml", "ks: [1\n", ["not valid YAML"]),
        ("c.json", "{}", ["use a .toml, .yaml or .yml file"]),
        (None, None, ["no such file"]),
    ],
)
def test_bad_config_files_are_one_line(tmp_path, name, text, needles):
    path = tmp_path / (name or "missing.toml")
    if text is not None:
        path.write_text(text)
    out = tmp_path / "r"
    result = invoke(["run", "--config", path, "--out", out])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "text, needles",
    [
        ("max-tokens = 16.5\n", ["max-tokens = 16.5", "not a valid integer"]),
        ("repeats = true\n", ["repeats = true", "--repeats is not a switch"]),
        ("limit = 2.9\n", ["limit = 2.9", "not a valid integer"]),
        ('repeats = "three"\n', ["repeats = 'three'", "not a valid integer"]),
        ("temperature = false\n", ["temperature = false"]),
        (
            'check-lossless = "yes"\n',
            ["check-lossless = 'yes'", "--check-lossless is a switch: write true or false"],
        ),
        ('method = "bogus"\n', ["method = 'bogus'", "not one of"]),
    ],
)
def test_config_values_are_checked_as_the_flags_are(tmp_path, text, needles):
    """Issue 50: a value the flag refuses is refused from the file too, in one line that names the
    file and the key, before anything is written (it used to become int(16.5) = 16, int(True) = 1)."""
    path = tmp_path / "c.toml"
    path.write_text('reference = "none"\n' + text)
    out = tmp_path / "r"
    result = invoke(["run", "--config", path, "--out", out])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: --config {path}: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()


def test_list_values_of_a_repeatable_option_are_several_values(tmp_path):
    from alcheck.cli.config_file import load_defaults
    from alcheck.cli.run import run_cmd

    path = tmp_path / "c.yaml"
    path.write_text("draft: [a, b]\nendpoint: http://127.0.0.1:9\nks: [1, 2]\nskip-long: true\n")
    assert load_defaults(run_cmd, path) == {
        "draft": ("a", "b"),
        "endpoints": ("http://127.0.0.1:9",),
        "ks": "1,2",
        "skip_long": True,
    }
