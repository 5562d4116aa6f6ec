"""Build and train the demo MTP target (`alcheck-demo-mimo`, `--method mtp` with no --target).

    python -m alcheck.demo.mtp_train --models alcheck/demo/models --seed 0 [--eval]

Runs after alcheck.demo.train (it needs the saved demo target). One thread, deterministic given
--seed, the CPython version (the corpus, see corpus.py) and the torch build.
- trunk: the demo Llama target rewritten in MiMo's format: a Qwen2 of the same shape (Llama's and
  Qwen2's tensor names agree; Qwen2's q/k/v biases are zero, so it computes what the Llama does),
  config.json with architectures ["MiMoForCausalLM"] and num_nextn_predict_layers 1;
- MTP layer `model.mtp_layers.0.*`: a Qwen2 decoder layer started from the trunk's last layer,
  input_proj from [I | I] / 2, final_layernorm from the trunk's final norm; trained with the trunk
  frozen;
- data: the target's greedy answers to --distill-prompts corpus prompts, then chat-formatted corpus
  samples (as draft_train.py);
- loss: cross-entropy to the trunk's distribution one token further (row p sees the trunk's
  last-layer state h_p and token x_{p+1}, and learns the trunk's prediction of x_{p+2}).
--eval measures AL(K) on MT-Bench turn 1 with alcheck's paged runner, trained vs initial.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch
from torch import nn

from alcheck.demo.draft_train import batches_of, deterministic, log, lr_at, trainer_parser
from alcheck.paths import DEMO_MTP_NAME, DEMO_TARGET_NAME

COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def mimo_config(target_dir: Path) -> dict:
    """The trunk's config.json in MiMo's format (model_type qwen2, as vLLM's CPU build serves it)."""
    t = json.loads((target_dir / "config.json").read_text())
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "num_hidden_layers", "vocab_size", "max_position_embeddings", "rms_norm_eps", "bos_token_id",
            "eos_token_id", "pad_token_id", "tie_word_embeddings", "hidden_act")  # fmt: skip
    theta = (t.get("rope_parameters") or {}).get("rope_theta") or t.get("rope_theta", 10000.0)
    return {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        **{k: t[k] for k in keep},
        "rope_theta": theta,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": t["num_hidden_layers"],
        "attention_dropout": 0.0,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
    }


class MTPTrainLayer(nn.Module):
    """The MTP layer as it trains: whole sequences, causal attention (transformers' sdpa)."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.qwen2.modeling_qwen2 import (
            Qwen2DecoderLayer,
            Qwen2RMSNorm,
            Qwen2RotaryEmbedding,
        )

        h, eps = config.hidden_size, config.rms_norm_eps
        self.token_layernorm = Qwen2RMSNorm(h, eps=eps)
        self.hidden_layernorm = Qwen2RMSNorm(h, eps=eps)
        self.input_proj = nn.Linear(2 * h, h, bias=False)
        self.block = Qwen2DecoderLayer(config, layer_idx=0)
        self.final_layernorm = Qwen2RMSNorm(h, eps=eps)
        self.rotary = Qwen2RotaryEmbedding(config=config)

    def forward(self, hidden, embeds):
        """hidden, embeds [B, T, H] (row p: h_p and embed(x_{p+1})) -> final-norm outputs [B, T, H]."""
        positions = torch.arange(hidden.shape[1])[None].expand(hidden.shape[0], -1)
        embeds = torch.where(positions[..., None] == 0, torch.zeros_like(embeds), embeds)
        x = self.input_proj(torch.cat([self.hidden_layernorm(hidden), self.token_layernorm(embeds)], -1))
        out = self.block(x, attention_mask=None, position_embeddings=self.rotary(x, positions))
        return self.final_layernorm(out[0] if isinstance(out, tuple) else out)

    def state_for_checkpoint(self) -> dict[str, torch.Tensor]:
        """model.mtp_layers.0.*: the decoder layer's tensors at the layer's own level."""
        out = {}
        for name, t in self.state_dict().items():
            if name.startswith("rotary."):
                continue
            out["model.mtp_layers.0." + name.removeprefix("block.")] = t
        return out


def trunk_qwen2(target, config: dict):
    """The demo Llama's weights in a Qwen2ForCausalLM (zero q/k/v biases)."""
    import transformers

    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    cfg = transformers.Qwen2Config(**fields)
    cfg._attn_implementation = "sdpa"
    model = transformers.Qwen2ForCausalLM(cfg)
    state = {k: v for k, v in target.state_dict().items() if "rotary" not in k}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(m.endswith("_proj.bias") for m in missing), (missing, unexpected)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.zero_()
    return model.eval(), cfg


def initial_layer(trunk, cfg, seed: int) -> MTPTrainLayer:
    torch.manual_seed(seed + 1)
    layer = MTPTrainLayer(cfg)
    h = cfg.hidden_size
    with torch.no_grad():
        layer.block.load_state_dict(trunk.model.layers[-1].state_dict())
        layer.final_layernorm.weight.copy_(trunk.model.norm.weight)
        layer.input_proj.weight.copy_(torch.cat([torch.eye(h), torch.eye(h)], 1) / 2)
    return layer


