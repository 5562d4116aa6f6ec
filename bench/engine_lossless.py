#!/usr/bin/env python3
"""Is a running engine's speculative sampling lossless at temperature > 0? (issue 23)

    python bench/engine_lossless.py --target DIR --engine-cmd "CMD with {k} and {port}" --k 3
    python bench/engine_lossless.py --target DIR --endpoint http://127.0.0.1:8000 --k 3

Sends the first --limit MT-Bench questions (turn 1, the vllm-example protocol's chat prompt) --samples
times each at --temperature, each request with its own seed, keeps the output ids, then draws as many
target-only samples per prompt with alcheck's own runner (K=0, float32 CPU) and runs the two-sample
test of alcheck/metrics/lossless.py. Prints one line; --out writes the result as JSON.
--expect lossless|lossy makes the exit code 1 when the verdict is the other one.
(`alcheck run --engine ... --check-lossless` takes this over in phase 2 of issue 23.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alcheck.errors import AlcheckError  # noqa: E402


def mt_bench_prompts(tokenizer, limit: int) -> list[list[int]]:
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol

    protocol = get_protocol("vllm-example")
    return [build_prompt_ids(tokenizer, protocol, q.turns[:1]) for q in load_questions("mt_bench", limit)]


def sample_server(args, prompts) -> tuple[list, dict]:
    """([prompt][draw] -> output ids, what the server said it is), starting it first with --engine-cmd."""
    from alcheck.backends.engine import DIALECTS
    from alcheck.backends.engines.http import EngineHTTP
    from alcheck.backends.engines.launch import EngineProcess
    from alcheck.backends.engines.samples import engine_samples

    dialect = DIALECTS[args.engine]()
    process = None
    if args.engine_cmd:
        process = EngineProcess(args.engine_cmd, args.k, args.endpoint)
        process.start()
        waiting = EngineHTTP(process.url, "--engine-cmd")
        try:
            process.wait_healthy(waiting, args.engine_start_timeout)
        finally:
            waiting.close()
    url = process.url if process else args.endpoint
    http = EngineHTTP(url, "--engine-cmd" if process else "--endpoint")
    try:
        info = dialect.probe(http)
        outputs = engine_samples(http, dialect, info, prompts, args.k, args.max_tokens, args.temperature,
                                 args.samples, args.seed, args.concurrency)
    finally:
        http.close()
        if process is not None:
            process.stop()
    return outputs, {key: info.get(key) for key in ("engine", "version", "model")}


def run(args) -> dict:
    import torch

    from alcheck.runner.lossless_check import check_outputs
    from alcheck.models.loading import load_target

    torch.set_num_threads(max(1, args.threads))
    target = load_target(args.target)  # float32 on the CPU: the reference distribution
    prompts = mt_bench_prompts(target.tokenizer, args.limit)
    start = time.perf_counter()
    outputs, server = sample_server(args, prompts)
    sampled_s = time.perf_counter() - start
    result = check_outputs(target.model, target.eos_token_ids, prompts, outputs, args.temperature, args.max_tokens,
                           seed=args.seed)
    tokens = sum(len(o) for outs in outputs for o in outs)
    return {"server": server, "k": args.k, "temperature": args.temperature, "limit": args.limit,
            "samples": args.samples, "max_tokens": args.max_tokens, "seed": args.seed, "engine_tokens": tokens,
            "engine_s": round(sampled_s, 2), "total_s": round(time.perf_counter() - start, 2),
            "test": result.to_dict(), "line": result.line()}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="the served target's folder (tokenizer, weights)")
    p.add_argument("--engine", default="vllm", choices=("vllm", "sglang"))
    p.add_argument("--endpoint", default="http://127.0.0.1:8000")
    p.add_argument("--engine-cmd", help="start the server: {k} and {port} are filled in")
    p.add_argument("--engine-start-timeout", type=float, default=900.0)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--limit", type=int, default=16, help="MT-Bench questions (turn 1)")
    p.add_argument("--samples", type=int, default=2, help="engine samples per prompt (as many target-only)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads for alcheck's target")
    p.add_argument("--expect", choices=("lossless", "lossy", "any"), default="any")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        result = run(args)
    except AlcheckError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    server = result["server"]
    print(f"{server.get('engine')} {server.get('version')} K={args.k} T={args.temperature:g}: {result['line']}")
    lossless = result["test"]["lossless"]
    if args.expect != "any" and lossless != (args.expect == "lossless"):
        print(f"expected {args.expect}, found {'lossless' if lossless else 'lossy'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
