"""Train the demo target's EAGLE-3 head (`alcheck-demo-eagle3`), the EAGLE-3 way.

    python -m alcheck.demo.eagle3_train --models alcheck/demo/models --seed 0
    python -m alcheck.demo.eagle3_train --probe     # what each candidate feature knows (README)

Runs after alcheck.demo.train (it needs the saved demo target). One thread, deterministic given
--seed, the CPython version (the corpus, see corpus.py) and the torch build. What is EAGLE-3
about it (EAGLE3-NOTES sections 1-4):
- features: the target's pre-norm residual streams entering layers 1, 2 and 3 (of 4), fused by
  fc; the demo target is too shallow for the default (2, L//2, L-3) = (2, 2, 1), so the config
  names its layers in `eagle_aux_hidden_state_layer_ids` (alcheck's and vLLM's convention:
  id i = the input of layer i);
- draft vocabulary: the --draft-vocab most frequent target tokens of the training answers,
  ascending (d2t[i] = id_i - i, t2d marks them), as EAGLE's trainer builds it;
- loss: training-time test over --ttt chained steps. Step 0 pairs token x_{p+1} with fc(aux_p)
  at position p; step j feeds x_{p+1+j} (teacher-forced) with the head's own PRE-norm output of
  step j-1, at position p+j, attending to the step-0 rows <= p and to its own chain, exactly as
  chained drafting does at inference. Each step's loss is the cross-entropy to the target's
  next-token distribution over the draft vocabulary, at positions whose target argmax is in it,
  weighted 0.8^j. No feature regression (EAGLE-1's SmoothL1) and no input noise.
Data: the same corpus samples the EAGLE-1 head is trained on (the first --samples of its picks),
chat-formatted, capped at --max-len tokens. Saved as config.json + pytorch_model.bin (float16)
with the EAGLE repo's tensor names and no embedding copy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from alcheck.paths import DEMO_EAGLE3_NAME, DEMO_TARGET_NAME
from alcheck.testing.tiny import END_TEXT, eagle3_config_from_target, eagle3_vocab_tensors, save_eagle3_head

AUX_LAYERS = (1, 2, 3)
LAYER_TENSORS = {  # EAGLE repo name -> attribute of Eagle3Trainee
    "fc.weight": "fc.weight",
    "midlayer.self_attn.q_proj.weight": "q_proj.weight",
    "midlayer.self_attn.k_proj.weight": "k_proj.weight",
    "midlayer.self_attn.v_proj.weight": "v_proj.weight",
    "midlayer.self_attn.o_proj.weight": "o_proj.weight",
    "midlayer.mlp.gate_proj.weight": "gate_proj.weight",
    "midlayer.mlp.up_proj.weight": "up_proj.weight",
    "midlayer.mlp.down_proj.weight": "down_proj.weight",
    "midlayer.input_layernorm.weight": "input_layernorm",
    "midlayer.hidden_norm.weight": "hidden_norm",
    "midlayer.post_attention_layernorm.weight": "post_attention_layernorm",
    "norm.weight": "norm",
    "lm_head.weight": "lm_head.weight",
}


START = time.time()  # the run's start, for the log's elapsed seconds


def log(msg: str) -> None:
    print(f"[{time.time() - START:7.1f}s] {msg}", flush=True)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Eagle3Trainee(nn.Module):
    """The runtime layer (alcheck.models.eagle3) written densely for batched training-time test."""

    def __init__(self, cfg: dict, embed_weight: torch.Tensor):
        super().__init__()
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.n_heads, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = h // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        self.register_buffer("embed", embed_weight.detach().float().clone(), persistent=False)
        theta = cfg.get("rope_theta", 10000.0)
        inv = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.fc = nn.Linear(3 * h, h, bias=False)
        self.q_proj = nn.Linear(2 * h, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * h, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * h, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.hidden_norm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.norm = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Linear(h, cfg["draft_vocab_size"], bias=False)

    def rms(self, x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def rope(self, x, pos):  # x [B, heads, T, d]; pos [T]
        freqs = pos.float()[:, None] * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), -1)
        return x * emb.cos() + _rotate_half(x) * emb.sin()

    def qkv(self, tokens, hidden, pos):
        b, t = tokens.shape
        h_norm = self.rms(hidden, self.hidden_norm)
        x = torch.cat((self.rms(F.embedding(tokens, self.embed), self.input_layernorm), h_norm), -1)
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        rep = self.n_heads // self.n_kv
        return self.rope(q, pos), self.rope(k, pos).repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def finish(self, hidden, attn):
        b, _, t, _ = attn.shape
        y = hidden + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        z = self.rms(y, self.post_attention_layernorm)
        return y + self.down_proj(F.silu(self.gate_proj(z)) * self.up_proj(z))

    def logits(self, y):
        return self.lm_head(self.rms(y, self.norm))

    def ttt(self, tokens, aux, steps: int):
        """tokens [B, T]: x_{p+1} at row p (padded past each length); aux [B, T, 3H]: the target's
        states at position p. Returns the draft logits of every chained step j, [B, T, Vd] each;
        row p of step j drafts the token at position p + j + 2."""
        b, t = tokens.shape
        pos = torch.arange(t)
        hidden = self.fc(aux)
        q, k0, v0 = self.qkv(tokens, hidden, pos)
        scale = 1.0 / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        s0 = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
        y = self.finish(hidden, torch.softmax(s0, -1) @ v0)
        out, diag_k, diag_v = [self.logits(y)], [], []
        for j in range(1, steps):
            shifted = torch.cat((tokens[:, j:], tokens.new_zeros(b, j)), 1)  # x_{p+1+j}
            q, k, v = self.qkv(shifted, y, pos + j)
            diag_k.append(k)
            diag_v.append(v)
            s0 = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # step-0 rows <= p
            sd = torch.stack([(q * kk).sum(-1) * scale for kk in diag_k], -1)  # its own chain, [B, h, T, j]
            p = torch.softmax(torch.cat((s0, sd), -1), -1)
            attn = p[..., :t] @ v0 + (p[..., t:, None] * torch.stack(diag_v, -2)).sum(-2)
            y = self.finish(y, attn)
            out.append(self.logits(y))
        return out

    def eagle_state_dict(self, dtype=torch.float16) -> dict[str, torch.Tensor]:
        own = dict(self.named_parameters())
        return {name: own[attr].detach().to(dtype).clone() for name, attr in LAYER_TENSORS.items()}


@torch.no_grad()
def target_data(model, seqs: list[list[int]], pad: int, batch: int):
    """Per padded batch: (tokens, lengths, aux states of AUX_LAYERS, final-norm hidden), float16."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out = []
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        width = max(len(seqs[i]) for i in idx)
        ids = torch.tensor([seqs[i] + [pad] * (width - len(seqs[i])) for i in idx])
        res = model.model(input_ids=ids, output_hidden_states=True)  # right padding: valid rows unaffected
        aux = torch.cat([res.hidden_states[i] for i in AUX_LAYERS], -1)  # entry i < L: the input of layer i
        out.append((ids, torch.tensor([len(seqs[i]) for i in idx]), aux.half(), res.last_hidden_state.half()))
    return out


