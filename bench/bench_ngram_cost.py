"""What the n-gram proposer costs against a demo verification step on the CPU (issue 30: under 5%).
Benchmark, not a test.

    OMP_NUM_THREADS=1 python bench/bench_ngram_cost.py [--questions 16] [--max-tokens 256]
                                                       [--out results/bench-ngram-cost.md]

The demo target on MT-Bench turn-1 prompts (chat template applied, as `alcheck run` does), the
paged runner, K=1/3/5, each rule at its defaults and vLLM's at min 1 max 3. The proposer's calls
are timed inside the run (a wrapper around propose_tokens); a step's time is the run's wall time
over its steps. Both are medians of --passes passes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from alcheck.device_info import device_name  # noqa: E402
from alcheck.models.loading import load_target  # noqa: E402
from alcheck.runner.config import RunnerConfig  # noqa: E402
from alcheck.runner.paged import PagedRunner  # noqa: E402
from alcheck.runner.proposers.ngram import NgramProposer  # noqa: E402
from alcheck.runner.proposers.ngram_rules import NgramSettings  # noqa: E402

DEMO = ROOT / "alcheck" / "demo" / "models" / "alcheck-demo-llama"
SETTINGS = [
    NgramSettings("vllm", 1, 3),
    NgramSettings("vllm", 5, 5),
    NgramSettings("transformers", 1, 2),
    NgramSettings("spec-bench", 1, 3),
]


class TimedProposer(NgramProposer):
    """The proposer, with the seconds its calls took."""

    def __init__(self, settings, eos_ids):
        super().__init__(settings, eos_ids)
        self.seconds = 0.0

    def propose_tokens(self, reqs, k):
        start = time.perf_counter()
        try:
            return super().propose_tokens(reqs, k)
        finally:
            self.seconds += time.perf_counter() - start


def prompts(target, n: int) -> list[list[int]]:
    rows = [json.loads(line) for line in (ROOT / "datasets" / "mt_bench" / "question.jsonl").open()][:n]
    tok = target.tokenizer
    out = []
    for r in rows:
        messages = [{"role": "user", "content": r["turns"][0]}]
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(tok(text, add_special_tokens=False).input_ids)
    return out


def one_pass(target, batch, settings, k, max_tokens):
    proposer = TimedProposer(settings, target.eos_token_ids)
    cfg = RunnerConfig(num_spec_tokens=k, block_size=16)
    runner = PagedRunner(target.model, proposer, target.eos_token_ids, cfg)
    start = time.perf_counter()
    results = runner.generate(batch, max_tokens)
    wall = time.perf_counter() - start
    steps = sum(r.steps for r in results)
    tokens = sum(len(r.output_ids) for r in results)
    accepted = sum(r.accepted for r in results)
    return wall, proposer.seconds, steps, tokens, accepted


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench-ngram-cost.md")
    args = p.parse_args()
    torch.manual_seed(0)
    target = load_target(str(DEMO))
    batch = prompts(target, args.questions)
    lines = [
        f"# n-gram proposer cost on the CPU ({datetime.date.today()})",
        "",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, {device_name('cpu')}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads",
        f"- demo target, {args.questions} MT-Bench turn-1 prompts, {args.max_tokens} tokens, paged "
        f"runner (one batch), float32; medians of {args.passes} passes",
        "",
        "| rule (min / max) | K | AL | request steps | wall ms per request step "
        "| proposer ms per request step | proposer share of wall |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for settings in SETTINGS:
        for k in (1, 3, 5):
            runs = [one_pass(target, batch, settings, k, args.max_tokens) for _ in range(args.passes)]
            wall = statistics.median(r[0] for r in runs)
            spent = statistics.median(r[1] for r in runs)
            _, _, steps, _, accepted = runs[0]
            share = spent / wall
            worst = max(worst, share)
            lines.append(
                f"| {settings.rule} ({settings.min_n} / {settings.max_n}) | {k} | {1 + accepted / steps:.2f} "
                f"| {steps} | {1000 * wall / steps:.2f} | {1000 * spent / steps:.3f} | {100 * share:.2f}% |"
            )
            print(lines[-1], flush=True)
    lines += ["", f"Largest proposer share: {100 * worst:.2f}% of a step (target: under 5%)."]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
