"""Where a decode step's time goes.

`--demo` (issue 36): the demo cell as `alcheck run` runs it (the demo pair, EAGLE-1 or EAGLE-3,
K=3, 80 MT-Bench questions, 256 tokens, float32, batch up to 128) with wall-clock timers around
the runner's pieces, nested: a piece's "self" time excludes the pieces timed inside it. The
split: prefill, the target forward (attention: KV store, gather, SDPA), lm_head + acceptance,
drafting (its own attention and lm_head), batch assembly (attn_batch: block tables, slots,
masks) and the rest of the step (scheduling, slot allocation, commits: bookkeeping).

    OMP_NUM_THREADS=1 python bench/profile_step.py --demo --out results/profile-step.md

Without --demo: torch.profiler over a short generate() (K=0, batch 1), the ops with the most
self CPU time; `--shape llama8b --device cuda` is the GPU step the gpu-check measured.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from alcheck.runner.config import RunnerConfig  # noqa: E402
from alcheck.runner.engine import Engine  # noqa: E402
from alcheck.runner.paged import PagedRunner  # noqa: E402


class NestedTimer:
    """Inclusive and self wall time per path of nested timed calls ("step/target/attention")."""

    def __init__(self):
        self.stack: list[list] = []  # [name, start, time spent in timed children]
        self.total = defaultdict(float)
        self.own = defaultdict(float)
        self.calls = defaultdict(int)

    def wrap(self, owner, attr: str, name: str):
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                label, start, inner = self.stack.pop()
                path = "/".join([f[0] for f in self.stack] + [label])
                spent = time.perf_counter() - start
                self.total[path] += spent
                self.own[path] += spent - inner
                self.calls[path] += 1
                if self.stack:
                    self.stack[-1][2] += spent

        setattr(owner, attr, timed)
        return fn


def instrument(timer: NestedTimer, target, proposer) -> None:
    from alcheck.models import attention, layers

    timer.wrap(PagedRunner, "_admit", "prefill")
    timer.wrap(PagedRunner, "_step", "step")
    timer.wrap(PagedRunner, "_allocate_step", "allocate")
    timer.wrap(PagedRunner, "run_model", "target")
    timer.wrap(PagedRunner, "accept", "accept")
    timer.wrap(PagedRunner, "_propose", "draft")
    timer.wrap(PagedRunner, "attn_batch", "batch")
    timer.wrap(target, "compute_logits", "lm_head")
    timer.wrap(layers, "store_kv", "kv_store")
    timer.wrap(layers, "paged_attention", "attention")
    timer.wrap(attention, "gather_kv", "gather")
    timer.wrap(attention, "attend", "sdpa")


def demo_profile(args) -> str:
    from alcheck import paths
    from alcheck.gpu_check.demo_pieces import demo_prompts
    from alcheck.methods.table import proposer_for
    from alcheck.models.cpu_linear import pack_linears
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_eagle, load_target

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    load_start = time.perf_counter()
    target = load_target(str(paths.DEMO_TARGET_DIR), torch.float32, "cpu")
    if args.head == "eagle3":
        head = load_eagle3(str(paths.DEMO_EAGLE3_DIR), target, torch.float32, "cpu")
    else:
        head = load_eagle(str(paths.DEMO_DRAFT_DIR), target, torch.float32, "cpu")
    packed = pack_linears(target.model, head)  # as `alcheck run` loads it (methods/pair.py)
    proposer = proposer_for(head)
    load = time.perf_counter() - load_start
    _, prompts = demo_prompts(target.tokenizer, args.questions)
    order = list(range(len(prompts)))
    random.Random("0:0").shuffle(order)
    prompts = [prompts[i] for i in order]
    model, eos = target.model, target.eos_token_ids

    engine = Engine()  # one per loaded pair, as the sweep keeps it: later runs hit the prompt cache

    def run(max_tokens):
        cfg = RunnerConfig(
            num_spec_tokens=args.k, block_size=16, max_batch_size=128, prompt_cache=not args.no_prompt_cache
        )
        runner = PagedRunner(model, proposer, eos, cfg, engine=engine)
        start = time.perf_counter()
        results = runner.generate(prompts, max_tokens)
        return time.perf_counter() - start, results

    run(16)  # warm-up: allocator, first-call costs
    plain, results = run(args.max_tokens)
    timer = NestedTimer()
    instrument(timer, model, proposer)
    timed, _ = run(args.max_tokens)
    steps = max(r.steps for r in results)
    tokens = sum(len(r.output_ids) for r in results)
    al = sum(r.steps + r.accepted for r in results) / sum(r.steps for r in results)
    rows = [
        "| piece | calls | self s | incl. s | self % |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(timer.total):
        depth = path.count("/")
        name = "&nbsp;&nbsp;" * depth + path.rsplit("/", 1)[-1]
        rows.append(
            f"| {name} | {timer.calls[path]} | {timer.own[path]:.3f} | {timer.total[path]:.3f} | "
            f"{100 * timer.own[path] / timed:.1f} |"
        )
    rows.append(f"| (outside the timers) | | {timed - sum(timer.own.values()):.3f} | | |")
    return (
        f"# Where the demo cell's time goes (bench/profile_step.py --demo)\n\n"
        f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
        f"- the demo pair, {args.head}, K={args.k}, {len(prompts)} MT-Bench questions, "
        f"{args.max_tokens} tokens, float32, paged runner, batch up to 128; AL {al:.4f}, "
        f"{tokens} tokens, {steps} steps of the longest request; prompt cache "
        f"{'off (every prefill computed)' if args.no_prompt_cache else 'on (reusing the warm-up prefills)'}; "
        "linears: "
        f"{f'oneDNN, {packed} weights reordered at load' if packed else 'F.linear (MKL)'}\n"
        f"- pair load {load:.2f} s; generate() {plain:.2f} s untimed, {timed:.2f} s with the timers "
        f"({tokens / plain:.0f} tokens/s untimed)\n\n" + "\n".join(rows) + "\n"
    )


def op_profile(args) -> str:
    from torch.profiler import ProfilerActivity, profile

    from alcheck.gpu_check.llama8b import LLAMA31_8B, TINY, build

    device = torch.device(args.device)
    shape = LLAMA31_8B if args.shape == "llama8b" else TINY
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    _, target, _ = build(shape, device, dtype)
    prompt = [[1 + (i * 7919) % (shape["vocab_size"] - 1) for i in range(128)]]
    runner = PagedRunner(target, None, [], RunnerConfig(num_spec_tokens=0, device=str(device)))
    runner.generate(prompt, 4)  # warm-up: kernels, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    runner.generate(prompt, args.new_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        runner.generate(prompt, args.new_tokens)
        if device.type == "cuda":
            torch.cuda.synchronize()
    steps = args.new_tokens - 1  # the prefill emits the first token
    table = prof.key_averages().table(
        sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60
    )
    return (
        f"# alcheck decode step profile\n\n- shape {args.shape}, "
        f"device {device}, dtype {dtype}, batch 1, K=0, "
        f"{args.new_tokens} new tokens ({steps} steps after the prefill)\n"
        f"- wall {wall * 1e3:.1f} ms for the generate() (prefill included), "
        f"{wall / args.new_tokens * 1e3:.2f} ms "
        f"per token\n- torch {torch.__version__}\n\n```\n{table}\n```\n"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo", action="store_true", help="the demo cell, split into the runner's pieces")
    parser.add_argument("--head", choices=("eagle", "eagle3"), default="eagle")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--questions", type=int, default=None, help="first N MT-Bench questions (all 80)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--no-prompt-cache", action="store_true", help="--demo: every run prefills its prompts (a cold cell)"
    )
    parser.add_argument("--shape", choices=("tiny", "llama8b"), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    text = demo_profile(args) if args.demo else op_profile(args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