def draft_vocabulary(seqs: list[list[int]], prompt_lens: list[int], size: int) -> list[int]:
    """The `size` most frequent tokens of the answers (ties: lower id first), ascending."""
    counts = Counter(t for s, n in zip(seqs, prompt_lens) for t in s[n:])
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
    return sorted(ranked)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


def train(head: Eagle3Trainee, batches, lm_head_t, keep: torch.Tensor, args) -> None:
    in_vocab = torch.zeros(lm_head_t.shape[0], dtype=torch.bool)
    in_vocab[keep] = True
    lm_draft = lm_head_t[keep]
    params = list(head.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 2)
    total, step = args.epochs * len(batches), 0
    for _ in range(args.epochs):
        for bi in torch.randperm(len(batches), generator=g).tolist():
            ids, lens, aux, final = batches[bi]
            final = final.float()
            with torch.no_grad():  # soft labels: the target's distribution over the draft vocabulary
                target_p = torch.softmax(final @ lm_draft.T, -1)
                ok = in_vocab[
                    (final @ lm_head_t.T).argmax(-1)
                ]  # EAGLE: only where the target's token is draftable
            logits = head.ttt(ids[:, 1:], aux[:, :-1].float(), args.ttt)
            t = ids.shape[1] - 1
            loss, parts = 0.0, []
            for j, lg in enumerate(logits):
                # row p, step j predicts position p+j+2, whose distribution is target_p[p+j+1]
                span = t - j
                valid = ((torch.arange(span)[None] + j + 2) < lens[:, None]) & ok[:, j + 1 : j + 1 + span]
                ce = -(target_p[:, j + 1 : j + 1 + span] * torch.log_softmax(lg[:, :span], -1)).sum(-1)
                part = (ce * valid).sum() / valid.sum().clamp_min(1)
                loss = loss + 0.8**j * part
                parts.append(part.item())
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.lr, 20)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 25 == 0 or step == total - 1:
                log(f"step {step}/{total} ce per TTT step " + " ".join(f"{x:.3f}" for x in parts))
            step += 1


