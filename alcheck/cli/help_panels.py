"""Option groups in `--help` (issue 35): rich-click draws each command's options in named panels.

A command with many options is declared `@click.command(..., **panelled(LAYOUT))`; LAYOUT is a list
of (panel title, its options' flags). tests/test_cli_help.py checks that every option of such a
command sits in exactly one panel, so a new option cannot fall into a catch-all list unnoticed.
Without rich-click (an install that skipped the dependency) the commands are plain click ones,
with the same options and the same behaviour, ungrouped.

Every other command and the `alcheck` group itself are drawn the same way (`drawn_alike`, called
by cli/main.py as it loads each command), so no subcommand's help is in click's plain style.
"""

from __future__ import annotations

import copy

import click

try:
    import rich_click
except ImportError:  # the help is ungrouped, nothing else changes
    rich_click = None

MODEL = "Model"
SWEEP = "Sweep"
RUNNER = "Runner and KV"
ENGINE = "Engine"
OUTPUT = "Output"

_MODEL = [
    "--target",
    "--draft",
    "--method",
    "--speculative-config",
    "--ngram-rule",
    "--prompt-lookup-min",
    "--prompt-lookup-max",
    "--suffix-decoding-max-tree-depth",
    "--suffix-decoding-max-cached-requests",
    "--suffix-decoding-max-spec-factor",
    "--suffix-decoding-min-token-prob",
    "--topk",
    "--num-draft-tokens",
]
_SWEEP = [
    "--config",
    "--ks",
    "--repeats",
    "--dataset",
    "--protocol",
    "--max-tokens",
    "--temperature",
    "--draft-sampling",
    "--chat-template",
    "--skip-long",
    "--limit",
    "--seed",
    "--shard",
]
_RUNNER = [
    "--device",
    "--devices",
    "--dtype",
    "--runner",
    "--max-batch-size",
    "--block-size",
    "--num-blocks",
    "--gpu-memory-utilization",
    "--tensor-parallel-size",
    "--no-kv-lookahead",
    "--check-lossless",
    "--audit-slots",
    "--no-prompt-cache",
]

RUN = [
    (MODEL, _MODEL),
    (SWEEP, _SWEEP),
    (RUNNER, [*_RUNNER, "--executor", "--ray-address"]),
    (
        ENGINE,
        [
            "--engine",
            "--endpoint",
            "--engine-cmd",
            "--engine-start-timeout",
            "--concurrency",
            "--request-timeout",
        ],
    ),
    (OUTPUT, ["--out", "--resume", "--reference", "--gate", "--tolerance", "--json", "--help"]),
]

ABLATE = [
    (MODEL, [flag for flag in _MODEL if flag != "--speculative-config"]),
    (SWEEP, [flag for flag in _SWEEP if flag not in ("--config", "--shard")]),
    (RUNNER, [flag for flag in _RUNNER if flag != "--devices"]),
    (OUTPUT, ["--out", "--help"]),
]

SERVE = [
    (
        MODEL,
        [
            "--target",
            "--draft",
            "--method",
            "--speculative-config",
            "--k",
            "--prompt-lookup-min",
            "--prompt-lookup-max",
            "--topk",
            "--num-draft-tokens",
            "--draft-sampling",
        ],
    ),
    ("Server", ["--dialect", "--host", "--port", "--model-name", "--no-per-request-metrics", "--help"]),
    (
        RUNNER,
        ["--device", "--dtype", "--max-batch-size", "--block-size", "--num-blocks", "--no-kv-lookahead"],
    ),
]

IMPORT = [
    (
        "What the file does not record",
        [
            "--k",
            "--target",
            "--draft",
            "--method",
            "--dataset",
            "--protocol",
            "--temperature",
            "--max-tokens",
            "--dtype",
            "--topk",
            "--num-draft-tokens",
            "--draft-sampling",
            "--limit",
        ],
    ),
    ("Comparisons", ["--baseline", "--tokenizer", "--against"]),
    (OUTPUT, ["--out", "--name", "--reference", "--help"]),
]


# the option (short name, then long names) and its help, the default after it; no metavar column:
# a Choice's metavar in a column of its own would take a third of 80 columns; paragraphs kept as written
HELP = {
    "options_table_column_types": ["opt_short", "opt_long", "help"],
    "options_table_help_sections": ["help", "default"],
    "text_paragraph_linebreaks": "\n\n",
    "delimiter_comma": "\n",  # an option's other names each on a line of their own, never cut mid-name
}


def panelled(layout: list[tuple[str, list[str]]]) -> dict:
    """click.command's keywords that draw `layout`'s panels (none without rich-click)."""
    if rich_click is None:
        return {}
    panels = [rich_click.RichOptionPanel(name=title, options=list(flags)) for title, flags in layout]
    return {"cls": rich_click.RichCommand, "panels": panels, "context_settings": {"rich_help_config": HELP}}


def drawn_alike(cmd: click.Command) -> click.Command:
    """A plain click command or group (none of rich-click's yet) as rich-click draws the panelled ones:
    a copy of it of rich-click's class, with HELP, its subcommands too. Parsing and behaviour are
    click's own either way; unchanged without rich-click, or for a command of another class."""
    if rich_click is None or type(cmd) not in (click.Command, click.Group):
        return cmd
    rich = copy.copy(cmd)
    rich.panel, rich.panels, rich.aliases = None, [], []
    rich.context_settings = {"rich_help_config": HELP, **cmd.context_settings}
    if isinstance(cmd, click.Group):
        rich.__class__ = rich_click.RichGroup
        rich._alias_mapping, rich._panel_command_mapping = {}, {}
        rich.commands = {name: drawn_alike(sub) for name, sub in cmd.commands.items()}
    else:
        rich.__class__ = rich_click.RichCommand
    return rich
