"""Probe every subcommand as a new user would, and grade each case GOOD / POOR / BAD.

    python bench/probe_cli.py            # all cases; prints one line per case and the counts
    python bench/probe_cli.py -k gate    # only cases whose name contains "gate"
    python bench/probe_cli.py -v         # also the output of every case that is not GOOD
    python bench/probe_cli.py -k issue50 # issue 50's 3 BAD and 22 POOR cases alone (a few minutes)

The cases run in this process through click's CliRunner (one torch import), as a terminal of 80
columns (TTY_COMPATIBLE=1, COLUMNS=80), on tiny checkpoints built in a temporary folder; the
serve cases start `python -m alcheck serve`. Grades:
- BAD: a right input refused, a wrong input accepted with exit 0, a traceback, or a wrong number
  (a case's own check);
- POOR: the right exit code, but the message misses what it must name (or names what it must
  not: the wrong culprit), an error of more than one line, or a table cell cut to "…";
- GOOD: otherwise.
Re-run it after a restructure: the cases only use the command line and the files it writes.
Later cases read runs that earlier ones wrote (report, compare, gate), so a -k selection can
leave them without their inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECULATORS_FIXTURE = ROOT / "tests" / "data" / "speculators-0.9.0"
ENV = {
    "TTY_COMPATIBLE": "1",
    "TTY_INTERACTIVE": "0",
    "COLUMNS": "80",
    "NO_COLOR": "1",
    "OMP_NUM_THREADS": "1",
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CUT = re.compile(r"\S…")  # rich's ellipsis after a cut cell
SMALL = ["--repeats", "1", "--limit", "3", "--max-tokens", "12"]


@dataclass
class Case:
    group: str
    name: str
    args: list[str] | Callable[[], tuple[int, str]]  # CLI args, or a function giving (code, output)
    code: int
    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    check: Callable[..., str | None] | None = None  # a wrong number: check(output) says what is wrong (BAD)
    style: Callable[..., str | None] | None = None  # a readability problem: style(output) says which (POOR)
    grade: str = ""
    why: str = ""
    output: str = ""


@dataclass
class Fixtures:
    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        return str(self.paths[key])

    def out(self, name: str) -> str:
        return str(self.root / "out" / name)


# -- fixtures --------------------------------------------------------------------------------------


def edited(src: Path, dst: Path, **edits) -> Path:
    """A copy of a checkpoint folder with config.json keys set (None removes a key)."""
    from alcheck.testing.tiny import copy_with_config

    return copy_with_config(src, dst, edits)


def build(root: Path) -> Fixtures:
    from alcheck.testing.tiny import (
        NAN_MARK,
        damp_target_layers,
        make_tiny_eagle,
        make_tiny_eagle3,
        make_tiny_target,
    )

    fx = Fixtures(root)
    p = fx.paths
    (root / "out").mkdir()
    p["target"] = make_tiny_target(root / "target", num_layers=1, unit_rms_embeddings=True)
    p["eagle"] = make_tiny_eagle(root / "eagle", p["target"], copy_target_layer=0, noise=0.0)
    rope = {"rope_theta": 10000.0, "rope_type": "default"}
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 512,
    }
    for name, edits in {
        "gelu": {"hidden_act": "gelu"},
        "heads3": {"num_attention_heads": 3, "head_dim": None},
        "kv3": {"num_key_value_heads": 3},
        "eps0": {"rms_norm_eps": 0},
        "eps0f": {"rms_norm_eps": 0.0},
        "nofactor": {
            "rope_parameters": {k: v for k, v in dict(llama3, rope_theta=1e4).items() if k != "factor"}
        },
        "strhidden": {"hidden_size": "64"},
        "baddtype": {"dtype": "floaty"},
        "theta0": {"rope_parameters": dict(rope, rope_theta=0.0)},
        "thetanan": {"rope_parameters": dict(rope, rope_theta=NAN_MARK)},
        "negh": {"hidden_size": -64},
        "yarn": {
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "rope_theta": 1e4,
                "original_max_position_embeddings": 512,
            }
        },
        "contra": {"rope_theta": 500000.0, "rope_scaling": llama3},
        "qwen": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
        "automodel": {"auto_map": {"AutoModelForCausalLM": "modeling_x.MyLlama"}},
        "autoconfig": {"auto_map": {"AutoConfig": "configuration_x.MyConfig"}},
        "nomaxpos": {"max_position_embeddings": None},
        "nohidden": {"hidden_size": None},
    }.items():
        p[f"t-{name}"] = edited(p["target"], root / f"t-{name}", **edits)
    p["e-gelu"] = edited(p["eagle"], root / "e-gelu", hidden_act="gelu")
    p["e-wide"] = edited(p["eagle"], root / "e-wide", hidden_size=128)
    p["empty"] = root / "empty"
    p["empty"].mkdir()
    # tokenizer with more tokens than the model's vocabulary
    p["t300"] = make_tiny_target(root / "t300", num_layers=1, vocab_size=300)
    p["e300"] = make_tiny_eagle(root / "e300", p["t300"])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(p["target"] / name, p["t300"] / name)
    # EAGLE-3: the speculators fixture's pair (the converter's own output), and a nested-aux variant
    p["t3"] = damp_target_layers(
        make_tiny_target(
            root / "t3",
            hidden_size=32,
            num_layers=4,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=64,
            unit_rms_embeddings=True,
        ),
        first=1,
        factor=0.05,
    )
    p["e3"] = SPECULATORS_FIXTURE / "eagle3"
    p["e3-conv"] = SPECULATORS_FIXTURE / "converted"
    conv = json.loads((SPECULATORS_FIXTURE / "converted" / "config.json").read_text())
    p["e3-nested"] = edited(
        p["e3-conv"],
        root / "e3-nested",
        eagle_aux_hidden_state_layer_ids=None,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
    )
    p["e3-mlp"] = edited(p["e3-conv"], root / "e3-mlp", speculators_model_type="mlp_speculator")
    p["e3-own"] = make_tiny_eagle3(root / "e3-own", p["t3"], fmt="eagle-repo", copy_target_layer=0)
    assert conv["auto_map"]
    # chat templates, datasets, baselines
    (root / "static.jinja").write_text("Hello there, answer the question: ")
    (root / "raises.jinja").write_text(
        "{% for m in messages %}{{ raise_exception('no users here') }}{% endfor %}"
    )
    (root / "broken.jinja").write_text("{% for m in messages %}{{ m['content'] }}")
    (root / "three.jsonl").write_text(
        "".join(
            json.dumps({"question_id": i, "category": "c", "turns": ["One?", "Two?", "Three?"]}) + "\n"
            for i in range(2)
        )
    )
    (root / "bad.jsonl").write_text(
        '{"question_id": 1, "category": "c", "turns": ["ok"]}\n{"question_id": 2\n'
    )
    (root / "k7.json").write_text(json.dumps({"name": "k7", "values": {"7": 2.0}}))
    (root / "nan.json").write_text('{"name": "n", "values": {"1": NaN}}')
    (root / "k12.json").write_text(
        json.dumps({"name": "k12", "values": {"1": 1.5, "2": 2.0}, "limit": 3, "max_tokens": 12})
    )
    (root / "afile").write_text("not a folder")
    return fx


# -- running a case --------------------------------------------------------------------------------


def invoke(args: list[str], env: dict | None = None) -> tuple[int, str, BaseException | None]:
    """`alcheck ARGS` in this process, under ENV updated by env (None removes a variable)."""
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    result = CliRunner().invoke(
        cli, args, env={**ENV, **(env or {})}, catch_exceptions=True, prog_name="alcheck"
    )
    exc = result.exception if result.exception and not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, exc


def grade(case: Case) -> None:
    start = time.monotonic()
    if callable(case.args):
        try:
            code, out = case.args()
            exc = None
        except Exception as e:  # noqa: BLE001 - a probe helper that raised grades the case BAD
            code, out, exc = 1, f"{type(e).__name__}: {e}", e
    else:
        code, out, exc = invoke(case.args)
    text = ANSI.sub("", out)
    case.output = text
    flat = " ".join(text.split())
    problems, bad = [], []
    if exc is not None or "Traceback (most recent call last)" in text:
        bad.append(f"traceback ({type(exc).__name__ if exc else 'in output'})")
    if code != case.code:
        if case.code != 0 and code == 0:
            bad.append(f"accepted with exit 0 (expected {case.code})")
        elif case.code == 0:
            bad.append(f"refused with exit {code}")
        else:
            problems.append(f"exit {code}, expected {case.code}")
    if case.check is not None and not bad:
        wrong = case.check(text)
        if wrong:
            bad.append(wrong)
    if case.style is not None:
        unreadable = case.style(text)
        if unreadable:
            problems.append(unreadable)
    missing = [h for h in case.has if h not in flat]
    if missing:
        problems.append(f"does not say {missing[0]!r}")
    present = [w for w in case.lacks if w in flat]
    if present:
        problems.append(f"says {present[0]!r} (the wrong thing)")
    if code == 2 and "Error:" in text:
        errors = [line for line in text.splitlines() if line.startswith("Error:")]
        usage = text.lstrip().startswith("Usage:")  # click's own usage errors: Usage / Try / Error
        if len(errors) != 1 or (
            not usage
            and len([ln for ln in text.splitlines() if ln.strip()]) > 1
            and not text.strip().splitlines()[-1].startswith("Error:")
        ):
            problems.append("not a one-line error")
    if CUT.search(text.replace("P(a ≥ 2) / …", "")):
        problems.append("a cell is cut to '…' at 80 columns")
    case.grade = "BAD" if bad else "POOR" if problems else "GOOD"
    case.why = "; ".join(bad + problems)
    case.why += f" [{time.monotonic() - start:.1f}s]" if case.why else ""


# -- helpers for checks ------------------------------------------------------------------------------


def summary(out: str) -> dict[int, float]:
    meta = json.loads((Path(out) / "run.json").read_text())
    return {int(e["k"]): e["al_mean"] for e in meta["summary"]}


def same_al(out_a: str, out_b: str) -> Callable[..., str | None]:
    def check(_text=""):
        a, b = summary(out_a), summary(out_b)
        return None if a == b else f"AL differs: {a} vs {b}"

    return check


def no_folder(path: str) -> Callable[..., str | None]:
    return lambda _text="": (
        f"{path} was created" if Path(path).exists() and any(Path(path).iterdir()) else None
    )


def summaries_whole(text: str) -> str | None:
    """A command's summary cut to '...' (click's plain list, or rich-click's Commands panel)."""
    listed = re.split(r"Commands:|─ Commands ─", text, maxsplit=1)[-1]
    cut = [
        line.strip(" │").split()[0]
        for line in listed.splitlines()
        if line.strip(" │").endswith(("...", "…")) and line.strip(" │")
    ]
    return f"--help cuts the summary of {', '.join(cut)}" if cut else None


