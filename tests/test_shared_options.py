"""`alcheck run` and `alcheck serve` check the options they share with one set of functions
(alcheck/options.py): the same bad value gets the same one-line message from both."""

from __future__ import annotations

import pytest

from alcheck.config import RunConfig
from alcheck.errors import AlcheckError
from alcheck.serve.config import ServeConfig

BAD = [
    ("dtype", "half", "--dtype half: use auto, float32, float16 or bfloat16"),
    ("device", "gpu0", "--device gpu0: use auto, cpu, cuda or cuda:N (N the GPU's index)"),
    ("device", "cuda:x", "--device cuda:x: use auto, cpu, cuda or cuda:N"),
    ("method", "hydra", "--method hydra: use one of auto, draft_model, eagle, eagle3, medusa, mtp"),
    ("draft_sampling", "greedy", "--draft-sampling greedy: use one of onehot, sampled"),
    ("max_batch_size", 0, "--max-batch-size 0: must be an integer >= 1"),
    ("max_batch_size", True, "--max-batch-size True: must be an integer >= 1"),
    ("block_size", -4, "--block-size -4: must be an integer >= 1"),
    ("block_size", 2.5, "--block-size 2.5: must be an integer >= 1"),
]


def message(make) -> str:
    with pytest.raises(AlcheckError) as err:
        make()
    return err.value.message


@pytest.mark.parametrize("field, value, needle", BAD)
def test_run_and_serve_refuse_a_bad_value_alike(field, value, needle):
    run = message(lambda: RunConfig(target="t", draft="d", **{field: value}))
    serve = message(lambda: ServeConfig(target="t", draft="d", k=2, **{field: value}))
    assert run == serve and run.startswith(needle), (run, serve)


@pytest.mark.parametrize(
    "field, value",
    [
        ("device", "cuda:1"),
        ("dtype", "bfloat16"),
        ("method", "eagle3"),
        ("device", "auto"),
        ("block_size", 4),
    ],
)
def test_both_take_the_same_good_values(field, value):
    RunConfig(target="t", draft="d", **{field: value})
    ServeConfig(target="t", draft="d", k=2, **{field: value})
