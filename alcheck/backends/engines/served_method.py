"""Which drafting method a server runs: what settles the verification steps its counts leave out.

vLLM counts a step only when it drafted (engines/steps.py). A head or a draft model drafts at every
step, so the steps are the drafted ones and nothing is uncertain. n-gram (and suffix) decoding
drafts nothing where the context matches nothing; those plain steps are counted from the tokens,
which is exact unless the last step was a drafted one whose accepted run crossed EOS or
max_tokens (the tokens past the stop are cut from the answer, the accepted count keeps them). The
n-gram rule is a function of the tokens, so the answer replays it exactly (engines/replay.py);
nothing replays suffix decoding or a method alcheck does not know.

The method comes, first found first, from:
1. --method (a typed one, or --speculative-config's "method", which alcheck reads as its options);
2. the vLLM speculative config in --engine-cmd (`--speculative-config JSON`, `-sc JSON`,
   `--speculative-config.method NAME`, `--spec-method NAME`; `{k}` and `{port}` as they will be);
3. the server: `alcheck serve`'s /version, or vLLM's /server_info (only with
   VLLM_SERVER_DEV_MODE=1; plain vLLM names its method nowhere in its API).
Two sources that name different methods are one line, exit 2.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from alcheck.errors import AlcheckError

EVERY_STEP = "every step drafts"  # a head or a draft model: the drafted steps are all the steps
REPLAY = "replayed"  # n-gram: the steps replayed from the answer
UNSETTLED = "unsettled"  # may skip steps and cannot be replayed (suffix, an unknown method, none known)

SPEC_FLAGS = ("--speculative-config", "--speculative_config", "-sc")
METHOD_FLAGS = ("--spec-method", "--spec_method")
MODEL_FLAGS = ("--spec-model", "--spec_model")


@dataclass(frozen=True)
class ServedMethod:
    name: str | None  # the method as the engine names it (vLLM's and alcheck's agree); None: not named
    source: str  # where it was read, in words
    spec: dict = field(default_factory=dict)  # the speculative config as read (n-gram sizes)

    @property
    def kind(self) -> str:
        return steps_kind(self.name, self.spec)

    def describe(self) -> str:
        return f"{self.name or 'a draft model or head'} ({self.source})"


def steps_kind(name: str | None, spec: dict | None = None) -> str:
    """How a method's steps are settled: EVERY_STEP, REPLAY or UNSETTLED."""
    from alcheck.methods.ngram import NGRAM
    from alcheck.methods.table import METHOD_NAMES, get_method

    if name is None:  # vLLM: a "model" without a "method" is a draft model or head it detects
        model = (spec or {}).get("model")
        return EVERY_STEP if isinstance(model, str) and model and ngram_name(model) is None else UNSETTLED
    if name == NGRAM.name:
        return REPLAY
    if name in METHOD_NAMES and get_method(name).needs_checkpoint:
        return EVERY_STEP
    return UNSETTLED  # model-free and not replayed (suffix), or a method alcheck does not know


def ngram_name(value) -> str | None:
    """vLLM's spellings of the n-gram method ("ngram", "[ngram]") as the table's name."""
    from alcheck.methods.ngram import NGRAM

    return NGRAM.name if isinstance(value, str) and value.strip("[]") == NGRAM.name else None


def method_of(spec: dict) -> str | None:
    """The method a vLLM speculative config runs: its "method" (vLLM's spellings normalised), or
    n-gram when its "model" says so; None when only a draft model or head is named (vLLM detects
    which kind: every kind drafts at every step)."""
    method = spec.get("method")
    if isinstance(method, str) and method:
        return ngram_name(method) or method
    return ngram_name(spec.get("model"))


def command_spec(command: str | None) -> dict | None:
    """The vLLM speculative config in a server command, or None when it has none (or cannot be read:
    a config file, quoting shlex cannot split)."""
    if not command:
        return None
    text = command.replace("{k}", "1").replace("{port}", "0")  # as EngineProcess fills them in
    try:
        args = shlex.split(text)
    except ValueError:
        return None
    spec: dict = {}
    found = False
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        step = 1 if eq else 2
        if flag in SPEC_FLAGS and value is not None:
            try:
                data = json.loads(value)
            except json.JSONDecodeError:
                return None
            if not isinstance(data, dict):
                return None
            spec.update(data)
            found = True
        elif any(flag.startswith(f + ".") for f in SPEC_FLAGS[:2]) and value is not None:
            key = flag.split(".", 1)[1].replace("-", "_")
            spec[key] = _scalar(value)
            found = True
        elif flag in METHOD_FLAGS and value is not None:
            spec["method"] = value
            found = True
        elif flag in MODEL_FLAGS and value is not None:
            spec["model"] = value
            found = True
        else:
            step = 1
        i += step
    return spec if found else None


def _scalar(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def resolve(stated: str | None, command: str | None, reported: dict | None) -> ServedMethod:
    """The method of one server, from the sources in order; differing names are one line."""
    from_cmd = command_spec(command)
    candidates = []
    if stated:
        candidates.append(ServedMethod(stated, "--method"))
    if from_cmd is not None:
        candidates.append(ServedMethod(method_of(from_cmd), "--engine-cmd's speculative config", from_cmd))
    if reported and (reported.get("method") or reported.get("spec")):
        spec = dict(reported.get("spec") or {})
        name = reported.get("method") or method_of(spec)
        candidates.append(ServedMethod(ngram_name(name) or name, reported["source"], spec))
    named = [c for c in candidates if c.name]
    for other in named[1:]:
        if other.name != named[0].name:
            first = named[0]
            raise AlcheckError(
                f"{first.source} says {first.name} but {other.source} says {other.name}: the server runs "
                "one method: state the one it serves (or leave --method out)"
            )
    if named:
        best = named[0]
        # the n-gram sizes: a config that states them (the command's, the server's) over none
        sized = next((c for c in candidates if c.name == best.name and _sizes(c.spec)), None)
        return ServedMethod(best.name, best.source, sized.spec if sized is not None else best.spec)
    if candidates:  # only a draft model or head named
        return candidates[0]
    return ServedMethod(None, "nothing: no --method, no method in --engine-cmd, none reported by the server")


def _sizes(spec: dict) -> bool:
    return any(spec.get(key) is not None for key in ("prompt_lookup_min", "prompt_lookup_max"))
