"""The docs' shell examples (docs/reference/examples.md): every one carries a marker, the runnable
ones run on the demo pair, and the generated CLI reference covers every command and option."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli

DOCS = paths.REPO_ROOT / "docs"
MARKER = re.compile(r"<!-- example: ([a-z ]+) -->")
KINDS = {"runnable", "gpu", "hub", "server", "files", "network", "slow"}
COMMAND = re.compile(r"\s*(alcheck|make|python|torchrun|sbatch|pip)\b")
# pages other helpers write; the lead marks their examples when merging them
EXEMPT: set[str] = set()
# the shrink rule for runnable `alcheck run` / `alcheck ablate` lines (docs/reference/examples.md)
SMALL = {"--ks": "1-2", "--repeats": "1", "--limit": "2", "--max-tokens": "16"}


@dataclass
class Block:
    page: str
    line: int
    kinds: set[str]
    lines: list[str]


def blocks() -> list[Block]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        page = str(path.relative_to(DOCS))
        if page in EXEMPT:
            continue
        text = path.read_text().splitlines()
        i = 0
        while i < len(text):
            if not text[i].startswith("```"):
                i += 1
                continue
            end = next(j for j in range(i + 1, len(text)) if text[j].startswith("```"))
            mark = MARKER.fullmatch(text[i - 1].strip()) if i else None
            kinds = set(mark.group(1).split()) if mark else set()
            found.append(Block(page, i + 1, kinds, text[i + 1 : end]))
            i = end + 1
    return found


def commands(block: Block) -> list[list[str]]:
    """Each `alcheck` command of a block (continuation lines joined, comments dropped) as argv."""
    joined, out = "", []
    for raw in block.lines:
        joined += raw.rstrip().removesuffix("\\")
        if raw.rstrip().endswith("\\"):
            continue
        argv = shlex.split(joined, comments=True)
        joined = ""
        if argv and argv[0] == "alcheck":
            out.append(argv[1:])
    return out


def shrink(argv: list[str]) -> list[str]:
    if argv[0] not in ("run", "ablate"):
        return argv
    argv = list(argv)
    for flag, value in SMALL.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def test_every_shell_example_is_marked():
    unmarked = [
        f"{b.page}:{b.line}" for b in blocks() if any(COMMAND.match(x) for x in b.lines) and not b.kinds
    ]
    assert not unmarked, f"shell examples without an <!-- example: KIND --> marker: {unmarked}"
    unknown = [f"{b.page}:{b.line} {b.kinds - KINDS}" for b in blocks() if b.kinds - KINDS]
    assert not unknown


def test_the_shrink_rule():
    assert shrink(["run", "--ks", "1-5", "--out", "x"]) == [
        "run", "--ks", "1-2", "--out", "x", "--repeats", "1", "--limit", "2", "--max-tokens", "16",
    ]  # fmt: skip
    assert shrink(["compare", "a", "b"]) == ["compare", "a", "b"]


RUNNABLE: dict[str, list[Block]] = {}
for _b in blocks():
    if "runnable" in _b.kinds:
        RUNNABLE.setdefault(_b.page, []).append(_b)


@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_runnable_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    for block in RUNNABLE[page]:
        for argv in commands(block):
            result = CliRunner().invoke(cli, shrink(argv), catch_exceptions=False)
            assert result.exit_code == 0, f"{page}:{block.line}: alcheck {shlex.join(argv)}\n{result.output}"


def test_there_are_runnable_examples():
    assert {"getting-started.md", "guides/ci-gate.md", "guides/evaluate.md"} <= set(RUNNABLE)


# -- the generated CLI reference ------------------------------------------------------------------


def all_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    ctx = click.Context(group)
    out = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        out[prefix + name] = cmd
        if isinstance(cmd, click.Group):
            out.update(all_commands(cmd, prefix + name + " "))
    return out


def test_cli_reference_documents_the_group_and_every_command_recurses():
    """docs/reference/cli.md's mkdocs-click directive documents the whole group (depth and every
    subcommand): mkdocs-click walks list_commands/get_command, so every command below is rendered
    with every option its --help lists."""
    text = (DOCS / "reference" / "cli.md").read_text()
    assert ":module: alcheck.cli.main" in text and ":command: cli" in text
    assert ":depth:" not in text or ":depth: 1" in text  # depth is the heading level, not a cut-off
    assert "mkdocs-click" in (paths.REPO_ROOT / "mkdocs.yml").read_text()
    assert set(all_commands(cli)) >= {
        "run",
        "report",
        "compare",
        "gate",
        "import",
        "merge",
        "ablate kv-lookahead",
    }


def test_every_option_is_in_the_generated_reference():
    """What mkdocs-click renders for each command (its own generator, no build): every option
    that `alcheck CMD --help` lists appears there."""
    from mkdocs_click._docs import make_command_docs

    rendered = "\n".join(make_command_docs(prog_name="alcheck", command=cli, depth=1, style="table"))
    missing = []
    for name, cmd in all_commands(cli).items():
        ctx = click.Context(cmd, info_name=name)
        for param in cmd.get_params(ctx):
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for opt in param.opts + param.secondary_opts:
                if opt not in rendered:
                    missing.append(f"{name} {opt}")
    assert not missing, missing


def test_readme_is_short_and_names_both_set_up_commands():
    readme = (paths.REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make demo    #" in readme and "make test    #" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):  # every page it links exists
        assert (paths.REPO_ROOT / link).is_file(), link


def test_the_github_workflow_in_the_ci_gate_guide_runs_make_targets_that_exist():
    yaml = pytest.importorskip("yaml")
    workflow = paths.REPO_ROOT / ".github" / "workflows" / "al-gate.yml"
    steps = yaml.safe_load(workflow.read_text())["jobs"]["gate"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert "make ci-gate" in runs
    makefile = (paths.REPO_ROOT / "Makefile").read_text()
    for line in runs:
        if line.startswith("make "):
            assert re.search(rf"^{line.split()[1]}:", makefile, re.M), line
    assert '--8<-- ".github/workflows/al-gate.yml"' in (DOCS / "guides" / "ci-gate.md").read_text()
