"""The `alcheck` command group. Subcommands load lazily so `alcheck --help` needs no torch."""

from __future__ import annotations

import importlib

import click

from alcheck import __version__
from alcheck.cli.help_panels import HELP, drawn_alike, rich_click

# name -> "module:attribute" of a click.Command
COMMANDS = {
    "run": "alcheck.cli.run:run_cmd",
    "report": "alcheck.cli.report:report_cmd",
    "compare": "alcheck.cli.compare:compare_cmd",
    "gate": "alcheck.cli.gate:gate_cmd",
    "references": "alcheck.cli.references:references_cmd",
    "ablate": "alcheck.cli.ablate:ablate_cmd",
    "serve": "alcheck.cli.serve:serve_cmd",
    "import": "alcheck.cli.import_cmd:import_cmd",
    "merge": "alcheck.cli.merge:merge_cmd",
}


class LazyGroup(click.Group if rich_click is None else rich_click.RichGroup):
    """The command group: each subcommand imported when named, every one's help in one style.
    Errors stay click's own lines ("Error: ..."), not rich-click's panels: click's main."""

    main = click.Group.main

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return drawn_alike(getattr(importlib.import_module(module), attr))


@click.group(
    cls=LazyGroup,
    context_settings={
        "help_option_names": ["-h", "--help"],
        **({"rich_help_config": HELP} if rich_click else {}),
    },
)
@click.version_option(__version__, prog_name="alcheck")
def cli():
    """Measure EAGLE speculative-decoding acceptance length (AL) and judge it against references."""


def main():
    cli(prog_name="alcheck")