@torch.no_grad()
def probe_features(models_dir: Path, num_questions: int = 80) -> dict[str, float]:
    """How much of the target's next-token decision each feature carries: the target's greedy
    answers to MT-Bench turn 1 (256 tokens), then its own final norm + lm_head applied to the
    state entering each layer (a logit lens); top-1 agreement with its actual next token.
    EAGLE-1 reads the final state (agreement 1 by definition), EAGLE-3 the states it names."""
    from alcheck.demo.train import MAX_NEW, chat_text, generate, load_target
    from alcheck.paths import MT_BENCH_FILE

    model, tok = load_target(models_dir / DEMO_TARGET_NAME)
    questions = [json.loads(line) for line in MT_BENCH_FILE.read_text().splitlines() if line.strip()][
        :num_questions
    ]
    prompts = [chat_text(tok, q["turns"][0]) for q in questions]
    seqs = generate(model, tok, prompts, max_new=MAX_NEW)
    agree, total = Counter(), 0
    for prompt, seq in zip(prompts, seqs):
        n = len(tok(prompt, add_special_tokens=False)["input_ids"])
        out = model(input_ids=torch.tensor([seq]), output_hidden_states=True)
        chosen = out.logits[0, n - 1 : -1].argmax(-1)
        for i in range(model.config.num_hidden_layers):  # entry i: the input of layer i
            lens = model.lm_head(model.model.norm(out.hidden_states[i][0, n - 1 : -1])).argmax(-1)
            agree[f"input of layer {i}"] += int((lens == chosen).sum())
        total += len(chosen)
    result = {name: count / total for name, count in agree.items()}
    log(
        f"logit-lens top-1 agreement with the target's next token over {total} answer tokens: "
        + ", ".join(f"{k}: {v:.3f}" for k, v in result.items())
        + ", final state: 1 by definition"
    )
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=Path, default=Path(__file__).parent / "models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--samples", type=int, default=2560, help="corpus samples (the EAGLE-1 head's first picks)"
    )
    ap.add_argument(
        "--eagle1-samples", type=int, default=2560, help="how many the EAGLE-1 head picked (train.py)"
    )
    ap.add_argument("--max-len", type=int, default=384)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--ttt", type=int, default=4, help="training-time-test steps")
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--probe", action="store_true", help="only measure the features' logit-lens agreement")
    args = ap.parse_args(argv)
    if args.probe:
        torch.set_num_threads(args.threads)
        probe_features(args.models)
        return

    from alcheck.demo.corpus import samples as corpus_samples
    from alcheck.demo.train import chat_text, encode, load_target

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.use_deterministic_algorithms(True)
    target_dir, out = args.models / DEMO_TARGET_NAME, args.models / DEMO_EAGLE3_NAME
    model, tok = load_target(target_dir)
    for p in model.parameters():
        p.requires_grad_(False)
    samples = corpus_samples()
    picks = random.Random(args.seed + 3).sample(range(len(samples)), args.eagle1_samples)[: args.samples]
    seqs = [encode(tok, chat_text(tok, *samples[i]))[: args.max_len] for i in picks]
    prompt_lens = [len(encode(tok, chat_text(tok, samples[i][0]))) for i in picks]
    keep = draft_vocabulary(seqs, prompt_lens, args.draft_vocab)
    answer_tokens = [t for s, n in zip(seqs, prompt_lens) for t in s[n:]]
    covered = sum(t in set(keep) for t in answer_tokens) / max(1, len(answer_tokens))
    log(
        f"{len(seqs)} sequences, {sum(map(len, seqs))} tokens; draft vocabulary {len(keep)} of {len(tok)} "
        f"covers {covered:.1%} of answer tokens"
    )
    batches = target_data(model, seqs, tok.convert_tokens_to_ids(END_TEXT), args.batch)
    log(f"target features for {len(batches)} batches")
    tcfg = json.loads((target_dir / "config.json").read_text())
    cfg = eagle3_config_from_target(tcfg, draft_vocab_size=len(keep), aux_layer_ids=AUX_LAYERS, aux_key="top")
    cfg["torch_dtype"] = "float16"
    torch.manual_seed(args.seed + 1)
    head = Eagle3Trainee(cfg, model.model.embed_tokens.weight)
    keep_t = torch.tensor(keep)
    with torch.no_grad():  # start from the target's own output head and "pass the top state through"
        head.lm_head.weight.copy_(model.lm_head.weight[keep_t])
        head.fc.weight[:, 2 * cfg["hidden_size"] :] += torch.eye(cfg["hidden_size"]) * 0.5
    train(head, batches, model.lm_head.weight.detach(), keep_t, args)
    state = head.eagle_state_dict(torch.float16)
    state.update(eagle3_vocab_tensors(keep, cfg["vocab_size"]))
    save_eagle3_head(out, cfg, state, fmt="eagle-repo")
    for f in out.iterdir():
        f.chmod(0o644)
    log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 2**20:.1f} MB)")


if __name__ == "__main__":
    main()
