"""Train the embedded demo pair: a tiny Llama-3-style chat target and an EAGLE-1 head for it.

    python -m alcheck.demo.train --out alcheck/demo/models --seed 0 [--eval]

Stages (CPU, 2 threads; deterministic given --seed, the CPython version -- see corpus.py -- and
the torch build):
1. corpus: CPython's own documentation as (user, assistant) chat samples (alcheck.demo.corpus);
2. tokenizer: byte-level BPE, 4096 tokens, Llama-3 chat template (alcheck.testing.tiny.train_tokenizer);
3. target: LlamaForCausalLM (hidden 256, 4 layers, 4 heads / 2 KV heads, intermediate 704,
   untied lm_head) trained with AdamW for 640 steps of 8 x 512 packed chat tokens; saved by
   transformers (safetensors, bfloat16) with generation_config.json (eos = <|eot_id|>,
   <|end_of_text|>);
4. head: an EAGLE-1 head trained the EAGLE-1 way on the frozen, saved target's features over
   chat-formatted corpus samples -- SmoothL1 from the head's output at p to the target's feature
   h_{p+1} plus 0.2 x cross-entropy from the head's logits to the target's next-token
   distribution softmax(lm_head(h_{p+1})), with Gaussian noise (std 0.05) on the input features;
   saved as config.json + pytorch_model.bin (float16) with the official tensor names.
   --distill-prompts N adds the target's own greedy answers to N corpus prompts to the head's
   data (self-distillation). It is off by default: it lifts AL(5) on MT-Bench from about 2.6 to
   3.3, far above what real EAGLE-1 heads reach, whereas plain EAGLE-1 training gives a curve
   shaped like the published Llama-3.1-8B one.
--eval / --eval-only estimate AL(K) for K=1..5 on MT-Bench turn-1 questions (chat template, no
system prompt, greedy, 256 new tokens) by simulating greedy chain drafting with full
recomputation, for the trained head and for a random head (alcheck.testing.tiny's random init).
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
from alcheck.paths import DEMO_DRAFT_NAME, DEMO_TARGET_NAME
from alcheck.testing.tiny import END_TEXT, EOT, eagle_config_from_target, save_eagle_head, train_tokenizer

VOCAB = 4096
TARGET_SHAPE = dict(
    hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=704
)
SEQ = 512
MAX_NEW = 256


START = time.time()  # the run's start, for the log's elapsed seconds


def log(msg: str) -> None:
    print(f"[{time.time() - START:7.1f}s] {msg}", flush=True)


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
        **TARGET_SHAPE,
        vocab_size=len(tok),
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=[eot, end],
        pad_token_id=end,
        initializer_range=0.02,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.target_lr,
        betas=(0.9, 0.95),
    )
    g = torch.Generator().manual_seed(args.seed)
    perm, cursor = torch.randperm(n_win, generator=g), 0
    for step in range(args.target_steps):
        if cursor + args.batch > n_win:
            perm, cursor = torch.randperm(n_win, generator=g), 0
        batch = data[perm[cursor : cursor + args.batch]]
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
    GenerationConfig(
        bos_token_id=bos, eos_token_id=[eot, end], pad_token_id=end, do_sample=False
    ).save_pretrained(str(out))


def load_target(path: Path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(path))
    return model, tok


@torch.no_grad()
def generate(model, tok, prompts: list[str], batch: int = 64, max_new: int = MAX_NEW) -> list[list[int]]:
    """Greedy answers: prompt + answer token ids, the answer ending at EOS or after max_new tokens.

    A plain KV-cached loop over left-padded batches that drops finished rows as it goes.
    """
    from transformers import DynamicCache

    eos = set(model.generation_config.eos_token_id)
    pad = tok.convert_tokens_to_ids(END_TEXT)
    enc = [encode(tok, p) for p in prompts]
    order = sorted(range(len(enc)), key=lambda i: (len(enc[i]), i))
    result: list[list[int]] = [None] * len(enc)  # type: ignore[list-item]
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        width = max(len(enc[i]) for i in idx)
        ids = torch.tensor([[pad] * (width - len(enc[i])) + enc[i] for i in idx])
        mask = torch.tensor([[0] * (width - len(enc[i])) + [1] * len(enc[i]) for i in idx])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=model.config)
        logits = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits
        nxt, last = logits[:, -1].argmax(-1), pos[:, -1]
        alive = torch.arange(len(idx))
        gens: list[list[int]] = [[] for _ in idx]
        for _ in range(max_new):
            done = []
            for row, tok_id in zip(alive.tolist(), nxt.tolist()):
                gens[row].append(tok_id)
                done.append(tok_id in eos or len(gens[row]) >= max_new)
            keep = ~torch.tensor(done)
            if not keep.any():
                break
            if not keep.all():
                cache.batch_select_indices(keep.nonzero()[:, 0])
                alive, mask, nxt, last = alive[keep], mask[keep], nxt[keep], last[keep]
            mask = torch.cat((mask, torch.ones(len(alive), 1, dtype=mask.dtype)), 1)
            last = last + 1
            logits = model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=last[:, None],
                cache=cache,
                use_cache=True,
            ).logits
            nxt = logits[:, -1].argmax(-1)
        for row, i in enumerate(idx):
            result[i] = enc[i] + gens[row]
    return result


@torch.no_grad()
def features(model, seqs: list[list[int]], pad: int, batch: int = 16):
    """Per padded batch: (tokens, lengths, target features after the final norm)."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    batches = []
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
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
        head.fc.weight[:, cfg["hidden_size"] :] += torch.eye(cfg["hidden_size"]) * 0.5
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.head_lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 2)
    total = args.head_epochs * len(batches)
    step = 0
    for _epoch in range(args.head_epochs):
        for bi in torch.randperm(len(batches), generator=g).tolist():
            ids, lens, h = batches[bi]
            t = ids.shape[1] - 1
            valid = (torch.arange(t)[None, :] + 1 < lens[:, None]).float()  # p+1 < len
            tok_next, feat, target_h = ids[:, 1:], h[:, :-1], h[:, 1:]
            with torch.no_grad():
                target_p = torch.softmax(target_h @ lm_head.T, -1)
            noisy = feat + torch.randn(feat.shape, generator=g) * args.noise
            pred = head(tok_next, noisy)
            n_valid = valid.sum()
            # feature regression (SmoothL1 to h_{p+1}) + CE to the target's distribution at p+1
            vloss = (F.smooth_l1_loss(pred, target_h, reduction="none").mean(-1) * valid).sum() / n_valid
            logp = torch.log_softmax(head.logits(pred), -1)
            ploss = (-(target_p * logp).sum(-1) * valid).sum() / n_valid
            loss = vloss + args.p_weight * ploss
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.head_lr, 20)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 50 == 0 or step == total - 1:
                log(f"head step {step}/{total} smoothl1 {vloss.item():.4f} ce {ploss.item():.3f}")
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
    """Greedy chain drafting on the target's greedy output.

    Returns per K: (steps, accepted, [steps with a >= i+1 for i < K]). The prefill token is not a
    step; a step starting from committed prefix seq[:c+1] drafts K tokens, accepts the longest
    matching prefix a and emits a + 1 tokens.
    """
    L = len(seq)
    starts = torch.arange(prompt_len, L)
    drafts = head.chain_all(torch.tensor(seq), feats, starts, kmax).tolist()
    res = {}
    for k in range(1, kmax + 1):
        c, steps, acc, per_pos = prompt_len, 0, 0, [0] * k
        while c < L - 1 and seq[c] not in eos and c - prompt_len + 1 < MAX_NEW:
            d = drafts[c - prompt_len]
            a = 0
            while a < k and c + a + 1 < L and d[a] == seq[c + a + 1]:
                per_pos[a] += 1
                a += 1
            steps, acc, c = steps + 1, acc + a, c + a + 1
        res[k] = (steps, acc, per_pos)
    return res


