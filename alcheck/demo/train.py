"""Train the embedded demo pair: a tiny Llama-3-style chat target and an EAGLE-1 head for it.

    python -m alcheck.demo.train --out alcheck/demo/models --seed 0 [--eval]

Stages (all on CPU, deterministic given --seed and the CPython version, see corpus.py):
1. corpus: CPython's own documentation as (user, assistant) chat samples (alcheck.demo.corpus);
2. tokenizer: byte-level BPE with the Llama-3 chat template (alcheck.tiny.train_tokenizer);
3. target: LlamaForCausalLM (hidden 256, 4 layers, 4 heads / 2 KV heads) trained with AdamW on
   the chat-formatted corpus; saved by transformers in bfloat16 with generation_config.json;
4. self-distillation: the saved target answers corpus prompts greedily (its own outputs are what
   the head must predict at inference);
5. head: EAGLE-1 head trained the EAGLE way on the frozen target's features -- SmoothL1 to the
   target's next feature plus cross-entropy to the target's next-token distribution, with noise
   on the input features and a second, chained pass that feeds the head its own outputs (as
   chain drafting does); saved as config.json + pytorch_model.bin (float16).
--eval simulates greedy chain drafting on MT-Bench turn-1 questions (full recomputation) and
prints AL(K) for K=1..5 for the trained head and for a random head.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from alcheck.demo.eagle_train import EagleHead, random_head_state
from alcheck.tiny import END_TEXT, EOT, eagle_config_from_target, save_eagle_head, train_tokenizer

VOCAB = 4096
TARGET_SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=704)
SEQ = 512
MAX_NEW = 256


def log(msg: str, t0=[time.time()]) -> None:  # noqa: B006 - start time of the run
    print(f"[{time.time() - t0[0]:7.1f}s] {msg}", flush=True)


def chat_text(tok, user: str, answer: str | None = None) -> str:
    msgs = [{"role": "user", "content": user}]
    if answer is None:
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    msgs.append({"role": "assistant", "content": answer})
    return tok.apply_chat_template(msgs, tokenize=False)


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


# --------------------------------------------------------------------------------- target
def train_target(out: Path, samples, tok, args) -> None:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    rng = random.Random(args.seed)
    order = list(range(len(samples)))
    rng.shuffle(order)
    stream: list[int] = []
    for i in order:
        stream.extend(encode(tok, chat_text(tok, *samples[i])))
    n_win = len(stream) // SEQ
    data = torch.tensor(stream[: n_win * SEQ]).view(n_win, SEQ)
    log(f"target data: {len(stream)} tokens, {n_win} windows of {SEQ}")

    bos, eot, end = (tok.convert_tokens_to_ids(t) for t in (tok.bos_token, EOT, END_TEXT))
    config = LlamaConfig(
        **TARGET_SHAPE, vocab_size=len(tok), max_position_embeddings=2048, rope_theta=10000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=bos, eos_token_id=[eot, end],
        pad_token_id=end, initializer_range=0.02,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.target_lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(args.seed)
    perm, cursor = torch.randperm(n_win, generator=g), 0
    for step in range(args.target_steps):
        if cursor + args.batch > n_win:
            perm, cursor = torch.randperm(n_win, generator=g), 0
        batch = data[perm[cursor:cursor + args.batch]]
        cursor += args.batch
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.target_steps, args.target_lr, 40)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == args.target_steps - 1:
            log(f"target step {step}/{args.target_steps} loss {loss.item():.3f}")
    model.eval()
    model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(bos_token_id=bos, eos_token_id=[eot, end], pad_token_id=end,
                     do_sample=False).save_pretrained(str(out))


def load_target(path: Path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(path))
    return model, tok


@torch.no_grad()
def generate(model, tok, prompts: list[str], batch: int = 48, max_new: int = MAX_NEW) -> list[list[int]]:
    """Greedy answers (prompt + answer token ids, answer ending at EOS or max_new)."""
    eos = set(model.generation_config.eos_token_id)
    pad = tok.convert_tokens_to_ids(END_TEXT)
    enc = [encode(tok, p) for p in prompts]
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    result: list[list[int]] = [None] * len(enc)  # type: ignore[list-item]
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        width = max(len(enc[i]) for i in idx)
        ids = torch.tensor([[pad] * (width - len(enc[i])) + enc[i] for i in idx])
        mask = torch.tensor([[0] * (width - len(enc[i])) + [1] * len(enc[i]) for i in idx])
        outs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                              do_sample=False, eos_token_id=list(eos), pad_token_id=pad)
        for row, i in enumerate(idx):
            gen = outs[row, width:].tolist()
            cut = next((j + 1 for j, t in enumerate(gen) if t in eos), len(gen))
            result[i] = enc[i] + gen[:cut]
    return result


@torch.no_grad()
def features(model, seqs: list[list[int]], pad: int, batch: int = 16):
    """Per padded batch: (tokens, lengths, target features after the final norm)."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    batches = []
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        width = max(len(seqs[i]) for i in idx)
        ids = torch.tensor([seqs[i] + [pad] * (width - len(seqs[i])) for i in idx])
        lens = torch.tensor([len(seqs[i]) for i in idx])
        h = model.model(input_ids=ids).last_hidden_state  # right padding: valid rows unaffected
        batches.append((ids, lens, h))
    return batches


