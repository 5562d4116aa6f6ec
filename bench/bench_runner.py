"""Benchmark (not a test): our paged runner vs transformers `generate()`, and speculative rows.

    python bench/bench_runner.py [--threads 1] [--repeats 3] [--new-tokens 128]
                                 [--out results/bench-runner.md]

1. Target-only greedy tokens/s, CPU float32, on a random Llama shaped like the demo target
   (hidden 256, 4 layers, 4 heads / 2 KV heads, intermediate 704, vocab 4096): our runner (K=0,
   block size 16) vs transformers `generate(do_sample=False)` with its default KV cache and a
   left-padded batch, at batch 1 (4 prompts one after another) and batch 32.
2. The speculative runner's tokens/s and AL at K=0..5 on the copy-layer pair from alcheck.testing.tiny
   (one-layer target of the same width with unit-RMS embeddings, EAGLE-1 head copying its layer),
   and tree drafting (issue 13) at the same depth as the K=5 chain: 5 steps, topk 8, 32 tokens
   verified per step (SGLang's older EAGLE-3 example), and 5 steps, topk 4, 16 tokens.

Every run generates exactly --new-tokens tokens per prompt (EOS disabled: no stop ids for our
runner, eos_token_id=None + min_new_tokens for generate), after a warm-up, and the best of
--repeats wall times is reported (the machine may be shared). Prints a markdown table and
writes it to --out.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alcheck.device_info import device_name  # noqa: E402
from alcheck.methods.table import proposer_for  # noqa: E402
from alcheck.models.config import ModelConfig  # noqa: E402
from alcheck.models.layers import stack_checkpoint  # noqa: E402
from alcheck.models.llama import LlamaTarget  # noqa: E402
from alcheck.runner.config import RunnerConfig  # noqa: E402
from alcheck.runner.paged import PagedRunner  # noqa: E402

SHAPE = dict(
    hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=704
)
VOCAB = 4096
BLOCK_SIZE = 16


def make_prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(rng.randint(16, 64))] for _ in range(n)]


def best_of(repeats: int, fn):
    """(best wall seconds, result of the last call)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def demo_shaped_models(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **SHAPE, vocab_size=VOCAB, max_position_embeddings=2048, rope_theta=10000.0, initializer_range=0.1
    )
    hf = LlamaForCausalLM(cfg).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    ours = LlamaTarget(ModelConfig.from_dict(cfg.to_dict()))
    ours.load_state_dict(stack_checkpoint(hf.state_dict()), strict=True)
    return hf, ours.eval()


TREES = [(8, 32), (4, 16)]  # (topk, tokens verified per step) at K=5 draft steps


def ours_generate(model, head, prompts, new_tokens, k, topk=1, num_draft_tokens=None):
    config = RunnerConfig(
        num_spec_tokens=k, block_size=BLOCK_SIZE, topk=topk, num_draft_tokens=num_draft_tokens
    )
    runner = PagedRunner(model, proposer_for(head) if k else None, [], config)
    results = runner.generate(prompts, new_tokens)
    assert all(len(r.output_ids) == new_tokens for r in results)
    return results


def hf_generate(model, prompts, new_tokens):
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    assert out.shape[1] == width + new_tokens
    return out[:, width:].tolist()


def one_at_a_time(fn, prompts):
    return [r for p in prompts for r in fn([p])]


