"""A draft language model (`--method draft_model`): any causal LM of the target table (Llama
natively, the transformers-backed families through their own modeling code), loaded as a target
is and wrapped so it is told apart from an EAGLE head.

Before any weight is read, `check_draft_lm` refuses a draft that cannot draft for this target:
an architecture alcheck does not run (or one asking for remote code), a vocabulary of another
size, or a tokenizer that maps text to other ids. vLLM drafts with the target's tokenizer, so a
draft trained on another tokenizer would propose ids that mean other text.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from alcheck.errors import AlcheckError

# what both tokenizers encode: words, digits, punctuation, code, whitespace runs and non-ASCII
PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. 1234567890 + 3.14 = ?\n"
    'def f(x):\n    return x ** 2  # squares\n\t"Quotes", (parens) [brackets] {braces} <tags/>\n'
    "Ünïcödé: café, naïve, 東京, Привет, 😀 — end."
)


class DraftLM(nn.Module):
    """The draft model: `forward(ids, batch)` -> final-norm hidden, `compute_logits`, and its own
    attention layers, whose KV the runner binds to the request's block table."""

    def __init__(self, model: nn.Module, path: Path):
        super().__init__()
        self.model = model  # LlamaTarget or HFTarget (models/targets.py)
        self.config = model.config
        self.path = Path(path)

    @property
    def attention_layers(self) -> list:
        return self.model.attention_layers

    def forward(self, input_ids, batch):
        return self.model(input_ids, batch)

    def compute_logits(self, hidden):
        return self.model.compute_logits(hidden)


def check_draft_lm(target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> list[str]:
    """Config and tokenizer checks of a draft LM against its target; notes on ignored keys."""
    from alcheck.models.compat import check_target_config
    from alcheck.models.config import auto_map_notes
    from alcheck.models.targets import find_target

    notes = check_target_config(target_raw, target_dir)
    kind = find_target(draft_raw, draft_dir, "draft")  # remote code and unknown architectures: refused
    kind.check(draft_raw, Path(draft_dir), "draft")
    notes += auto_map_notes(draft_raw, Path(draft_dir) / "config.json", "draft")
    t, d = target_raw.get("vocab_size"), draft_raw.get("vocab_size")
    if t != d:
        raise AlcheckError(
            f"draft {Path(draft_dir) / 'config.json'} has vocab_size={d} but target "
            f"{Path(target_dir) / 'config.json'} has vocab_size={t}: a draft model proposes target "
            "token ids, so it needs the target's vocabulary: pass a draft model of the target's family"
        )
    check_same_tokenizer(Path(target_dir), Path(draft_dir))
    return notes


def check_same_tokenizer(target_dir: Path, draft_dir: Path) -> None:
    """The draft's tokenizer must map text to the ids the target's does: the probe text, and
    every vocabulary entry (token -> id), are compared."""
    from alcheck.prompts.tokenizer import load_tokenizer

    if not any((draft_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        raise AlcheckError(
            f"draft {draft_dir} has no tokenizer (tokenizer.json or tokenizer.model), so alcheck cannot "
            "check that it maps text as the target's does: copy the target's tokenizer files into it "
            "if the draft was trained with that tokenizer"
        )
    target_tok = load_tokenizer(target_dir, "target")
    draft_tok = load_tokenizer(draft_dir, "draft")
    t_ids = target_tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    d_ids = draft_tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    problem = None
    if t_ids != d_ids:
        at = next((i for i, (a, b) in enumerate(zip(t_ids, d_ids)) if a != b), min(len(t_ids), len(d_ids)))
        got, want = (ids[at] if at < len(ids) else "nothing" for ids in (d_ids, t_ids))
        problem = (
            f"a probe text encodes to {len(d_ids)} ids against the target's {len(t_ids)}, and its "
            f"token {at} is id {got} where the target's is {want}"
        )
    else:
        t_vocab, d_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
        if t_vocab != d_vocab:
            diff = sorted(set(t_vocab.items()) ^ set(d_vocab.items()), key=lambda kv: (kv[1], kv[0]))
            token, index = diff[0]
            problem = (
                f"their vocabularies differ ({len(diff)} token -> id entries, "
                f"the first {token!r} -> {index} in only one of them)"
            )
    if problem:
        raise AlcheckError(
            f"draft {draft_dir}: its tokenizer maps text differently from the target's at {target_dir}: "
            f"{problem}: pass a draft model trained with the target's tokenizer"
        )


def load_draft_lm(draft_dir: Path, dtype, device) -> DraftLM:
    """The draft's weights, strictly, as a target of its architecture loads (whole: a tensor-parallel
    rank holds all of the draft, which is small beside the target)."""
    from alcheck.models.checkpoint_files import read_config
    from alcheck.models.targets import find_target

    draft_dir = Path(draft_dir)
    raw = read_config(draft_dir, "draft")
    model = find_target(raw, draft_dir, "draft").load(draft_dir, raw, dtype, device, "draft", None)
    return DraftLM(model, draft_dir).eval()


def draft_lm_bytes(draft_raw: dict, draft_dir: Path, dtype_bytes: int) -> int:
    """The draft's parameter bytes, counted on the meta device as a target of its kind is built."""
    from alcheck.models.targets import parameter_count

    return parameter_count(draft_raw, Path(draft_dir)) * dtype_bytes
