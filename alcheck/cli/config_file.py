"""`run --config FILE`: any of run's options in a TOML or YAML file, for CI.

The file's keys are the options' names (`ks`, `max-tokens` or `max_tokens`, `speculative-config`
...); they become click's defaults, so a flag typed on the command line still wins. An unknown key,
a file that is not a table of options, or an unreadable file is one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from alcheck.errors import AlcheckError

FLAG = "--config"


def _parse(path: Path) -> object:
    text = path.read_text()
    if path.suffix.lower() == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise AlcheckError(f"{FLAG} {path}: TOML needs Python >= 3.11: use a .yaml file") from None
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise AlcheckError(f"{FLAG} {path}: not valid TOML ({exc}): fix the file") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)  # safe_load: a config file builds no Python objects
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0]
            raise AlcheckError(f"{FLAG} {path}: not valid YAML ({first}): fix the file") from None
    raise AlcheckError(f"{FLAG} {path}: use a .toml, .yaml or .yml file")


def load_defaults(command: click.Command, path: Path) -> dict:
    """The file's options as click parameter names -> values, checked against the command's options."""
    if not path.is_file():
        raise AlcheckError(f"{FLAG} {path}: no such file: pass the path of a TOML or YAML file")
    data = _parse(path)
    if not isinstance(data, dict):
        raise AlcheckError(
            f"{FLAG} {path}: expected a table of options (key = value), not {type(data).__name__}"
        )
    names = {p.name for p in command.params if isinstance(p, click.Option)} - {"config"}
    out = {}
    for key, value in data.items():
        name = str(key).lstrip("-").replace("-", "_")
        if name not in names:
            raise AlcheckError(
                f"{FLAG} {path}: {key!r} is not an option of `alcheck {command.name}`: "
                f"see `alcheck {command.name} --help`"
            )
        if isinstance(value, list):  # ks = [1, 2, 3] reads as --ks 1,2,3
            value = ",".join(map(str, value))
        elif isinstance(value, dict):  # speculative-config = { method = "ngram", ... }
            import json

            value = json.dumps(value, allow_nan=False)
        out[name] = value
    return out


def config_callback(ctx: click.Context, param, value):
    """Eager: read the file before the other options take their defaults."""
    if value:
        ctx.default_map = {**(ctx.default_map or {}), **load_defaults(ctx.command, Path(value))}
    return value
