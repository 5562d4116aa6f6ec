"""Train the demo target's draft language model (`alcheck-demo-draft`, `--method draft_model`).

    python -m alcheck.demo.draft_train --models alcheck/demo/models --seed 0 [--eval]

Runs after alcheck.demo.train (it needs the saved demo target). One thread, deterministic given
--seed, the CPython version (the corpus, see corpus.py) and the torch build.
- model: a LlamaForCausalLM with the target's tokenizer and vocabulary (its tokenizer files are
  copied), 2 layers of hidden 256 and an MLP of 512 (the target: 4 layers, 704), tied embeddings,
  started from the target's input embedding; saved by transformers (safetensors, bfloat16);
- data: the target's own greedy answers to --distill-prompts corpus prompts (the text a draft
  model is asked to predict), then chat-formatted corpus samples (the EAGLE-1 head's picks);
- loss: cross-entropy to the target's next-token distribution at every position (distillation),
  the target run alongside in float32.
--eval measures AL(K) on MT-Bench turn 1 with alcheck's own paged runner, trained vs the same
model at its initial (random) weights.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import time
from pathlib import Path

import torch

from alcheck.paths import DEMO_DRAFT_LM_NAME, DEMO_TARGET_NAME

DRAFT_SHAPE = dict(
    hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512
)
COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")

START = time.time()  # the run's start, for the log's elapsed seconds


def log(msg: str) -> None:
    print(f"[{time.time() - START:7.1f}s] {msg}", flush=True)


def draft_config(target_dir: Path):
    """The draft's LlamaConfig: the target's vocabulary, special ids and RoPE; its own shape."""
    from transformers import LlamaConfig

    t = LlamaConfig.from_pretrained(str(target_dir))
    return LlamaConfig(
        **DRAFT_SHAPE,
        vocab_size=t.vocab_size,
        max_position_embeddings=t.max_position_embeddings,
        rope_theta=10000.0,
        rms_norm_eps=t.rms_norm_eps,
        tie_word_embeddings=True,
        bos_token_id=t.bos_token_id,
        eos_token_id=t.eos_token_id,
        pad_token_id=t.pad_token_id,
        initializer_range=0.02,
    )


def initial_draft(target_dir: Path, seed: int, target=None):
    """The untrained draft: random layers (seeded), the target's input embedding (tied)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed + 1)
    model = LlamaForCausalLM(draft_config(target_dir))
    if target is not None:
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    return model


def save_draft(model, target_dir: Path, out: Path) -> Path:
    """The HF folder: config.json + model.safetensors (bfloat16) + the target's tokenizer files."""
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)
    for name in COPIED:
        if (target_dir / name).is_file():
            shutil.copyfile(target_dir / name, out / name)
    for f in out.iterdir():
        f.chmod(0o644)  # transformers writes model.safetensors 0600; package data must be readable
    return out


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + torch.cos(torch.tensor(torch.pi * frac)).item()))


