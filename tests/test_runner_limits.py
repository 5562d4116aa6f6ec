"""A KV pool too small for one request fails with a clear error instead of preempting forever."""

from __future__ import annotations

import pytest
from conftest import run_spec

from alcheck.errors import AlcheckError


def test_a_request_that_cannot_take_a_step_is_an_error_not_a_loop(pair):
    target, head = pair
    # block size 4: admission takes cdiv(8 + 3, 4) = 3 blocks, the first step needs cdiv(8 + 1 + 3 + 3, 4) = 4
    with pytest.raises(AlcheckError, match="KV cache too small"):
        run_spec(target.model, head, target.eos_token_ids, [list(range(5, 13))], k=3, num_blocks=4)


def test_a_request_that_cannot_be_admitted_is_an_error(pair):
    target, head = pair
    with pytest.raises(AlcheckError, match="KV cache too small"):
        run_spec(target.model, head, target.eos_token_ids, [list(range(5, 40))], k=3, num_blocks=4)
