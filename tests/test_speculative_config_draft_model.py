"""`run --speculative-config` with vLLM's draft-model JSON (issue 35, the fourth of vLLM's examples
beside EAGLE, EAGLE-3 and n-gram): with "method": "draft_model", and without a method, as vLLM's own
example writes it (the method is then detected from the model's files), it is the same run as the
flags give."""

from __future__ import annotations

import pytest
from test_speculative_config import same_run

from alcheck import paths


@pytest.mark.parametrize("method", [{"method": "draft_model"}, {}], ids=["draft_model", "no-method"])
def test_vllms_draft_model_json_is_the_same_run_as_the_flags(tmp_path, method):
    draft = str(paths.DEMO_DRAFT_LM_DIR)
    spec = {**method, "model": draft, "num_speculative_tokens": 2}
    flags = ["--method", "draft_model", "--draft", draft, "--ks", "2"]
    same_run(tmp_path, spec, flags, target=str(paths.DEMO_TARGET_DIR))
