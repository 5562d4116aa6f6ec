"""`run --config FILE`: any of run's options in a TOML or YAML file, for CI.

The file's keys are the options' names (`ks`, `max-tokens` or `max_tokens`, `speculative-config`
...); they become click's defaults, so a flag typed on the command line still wins. Each value is
checked as the same flag typed on the command line is: `max-tokens = 16.5`, `repeats = true` or
`limit = 2.9` are refused, not converted (click casts a default with int(), which would give 16, 1
and 2). An unknown key, a value the flag would refuse, a file that is not a table of options, or an
unreadable file is one line that names the file (and the key), exit 2.
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
    options = _options_by_key(command)
    ctx = click.Context(command)
    out = {}
    for key, value in data.items():
        option = options.get(str(key).lstrip("-").replace("-", "_"))
        if option is None:
            raise AlcheckError(
                f"{FLAG} {path}: {key!r} is not an option of `alcheck {command.name}`: "
                f"see `alcheck {command.name} --help`"
            )
        try:
            out[option.name] = _as_typed(option, value, ctx)
        except click.BadParameter as exc:
            flag = max(option.opts, key=len)
            fix = (
                "write true or false"
                if option.is_bool_flag
                else f"write the value as you would type it after {flag}"
            )
            raise AlcheckError(
                f"{FLAG} {path}: {key} = {_shown(value)}: {exc.message.rstrip('.')}: {fix}"
            ) from None
    return out


def _options_by_key(command: click.Command) -> dict[str, click.Option]:
    """An option under its parameter name and each of its flags' names (`endpoint` -> endpoints)."""
    options = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "config":
            for name in (param.name, *(opt.lstrip("-").replace("-", "_") for opt in param.opts)):
                options.setdefault(name, param)
    return options


def _shown(value: object) -> str:
    """A value as the file spells it: true, not Python's True."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _as_typed(option: click.Option, value: object, ctx: click.Context) -> object:
    """The value as the words a user would type after the flag, checked by the flag's own type.

    Raises click.BadParameter where typing it would be refused."""
    if value is None:  # YAML's null: the option's own default
        return None
    if option.is_flag and option.is_bool_flag:
        if not isinstance(value, bool):
            raise click.BadParameter(f"{max(option.opts, key=len)} is a switch")
        return value
    if option.multiple:  # draft = ["a", "b"] reads as --draft a --draft b
        return tuple(
            _typed_word(option, item, ctx) for item in (value if isinstance(value, list) else [value])
        )
    if isinstance(value, list):  # ks = [1, 2, 3] reads as --ks 1,2,3
        return _typed_word(option, ",".join(map(str, value)), ctx)
    if isinstance(value, dict):  # speculative-config = { method = "ngram", ... }
        import json

        return json.dumps(value, allow_nan=False)
    return _typed_word(option, value, ctx)


def _typed_word(option: click.Option, value: object, ctx: click.Context) -> str:
    if isinstance(value, (bool, dict, list)):
        raise click.BadParameter(f"{max(option.opts, key=len)} is not a switch and takes one value")
    word = str(value)
    option.type.convert(word, option, ctx)  # what the command line would refuse, refused here
    return word


def config_callback(ctx: click.Context, param, value):
    """Eager: read the file before the other options take their defaults."""
    if value:
        ctx.default_map = {**(ctx.default_map or {}), **load_defaults(ctx.command, Path(value))}
    return value