# ----------------------------------------------------------------------------------- head
def head_config(target_dir: Path) -> dict:
    tcfg = json.loads((target_dir / "config.json").read_text())
    cfg = eagle_config_from_target(tcfg, bias=False)
    cfg["torch_dtype"] = "float16"
    return cfg


def train_head(target_dir: Path, out: Path, model, batches, args) -> None:
    cfg = head_config(target_dir)
    embed = model.model.embed_tokens.weight.detach()
    lm_head = model.lm_head.weight.detach()
    torch.manual_seed(args.seed + 1)
    head = EagleHead(cfg, embed, lm_head)
    with torch.no_grad():  # start the residual stream near "pass the feature through"
        head.fc.weight[:, cfg["hidden_size"]:] += torch.eye(cfg["hidden_size"]) * 0.5
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.head_lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 2)
    total = args.head_epochs * len(batches)
    step = 0
    for epoch in range(args.head_epochs):
        for bi in torch.randperm(len(batches), generator=g).tolist():
            ids, lens, h = batches[bi]
            t = ids.shape[1] - 1
            valid = (torch.arange(t)[None, :] + 1 < lens[:, None]).float()  # p+1 < len
            tok_next, feat, target_h = ids[:, 1:], h[:, :-1], h[:, 1:]
            with torch.no_grad():
                target_p = torch.softmax(target_h @ lm_head.T, -1)
            noisy = feat + torch.randn(feat.shape, generator=g) * args.noise
            loss_sum, parts = 0.0, []
            outs = [head(tok_next, noisy)]
            for _ in range(args.unroll):  # chained passes: feature at p is the head's output at p-1
                prev = torch.cat((feat[:, :1], outs[-1][:, :-1]), 1)
                outs.append(head(tok_next, prev))
            for k, o in enumerate(outs):
                vloss = (F.smooth_l1_loss(o, target_h, reduction="none").mean(-1) * valid).sum()
                logp = torch.log_softmax(head.logits(o), -1)
                ploss = (-(target_p * logp).sum(-1) * valid).sum()
                w = 1.0 if k == 0 else args.unroll_weight
                loss_sum = loss_sum + w * (vloss + args.p_weight * ploss) / valid.sum()
                parts.append(ploss.item() / valid.sum().item())
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.head_lr, 20)
            loss_sum.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 50 == 0 or step == total - 1:
                log(f"head step {step}/{total} loss {loss_sum.item():.3f} ce " +
                    " ".join(f"{p:.3f}" for p in parts))
            step += 1
    save_eagle_head(out, cfg, head.eagle_state_dict(torch.float16))


# ----------------------------------------------------------------------------------- eval
def load_head(target_dir: Path, eagle_dir: Path | None, model) -> EagleHead:
    cfg = json.loads((eagle_dir / "config.json").read_text()) if eagle_dir else head_config(target_dir)
    head = EagleHead(cfg, model.model.embed_tokens.weight, model.lm_head.weight)
    if eagle_dir:
        state = torch.load(eagle_dir / "pytorch_model.bin", map_location="cpu", weights_only=True)
        head.embed.copy_(state["embed_tokens.weight"].float())
    else:
        state = random_head_state(cfg, model.model.embed_tokens.weight.detach())
    head.load_eagle_state_dict(state)
    return head.eval()


def simulate(head: EagleHead, seq: list[int], feats, prompt_len: int, eos: set, kmax: int):
    """Greedy chain drafting on the target's greedy output; per K: (steps, accepted)."""
    L = len(seq)
    starts = torch.arange(prompt_len, L)
    drafts = head.chain_all(torch.tensor(seq), feats, starts, kmax).tolist()
    res = {}
    for k in range(1, kmax + 1):
        c, steps, acc = prompt_len, 0, 0
        while c < L - 1 and seq[c] not in eos and c - prompt_len + 1 < MAX_NEW:
            d = drafts[c - prompt_len]
            a = 0
            while a < k and c + a + 1 < L and d[a] == seq[c + a + 1]:
                a += 1
            steps, acc, c = steps + 1, acc + a, c + a + 1
        res[k] = (steps, acc)
    return res