def aux_capture_cost(model, prompts, iters: int = 40) -> list[str]:
    """EAGLE-3's extra target work: keeping the states entering layers (1, 2, 3) and concatenating
    them, as % of a plain target forward, for a prefill of the prompts and a K=3 verify step.
    Forwards alternate with and without capture; the median of each is compared."""
    import statistics

    from alcheck.models.attention import AttnBatch, bind_kv_cache

    bs = BLOCK_SIZE
    lens = [len(p) for p in prompts]
    per_req = [-(-(n + 8) // bs) for n in lens]
    bind_kv_cache(model.attention_layers, sum(per_req) + 1, bs, torch.float32, "cpu")
    tables, first = [], 1
    for n in per_req:
        tables.append(list(range(first, first + n)) + [0] * (max(per_req) - n))
        first += n
    table = torch.tensor(tables, dtype=torch.int32)

    def batch(starts, counts):
        pos = [p for s, c in zip(starts, counts) for p in range(s, s + c)]
        rows = [b for b, c in enumerate(counts) for _ in range(c)]
        pos_t = torch.tensor(pos)
        slots = table[torch.tensor(rows), pos_t // bs].long() * bs + pos_t % bs
        return AttnBatch.build(
            pos, slots, table, counts, [s + c for s, c in zip(starts, counts)], bs, "torch"
        )

    cases = {
        "prefill": ([0] * len(lens), lens, [t for p in prompts for t in p]),
        "verify K=3": (lens, [4] * len(lens), [t for p in prompts for t in p[:4]]),
    }
    out = []
    with torch.inference_mode():
        for name, (starts, counts, ids) in cases.items():
            ids, meta = torch.tensor(ids), batch(starts, counts)
            times = {False: [], True: []}
            for i in range(2 * iters + 2):
                aux = bool(i % 2)
                start = time.perf_counter()
                model(ids, meta, aux_layers=(1, 2, 3) if aux else None)
                if i >= 2:  # the first pair warms up
                    times[aux].append(time.perf_counter() - start)
            plain, captured = statistics.median(times[False]), statistics.median(times[True])
            out.append(
                f"- EAGLE-3 aux capture (layers 1, 2, 3) at the demo shape, batch {len(lens)} {name} "
                f"({sum(counts)} tokens): {1e3 * plain:.2f} ms plain vs {1e3 * captured:.2f} ms with "
                f"capture, {100 * (captured - plain) / plain:+.1f}% of a target forward (median of {iters})"
            )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (default 1: the machine may be shared)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--single", type=int, default=4, help="prompts run one at a time for the batch-1 rows"
    )
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-runner.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n_new = args.new_tokens
    rows = []

    def row(runner, model, batch, k, n_prompts, wall, al="", note=""):
        tokens = n_prompts * n_new
        rows.append(
            (
                runner,
                model,
                batch,
                "-" if k is None else k,
                tokens,
                f"{wall:.2f}",
                f"{tokens / wall:.0f}",
                al,
                note,
            )
        )
        print(" | ".join(map(str, rows[-1])), file=sys.stderr, flush=True)

    # 1. target-only: ours vs transformers generate()
    hf, ours = demo_shaped_models(0)
    prompts = make_prompts(args.batch, VOCAB, 0)
    single = prompts[: args.single]
    ours_generate(ours, None, prompts[:2], 8, 0)  # warm-up
    hf_generate(hf, prompts[:2], 8)
    name = "random, demo-shaped (h256 L4 vocab 4096)"
    wall, ours_single = best_of(
        args.repeats, lambda: one_at_a_time(lambda p: ours_generate(ours, None, p, n_new, 0), single)
    )
    row("alcheck paged (K=0)", name, 1, 0, len(single), wall)
    wall, hf_single = best_of(
        args.repeats, lambda: one_at_a_time(lambda p: hf_generate(hf, p, n_new), single)
    )
    same = sum(a.output_ids == b for a, b in zip(ours_single, hf_single))
    row(
        "transformers generate()",
        name,
        1,
        None,
        len(single),
        wall,
        note=f"same tokens as ours: {same}/{len(single)}",
    )
    wall, ours_batch = best_of(args.repeats, lambda: ours_generate(ours, None, prompts, n_new, 0))
    row("alcheck paged (K=0)", name, len(prompts), 0, len(prompts), wall)
    ours_wall = wall
    wall, hf_batch = best_of(args.repeats, lambda: hf_generate(hf, prompts, n_new))
    same = sum(a.output_ids == b for a, b in zip(ours_batch, hf_batch))
    row(
        "transformers generate()",
        name,
        len(prompts),
        None,
        len(prompts),
        wall,
        note=f"left-padded; same tokens as ours: {same}/{len(prompts)}",
    )
    ratio = wall / ours_wall  # > 1: ours is faster
    verdict = (
        f"- batch {len(prompts)}: alcheck's paged runner runs at {ratio:.2f}x the tokens/s of "
        f"transformers generate() ({'not slower' if ratio >= 1 else 'SLOWER'})"
    )

    # 2. speculative: the copy-layer pair
    from alcheck.models.loading import load_eagle, load_target
    from alcheck.testing.tiny import make_tiny_eagle, make_tiny_target

    with tempfile.TemporaryDirectory() as tmp:
        shape = dict(
            hidden_size=SHAPE["hidden_size"],
            num_heads=SHAPE["num_attention_heads"],
            num_kv_heads=SHAPE["num_key_value_heads"],
            intermediate_size=SHAPE["intermediate_size"],
        )
        target_dir = make_tiny_target(Path(tmp) / "target", num_layers=1, unit_rms_embeddings=True, **shape)
        eagle_dir = make_tiny_eagle(Path(tmp) / "eagle", target_dir, copy_target_layer=0, noise=0.0)
        target = load_target(str(target_dir))
        head = load_eagle(str(eagle_dir), target)
    vocab = target.model.config.vocab_size
    pair = f"copy-layer pair (h256 L1 + EAGLE-1, vocab {vocab})"
    spec_prompts = make_prompts(args.batch, vocab, 1)
    ours_generate(target.model, head, spec_prompts[:2], 8, 3)  # warm-up
    for batch_prompts, label in ((spec_prompts[: args.single], 1), (spec_prompts, len(spec_prompts))):
        for k in range(0, 6):

            def spec(p, k=k):
                return ours_generate(target.model, head, p, n_new, k)

            fn = partial(one_at_a_time, spec, batch_prompts) if label == 1 else partial(spec, batch_prompts)
            wall, results = best_of(args.repeats, fn)
            steps = sum(r.steps for r in results)
            al = (steps + sum(r.accepted for r in results)) / steps
            row("alcheck speculative", pair, label, k, len(batch_prompts), wall, al=f"{al:.2f}")
        for topk, t in TREES:  # trees at the chain's deepest K

            def tree(p, topk=topk, t=t):
                return ours_generate(target.model, head, p, n_new, 5, topk, t)

            fn = partial(one_at_a_time, tree, batch_prompts) if label == 1 else partial(tree, batch_prompts)
            wall, results = best_of(args.repeats, fn)
            steps = sum(r.steps for r in results)
            al = (steps + sum(r.accepted for r in results)) / steps
            row(
                "alcheck speculative, tree",
                pair,
                label,
                f"5, topk {topk}, T {t}",
                len(batch_prompts),
                wall,
                al=f"{al:.2f}",
                note=f"{t} tokens verified per step vs 6 for the K=5 chain",
            )

    # 3. EAGLE-3: a copy-layer EAGLE-3 pair at the demo's shape, and the cost of its aux capture
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.testing.tiny import damp_target_layers, make_tiny_eagle3

    with tempfile.TemporaryDirectory() as tmp:
        target_dir = make_tiny_target(Path(tmp) / "target", num_layers=4, unit_rms_embeddings=True, **shape)
        damp_target_layers(target_dir, first=1, factor=0.05)
        head_dir = make_tiny_eagle3(
            Path(tmp) / "eagle3", target_dir, copy_target_layer=0, norm_before_residual=True
        )
        target3 = load_target(str(target_dir))
        head3 = load_eagle3(str(head_dir), target3)
    pair3 = (
        f"copy-layer EAGLE-3 pair (h256 L4 + EAGLE-3, vocab {vocab}, "
        f"draft vocab {head3.config.draft_vocab_size})"
    )
    ours_generate(target3.model, head3, spec_prompts[:2], 8, 3)  # warm-up
    for batch_prompts, label in ((spec_prompts[: args.single], 1), (spec_prompts, len(spec_prompts))):
        for k in (0, 1, 3, 5):

            def spec3(p, k=k):
                return ours_generate(target3.model, head3, p, n_new, k)

            fn = partial(one_at_a_time, spec3, batch_prompts) if label == 1 else partial(spec3, batch_prompts)
            wall, results = best_of(args.repeats, fn)
            steps = sum(r.steps for r in results)
            al = (steps + sum(r.accepted for r in results)) / steps
            row("alcheck speculative", pair3, label, k, len(batch_prompts), wall, al=f"{al:.2f}")
    aux_lines = aux_capture_cost(ours, make_prompts(args.batch, VOCAB, 2))

    header = (
        "runner",
        "model",
        "batch",
        "K",
        "new tokens",
        f"wall s (best of {args.repeats})",
        "tokens/s",
        "AL",
        "note",
    )
    lines = [
        "# alcheck runner benchmark",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {device_name('cpu')}, {os.cpu_count()} logical cores, torch threads "
        f"{torch.get_num_threads()}",
        f"- software: python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {__import__('transformers').__version__}, {platform.platform()}",
        f"- CPU float32, greedy, exactly {n_new} new tokens per prompt (EOS disabled), prompts of 16-64 "
        f"random tokens, block size {BLOCK_SIZE}, warm-up first, best of {args.repeats} wall times",
        "- AL = tokens emitted per verification step (1 + accepted drafts / steps), pooled; the prefill "
        "token is not a step. K=0 rows: AL 1 by definition",
        f"- batch 1 = the first {args.single} prompts one after another",
        "- speculative rows: the head is as large as the one-layer target, so K buys little speed here; "
        "they show the runner's overhead per K and the AL it measures",
        verdict,
        *aux_lines,
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(map(str, r)) + " |" for r in rows),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
