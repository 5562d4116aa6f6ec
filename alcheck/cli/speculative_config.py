"""`run|serve --speculative-config JSON`: the JSON a vLLM user passes to `vllm serve`, read as
alcheck's own options, so one config drives both sides.

Each key maps to one option (KEYS for run, SERVE_KEYS for serve). A key alcheck does not map, a
method it does not run, or a value that contradicts an option also given (on the command line or in
run's --config FILE) is one line, exit 2: silently dropping a key would measure another
configuration than the user's. With `--engine-cmd` the same JSON (its num_speculative_tokens set to
each K) is appended to the server's command. Without "method", a "model" is detected from its files,
as vLLM detects it (a draft model's JSON often names no method).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from alcheck.errors import AlcheckError

FLAG = "--speculative-config"

# vLLM's SpeculativeConfig key -> the run option (click parameter name) it sets
KEYS = {
    "method": "method",
    "model": "draft",
    "num_speculative_tokens": "ks",
    "prompt_lookup_min": "prompt_lookup_min",
    "prompt_lookup_max": "prompt_lookup_max",
    "suffix_decoding_max_tree_depth": "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests": "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor": "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob": "suffix_decoding_min_token_prob",
}
# `alcheck serve` runs one K and has no suffix decoding
SERVE_KEYS = {
    "method": "method",
    "model": "draft",
    "num_speculative_tokens": "k",
    "prompt_lookup_min": "prompt_lookup_min",
    "prompt_lookup_max": "prompt_lookup_max",
}
# where a value the JSON contradicts was set, as the message names it
SOURCES = {"COMMANDLINE": "{flag} {value!r} is given too", "DEFAULT_MAP": "--config sets {flag} {value!r}"}


def read_json(text: str) -> dict:
    """The JSON itself, or @FILE holding it."""
    source = text
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        if not path.is_file():
            raise AlcheckError(f"{FLAG} {text}: no file {path}: pass the JSON, or @FILE of an existing file")
        source = path.read_text()
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise AlcheckError(
            f"{FLAG}: not valid JSON ({exc.msg} at char {exc.pos}): pass vLLM's JSON object"
        ) from None
    if not isinstance(data, dict):
        raise AlcheckError(f"{FLAG}: expected a JSON object like vLLM's, got {type(data).__name__}")
    return data


def _method(value) -> str:
    from alcheck.methods.table import METHOD_NAMES

    if not isinstance(value, str) or value not in METHOD_NAMES:
        raise AlcheckError(
            f"{FLAG}: method {value!r} is not one alcheck runs: use one of {', '.join(METHOD_NAMES)}"
        )
    return value


def apply(params: dict, spec: dict, given: dict[str, str], keys: dict = KEYS, command: str = "run") -> dict:
    """params with the JSON's settings; `given`: option name -> where it was set (a SOURCES key)."""
    unknown = [key for key in spec if key not in keys]
    if unknown:
        fix = "measure that setting against the server with `alcheck run --engine`"
        raise AlcheckError(
            f"{FLAG}: key {unknown[0]!r} is not one alcheck maps{' for serve' * (command == 'serve')} "
            f"(it maps {', '.join(keys)}): "
            f"drop it, or {fix}"
        )
    if "method" not in spec and "model" not in spec:
        raise AlcheckError(f'{FLAG}: no "method": vLLM needs one too (e.g. "eagle", "eagle3", "ngram")')
    out = dict(params)
    for key, value in spec.items():
        name = keys[key]
        if key == "method":
            value = _method(value)
        elif key == "num_speculative_tokens":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AlcheckError(f"{FLAG}: num_speculative_tokens {value!r} is not an integer >= 1")
            value = str(value) if name == "ks" else value
        if name in given and str(params.get(name)) != str(value):
            where = SOURCES[given[name]].format(flag="--" + name.replace("_", "-"), value=params.get(name))
            raise AlcheckError(f"{FLAG} sets {key} {value!r} but {where}: give it once")
        out[name] = value
    return out


def engine_command(template: str, spec: dict) -> str:
    """The server's command with the same JSON, num_speculative_tokens = each K ({k})."""
    if FLAG in template:
        raise AlcheckError(
            f"{FLAG} is given to alcheck and inside --engine-cmd: give it once (alcheck appends it)"
        )
    marker = "__alcheck_k__"
    text = json.dumps({**spec, "num_speculative_tokens": marker}, allow_nan=False).replace(
        f'"{marker}"', "{k}"
    )
    return f"{template} {FLAG} {shlex.quote(text)}"


def given_options(ctx, keys: dict = KEYS) -> dict[str, str]:
    """The mapped options a user set, typed or from --config FILE -> which (a SOURCES key)."""
    given = {}
    for name in keys.values():
        source = ctx.get_parameter_source(name) if name in ctx.params else None
        if source is not None and source.name in SOURCES:
            given[name] = source.name
    return given


def with_speculative_config(ctx, params: dict) -> dict:
    """The run's params after --speculative-config (unchanged without it)."""
    text = params.get("speculative_config")
    if not text:
        return params
    spec = read_json(text)
    out = apply(params, spec, given_options(ctx))
    if out.get("engine_cmd"):
        out["engine_cmd"] = engine_command(out["engine_cmd"], spec)
    return out


def serve_params(ctx, params: dict) -> dict:
    """serve's params after --speculative-config; --k is required from one of the two."""
    text = params.get("speculative_config")
    out = (
        apply(params, read_json(text), given_options(ctx, SERVE_KEYS), SERVE_KEYS, "serve")
        if text
        else params
    )
    if out.get("k") is None:
        raise AlcheckError(f"alcheck serve needs --k (or num_speculative_tokens in {FLAG}): pass --k K")
    return out
