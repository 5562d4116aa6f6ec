"""Our EAGLE-3 layer against speculators' own model (issue 11), on the same weights.

Runs only where the optional `speculators-check` extra is installed (speculators 0.9.0 pins
transformers<=5.19 and pulls torchvision/torchaudio/openai, so it is not in `test`). Speculators
loads the tiny head from its speculators-format folder with its own loader; its training forward
(training-time test, teacher-forced tokens) must give our logits for step 0 over every row and
for the first chained step, which our runner computes with the paged cache.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("speculators.models.eagle3")

from eagle3_pair import AUX, build_pair  # noqa: E402

from alcheck.methods.table import proposer_for
from alcheck.models.eagle3_loading import load_eagle3  # noqa: E402
from alcheck.models.loading import load_target  # noqa: E402
from alcheck.runner.contiguous import _Contiguous  # noqa: E402


def test_our_layer_equals_speculators_eagle3_draft_model(tmp_path):
    from speculators.models.attention import create_float_mask
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import LlamaForCausalLM

    dirs = build_pair(tmp_path)
    spec_dir = dirs["speculators"]
    raw = json.loads((spec_dir / "config.json").read_text())
    raw["speculators_config"]["verifier"]["name_or_path"] = str(dirs["target"])  # local, no hub
    (spec_dir / "config.json").write_text(json.dumps(raw))
    theirs = Eagle3DraftModel.from_pretrained(str(spec_dir)).eval()
    theirs._attn_impl, theirs._create_mask_fn = (
        "eager",
        create_float_mask,
    )  # flex attention needs 128-row blocks
    for layer in theirs.layers:
        layer.self_attn.config._attn_implementation = "eager"
    target = load_target(str(dirs["target"]))
    ours = load_eagle3(str(spec_dir), target)

    hf = LlamaForCausalLM.from_pretrained(str(dirs["target"])).eval()
    seq = torch.randint(
        5, target.model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        states = hf(seq, output_hidden_states=True).hidden_states
        aux = torch.cat([states[i] for i in AUX], -1)[:, :-1]  # row p: the target's states at position p
        tokens = seq[:, 1:]  # row p: token x_{p+1}
        logits = []
        hook = theirs.lm_head.register_forward_hook(lambda m, i, o: logits.append(o))
        theirs(hidden_states=aux, input_ids=tokens, document_ids=torch.zeros_like(tokens), ttt_steps=2)
        hook.remove()
        rows = tokens.shape[1]
        kv = _Contiguous(target.model, proposer_for(ours), 64)
        step0 = ours.draft_logits(kv.run_draft(tokens[0].tolist(), aux[0], 0, first=True))
        torch.testing.assert_close(step0, logits[0][0], atol=2e-4, rtol=1e-4)
        for p in range(rows - 1):  # chained step: x_{p+2} with the pre-norm output at p, one position on
            kv = _Contiguous(target.model, proposer_for(ours), 64)
            y0 = kv.run_draft(tokens[0, : p + 1].tolist(), aux[0, : p + 1], 0, first=True)
            y1 = kv.run_draft([int(tokens[0, p + 1])], y0[-1:], p + 1)
            torch.testing.assert_close(ours.draft_logits(y1)[0], logits[1][0, p], atol=2e-4, rtol=1e-4)