def batches_of(seqs: list[list[int]], pad: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded batches of similar lengths: (ids, valid-next-token mask)."""
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))
    out = []
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        width = max(len(seqs[i]) for i in idx)
        ids = torch.tensor([seqs[i] + [pad] * (width - len(seqs[i])) for i in idx])
        lens = torch.tensor([len(seqs[i]) for i in idx])
        out.append((ids, torch.arange(width - 1)[None] + 1 < lens[:, None]))
    return out


def train(draft, target, batches, args) -> None:
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 2)
    total, step = args.epochs * len(batches), 0
    draft.train()
    for _ in range(args.epochs):
        for bi in torch.randperm(len(batches), generator=g).tolist():
            ids, valid = batches[bi]
            with torch.no_grad():  # right padding: the valid rows are unaffected by it
                target_p = torch.softmax(target(input_ids=ids).logits[:, :-1], -1)
            logp = torch.log_softmax(draft(input_ids=ids).logits[:, :-1], -1)
            loss = (-(target_p * logp).sum(-1) * valid).sum() / valid.sum()
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.lr, 20)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 25 == 0 or step == total - 1:
                log(f"step {step}/{total} soft ce {loss.item():.3f}")
            step += 1
    draft.eval()


def measure_al(target_dir: Path, draft_dir: Path, num_questions: int, k: int, max_new: int) -> float:
    """AL(k) pooled over steps, greedy, MT-Bench turn 1, through alcheck's paged runner."""
    from alcheck.methods.table import proposer_for
    from alcheck.models.draft_lm import load_draft_lm
    from alcheck.models.loading import load_target
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    target = load_target(str(target_dir))
    draft = load_draft_lm(draft_dir, torch.float32, "cpu")
    protocol = get_protocol("vllm-example")
    prompts = [
        build_prompt_ids(target.tokenizer, protocol, q.turns[:1])
        for q in load_questions("mt_bench", num_questions)
    ]
    runner = PagedRunner(
        target.model, proposer_for(draft), target.eos_token_ids, RunnerConfig(num_spec_tokens=k)
    )
    results = runner.generate(prompts, max_new)
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps


def trainer_parser(description: str, *, distill_prompts: int, samples: int, samples_help: str, lr: float):
    """The options every demo distillation trainer takes (this one and mtp_train.py); their defaults
    differ, and each default is part of a shipped checkpoint's recipe."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--models", type=Path, default=Path(__file__).parent / "models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--distill-prompts", type=int, default=distill_prompts, help="corpus prompts the target answers"
    )
    ap.add_argument("--samples", type=int, default=samples, help=samples_help)
    ap.add_argument(
        "--eagle1-samples", type=int, default=2560, help="how many the EAGLE-1 head picked (train.py)"
    )
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--eval", action="store_true", help="AL(K=1..5) on MT-Bench, trained vs initial weights")
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--eval-questions", type=int, default=16)
    return ap


def deterministic(threads: int) -> None:
    """Bit-reproducible training on CPU: the shipped weights' sha256 must come out the same."""
    torch.set_num_threads(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.use_deterministic_algorithms(True)


def main(argv=None) -> None:
    ap = trainer_parser(
        __doc__.split("\n")[0],
        distill_prompts=2048,
        samples=1024,
        samples_help="corpus samples (the EAGLE-1 head's first picks)",
        lr=3e-3,
    )
    args = ap.parse_args(argv)

    from alcheck.demo.corpus import samples as corpus_samples
    from alcheck.demo.train import chat_text, encode, generate, load_target
    from alcheck.testing.tiny import END_TEXT

    deterministic(args.threads)
    target_dir, out = args.models / DEMO_TARGET_NAME, args.models / DEMO_DRAFT_LM_NAME
    if not args.eval_only:
        target, tok = load_target(target_dir)
        for p in target.parameters():
            p.requires_grad_(False)
        samples = corpus_samples()
        picks = random.Random(args.seed + 3).sample(range(len(samples)), args.eagle1_samples)
        rest = sorted(set(range(len(samples))) - set(picks))  # prompts the heads were not trained on
        asked = random.Random(args.seed + 4).sample(rest, args.distill_prompts)
        seqs = generate(target, tok, [chat_text(tok, samples[i][0]) for i in asked]) if asked else []
        log(f"distillation: {len(seqs)} target answers, {sum(map(len, seqs))} tokens")
        seqs = [s[: args.max_len] for s in seqs]
        seqs += [encode(tok, chat_text(tok, *samples[i]))[: args.max_len] for i in picks[: args.samples]]
        batches = batches_of(seqs, tok.convert_tokens_to_ids(END_TEXT), args.batch)
        log(f"data: {len(seqs)} sequences, {sum(map(len, seqs))} tokens, {len(batches)} batches")
        draft = initial_draft(target_dir, args.seed, target)
        train(draft, target, batches, args)
        save_draft(draft, target_dir, out)
        log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 2**20:.1f} MB)")
    if args.eval or args.eval_only:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            initial = save_draft(initial_draft(target_dir, args.seed), target_dir, Path(tmp) / "initial")
            for k in range(1, 6):
                trained = measure_al(target_dir, out, args.eval_questions, k, 256)
                rand = measure_al(target_dir, initial, args.eval_questions, k, 256)
                log(
                    f"AL(K={k}) on {args.eval_questions} MT-Bench questions: "
                    f"trained {trained:.3f}, initial {rand:.3f}"
                )


if __name__ == "__main__":
    main()