# -- serve -------------------------------------------------------------------------------------------


class Server:
    """`python -m alcheck serve` in its own process, on a free port."""

    def __init__(self, fx: Fixtures, dialect: str, *extra: str):
        cmd = [
            sys.executable,
            "-m",
            "alcheck",
            "serve",
            "--target",
            fx["target"],
            "--draft",
            fx["eagle"],
            "--k",
            "2",
            "--dialect",
            dialect,
            "--port",
            "0",
            *extra,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"alcheck serve did not start: {line!r} {self.proc.stderr.read()[-500:]}")
        self.url = line.split(" on ")[1].strip()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve_process(args: list[str], timeout: float = 120.0) -> tuple[int, str]:
    """`alcheck serve ARGS` in its own process (a server that starts would block this one): its exit
    code and output, or 0 when it started listening (it is stopped again)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "alcheck", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + timeout
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "listening on" in line or time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            return 0, "".join(lines) + "(the server started: the options were accepted)"
    return proc.wait(), "".join(lines)


def http(method: str, url: str, **kw) -> tuple[int, str]:
    import httpx

    response = httpx.request(method, url, timeout=60, **kw)
    return response.status_code, response.text


def hung_server_run(fx: Fixtures) -> tuple[int, str]:
    """An endpoint that accepts connections and never answers: --request-timeout bounds the wait."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        start = time.monotonic()
        code, out, exc = invoke(
            [
                "run",
                "--target",
                fx["target"],
                "--engine",
                "vllm",
                "--endpoint",
                f"http://127.0.0.1:{listener.getsockname()[1]}",
                "--ks",
                "2",
                *SMALL,
                "--request-timeout",
                "1",
                "--out",
                fx.out("hung"),
            ]
        )
        if exc:
            raise exc
        if time.monotonic() - start > 60:
            return 0, "hung for more than a minute"
        return code, out
    finally:
        listener.close()


# -- the cases ---------------------------------------------------------------------------------------


