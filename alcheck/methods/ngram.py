"""n-gram drafting (prompt lookup): no checkpoint, no head, no draft KV. The draft is copied from
the committed context by a matching rule (runner/proposers/ngram_rules.py): vLLM's by default,
or transformers' or Spec-Bench's (--ngram-rule), with vLLM's option names --prompt-lookup-min /
--prompt-lookup-max (methods/ngram_options.py). The target computes no draft features."""

from __future__ import annotations

from alcheck.methods.base import DraftMethod
from alcheck.methods.model_free_checks import ModelFreeWording, refuse_head_options
from alcheck.methods.ngram_options import resolve_options
from alcheck.methods.suffix_options import refuse_suffix_options

WORDING = ModelFreeWording(
    name="ngram",
    source="n-gram drafting copies tokens from the context",
    chain="n-gram drafting proposes one chain per step (vLLM's rule)",
    drafts="n-gram drafts",
)


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
        refuse_head_options(cfg, WORDING)

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
