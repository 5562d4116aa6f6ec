"""Issue 50, part B: the errors that pointed elsewhere (one flag of the pair, swapped flags, a draft
read as a target, checkpoint files) and resume with a --draft typed again or copied elsewhere."""

from __future__ import annotations

import json
import pickle
import shutil
import warnings

import pytest
from conftest import invoke, one_line_error

from alcheck import paths
from alcheck.errors import AlcheckError

TARGET, EAGLE, EAGLE3 = str(paths.DEMO_TARGET_DIR), str(paths.DEMO_DRAFT_DIR), str(paths.DEMO_EAGLE3_DIR)
TINY = ["--ks", "1-2", "--repeats", "1", "--limit", "2", "--max-tokens", "8", "--reference", "none"]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--target", "/nope/target"], ["target /nope/target: no such directory"]),
        (["--draft", "/nope/head"], ["draft /nope/head: no such directory"]),
        (["--target", TARGET], [f"--target {TARGET} is given without --draft", "pass --draft too"]),
        (["--draft", EAGLE], [f"--draft {EAGLE} is given without --target", "pass --target too"]),
    ],
)
def test_one_flag_of_the_pair_names_a_missing_folder_first(tmp_path, args, needles):
    out = tmp_path / "out"
    message = one_line_error(invoke(["run", *args, *TINY, "--out", str(out)]), *needles)
    assert "or neither" not in message
    assert not out.exists()


def test_the_help_says_the_demo_is_used_only_with_neither():
    result = invoke(["run", "--help"])
    flat = " ".join(result.output.replace("│", " ").split())
    assert "With neither --target nor --draft: the embedded demo pair" in flat
    assert "Needs --target" in flat


@pytest.mark.parametrize(
    "target, draft, needles",
    [
        (EAGLE, TARGET, ["is an EAGLE-1 head", "look swapped", f"pass --target {TARGET} --draft {EAGLE}"]),
        (EAGLE3, EAGLE, ["is an EAGLE-3 head", "look swapped", "pass the base model as --target"]),
    ],
)
def test_a_head_as_target_says_the_flags_look_swapped(tmp_path, target, draft, needles):
    result = invoke(["run", "--target", target, "--draft", draft, *TINY, "--out", str(tmp_path / "o")])
    message = one_line_error(result, f"--target {target}", *needles)
    assert "tokenizer" not in message and "Couldn't instantiate" not in message


def test_mtp_names_the_draft_as_the_draft(tmp_path):
    out = tmp_path / "o"
    message = one_line_error(
        invoke(["run", "--method", "mtp", "--draft", EAGLE, *TINY, "--out", str(out)]),
        f"--draft {EAGLE} is not read",
        "drop --draft",
    )
    assert f"target {EAGLE}" not in message
    one_line_error(
        invoke(["run", "--method", "mtp", "--target", TARGET, "--draft", EAGLE, *TINY, "--out", str(out)]),
        f"--draft {EAGLE} is not the target {TARGET}",
        "drop --draft",
    )


def test_a_truncated_config_names_line_and_column(tmp_path):
    from alcheck.models.checkpoint_files import read_config

    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "config.json").write_text('{\n  "hidden_size": 64,\n  "model_type": "lla')
    with pytest.raises(AlcheckError) as err:
        read_config(folder, "target")
    assert "(unterminated string starting at line 3, column 17)" in str(err.value)
    (folder / "config.json").write_text('{"a": 1,}')
    with pytest.raises(AlcheckError, match=r"at line 1, column 9\)"):
        read_config(folder, "target")


class _RunsCode:
    def __reduce__(self):
        return (print, ("never run",))


def test_a_refused_legacy_pickle_prints_no_torch_warning(tmp_path):
    """A protocol-4 pickle makes torch's weights-only unpickler warn before it refuses: alcheck's one
    line is all that shows."""
    from alcheck.models.checkpoint_files import load_state_dict, tensor_names

    folder = tmp_path / "h"
    folder.mkdir()
    with (folder / "pytorch_model.bin").open("wb") as f:
        pickle.dump({"fc.weight": _RunsCode()}, f, protocol=4)
    for read in (tensor_names, load_state_dict):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(AlcheckError, match="pytorch_model.bin"):
                read(folder, "draft")
        assert not caught, [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def partial_run(tmp_path_factory):
    """A demo run (EAGLE-1 head) and a partial copy of it, one cell short."""
    root = tmp_path_factory.mktemp("resume_b")
    full = root / "full"
    result = invoke(["run", "--target", TARGET, "--draft", EAGLE, *TINY, "--out", str(full)])
    assert result.exit_code == 0, result.output
    return root, full


def _partial(root, full, name):
    out = shutil.copytree(full, root / name)
    meta = json.loads((out / "run.json").read_text())
    meta["cells"], meta["status"] = meta["cells"][:1], "partial"
    (out / "run.json").write_text(json.dumps(meta))
    return out


def test_resume_with_another_head_says_to_drop_draft_not_to_pass_a_method(partial_run):
    root, full = partial_run
    out = _partial(root, full, "other-head")
    message = one_line_error(
        invoke(["run", "--resume", str(out), "--draft", EAGLE3]),
        "different config",
        "its files are not the ones this run measured",
        "drop --draft to resume with",
    )
    assert "pass --method" not in message


def test_resume_accepts_a_byte_identical_copy_of_the_head(partial_run):
    root, full = partial_run
    out = _partial(root, full, "copied")
    copy = shutil.copytree(EAGLE, root / "eagle-copy")
    result = invoke(["run", "--resume", str(out), "--draft", str(copy)])
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (full / "questions.csv").read_bytes()
    assert json.loads((out / "run.json").read_text())["config"]["draft"] == str(copy)


def test_resume_with_an_edited_copy_names_the_changed_file(partial_run):
    root, full = partial_run
    out = _partial(root, full, "edited")
    copy = shutil.copytree(EAGLE, root / "eagle-edited")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    one_line_error(
        invoke(["run", "--resume", str(out), "--draft", str(copy)]),
        f"--draft {copy}: its files are not the ones this run measured (config.json changed)",
    )