def cases(fx: Fixtures, servers: dict[str, Server]) -> list[Case]:
    T, E = fx["target"], fx["eagle"]
    pair = ["--target", T, "--draft", E]
    run = ["run", *pair, *SMALL]
    out = fx.out
    c: list[Case] = []

    def add(group, name, args, code, has=(), lacks=(), check=None, style=None):
        c.append(Case(group, name, args, code, tuple(has), tuple(lacks), check, style))

    # ---- top level
    add(
        "cli",
        "--help lists every command whole at 80 columns",
        ["--help"],
        0,
        ["run", "serve", "gate"],
        style=summaries_whole,
    )
    add("cli", "--version", ["--version"], 0, ["alcheck"])
    add("cli", "unknown command", ["nonsense"], 2, ["No such command"])
    for sub in ("run", "report", "compare", "gate", "references", "serve", "ablate"):
        add("cli", f"{sub} --help", [sub, "--help"], 0, ["Usage:"])
    add(
        "cli",
        "ablate --help lists kv-lookahead whole",
        ["ablate", "--help"],
        0,
        ["kv-lookahead"],
        style=summaries_whole,
    )

    # ---- run: the happy paths and what they write
    add("run", "tiny pair K=1-2", [*run, "--ks", "1-2", "--out", out("ok")], 0, ["saved", "K=1", "K=2"])
    add("run", "resume a complete run loads nothing", ["run", "--resume", out("ok")], 0, ["already complete"])
    add(
        "run",
        "--resume with another --out",
        ["run", "--resume", out("ok"), "--out", out("x")],
        2,
        ["drop --out"],
    )
    add("run", "--resume of a folder without run.json", ["run", "--resume", fx["empty"]], 2, ["no run.json"])
    add("run", "--resume ''", ["run", "--resume", ""], 2, ["is empty"])
    add("run", "--out ''", [*run, "--out", ""], 2, ["--out '' is empty"])
    add("run", "--out is a file", [*run, "--out", str(fx.root / "afile")], 2, ["afile"])
    add("run", "target without draft", ["run", "--target", T], 2, [f"--target {T}", "without --draft"])
    add(
        "run",
        "contiguous runner",
        [*run, "--ks", "2", "--runner", "contiguous", "--out", out("contig")],
        0,
        ["saved"],
    )
    add(
        "run",
        "tree drafting",
        [*run, "--ks", "2", "--topk", "2", "--num-draft-tokens", "4", "--out", out("tree")],
        0,
        ["tree"],
    )
    add(
        "run",
        "temperature 0.8 onehot",
        [*run, "--ks", "2", "--temperature", "0.8", "--out", out("t08")],
        0,
        ["saved"],
    )
    add(
        "run",
        "check-lossless and audit-slots",
        [*run, "--ks", "2", "--check-lossless", "--audit-slots", "--out", out("lossless")],
        0,
        ["lossless"],
    )
    add(
        "run",
        "--no-kv-lookahead",
        [*run, "--ks", "2", "--no-kv-lookahead", "--out", out("nolook")],
        0,
        ["saved"],
    )
    bug = [*pair, "--ks", "5", "--repeats", "1", "--limit", "8", "--max-tokens", "48", "--block-size", "4"]
    add("run", "block size 4, K=5", ["run", *bug, "--out", out("gbase")], 0, ["saved"])
    add(
        "run",
        "block size 4, K=5, the pre-fix bug loses AL",
        ["run", *bug, "--no-kv-lookahead", "--out", out("gdrop")],
        0,
        ["saved"],
        check=lambda _text: (
            None
            if summary(out("gdrop"))[5] < summary(out("gbase"))[5] - 0.05
            else f"no AL lost: {summary(out('gdrop'))} vs {summary(out('gbase'))}"
        ),
    )
    add(
        "run",
        "--devices cpu,cpu",
        [*run, "--ks", "1-2", "--devices", "cpu,cpu", "--out", out("devs")],
        0,
        ["saved"],
        check=same_al(out("devs"), out("ok")),
    )
    # ---- the static runner (issue 22) and what only the eager runner does
    add(
        "run",
        "static runner",
        [*run, "--ks", "1-2", "--runner", "static", "--out", out("static-runner")],
        0,
        ["saved"],
        check=same_al(out("static-runner"), out("ok")),
    )
    add(
        "run",
        "static runner with --audit-slots",
        [*run, "--ks", "1", "--runner", "static", "--audit-slots", "--out", out("x-static")],
        2,
        ["--audit-slots needs --runner paged"],
    )
    add(
        "run",
        "static runner with --no-kv-lookahead",
        [*run, "--ks", "1", "--runner", "static", "--no-kv-lookahead", "--out", out("x-static2")],
        2,
        ["needs --runner paged"],
    )
    add(
        "run",
        "resume with another dtype",
        ["run", "--resume", out("ok"), "--dtype", "bfloat16"],
        2,
        ["bfloat16"],
    )
    add(
        "run",
        "3-turn dataset under a 2-turn protocol",
        [
            *run,
            "--ks",
            "1",
            "--protocol",
            "eagle-repo",
            "--dataset",
            str(fx.root / "three.jsonl"),
            "--out",
            out("three"),
        ],
        0,
        ["have up to 3 turns", "later turns are not measured"],
    )
    add(
        "run",
        "reference demo: not comparable",
        [*run, "--ks", "1", "--reference", "demo", "--out", out("refdemo")],
        0,
        ["not comparable"],
    )
    add(
        "run",
        "contradictory RoPE keys run as transformers reads them",
        [*run, "--target", fx["t-contra"], "--ks", "1", "--out", out("contra")],
        0,
        ["saved"],
    )
    add(
        "run",
        "auto_map naming only a config class",
        [*run, "--target", fx["t-autoconfig"], "--ks", "1", "--out", out("autoconfig")],
        0,
        ["saved"],
    )

    # ---- run: option values
    for args, code, has, lacks in [
        (["--ks", "a-b"], 2, ["--ks"], []),
        (["--ks", "0-2"], 2, ["K must be >= 1"], []),
        (["--ks", "3-1"], 2, ["write it as 1-3"], []),
        (["--ks", "1-0"], 2, ["K must be >= 1"], ["0-1"]),
        (["--repeats", "0"], 2, ["--repeats 0"], []),
        (["--limit", "0"], 2, ["--limit 0"], []),
        (["--max-tokens", "0"], 2, ["--max-tokens 0"], []),
        (["--max-tokens", "1"], 2, ["--max-tokens 1", "at least 2"], []),
        (["--temperature", "-1"], 2, ["--temperature"], []),
        (["--temperature", "nan"], 2, ["--temperature nan"], []),
        (["--temperature", "inf"], 2, ["--temperature inf"], []),
        (["--seed", "-1"], 2, ["--seed -1"], []),
        (["--seed", str(2**63)], 2, [f"--seed {2**63}"], []),
        (["--seed", str(2**64)], 2, [f"--seed {2**64}"], []),
        (["--protocol", "nope"], 2, ["unknown protocol"], []),
        (["--dataset", "missing.jsonl"], 2, ["missing.jsonl"], []),
        (["--dataset", str(fx.root / "bad.jsonl")], 2, ["bad.jsonl", "line 2"], []),
        (["--device", "gpu0"], 2, ["--device gpu0"], []),
        (["--device", "cuda:3"], 2, ["cuda"], []),
        (["--dtype", "float8"], 2, ["--dtype"], []),
        (["--max-batch-size", "0"], 2, ["--max-batch-size"], []),
        (["--block-size", "0"], 2, ["--block-size"], []),
        (["--num-blocks", "1"], 2, ["--num-blocks 1"], []),
        (["--num-blocks", "100000000"], 2, ["KV cache of", "lower --num-blocks"], []),
        (["--block-size", "100000000"], 2, ["longer than the target's context"], []),
        (["--gpu-memory-utilization", "0"], 2, ["--gpu-memory-utilization 0"], []),
        (["--gpu-memory-utilization", "1.5"], 2, ["--gpu-memory-utilization 1.5"], []),
        (["--gpu-memory-utilization", "nan"], 2, ["--gpu-memory-utilization nan"], []),
        (["--topk", "2"], 2, ["--num-draft-tokens"], []),
        (["--topk", "0"], 2, ["--topk 0"], []),
        (["--num-draft-tokens", "1"], 2, ["--num-draft-tokens 1"], []),
        (["--num-draft-tokens", "7", "--ks", "2"], 2, ["--topk 1 is the chain"], []),
        (["--topk", "2", "--num-draft-tokens", "99", "--ks", "2"], 2, ["more than a tree"], []),
        (
            [
                "--topk",
                "2",
                "--num-draft-tokens",
                "4",
                "--ks",
                "2",
                "--temperature",
                "0.5",
                "--draft-sampling",
                "sampled",
            ],
            2,
            ["--draft-sampling onehot"],
            [],
        ),
        (["--topk", "999", "--num-draft-tokens", "1000", "--ks", "1"], 2, ["--topk 999"], []),
        (["--runner", "contiguous", "--no-kv-lookahead"], 2, ["--no-kv-lookahead"], []),
        (["--check-lossless", "--temperature", "0.5"], 2, ["--check-lossless"], []),
        (["--devices", "cpu,cuda:0"], 2, ["mixes cpu and cuda"], []),
        (["--devices", ","], 2, ["--devices"], []),
        (["--tensor-parallel-size", "0"], 2, ["--tensor-parallel-size 0"], []),
        (["--tensor-parallel-size", "3"], 2, ["3"], []),
        (["--ks", "5000"], 2, ["lower the largest K"], ["lower --max-tokens"]),
        (["--method", "eagle3"], 2, ["--method eagle3", "EAGLE-1"], []),
        (["--endpoint", "http://127.0.0.1:9"], 2, ["--endpoint needs --engine"], []),
        (["--concurrency", "4"], 2, ["--concurrency needs --engine"], []),
        (["--request-timeout", "5"], 2, ["--request-timeout needs --engine"], []),
        (["--tolerance", "nan", "--gate", "demo"], 2, ["--tolerance nan"], []),
    ]:
        add("run-options", " ".join(args), [*run, *args, "--out", out("opt")], code, has, lacks)

    # ---- run: chat templates
    add(
        "run-template",
        "missing --chat-template",
        [*run, "--chat-template", "nope.jinja"],
        2,
        ["no such file"],
    )
    add(
        "run-template",
        "invalid Jinja",
        [*run, "--chat-template", str(fx.root / "broken.jinja")],
        2,
        ["not a valid Jinja template"],
    )
    add(
        "run-template",
        "static template ignores the message",
        [*run, "--chat-template", str(fx.root / "static.jinja"), "--out", out("static")],
        2,
        ["same prompt for different user messages"],
        check=no_folder(out("static")),
    )
    add(
        "run-template",
        "template that raises is blamed by name",
        [*run, "--chat-template", str(fx.root / "raises.jinja")],
        2,
        ["--chat-template", "raises.jinja rejected"],
        ["chat template of"],
    )
    add(
        "run-template",
        "--chat-template with a FastChat protocol",
        [*run, "--protocol", "eagle-repo-vicuna", "--chat-template", str(fx.root / "static.jinja")],
        2,
        ["not used by --protocol"],
    )

    # ---- run: target configs (the key named, never the tokenizer, head or precision)
    wrong = ["tokenizer", "logits", "float32"]
    for name, has in [
        ("gelu", ["hidden_act", "gelu"]),
        ("heads3", ["not a multiple"]),
        ("kv3", ["num_key_value_heads"]),
        ("eps0", ["rms_norm_eps"]),
        ("eps0f", ["rms_norm_eps"]),
        ("nofactor", ["factor"]),
        ("strhidden", ["hidden_size"]),
        ("baddtype", ["floaty"]),
        ("theta0", ["rope_theta"]),
        ("thetanan", ["rope_theta"]),
        ("negh", ["hidden_size -64"]),
        ("yarn", ["yarn"]),
        ("qwen", ["config.json", "model.safetensors", "disagree"]),
        ("automodel", ["auto_map", "modeling_x.MyLlama"]),
        ("nomaxpos", ["max_position_embeddings"]),
        ("nohidden", ["hidden_size"]),
    ]:
        add(
            "run-config",
            f"target config: {name}",
            [*run, "--target", fx[f"t-{name}"], "--ks", "1", "--out", out(name)],
            2,
            ["target", *has],
            wrong + (["draft"] if name == "negh" else []),
            check=no_folder(out(name)),
        )
    add(
        "run-config",
        "draft hidden_act gelu",
        [*run, "--draft", fx["e-gelu"], "--ks", "1"],
        2,
        ["draft", "hidden_act"],
    )
    add(
        "run-config",
        "draft of another width",
        ["run", "--target", T, "--draft", fx["e-wide"], *SMALL, "--ks", "1"],
        2,
        ["hidden_size=128"],
    )
    add(
        "run-config",
        "missing draft folder",
        ["run", "--target", T, "--draft", str(fx.root / "nope"), *SMALL, "--ks", "1"],
        2,
        ["draft"],
    )
    add(
        "run-config",
        "draft folder without config.json",
        ["run", "--target", T, "--draft", fx["empty"], *SMALL, "--ks", "1"],
        2,
        ["config.json"],
    )
    add(
        "run-config",
        "tokenizer larger than vocab_size",
        ["run", "--target", fx["t300"], "--draft", fx["e300"], *SMALL, "--ks", "1"],
        2,
        ["vocab_size 300", "320 tokens"],
    )

    # ---- run: EAGLE-3 and speculators heads
    e3 = ["run", "--target", fx["t3"], *SMALL, "--ks", "1-2"]
    add("run-eagle3", "EAGLE repo format head", [*e3, "--draft", fx["e3"], "--out", out("e3")], 0, ["saved"])
    add(
        "run-eagle3",
        "speculators converter output (auto_map) gives the same AL",
        [*e3, "--draft", fx["e3-conv"], "--out", out("e3-conv")],
        0,
        ["saved"],
        check=same_al(out("e3"), out("e3-conv")),
    )
    add(
        "run-eagle3",
        "speculators head with only SpecForge's nested aux key",
        [*e3, "--draft", fx["e3-nested"], "--out", out("e3-nested")],
        0,
        ["saved"],
        check=same_al(out("e3"), out("e3-nested")),
    )
    add(
        "run-eagle3",
        "speculators model alcheck does not know",
        [*e3, "--draft", fx["e3-mlp"]],
        2,
        ["mlp_speculator"],
    )
    add(
        "run-eagle3",
        "--method eagle on an EAGLE-3 head",
        [*e3, "--draft", fx["e3"], "--method", "eagle"],
        2,
        ["--method eagle", "EAGLE-3"],
    )
    add(
        "run-eagle3",
        "EAGLE-3 head on a 1-layer target",
        [*run, "--draft", fx["e3-own"], "--ks", "1"],
        2,
        ["draft"],
    )

    # ---- run --gate
    add(
        "run-gate",
        "baseline K the run will not measure",
        [*run, "--ks", "1", "--gate", str(fx.root / "k12.json"), "--out", out("g1")],
        2,
        ["the baseline has K=1,2"],
        check=no_folder(out("g1")),
    )
    add(
        "run-gate",
        "baseline with other K only",
        [*run, "--ks", "1-2", "--gate", str(fx.root / "k7.json")],
        2,
        ["K=7"],
    )
    add("run-gate", "baseline with NaN", [*run, "--ks", "1", "--gate", str(fx.root / "nan.json")], 2, ["NaN"])
    add("run-gate", "missing baseline", [*run, "--ks", "1", "--gate", "nope.json"], 2, ["baseline not found"])
    add(
        "run-gate",
        "run then gate against itself",
        [*run, "--ks", "1-2", "--gate", out("ok"), "--out", out("rg")],
        0,
        ["PASS"],
    )

    # ---- run --engine (client checks and runs against alcheck serve)
    eng = ["run", "--target", T, *SMALL]
    add(
        "run-engine",
        "--engine without endpoint",
        [*eng, "--engine", "vllm", "--ks", "2"],
        2,
        ["--endpoint URL"],
    )
    add(
        "run-engine",
        "--endpoint not a URL",
        [*eng, "--engine", "vllm", "--endpoint", "localhost", "--ks", "2"],
        2,
        ["not an http(s) URL"],
    )
    add(
        "run-engine",
        "several K without --engine-cmd",
        [*eng, "--engine", "vllm", "--endpoint", "http://127.0.0.1:9", "--ks", "1-3"],
        2,
        ["one server is one K"],
    )
    add(
        "run-engine",
        "--engine-cmd without {port}",
        [*eng, "--engine", "vllm", "--engine-cmd", "x --k {k}", "--ks", "2"],
        2,
        ["{port}"],
    )
    add(
        "run-engine",
        "--check-lossless with --engine at T=0",
        [*eng, "--engine", "vllm", "--endpoint", "http://127.0.0.1:9", "--ks", "2", "--check-lossless"],
        2,
        ["--check-lossless"],
    )
    add(
        "run-engine",
        "--topk with vLLM",
        [
            *eng,
            "--engine",
            "vllm",
            "--endpoint",
            "http://127.0.0.1:9",
            "--ks",
            "2",
            "--topk",
            "2",
            "--num-draft-tokens",
            "4",
        ],
        2,
        ["vLLM has no tree drafting", "it drafts chains"],
    )
    add(
        "run-engine",
        "--request-timeout 0",
        [*eng, "--engine", "vllm", "--endpoint", "http://127.0.0.1:9", "--ks", "2", "--request-timeout", "0"],
        2,
        ["--request-timeout 0"],
    )
    add(
        "run-engine",
        "nothing listens at the endpoint",
        [*eng, "--engine", "vllm", "--endpoint", "http://127.0.0.1:9", "--ks", "2", "--out", out("refused")],
        2,
        ["cannot connect"],
        check=no_folder(out("refused")),
    )
    add(
        "run-engine",
        "hung server, --request-timeout 1",
        lambda: hung_server_run(fx),
        2,
        ["did not answer within 1 s (--request-timeout)"],
    )
    if servers:
        v, s = servers["vllm"].url, servers["sglang"].url
        add(
            "run-engine",
            "vLLM dialect run",
            [*eng, "--engine", "vllm", "--endpoint", v, "--ks", "2", "--out", out("ev")],
            0,
            ["draft head", "saved"],
        )
        add(
            "run-engine",
            "SGLang dialect run",
            [*eng, "--engine", "sglang", "--endpoint", s, "--ks", "2", "--out", out("es")],
            0,
            ["draft head", "saved"],
        )
        add(
            "run-engine",
            "built-in and engine rows agree",
            [*run, "--ks", "2", "--out", out("eb")],
            0,
            ["saved"],
            check=same_al(out("eb"), out("ev")),
        )
        add(
            "run-engine",
            "stated --draft confirmed by the server",
            [*eng, "--engine", "sglang", "--endpoint", s, "--draft", E, "--ks", "2", "--out", out("ed")],
            0,
            ["as the server reports it"],
        )
        add(
            "run-engine",
            "--method the server does not run",
            [*eng, "--engine", "sglang", "--endpoint", s, "--method", "eagle3", "--ks", "2"],
            2,
            ["--method eagle3", "runs eagle"],
        )
        add(
            "run-engine",
            "K other than the server's",
            [*eng, "--engine", "vllm", "--endpoint", v, "--ks", "3"],
            2,
            ["drafts 2 tokens per step"],
        )
        add(
            "run-engine",
            "served model id other than --target",
            [*eng, "--engine", "vllm", "--endpoint", servers["named"].url, "--ks", "2", "--out", out("en")],
            0,
            ["serves 'other-name'"],
        )
        add(
            "run-engine",
            "another tokenizer as --target",
            ["run", "--target", fx["t300"], *SMALL, "--engine", "vllm", "--endpoint", v, "--ks", "2"],
            2,
            ["--target"],
        )

    # ---- report
    add("report", "report a run", ["report", out("ok")], 0, ["wrote", "report.md"])
    add(
        "report",
        "report -o elsewhere",
        ["report", out("ok"), "-o", str(fx.root / "r" / "x.md")],
        0,
        ["wrote"],
    )
    add("report", "report a missing folder", ["report", str(fx.root / "nope")], 2, ["nope"])
    add("report", "report a folder without run.json", ["report", fx["empty"]], 2, ["run.json"])
    add(
        "report",
        "report -o into a file path",
        ["report", out("ok"), "-o", str(fx.root / "afile" / "x.md")],
        2,
        ["afile"],
    )
    add(
        "report",
        "report an engine run",
        ["report", out("ev")] if servers else ["report", out("ok")],
        0,
        ["wrote"],
    )
    add("report", "report a tree run", ["report", out("tree")], 0, ["wrote"])

    # ---- compare
    add("compare", "a run with itself", ["compare", out("ok"), out("ok")], 0, ["no detectable change"])
    add("compare", "greedy vs temperature needs --force", ["compare", out("ok"), out("t08")], 2, ["--force"])
    add("compare", "--force", ["compare", out("ok"), out("t08"), "--force"], 0, ["B − A"])
    add("compare", "--json", ["compare", out("ok"), out("ok"), "--json"], 0, ['"rows"'])
    add("compare", "--n-boot 1e9", ["compare", out("ok"), out("ok"), "--n-boot", "1e9"], 2, ["--n-boot 1e9"])
    add(
        "compare",
        "--n-boot 1000000000",
        ["compare", out("ok"), out("ok"), "--n-boot", "1000000000"],
        2,
        ["--n-boot"],
    )
    add(
        "compare",
        "--n-boot 1e4",
        ["compare", out("ok"), out("ok"), "--n-boot", "1e4"],
        0,
        ["no detectable change"],
    )
    add("compare", "--n-boot abc", ["compare", out("ok"), out("ok"), "--n-boot", "abc"], 2, ["not a number"])
    add("compare", "a missing run", ["compare", out("ok"), str(fx.root / "nope")], 2, ["nope"])
    add(
        "compare",
        "--tolerance nan",
        ["compare", out("ok"), out("ok"), "--tolerance", "nan"],
        2,
        ["tolerance"],
    )
    add("compare", "contiguous vs paged", ["compare", out("ok"), out("contig")], 0, ["K=2"])

    # ---- gate
    add("gate", "a run against itself", ["gate", out("ok"), "--baseline", out("ok")], 0, ["PASS"])
    add(
        "gate",
        "a drop is a regression",
        ["gate", out("gdrop"), "--baseline", out("gbase")],
        1,
        ["FAIL", "K=5"],
    )
    add(
        "gate",
        "a K the baseline has and the run lacks",
        ["gate", out("lossless"), "--baseline", out("ok")],
        2,
        ["K=1, which the run did not measure"],
    )
    add(
        "gate",
        "--ks names the subset",
        ["gate", out("lossless"), "--baseline", out("ok"), "--ks", "2"],
        0,
        ["PASS"],
    )
    add(
        "gate", "a partial run", ["gate", out("partial"), "--baseline", out("ok")], 2, ["partial", "--resume"]
    )
    add(
        "gate",
        "baseline measured with other settings",
        ["gate", out("ok"), "--baseline", "demo"],
        2,
        ["--force"],
    )
    add(
        "gate", "reference with NaN", ["gate", out("ok"), "--baseline", str(fx.root / "nan.json")], 2, ["NaN"]
    )
    add("gate", "missing baseline", ["gate", out("ok"), "--baseline", "nope"], 2, ["baseline not found"])
    add(
        "gate",
        "--tolerance -1",
        ["gate", out("ok"), "--baseline", out("ok"), "--tolerance", "-1"],
        2,
        ["tolerance"],
    )
    add("gate", "--ks a", ["gate", out("ok"), "--baseline", out("ok"), "--ks", "a"], 2, ["--ks"])
    add(
        "gate",
        "--ks beyond the baseline",
        ["gate", out("ok"), "--baseline", out("ok"), "--ks", "7"],
        2,
        ["K=7"],
    )
    add("gate", "a missing run", ["gate", str(fx.root / "nope"), "--baseline", out("ok")], 2, ["nope"])

    # ---- references
    add("references", "the table at 80 columns", ["references"], 0, ["seed-vllm-v1-llama31-8b", "target: "])
    add("references", "--json", ["references", "--json"], 0, ['"values"'])
    add("references", "--dir without tables", ["references", "--dir", fx["empty"]], 0, ["0 reference table"])
    add("references", "--dir missing", ["references", "--dir", str(fx.root / "nope")], 2, ["nope"])

    # ---- ablate
    abl = ["ablate", "kv-lookahead", *pair, "--ks", "2", *SMALL]
    add("ablate", "ablation", [*abl, "--out", out("abl")], 0, ["ablation.json", "AL with"])
    add("ablate", "re-run resumes", [*abl, "--out", out("abl")], 0, ["0 (K, repeat) cells to run"])
    add("ablate", "report an ablation", ["report", out("abl")], 0, ["wrote"])
    add("ablate", "--out holding a run", [*abl, "--out", out("ok")], 2, ["holds an `alcheck run` run"])
    add(
        "ablate",
        "run --out holding an ablation",
        [*run, "--out", out("abl")],
        2,
        ["holds an `alcheck ablate`"],
    )
    add("ablate", "--no-kv-lookahead", [*abl, "--no-kv-lookahead"], 2, ["runs both ways"])
    add("ablate", "--runner contiguous", [*abl, "--runner", "contiguous"], 2, ["paged runner"])
    add("ablate", "--out ''", [*abl, "--out", ""], 2, ["is empty"])
    add("ablate", "--ks 0", [*abl, "--ks", "0"], 2, ["K must be >= 1"])

    # ---- serve (bad options exit before loading; the server's HTTP answers)
    srv = ["serve", "--target", T, "--draft", E, "--port", "0"]

    def serve_cli(args: list[str]) -> Callable[[], tuple[int, str]]:
        return lambda: serve_process(args)

    for args, has in [
        (["--k", "0", "--dialect", "vllm"], "--k 0"),
        (["--k", "2", "--dialect", "sglang", "--no-per-request-metrics"], "--no-per-request-metrics"),
        (["--k", "2", "--dialect", "vllm", "--topk", "2", "--num-draft-tokens", "4"], "vLLM has no tree"),
        (["--k", "2", "--dialect", "sglang", "--topk", "2"], "--num-draft-tokens"),
        (["--k", "2", "--dialect", "vllm", "--model-name", " "], "--model-name"),
        (["--k", "2", "--dialect", "vllm", "--device", "gpu0"], "--device gpu0"),
        (["--k", "2", "--dialect", "vllm", "--method", "eagle3"], "--method eagle3"),
        (["--k", "2", "--dialect", "vllm", "--max-batch-size", "0"], "--max-batch-size 0"),
        (["--k", "2", "--dialect", "xml"], "--dialect"),
    ]:
        add("serve", "serve " + " ".join(args), serve_cli([*srv, *args]), 2, [has])
    add(
        "serve",
        "serve with a missing draft",
        serve_cli(
            [
                "serve",
                "--target",
                T,
                "--draft",
                str(fx.root / "nope"),
                "--k",
                "2",
                "--dialect",
                "vllm",
                "--port",
                "0",
            ]
        ),
        2,
        ["draft"],
    )
    add(
        "serve",
        "serve a gelu target",
        serve_cli(
            ["serve", "--target", fx["t-gelu"], "--draft", E, "--k", "2", "--dialect", "vllm", "--port", "0"]
        ),
        2,
        ["hidden_act"],
    )
    if servers:
        v, s = servers["vllm"].url, servers["sglang"].url
        deep = b"[" * 100_000 + b"]" * 100_000
        add(
            "serve",
            "vLLM: a 100,000-deep JSON body is a 400",
            lambda: (http("POST", v + "/v1/completions", content=deep)[0] // 100, ""),
            4,
        )
        add(
            "serve",
            "SGLang: a 100,000-deep JSON body is a 400",
            lambda: (http("POST", s + "/generate", content=deep)[0] // 100, ""),
            4,
        )
        add(
            "serve",
            "vLLM: not JSON is a 400",
            lambda: (http("POST", v + "/v1/completions", content=b"{x")[0] // 100, ""),
            4,
        )
        add(
            "serve",
            "vLLM: an unknown model is a 404",
            lambda: (http("POST", v + "/v1/completions", json={"prompt": [5, 6], "model": "x"})[0], ""),
            404,
        )
        add(
            "serve",
            "vLLM: a token id outside the vocabulary is a 400",
            lambda: (http("POST", v + "/v1/completions", json={"prompt": [5, 99999]})[0], ""),
            400,
        )
        add(
            "serve",
            "vLLM: /version names the head",
            lambda: (0, http("GET", v + "/version")[1]),
            0,
            ["speculative_config", "eagle"],
        )
        add(
            "serve",
            "SGLang: a request with counts",
            lambda: (
                0,
                http(
                    "POST",
                    s + "/generate",
                    json={"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
                )[1],
            ),
            0,
            ["spec_verify_ct"],
        )
    c += issue50_cases(fx)
    return c


# -- issue 50: the new-user probe's 3 BAD and 22 POOR cases, each with the behaviour expected ---------
#
# Every case below is self-contained (`-k issue50` runs them alone, in about two minutes on 2 cores):
# the runs they read are made on first use. Cases that must see a real process (a pipe, a terminal,
# warnings printed once per process, a server, Ray) run `python -m alcheck` in a process of its own.

BAR_FRAME = re.compile(r"[━╸╺]+\s+\d+/\d+")  # a progress bar and its "done/total"
CELL_LINE = re.compile(r"K=\d+ repeat \d+: AL ")


def alcheck_process(
    args: list[str], env: dict | None = None, timeout: float = 300.0
) -> tuple[int | None, list[tuple[float, str]], float]:
    """`python -m alcheck ARGS` with stdout and stderr to one pipe: (exit code or None when it ran
    past timeout and was killed, each line with the second it arrived, the second it exited)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    for name in [k for k, v in full_env.items() if v is None]:
        del full_env[name]
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "alcheck", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line))
        code = proc.wait()
    finally:
        timer.cancel()
    ended = time.monotonic() - start
    return (None if code == -signal.SIGKILL else code), lines, ended


def text_of(lines: list[tuple[float, str]]) -> str:
    return "".join(line for _, line in lines)


class Issue50:
    """The runs and files issue 50's cases read, made on first use."""

    def __init__(self, fx: Fixtures):
        self.fx, self.root = fx, fx.root / "issue50"
        self.root.mkdir(exist_ok=True)
        self.pair = ["--target", fx["target"], "--draft", fx["eagle"]]

    def path(self, name: str) -> Path:
        return self.root / name

    def run(self, name: str, *args: str) -> Path:
        """A finished run of the tiny pair (or of ARGS' --target and --draft) under issue50/NAME."""
        out = self.path(name)
        if not (out / "run.json").is_file():
            pair = [] if "--target" in args else self.pair
            code, text, exc = invoke(["run", *pair, *SMALL, "--reference", "none", *args, "--out", str(out)])
            if exc is not None or code != 0:
                raise RuntimeError(f"the run {name} the case reads failed (exit {code}): {text[-300:]}")
        return out

    def base(self) -> Path:
        return self.run("base", "--ks", "1-2")

    def partial(self, name: str) -> Path:
        """A copy of the base run with its last (K, repeat) cell still to run."""
        out = self.path(name)
        shutil.copytree(self.base(), out)
        meta = json.loads((out / "run.json").read_text())
        meta["cells"], meta["status"] = meta["cells"][:-1], "partial"
        (out / "run.json").write_text(json.dumps(meta))
        return out

    def config_file(self, name: str, text: str) -> str:
        path = self.path(name)
        path.write_text(text)
        return str(path)


def unchanged(files: dict[Path, bytes]) -> Callable[..., str | None]:
    """A check (BAD when it fails): the files hold the bytes they held before the case."""

    def check(_text=""):
        changed = [str(p) for p, data in files.items() if not p.is_file() or p.read_bytes() != data]
        return f"overwrote {', '.join(changed)}" if changed else None

    return check


def one_error_line(text: str) -> str | None:
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    return None if len(errors) == 1 else f"{len(errors)} Error lines"


def issue50_cases(fx: Fixtures) -> list[Case]:
    i50 = Issue50(fx)
    T, E = fx["target"], fx["eagle"]
    c: list[Case] = []

    def add(name, args, code, has=(), lacks=(), check=None, style=None):
        c.append(Case("issue50", name, args, code, tuple(has), tuple(lacks), check, style))

    # ---- BAD 1: a config file's values were converted (16.5 -> 16, true -> 1, 2.9 -> 2), exit 0
    for key, value in (("max-tokens", "16.5"), ("repeats", "true"), ("limit", "2.9")):

        def config_value(key=key, value=value):
            path = i50.config_file(f"{key}.toml", f'ks = "1"\n{key} = {value}\n')
            out = i50.path(f"config-{key}")
            code, text, exc = invoke(["run", *i50.pair, "--config", path, "--out", str(out)])
            if exc is not None:
                raise exc
            return code, text + ("" if not out.exists() else f"\n(probe: {out} was written)")

        add(
            f"BAD 1: --config {key} = {value} is refused as the flag is",
            config_value,
            2,
            [f"{key}.toml", f"{key} = {value}"],
            ["was written"],
            style=one_error_line,
        )

    # ---- BAD 2: report -o into the run it reports overwrote run.json / questions.csv
    for name in ("run.json", "questions.csv"):

        def report_into(name=name):
            run = shutil.copytree(i50.base(), i50.path(f"report-into-{name}"))  # the base run stays whole
            before = {p: p.read_bytes() for p in run.iterdir() if p.is_file()}
            code, text, exc = invoke(["report", str(run), "-o", str(run / name)])
            if exc is not None:
                raise exc
            wrong = unchanged(before)()
            return code, text + (f"\n(probe: {wrong})" if wrong else "")

        add(
            f"BAD 2: report -o RUN/{name} is refused, nothing written",
            report_into,
            2,
            [name],
            ["(probe: overwrote"],
            style=one_error_line,
        )

    # ---- BAD 3: an unreachable Ray cluster hung the run for over 10 minutes
    def ray_unreachable():
        args = ["run", *i50.pair, *SMALL, "--ks", "1", "--executor", "ray", "--ray-address", "127.0.0.1:1"]
        code, lines, ended = alcheck_process([*args, "--out", str(i50.path("ray"))], timeout=120)
        if code is None:
            return 0, f"(probe: still running after {ended:.0f} s: killed)\n" + text_of(lines)
        return code, f"(probe: exit {code} after {ended:.0f} s)\n" + text_of(lines)

    add(
        "BAD 3: --ray-address 127.0.0.1:1 fails in one line within a timeout",
        ray_unreachable,
        2,
        ["--ray-address 127.0.0.1:1"],
        ["killed", "Traceback"],
        style=one_error_line,
    )

    # ---- POOR: progress when the output is a pipe (`> log 2>&1`): a line per cell as it finishes
    def piped_progress():
        args = [
            "run",
            *i50.pair,
            *SMALL,
            "--ks",
            "1-3",
            "--reference",
            "none",
            "--out",
            str(i50.path("piped")),
        ]
        code, lines, ended = alcheck_process(args, env={"TTY_COMPATIBLE": None, "FORCE_COLOR": None})
        cells = [(t, line) for t, line in lines if CELL_LINE.match(line)]
        spread = cells[-1][0] - cells[0][0] if cells else 0.0
        notes = f"(probe: {len(cells)} cell lines, the first {spread:.2f} s before the last)"
        if len(cells) > 1 and spread < 0.01:  # one cell takes longer than that: printed together
            notes += "\n(probe: the cell lines came only at the end)"
        return code, f"{notes}\n{text_of(lines)}"

    def no_frames(text: str) -> str | None:
        if BAR_FRAME.search(text):
            return "progress-bar frames in a piped log"
        if "3 cell lines" not in text:
            return "not one line per cell"
        return "the cell lines came only at the end" if "came only at the end" in text else None

    add(
        "POOR progress: a piped run prints each cell's line (K, repeat, AL, time, tok/s) as it finishes",
        piped_progress,
        0,
        ["K=1 repeat 1: AL", "tok/s", "3 of 3 cells"],
        style=no_frames,
    )

    # ---- POOR: start-up on a terminal: a first line at once, an ETA once one cell's rate is known
    def terminal_start():
        args = ["run", *i50.pair, *SMALL, "--ks", "1-3", "--reference", "none", "--out", str(i50.path("tty"))]
        env = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "100", "NO_COLOR": "1"}
        code, lines, ended = alcheck_process(args, env=env)
        first = lines[0][0] if lines else ended
        frames = [ANSI.sub("", line) for _, line in lines if "sweep" in line]
        known = [f for f in frames if "ETA" in f and "-:--:--" not in f.split("ETA")[-1]]
        shown = text_of(lines[:2]) + "...\n" + text_of(lines)[-1500:]
        return code, (
            f"(probe: first output after {first:.1f} s of {ended:.1f} s; "
            f"{len(known)} of {len(frames)} sweep frames with a known ETA)\n{shown}"
        )

    def early(text: str) -> str | None:
        seconds = re.search(r"first output after ([\d.]+) s of ([\d.]+) s; (\d+) of (\d+) sweep", text)
        if not seconds:
            return "no timing"
        first, total, known, frames = map(float, seconds.groups())
        if first > 3.0 and first > total / 3:
            return f"silent for the first {first:.1f} s of {total:.1f} s"
        if frames and known < frames / 2:
            return f"the sweep's ETA is known in {known:.0f} of {frames:.0f} frames"
        return None

    add(
        "POOR start-up: a terminal sees what is read at once, and the sweep's ETA early",
        terminal_start,
        0,
        ["alcheck run:"],
        style=early,
    )

    # ---- POOR: --target or --draft alone
    add(
        "POOR --target alone: a missing folder is named",
        ["run", "--target", str(fx.root / "nope-target"), *SMALL],
        2,
        ["nope-target", "no such directory"],
        ["or neither"],
    )
    add(
        "POOR --draft alone: asks for --target",
        ["run", "--draft", E, *SMALL],
        2,
        [f"--draft {E}", "without --target"],
    )

    def run_help_unboxed():
        code, text, _ = invoke(["run", "--help"])
        return code, " ".join(text.replace("│", " ").split())

    add(
        "POOR --help: the demo pair is used only with neither flag",
        run_help_unboxed,
        0,
        ["With neither --target nor --draft: the embedded demo pair", "Needs --target"],
        ["(default: demo)"],
    )

    # ---- POOR: flags that look swapped
    add(
        "POOR swapped flags: --target <a head> --draft <a Llama>",
        ["run", "--target", E, "--draft", T, *SMALL],
        2,
        [f"--target {E} is an EAGLE-1 head", "look swapped", f"--target {T} --draft {E}"],
        ["tokenizer", "Couldn't instantiate"],
    )

    # ---- POOR: --method mtp --draft <eagle> called the draft folder "target"
    add(
        "POOR --method mtp --draft <an EAGLE head> names it the draft",
        ["run", "--method", "mtp", "--draft", E, *SMALL],
        2,
        [f"--draft {E}", "drop --draft"],
        [f"target {E}"],
    )

    # ---- POOR: --ks 100: 95 per-position rates of 0.00, a spread of ± 5e-16
    add(
        "POOR --ks 100: the zero tail of per-position rates is named, not listed",
        [
            "run",
            *i50.pair,
            "--ks",
            "100",
            "--repeats",
            "2",
            "--limit",
            "2",
            "--max-tokens",
            "12",
            "--reference",
            "none",
            "--out",
            str(i50.path("k100")),
        ],
        0,
        ["to position 100"],
        ["0.00 / 0.00 / 0.00", "e-16", "e-15", "e-17"],
    )

    def k100_report():
        code, text, exc = invoke(["report", str(i50.path("k100")), "-o", str(i50.path("k100.md"))])
        if exc is not None:
            raise exc
        return code, text + (i50.path("k100.md").read_text() if code == 0 else "")

    add(
        "POOR --ks 100: the report names the zero tail",
        k100_report,
        0,
        ["to position 100"],
        ["| 0.00 | 0.00 | 0.00 |", "0.00 / 0.00 / 0.00", "e-16"],
    )

    # ---- POOR: checkpoint errors
    def truncated_config():
        folder = shutil.copytree(T, i50.path("truncated"), dirs_exist_ok=True)
        text = (Path(T) / "config.json").read_text()
        (folder / "config.json").write_text(text[: len(text) // 2])
        return invoke(["run", "--target", str(folder), "--draft", E, *SMALL, "--out", str(i50.path("o"))])[:2]

    add(
        "POOR a truncated config.json: the JSON error with its line and column",
        truncated_config,
        2,
        ["config.json is not valid JSON", "at line", "column"],
        ["starting at)"],
    )

    def legacy_pickle():
        folder = i50.path("pickle-head")
        folder.mkdir(exist_ok=True)
        shutil.copy(Path(E) / "config.json", folder / "config.json")
        # a protocol-4 pickle that would call print(): torch's weights-only unpickler warns, then refuses
        (folder / "pytorch_model.bin").write_bytes(
            b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\tfc.weight\x94\x8c\x08builtins"
            b"\x94\x8c\x05print\x94\x93\x94s."
        )
        args = ["run", "--target", T, "--draft", str(folder), *SMALL, "--out", str(i50.path("o"))]
        code, lines, _ = alcheck_process(args)
        return code, text_of(lines)

    add(
        "POOR a refused legacy pickle: alcheck's line only, no torch warning",
        legacy_pickle,
        2,
        ["pytorch_model.bin"],
        ["UserWarning", "site-packages", "Traceback"],
        style=one_error_line,
    )

    # ---- POOR: config-file type errors named neither the file nor the key
    def config_type_error():
        path = i50.config_file("three.toml", 'repeats = "three"\n')
        return invoke(["run", *i50.pair, "--config", path, "--out", str(i50.path("o"))])[:2]

    add(
        'POOR --config repeats = "three": one line naming the file and the key',
        config_type_error,
        2,
        ["three.toml", "repeats"],
        ["Usage:"],
        style=one_error_line,
    )

    # ---- POOR: resume
    def resume_other_head():
        out = i50.partial("resume-eagle3")
        return invoke(["run", "--resume", str(out), "--draft", fx["e3-own"]])[:2]

    add(
        "POOR --resume RUN --draft <an EAGLE-3 head>: says to drop --draft, not to pass --method",
        resume_other_head,
        2,
        ["drop --draft"],
        ["pass --method"],
    )

    def resume_copy():
        out = i50.partial("resume-copy")
        copy = shutil.copytree(E, i50.path("eagle-copy"), dirs_exist_ok=True)
        code, text, exc = invoke(["run", "--resume", str(out), "--draft", str(copy)])
        if exc is not None:
            raise exc
        same = (out / "questions.csv").read_bytes() == (i50.base() / "questions.csv").read_bytes()
        return code, text + ("" if same or code else "\n(probe: the resumed rows differ from the run's)")

    add(
        "POOR --resume with a byte-identical copy of the head at another path",
        resume_copy,
        0,
        ["saved"],
        check=lambda text: "resumed rows differ" if "resumed rows differ" in text else None,
    )

    # ---- POOR: report image links with a space (CommonMark renders no such image)
    def spaced_report():
        target = i50.path("rep ü") / "my report.md"
        code, text, exc = invoke(["report", str(i50.base()), "-o", str(target)])
        if exc is not None:
            raise exc
        links = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", target.read_text()) if target.is_file() else []
        return code, text + f"\n(probe: image links {links})"

    add(
        "POOR report -o 'rep ü/my report.md': image links without spaces",
        spaced_report,
        0,
        ["wrote", "my%20report"],
        style=lambda text: "an image link with a space" if re.search(r"'[^']* [^']*\.png'", text) else None,
    )

    # ---- POOR: a leaderboard folder passed to report / compare
    def board() -> Path:
        root = i50.path("board")
        if not (root / "leaderboard.json").is_file():
            other = shutil.copytree(E, i50.path("eagle-b"), dirs_exist_ok=True)
            args = ["run", "--target", T, "--draft", E, "--draft", str(other), *SMALL, "--ks", "1"]
            invoke([*args, "--reference", "none", "--out", str(root)])
        return root

    for command in ("report", "compare"):
        add(
            f"POOR {command} on a leaderboard folder names its entries",
            lambda command=command: invoke(
                [command, str(board())] + ([str(i50.base())] if command == "compare" else [])
            )[:2],
            2,
            ["leaderboard", "pass one of"],
        )

    # ---- POOR: compare
    def other_target():
        from alcheck import paths

        demo = i50.run(
            "demo",
            "--target",
            str(paths.DEMO_TARGET_DIR),
            "--draft",
            str(paths.DEMO_DRAFT_DIR),
            "--ks",
            "1-2",
        )
        return invoke(["compare", str(i50.base()), str(demo)])[:2]

    add(
        "POOR compare runs of different targets (other prompt token ids) is refused without --force",
        other_target,
        2,
        ["prompt", "--force"],
        ["B higher", "A higher"],
    )
    add(
        "POOR compare runs with no K in common exits 2",
        lambda: invoke(["compare", str(i50.base()), str(i50.run("k3", "--ks", "3"))])[:2],
        2,
        ["no K in common"],
    )

    # ---- POOR: gate
    add(
        "POOR gate --baseline RUN/questions.csv names the run folder",
        lambda: invoke(["gate", str(i50.base()), "--baseline", str(i50.base() / "questions.csv")])[:2],
        2,
        ["pass the run folder"],
        ["not valid JSON", "restore"],
    )

    def edited_baseline():
        edited = i50.path("edited-baseline")
        shutil.copytree(i50.base(), edited, dirs_exist_ok=True)
        meta = json.loads((edited / "run.json").read_text())
        stored = meta["summary"][-1]["al_mean"]  # K=2: an AL in [1, 3], edited by hand
        meta["summary"][-1]["al_mean"] = 1.5 if abs(stored - 1.5) > 0.05 else 1.7
        (edited / "run.json").write_text(json.dumps(meta))
        return invoke(["gate", str(i50.base()), "--baseline", str(edited)])[:2]

    add(
        "POOR gate against an edited baseline summary says so",
        edited_baseline,
        0,
        ["stored summary", "recomputed"],
    )

    def unwritable_step_summary():
        blocked = i50.path("a-file")
        blocked.write_text("x")
        code, text, exc = invoke(
            ["gate", str(i50.base()), "--baseline", str(i50.base())],
            env={"GITHUB_STEP_SUMMARY": str(blocked / "summary.md")},
        )
        if exc is not None:
            raise exc
        return code, text

    add(
        "POOR gate with an unwritable GITHUB_STEP_SUMMARY keeps the verdict's exit code",
        unwritable_step_summary,
        0,
        ["PASS", "GITHUB_STEP_SUMMARY"],
        ["Error"],
    )

    # ---- POOR: ablate's help offered a repeated --draft, which it refused
    def ablate_drafts():
        helped = invoke(["ablate", "kv-lookahead", "--help"])[1]
        offered = "repeat to rank" in " ".join(helped.replace("│", " ").split())
        args = ["ablate", "kv-lookahead", *i50.pair, "--draft", E, *SMALL, "--ks", "1"]
        code, text, exc = invoke([*args, "--out", str(i50.path("ablate-drafts"))])
        if exc is not None:
            raise exc
        return 0, f"{text}\n(probe: help offers a repeated --draft: {offered}; exit {code})"

    def ablate_consistent(text: str) -> str | None:
        offered = "offers a repeated --draft: True" in text
        refused = "; exit 0)" not in text
        if offered and refused:
            return "the help offers a repeated --draft, which is refused"
        if refused and one_error_line(text):
            return "not a one-line error"
        return None

    add(
        "POOR ablate: the help and a repeated --draft agree",
        ablate_drafts,
        0,
        ["--draft"],
        style=ablate_consistent,
    )

    # ---- POOR: serve without --target (run defaults to the demo) and without --dialect (no default)
    add(
        "POOR serve with neither --target nor --dialect starts as run would (the demo pair)",
        lambda: serve_process(["serve", "--k", "2", "--port", "0"]),
        0,
        ["listening on"],
    )

    # ---- POOR: help and colour
    from alcheck.cli.run import run_cmd

    names = [
        o for p in run_cmd.params if not getattr(p, "hidden", False) for o in p.opts if o.startswith("--")
    ]

    def help_names_whole(text: str) -> str | None:
        lines = text.splitlines()
        folded = [
            name
            for name in names
            if not any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", line) for line in lines)
        ]
        return f"an option name is split across lines ({folded[0]})" if folded else None

    add("POOR run --help: every option name whole on one line", ["run", "--help"], 0, style=help_names_whole)
    for sub in ("report", "compare", "gate", "merge", "references", "import", "ablate", ""):
        add(
            f"POOR {sub or 'alcheck'} --help: drawn in the run's style",
            [*([sub] if sub else []), "--help"],
            0,
            ["╭─"],
            style=lambda text: (
                "click's plain help style" if re.search(r"^(Options|Commands):", text, re.M) else None
            ),
        )

    def device_line():
        code, text, exc = invoke(
            ["run", "--resume", str(i50.base())], env={"NO_COLOR": None, "FORCE_COLOR": "1"}
        )
        if exc is not None:
            raise exc
        device = [line for line in text.splitlines() if "device " in line]
        return code, text + f"\n(probe: device line {device[:1]!r})"

    add(
        "POOR the device line is not coloured at random",
        device_line,
        0,
        ["device"],
        style=lambda text: (
            "the device line is coloured" if re.search(r"device line \['[^']*\\x1b", text) else None
        ),
    )
    return c


def make_partial(fx: Fixtures) -> None:
    """A partial copy of the first run: one of its (K, repeat) passes 'still to run'."""
    src, dst = Path(fx.out("ok")), Path(fx.out("partial"))
    if not (src / "run.json").is_file():
        return
    shutil.copytree(src, dst)
    meta = json.loads((dst / "run.json").read_text())
    meta["status"], meta["config"]["repeats"] = "partial", 2
    (dst / "run.json").write_text(json.dumps(meta))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose group or name contains this")
    parser.add_argument("-v", action="store_true", help="print the output of every case that is not GOOD")
    parser.add_argument("--all", action="store_true", help="print the last lines of every case's output")
    parser.add_argument("--no-serve", action="store_true", help="skip the cases that start alcheck serve")
    parser.add_argument(
        "--memory-gib",
        type=float,
        default=12.0,
        help="address-space limit of this process: a case that asks for a huge allocation then fails "
        "in it (graded BAD) instead of the kernel killing the probe",
    )
    opts = parser.parse_args()
    os.environ.update({"OMP_NUM_THREADS": "1"})
    import resource

    limit = int(opts.memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="alcheck-probe-") as tmp:
        here = os.getcwd()
        os.chdir(tmp)  # a default --out lands here, not in the repository
        try:
            fx = build(Path(tmp))
            servers = {}
            # the servers only when a case chosen needs one (`-k issue50` starts none)
            chosen = {c.group for c in cases(fx, {}) if opts.k in f"{c.group} {c.name}"}
            if not opts.no_serve and chosen & {"run-engine", "serve"}:
                servers = {
                    "vllm": Server(fx, "vllm"),
                    "sglang": Server(fx, "sglang"),
                    "named": Server(fx, "vllm", "--model-name", "other-name"),
                }
            try:
                todo = [c for c in cases(fx, servers) if opts.k in f"{c.group} {c.name}"]
                for case in todo:
                    if case.name == "a partial run":
                        make_partial(fx)
                    grade(case)
                    print(
                        f"{case.grade:4}  {case.group:12} {case.name}"
                        + (f"  -- {case.why}" if case.why else ""),
                        flush=True,
                    )
                    if (opts.v and case.grade != "GOOD") or opts.all:
                        shown = case.output.strip().splitlines()[-4 if opts.all else -40 :]
                        print("      " + "\n      ".join(shown))
            finally:
                for server in servers.values():
                    server.stop()
        finally:
            os.chdir(here)
    counts = {g: sum(c.grade == g for c in todo) for g in ("GOOD", "POOR", "BAD")}
    print(f"\n{len(todo)} cases: {counts['GOOD']} GOOD, {counts['POOR']} POOR, {counts['BAD']} BAD")
    return 0 if not counts["BAD"] else 1


if __name__ == "__main__":
    sys.exit(main())