@torch.no_grad()
def evaluate(models_dir: Path, n_questions: int, kmax: int = 5) -> dict:
    """Estimated AL(K) (pooled over steps) on MT-Bench turn 1, trained head vs random head."""
    from alcheck.paths import MT_BENCH_FILE

    model, tok = load_target(models_dir / DEMO_TARGET_NAME)
    qs = [json.loads(line) for line in MT_BENCH_FILE.read_text().splitlines() if line.strip()]
    qs = qs[:: max(1, len(qs) // n_questions)][:n_questions]
    prompts = [chat_text(tok, q["turns"][0]) for q in qs]
    t0 = time.time()
    seqs = generate(model, tok, prompts)
    eos = set(model.generation_config.eos_token_id)
    plens = [len(encode(tok, p)) for p in prompts]
    gen_lens = [len(s) - n for s, n in zip(seqs, plens)]
    ended = sum(1 for s in seqs if s[-1] in eos)
    log(
        f"eval: {len(qs)} questions, answers {sum(gen_lens) / len(gen_lens):.0f} tokens on average "
        f"(min {min(gen_lens)}, max {max(gen_lens)}), {ended} end with EOS, "
        f"{len(set(tuple(s[n:]) for s, n in zip(seqs, plens)))} "
        f"distinct; generated in {time.time() - t0:.1f}s"
    )
    heads = {
        "trained": load_head(models_dir / DEMO_TARGET_NAME, models_dir / DEMO_DRAFT_NAME, model),
        "random": load_head(models_dir / DEMO_TARGET_NAME, None, model),
    }
    feats = [model.model(input_ids=torch.tensor([s])).last_hidden_state[0] for s in seqs]
    table = {}
    for name, head in heads.items():
        tot = {k: [0, 0, [0] * k] for k in range(1, kmax + 1)}
        for s, f, n in zip(seqs, feats, plens):
            for k, (st, ac, pp) in simulate(head, s, f, n, eos, kmax).items():
                tot[k][0] += st
                tot[k][1] += ac
                tot[k][2] = [x + y for x, y in zip(tot[k][2], pp)]
        table[name] = {k: 1 + ac / st for k, (st, ac, _) in tot.items()}
        log(f"AL {name:8s} " + "  ".join(f"K={k}: {v:.2f}" for k, v in table[name].items()))
        st, _, pp = tot[kmax]
        log(f"   per-position acceptance at K={kmax}: " + " ".join(f"{x / st:.2f}" for x in pp))
    for i in range(min(3, len(qs))):
        log(f"answer to {qs[i]['question_id']}: {tok.decode(seqs[i][plens[i] :])[:240]!r}")
    return table


# ----------------------------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target-steps", type=int, default=640)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument(
        "--distill-prompts",
        type=int,
        default=0,
        help="also train the head on the target's greedy answers to this many corpus "
        "prompts (self-distillation; raises AL well above real EAGLE-1 numbers)",
    )
    ap.add_argument("--corpus-head-samples", type=int, default=2560)
    ap.add_argument("--head-epochs", type=int, default=4)
    ap.add_argument("--head-lr", type=float, default=2e-3)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--p-weight", type=float, default=0.2)
    ap.add_argument("--skip-target", action="store_true", help="reuse OUT/target, retrain the head")
    ap.add_argument("--eval", action="store_true", help="estimate AL(K) on MT-Bench afterwards")
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--eval-questions", type=int, default=80)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.use_deterministic_algorithms(True)
    target_dir, eagle_dir = args.out / DEMO_TARGET_NAME, args.out / DEMO_DRAFT_NAME
    if not args.eval_only:
        from alcheck.demo.corpus import samples as corpus_samples

        samples = corpus_samples()
        log(f"corpus: {len(samples)} chat samples")
        if not args.skip_target:
            texts = [t for pair in samples for t in pair]
            target_dir.mkdir(parents=True, exist_ok=True)
            tok = train_tokenizer(texts, VOCAB, target_dir)
            tok_cfg_file = target_dir / "tokenizer_config.json"  # the class Meta's files name,
            tok_cfg = json.loads(tok_cfg_file.read_text())  # loadable by transformers 4.x too
            tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
            tok_cfg_file.write_text(json.dumps(tok_cfg, indent=2, allow_nan=False) + "\n")
            log(f"tokenizer: {len(tok)} tokens")
            train_target(target_dir, samples, tok, args)
        model, tok = load_target(target_dir)  # the saved (bfloat16) target, upcast as at runtime
        for p in model.parameters():
            p.requires_grad_(False)
        rng = random.Random(args.seed + 3)
        picks = rng.sample(range(len(samples)), args.distill_prompts + args.corpus_head_samples)
        prompts = [chat_text(tok, samples[i][0]) for i in picks[: args.distill_prompts]]
        seqs = generate(model, tok, prompts) if prompts else []
        if prompts:
            log(f"self-distillation: {len(seqs)} answers, {sum(map(len, seqs))} tokens")
        seqs += [encode(tok, chat_text(tok, *samples[i]))[:SEQ] for i in picks[args.distill_prompts :]]
        batches = features(model, seqs, tok.convert_tokens_to_ids(END_TEXT))
        log(f"head data: {len(seqs)} sequences, {sum(map(len, seqs))} tokens")
        train_head(target_dir, eagle_dir, model, batches, args)
        for f in [*target_dir.iterdir(), *eagle_dir.iterdir()]:
            f.chmod(0o644)  # transformers writes model.safetensors 0600; package data must be readable
        log("saved " + ", ".join(str(p) for p in (target_dir, eagle_dir)))
    if args.eval or args.eval_only:
        evaluate(args.out, args.eval_questions)


if __name__ == "__main__":
    main()