@torch.no_grad()
def trunk_pass(trunk, ids):
    """(last layer's output before the final norm [B, T, H], next-token probabilities [B, T, V])."""
    seen = {}
    hook = trunk.model.layers[-1].register_forward_hook(
        lambda m, i, o: seen.update(h=o[0] if isinstance(o, tuple) else o)
    )
    logits = trunk(input_ids=ids).logits
    hook.remove()
    return seen["h"], torch.softmax(logits, -1)


def train(layer, trunk, batches, args) -> None:
    params = [p for p in layer.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 2)
    total, step = args.epochs * len(batches), 0
    embed = trunk.model.embed_tokens
    layer.train()
    for _ in range(args.epochs):
        for bi in torch.randperm(len(batches), generator=g).tolist():
            ids, valid = batches[bi]  # valid[:, p]: token p+1 exists
            hidden, probs = trunk_pass(trunk, ids)
            out = layer(hidden[:, :-1], embed(ids[:, 1:]).detach())  # row p: h_p, x_{p+1}
            logp = torch.log_softmax(trunk.lm_head(out), -1)
            loss = (-(probs[:, 1:] * logp).sum(-1) * valid).sum() / valid.sum()  # the trunk's x_{p+2}
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.lr, 20)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 25 == 0 or step == total - 1:
                log(f"step {step}/{total} soft ce {loss.item():.3f}")
            step += 1
    layer.eval()


def save_mimo(trunk, layer, config: dict, target_dir: Path, out: Path) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in trunk.state_dict().items() if "rotary" not in k}
    state.update(layer.state_for_checkpoint())
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sorted(state.items())}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False) + "\n")
    for name in COPIED:
        if (target_dir / name).is_file():
            shutil.copyfile(target_dir / name, out / name)
    for f in out.iterdir():
        f.chmod(0o644)
    return out


def measure_al(folder: Path, num_questions: int, k: int, max_new: int) -> float:
    """AL(k) pooled over steps, greedy, MT-Bench turn 1, through alcheck's paged runner."""
    from alcheck.methods.mtp import MTP_METHOD
    from alcheck.models.loading import load_target
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    target = load_target(str(folder))
    head = MTP_METHOD.load(folder, target, torch.float32, "cpu")
    protocol = get_protocol("vllm-example")
    prompts = [
        build_prompt_ids(target.tokenizer, protocol, q.turns[:1])
        for q in load_questions("mt_bench", num_questions)
    ]
    runner = PagedRunner(
        target.model, MTP_METHOD.proposer(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=k)
    )
    results = runner.generate(prompts, max_new)
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps


def main(argv=None) -> None:
    ap = trainer_parser(
        __doc__.split("\n")[0],
        distill_prompts=512,
        samples=512,
        samples_help="chat-formatted corpus samples",
        lr=2e-3,
    )
    args = ap.parse_args(argv)

    from alcheck.demo.corpus import samples as corpus_samples
    from alcheck.demo.train import chat_text, encode, generate, load_target
    from alcheck.testing.tiny import END_TEXT

    deterministic(args.threads)
    target_dir, out = args.models / DEMO_TARGET_NAME, args.models / DEMO_MTP_NAME
    config = mimo_config(target_dir)
    target, tok = load_target(target_dir)
    trunk, cfg = trunk_qwen2(target, config)
    for p in trunk.parameters():
        p.requires_grad_(False)
    if not args.eval_only:
        samples = corpus_samples()
        picks = random.Random(args.seed + 3).sample(range(len(samples)), args.eagle1_samples)
        rest = sorted(set(range(len(samples))) - set(picks))  # prompts the heads were not trained on
        asked = random.Random(args.seed + 5).sample(rest, args.distill_prompts)
        seqs = generate(target, tok, [chat_text(tok, samples[i][0]) for i in asked]) if asked else []
        log(f"distillation: {len(seqs)} target answers, {sum(map(len, seqs))} tokens")
        seqs = [s[: args.max_len] for s in seqs]
        seqs += [encode(tok, chat_text(tok, *samples[i]))[: args.max_len] for i in picks[: args.samples]]
        batches = batches_of(seqs, tok.convert_tokens_to_ids(END_TEXT), args.batch)
        log(f"data: {len(seqs)} sequences, {sum(map(len, seqs))} tokens, {len(batches)} batches")
        layer = initial_layer(trunk, cfg, args.seed)
        train(layer, trunk, batches, args)
        save_mimo(trunk, layer, config, target_dir, out)
        log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 2**20:.1f} MB)")
    if args.eval or args.eval_only:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            start_layer = initial_layer(trunk, cfg, args.seed)
            initial = save_mimo(trunk, start_layer, config, target_dir, Path(tmp) / "i")
            for k in range(1, 6):
                trained = measure_al(out, args.eval_questions, k, 256)
                start = measure_al(initial, args.eval_questions, k, 256)
                log(
                    f"AL(K={k}) on {args.eval_questions} MT-Bench questions: "
                    f"trained {trained:.3f}, initial {start:.3f}"
                )


if __name__ == "__main__":
    main()
