"""n-gram drafting (prompt lookup): no checkpoint, no head, no draft KV. The draft is copied from
the committed context by a matching rule (runner/proposers/ngram_rules.py): vLLM's by default,
or transformers' or Spec-Bench's (--ngram-rule), with vLLM's option names --prompt-lookup-min /
--prompt-lookup-max (methods/ngram_options.py). The target computes no draft features."""

from __future__ import annotations

from alcheck.errors import AlcheckError
from alcheck.methods.base import DraftMethod
from alcheck.methods.ngram_options import resolve_options
from alcheck.methods.suffix_options import refuse_suffix_options


class Ngram(DraftMethod):
    name = "ngram"
    title = "n-gram drafting (no checkpoint)"
    needs_checkpoint = False
    sglang_algorithm = None  # SGLang's NGRAM is another algorithm (a shared trie drafting trees)

    def check_run_config(self, cfg) -> None:
        refuse_suffix_options(cfg)
        cfg.ngram_rule, cfg.prompt_lookup_min, cfg.prompt_lookup_max = resolve_options(
            cfg.ngram_rule, cfg.prompt_lookup_min, cfg.prompt_lookup_max
        )
        if cfg.draft and not getattr(cfg, "engine", None):
            raise AlcheckError(
                f"--draft {cfg.draft} with --method ngram: n-gram drafting copies tokens from the "
                "context and needs no checkpoint: drop --draft"
            )
        if cfg.topk != 1:
            raise AlcheckError(
                f"--topk {cfg.topk} with --method ngram: n-gram drafting proposes one chain per step "
                "(vLLM's rule): drop --topk"
            )
        if cfg.draft_sampling != "onehot":
            raise AlcheckError(
                f"--draft-sampling {cfg.draft_sampling} with --method ngram: n-gram drafts are copied "
                "tokens, not samples (q is one-hot, so acceptance is the onehot rule): drop --draft-sampling"
            )

    def run_options(self, cfg) -> dict:
        return {
            "rule": cfg.ngram_rule,
            "prompt_lookup_min": cfg.prompt_lookup_min,
            "prompt_lookup_max": cfg.prompt_lookup_max,
        }

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        return None  # no head folder is ever n-gram

    def owns(self, head) -> bool:
        return False  # it has no head

    def model_free_proposer(self, options: dict, eos_ids):
        from alcheck.runner.proposers.ngram import NgramProposer
        from alcheck.runner.proposers.ngram_rules import NgramSettings

        settings = NgramSettings(options["rule"], options["prompt_lookup_min"], options["prompt_lookup_max"])
        return NgramProposer(settings, eos_ids)


NGRAM = Ngram()
