"""alcheck's paged KV behind transformers' attention registry.

transformers' attention modules project q/k/v, apply their own q/k norms and RoPE, then call
`ALL_ATTENTION_FUNCTIONS[config._attn_implementation](module, query, key, value, mask, ...)`.
Registering `paged_attention_forward` under ATTENTION_NAME makes every such module store its new
K/V through the runner's slot mapping and attend through its block table (models/attention.py),
so lookahead slots, the slot audit and tree masks work as with the native Llama target.

The runner's AttnBatch reaches the function as the `alcheck_batch` keyword: a decoder layer
passes unknown keywords through its attention module to the interface unchanged.
"""

from __future__ import annotations

import torch

from alcheck.errors import AlcheckError
from alcheck.models.attention import AttnBatch, paged_attention, store_kv

ATTENTION_NAME = "alcheck_paged"
# keywords some transformers attention modules pass that change the result (logit soft-capping,
# attention sinks, ALiBi-style biases); the table's architectures pass none of them
UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks", "position_bias")


def paged_attention_forward(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    alcheck_batch: AttnBatch | None = None,
    **kwargs,
):
    """query [1, heads, T, d], key/value [1, kv_heads, T, d] (T = every request's new tokens,
    flattened) -> ([1, T, heads, d], None), the layout transformers' eager path returns."""
    batch = alcheck_batch
    if batch is None:
        raise RuntimeError("alcheck's paged attention needs the runner's AttnBatch (alcheck_batch=...)")
    changed = [k for k in UNSUPPORTED_KWARGS if kwargs.get(k) is not None]
    if changed:  # attention this function does not compute: never silently ignored
        raise RuntimeError(
            f"alcheck's paged attention does not implement {changed} "
            f"({type(module).__name__}): add the architecture to the target table only with them"
        )
    if sliding_window is not None:
        check_inside_window(batch, sliding_window, module)
    q = query[0].transpose(0, 1)  # [T, heads, d]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    store_kv(module.k_cache, module.v_cache, k, v, batch.slot_mapping, batch.all_stored)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    out = paged_attention(q.contiguous(), module.k_cache, module.v_cache, batch, scale)
    return out.unsqueeze(0), None


def check_inside_window(batch: AttnBatch, window: int, module) -> None:
    """A windowed layer equals full causal attention while every query position is < window
    (transformers keeps key j for query i when i - j < window). Beyond it this runner would be
    wrong, so it stops. Runs are refused before loading when their positions cannot fit
    (models/targets.py, check_fits_window); this is the guard that makes the rule exact."""
    if max(batch.seq_lens) <= window:  # slot positions bound the RoPE positions: no device sync
        return
    key = ("window-max-position", window)
    if key not in batch.rope_cache:
        batch.rope_cache[key] = int(batch.positions.max()) + 1
    needed = batch.rope_cache[key]
    if needed > window:
        arch = getattr(getattr(module, "config", None), "model_type", "this model")
        raise AlcheckError(
            f"target: a {arch} layer attends through a sliding "
            f"window of {window} positions and this run reached "
            f"position {needed - 1}; the paged runner computes full "
            "causal attention, exact only inside the window: "
            f"lower --max-tokens or use shorter prompts so prompt + max_tokens + K - 1 <= {window}"
        )


def register() -> str:
    """Register the function with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention_forward)
    return ATTENTION_NAME
