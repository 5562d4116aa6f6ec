"""Chain vs tree AL on the embedded demo pair (issue 13), until `alcheck run --topk` is wired:
MT-Bench turn 1 (vllm-example protocol: chat template, no system prompt), 256 new tokens, greedy,
CPU float32, block size 16, every question in one batch. Prints a markdown table.

    python bench/bench_tree_demo.py [--limit N] [--method eagle|eagle3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alcheck import paths  # noqa: E402
from alcheck.methods.table import proposer_for
from alcheck.models.loading import load_eagle, load_target  # noqa: E402
from alcheck.prompts.dataset import load_questions  # noqa: E402
from alcheck.prompts.protocols import build_prompt_ids, get_protocol  # noqa: E402
from alcheck.runner.config import RunnerConfig  # noqa: E402
from alcheck.runner.paged import PagedRunner  # noqa: E402

SHAPES = [(3, 1, None), (3, 4, 16), (3, 8, 32), (5, 1, None), (5, 4, 16), (5, 8, 32)]  # (K steps, topk, T)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int)
    parser.add_argument("--method", default="eagle", choices=["eagle", "eagle3"])
    args = parser.parse_args()
    target = load_target(str(paths.DEMO_TARGET_DIR))
    if args.method == "eagle3":
        from alcheck.models.eagle3_loading import load_eagle3

        head = load_eagle3(str(paths.DEMO_EAGLE3_DIR), target)
    else:
        head = load_eagle(str(paths.DEMO_DRAFT_DIR), target)
    protocol = get_protocol("vllm-example")
    prompts = [
        build_prompt_ids(target.tokenizer, protocol, q.turns[:1])
        for q in load_questions("mt_bench", args.limit)
    ]
    print(
        "| K (draft steps) | drafting | tokens verified per step | AL "
        "| per-depth acceptance | same tokens as the chain | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    chain = {}  # K -> the chain's outputs: greedy decoding is lossless, so every shape must match them
    for k, topk, t in SHAPES:
        cfg = RunnerConfig(num_spec_tokens=k, topk=topk, num_draft_tokens=t, block_size=16)
        start = time.perf_counter()
        results = PagedRunner(target.model, proposer_for(head), target.eos_token_ids, cfg).generate(
            prompts, protocol.max_tokens
        )
        wall = time.perf_counter() - start
        steps = sum(r.steps for r in results)
        al = (steps + sum(r.accepted for r in results)) / steps
        depth = [sum(r.accepted_per_pos[i] for r in results) / steps for i in range(k)]
        shape = "chain" if topk == 1 else f"tree, topk {topk}"
        outputs = [r.output_ids for r in results]
        same = sum(a == b for a, b in zip(outputs, chain.setdefault(k, outputs)))
        print(
            f"| {k} | {shape} | {cfg.num_verify_tokens} | {al:.2f} | {' / '.join(f'{p:.2f}' for p in depth)} "
            f"| {same}/{len(outputs)} | {wall:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
