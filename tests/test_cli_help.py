"""`--help` (issues 35 and 33): options in named groups, one or two lines each, choices named."""

import click
import pytest
from click.testing import CliRunner

from alcheck.cli.help_panels import ABLATE, IMPORT, RUN, SERVE
from alcheck.cli.main import cli

MAX_HELP = 100  # characters of an option's help: one or two lines of the help column
PANELS = {("run",): RUN, ("serve",): SERVE, ("ablate", "kv-lookahead"): ABLATE, ("import",): IMPORT}


def command(path):
    cmd, ctx = cli, click.Context(cli)
    for name in path:
        cmd = cmd.get_command(ctx, name)
    return cmd


def every_command(group=cli, path=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from every_command(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def visible_options(cmd):
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


@pytest.mark.parametrize("path", list(PANELS), ids=" ".join)
def test_each_option_sits_in_exactly_one_group(path):
    flags = [flag for _, group in PANELS[path] for flag in group]
    assert len(flags) == len(set(flags)), "an option listed in two groups"
    cmd = command(path)
    declared = {p.opts[0] for p in visible_options(cmd)} | {"--help"}
    assert set(flags) == declared, (set(flags) - declared, declared - set(flags))


@pytest.mark.parametrize("path", list(PANELS), ids=" ".join)
def test_help_draws_the_groups_at_80_columns(path):
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for title, _ in PANELS[path]:
        assert any(line.startswith(f"╭─ {title} ─") for line in lines), title
    assert not any(line.startswith("╭─ Options ─") for line in lines)  # nothing left ungrouped
    assert all(len(line) <= 80 for line in lines)


def test_run_help_names_the_five_groups():
    assert [title for title, _ in RUN] == ["Model", "Sweep", "Runner and KV", "Engine", "Output"]


COMMANDS = list(every_command())
BY_COMMAND = pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])


@BY_COMMAND
def test_each_option_help_is_one_or_two_lines(path, cmd):
    long = [
        f"{p.opts[0]} ({len(p.help or '')})" for p in visible_options(cmd) if len(p.help or "") > MAX_HELP
    ]
    assert not long, f"alcheck {' '.join(path)}: move the explanation to docs/reference/cli-help-notes.md"


@BY_COMMAND
def test_a_choice_option_names_its_choices(path, cmd):
    """The help shows no metavar column (it took a third of 80 columns), so the help names the choices."""
    for p in visible_options(cmd):
        if isinstance(p.type, click.Choice):
            missing = [c for c in p.type.choices if c not in (p.help or "")]
            assert not missing, f"alcheck {' '.join(path)} {p.opts[0]}: help lacks {missing}"


def test_help_notes_page_covers_the_grouped_commands():
    from pathlib import Path

    notes = (Path(__file__).parents[1] / "docs" / "reference" / "cli-help-notes.md").read_text()
    for path in PANELS:
        assert f"alcheck {' '.join(path)}" in notes


def test_without_rich_click_the_commands_are_plain_click(monkeypatch):
    from alcheck.cli import help_panels

    monkeypatch.setattr(help_panels, "rich_click", None)
    plain = click.command("x", **help_panels.panelled(RUN))(lambda: None)
    assert type(plain) is click.Command
