"""Issue 50, part B: one help style for every command, option names never cut, no random colour."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli


def _commands(group=cli, path=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


COMMANDS = [((), cli), *_commands()]


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "alcheck" for p, _ in COMMANDS])
def test_every_help_is_drawn_alike_with_each_option_name_whole(path, cmd):
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert not any(line.startswith(("Options:", "Commands:")) for line in lines), "click's plain style"
    assert any(line.startswith("╭─") for line in lines), "no rich-click panel"
    names = {opt for p in cmd.params if isinstance(p, click.Option) and not p.hidden for opt in p.opts}
    for name in names:  # each name whole on one line, never folded across two
        assert any(f" {name} " in f" {line} " for line in lines), (name, result.output)


def test_errors_stay_one_plain_line_in_every_command():
    for args in (["report", "--nope"], ["run", "--repeats", "x"], ["nonsense"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2
        errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and "╭" not in result.output, result.output


def test_the_console_colours_nothing_by_itself(monkeypatch):
    """rich's highlighter coloured "Intel", "(R)" and digits of the device line on a terminal."""
    from alcheck.cli.console import make_console

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    console = make_console()
    assert console.is_terminal and console.color_system is not None
    with console.capture() as capture:
        console.print("device Intel(R) Xeon(R) Processor 2.10GHz (float32, torch-sdpa); seed 0:1")
        console.print("[yellow]note[/]: 3 question turns")
    plain, marked = capture.get().splitlines()
    assert "\x1b[" not in plain, repr(plain)
    assert "\x1b[" in marked  # markup still colours what it names
