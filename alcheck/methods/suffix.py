"""Suffix decoding (arctic-inference's SuffixDecodingCache, vLLM's `{"method": "suffix"}`): no
checkpoint, no head, no draft KV. Drafts come from suffix trees of the request's own prompt and
response and of a global tree of responses (runner/proposers/suffix_cache.py), with vLLM's option
names --suffix-decoding-max-tree-depth, -max-cached-requests, -max-spec-factor, -min-token-prob
(methods/suffix_options.py). K is vLLM's num_speculative_tokens: the most a step may draft.

The global tree makes a request's drafts depend on the requests before and beside it. Here it
starts empty at each pass (one K, repeat and turn: one runner generate() call), so a pass's rows
depend on its own requests and their order only: that order is recorded per cell in run.json
(`request_order`), and --suffix-decoding-max-cached-requests 0 turns the global tree off."""

from __future__ import annotations

from alcheck.errors import AlcheckError
from alcheck.methods.base import DraftMethod
from alcheck.methods.model_free_checks import ModelFreeWording, refuse_head_options
from alcheck.methods.ngram_options import refuse_ngram_options
from alcheck.methods.suffix_options import options_of, resolve_options

WORDING = ModelFreeWording(
    name="suffix",
    source="suffix decoding drafts from suffix trees of the prompts and responses",
    chain="alcheck drafts suffix decoding's best chain per step (vLLM's proposer)",
    drafts="suffix drafts",
)


class Suffix(DraftMethod):
    name = "suffix"
    title = "suffix decoding (no checkpoint)"
    needs_checkpoint = False
    history_across_requests = True

    def check_run_config(self, cfg) -> None:
        refuse_ngram_options(cfg)
        resolve_options(cfg)
        if getattr(cfg, "engine", None):
            raise AlcheckError(
                f"--engine {cfg.engine} with --method suffix: alcheck cannot yet check a suffix server's "
                "counts against the rule (its steps would be vLLM's drafted steps): measure the "
                "built-in runner, drop --engine"
            )
        refuse_head_options(cfg, WORDING)

    def run_options(self, cfg) -> dict:
        return options_of(cfg)

    def history(self, cfg) -> str:
        if cfg.suffix_decoding_max_cached_requests == 0:
            return (
                "suffix decoding with the global tree off (--suffix-decoding-max-cached-requests 0): "
                "each request drafts from its own prompt and response only; rows do not depend on "
                "request order"
            )
        return (
            "suffix decoding's global tree of responses starts empty at each pass (one K, repeat and "
            "turn) and takes each request's tokens as they are committed, requests in each cell's "
            f"request_order, up to --max-batch-size {cfg.max_batch_size} running at once: rows depend "
            "on that order (--suffix-decoding-max-cached-requests 0 turns the tree off)"
        )

    def detect(self, config: dict, tensor_names: set[str]) -> str | None:
        return None  # no head folder is ever suffix decoding

    def owns(self, head) -> bool:
        return False  # it has no head

    def model_free_proposer(self, options: dict, eos_ids):
        from alcheck.runner.proposers.suffix import SuffixProposer
        from alcheck.runner.proposers.suffix_cache import SuffixOptions

        return SuffixProposer(SuffixOptions(**options))


SUFFIX = Suffix()