@torch.no_grad()
def evaluate(models_dir: Path, n_questions: int, kmax: int = 5) -> dict:
    from alcheck.paths import MT_BENCH_FILE

    model, tok = load_target(models_dir / "target")
    qs = [json.loads(line) for line in MT_BENCH_FILE.read_text().splitlines() if line.strip()]
    qs = qs[:: max(1, len(qs) // n_questions)][:n_questions]
    prompts = [chat_text(tok, q["turns"][0]) for q in qs]
    seqs = generate(model, tok, prompts)
    eos = set(model.generation_config.eos_token_id)
    gen_lens = [len(s) - len(encode(tok, p)) for s, p in zip(seqs, prompts)]
    ended = sum(1 for s in seqs if s[-1] in eos)
    log(f"eval: {len(qs)} questions, mean answer {sum(gen_lens) / len(gen_lens):.0f} tokens, "
        f"{ended} end with EOS")
    heads = {"trained": load_head(models_dir / "target", models_dir / "eagle", model),
             "random": load_head(models_dir / "target", None, model)}
    table = {}
    for name, head in heads.items():
        tot = {k: [0, 0] for k in range(1, kmax + 1)}
        for s, p in zip(seqs, prompts):
            feats = model.model(input_ids=torch.tensor([s])).last_hidden_state[0]
            for k, (st, ac) in simulate(head, s, feats, len(encode(tok, p)), eos, kmax).items():
                tot[k][0] += st
                tot[k][1] += ac
        table[name] = {k: 1 + ac / st for k, (st, ac) in tot.items()}
        log(f"AL {name:8s} " + "  ".join(f"K={k}: {v:.2f}" for k, v in table[name].items()))
    sample = tok.decode(seqs[0][len(encode(tok, prompts[0])):])
    log(f"sample answer to {qs[0]['question_id']}: {sample[:300]!r}")
    return table


# ----------------------------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target-steps", type=int, default=320)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--distill-prompts", type=int, default=1024)
    ap.add_argument("--corpus-head-samples", type=int, default=1536)
    ap.add_argument("--head-epochs", type=int, default=4)
    ap.add_argument("--head-lr", type=float, default=2e-3)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--p-weight", type=float, default=0.2)
    ap.add_argument("--unroll", type=int, default=1)
    ap.add_argument("--unroll-weight", type=float, default=0.5)
    ap.add_argument("--skip-target", action="store_true", help="reuse OUT/target, retrain the head")
    ap.add_argument("--eval", action="store_true", help="estimate AL(K) on MT-Bench afterwards")
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--eval-questions", type=int, default=20)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.use_deterministic_algorithms(True)
    target_dir, eagle_dir = args.out / "target", args.out / "eagle"
    if not args.eval_only:
        from alcheck.demo.corpus import samples as corpus_samples

        samples = corpus_samples()
        log(f"corpus: {len(samples)} chat samples")
        if not args.skip_target:
            texts = [t for pair in samples for t in pair]
            target_dir.mkdir(parents=True, exist_ok=True)
            tok = train_tokenizer(texts, VOCAB, target_dir)
            log(f"tokenizer: {len(tok)} tokens")
            train_target(target_dir, samples, tok, args)
        model, tok = load_target(target_dir)  # the saved (bfloat16) target, upcast as at runtime
        for p in model.parameters():
            p.requires_grad_(False)
        rng = random.Random(args.seed + 3)
        picks = rng.sample(range(len(samples)), args.distill_prompts + args.corpus_head_samples)
        prompts = [chat_text(tok, samples[i][0]) for i in picks[: args.distill_prompts]]
        seqs = generate(model, tok, prompts)
        log(f"self-distillation: {len(seqs)} answers, {sum(map(len, seqs))} tokens")
        seqs += [encode(tok, chat_text(tok, *samples[i]))[:SEQ] for i in picks[args.distill_prompts:]]
        batches = features(model, seqs, tok.convert_tokens_to_ids(END_TEXT))
        log(f"head data: {len(seqs)} sequences, {sum(map(len, seqs))} tokens")
        train_head(target_dir, eagle_dir, model, batches, args)
        log("saved " + ", ".join(str(p) for p in (target_dir, eagle_dir)))
    if args.eval or args.eval_only:
        evaluate(args.out, args.eval_questions)


if __name__ == "__main__":
    main()
