"""Suffix decoding's rule (runner/proposers/suffix_tree.py, suffix_cache.py): exact drafts worked
out by hand, and an independent brute-force rule (substring counts recounted from the sequences
on every call) that must agree wherever its answer does not hang on a tie."""

from __future__ import annotations

import random

import pytest

from alcheck.runner.proposers.suffix_cache import SuffixCache, SuffixOptions
from alcheck.runner.proposers.suffix_tree import SuffixTree, f32


def tree_of(depth, *seqs):
    tree = SuffixTree(depth)
    for seq_id, seq in enumerate(seqs):
        tree.extend(seq_id, seq)
    return tree


SEQ = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]


def test_the_longer_match_drafts_further_and_wins():
    # [2] occurs 3 times, followed by 3 twice: a 1-token match may draft 1 token (factor 1), 3 at 2/3.
    # [1, 2] (3 times) may draft 2: 3 at 2/3, then "1 2 3" goes on to 4 or 5 (1 each of 3): 1/3.
    d = tree_of(24, SEQ).speculate(SEQ, 5)
    assert d.token_ids == [3, 4]
    assert d.probs == [f32(2 / 3), f32(1 / 3)]
    assert d.score == f32(f32(2 / 3) + f32(1 / 3))
    assert d.match_len == 2


def test_min_token_prob_stops_the_chain_and_ties_go_to_the_longer_match():
    d = tree_of(24, SEQ).speculate(SEQ, 5, min_token_prob=0.5)
    assert d.token_ids == [3]  # 4 at 1/3 < 0.5; match lengths 1 and 2 both score 2/3: the longer wins
    assert d.match_len == 2


def test_the_caps_spec_factor_max_tokens_and_depth():
    tree = tree_of(24, SEQ)
    assert tree.speculate(SEQ, 5, max_spec_factor=0.0).token_ids == []
    assert tree.speculate(SEQ, 1).token_ids == [3]
    assert tree.speculate(SEQ, 0).token_ids == []
    # depth 2: nodes hold at most 2 tokens, so a 1-token match can only see one more
    assert tree_of(2, SEQ).speculate(SEQ[-2:], 5, max_spec_factor=4.0).token_ids == [3]
    # the whole context is never a match length: a 1-token context drafts nothing
    assert tree.speculate([2], 5).token_ids == []


def test_no_match_no_draft():
    assert tree_of(24, SEQ).speculate([7, 8], 5).token_ids == []


def test_equal_counts_follow_arctics_sibling_order_not_token_ids_or_recency():
    # children of 9 are put in as 1, 2, 3; then 3 and 2 are seen again (count 2 each). 3, not the
    # first of its count, moves to the front; 2 (not first either) goes behind 3: 3 is drafted.
    t1 = tree_of(24, [9, 1, 9, 2, 9, 3, 9, 3, 9, 2, 9])
    assert t1.speculate([7, 9], 5).token_ids == [3]
    # put in as 3, 2, 1; then 1 then 2 again: 1 leads, 2 behind it
    t2 = tree_of(24, [9, 3, 9, 2, 9, 1, 9, 1, 9, 2, 9])
    assert t2.speculate([7, 9], 5).token_ids == [1]


def test_removing_a_sequence_takes_its_counts_out():
    tree = tree_of(24, [9, 1, 9, 1], [9, 2, 9, 2, 9, 2])
    assert tree.speculate([7, 9], 5).token_ids == [2]  # 2 follows 9 three times, 1 twice
    tree.remove(1)
    assert tree.speculate([7, 9], 5).token_ids == [1]
    tree.remove(0)
    assert tree.speculate([7, 9], 5).token_ids == []
    assert tree.num_seqs == 0


# -- the cache: which tree holds what, and the FIFO global tree --------------------------------


def run_request(cache, req, prompt, response):
    cache.start(req, prompt)
    cache.commit(req, response)
    cache.stop(req)


def test_a_requests_prompt_and_response_draft_for_itself():
    cache = SuffixCache(SuffixOptions(max_cached_requests=0))
    cache.start("a", [5, 6, 7, 8])
    cache.commit("a", [5, 6])
    assert cache.draft("a", 3).token_ids == [7, 8]  # "5 6" matched in the prompt, 2 tokens at most


def test_the_global_tree_holds_past_responses_fifo_and_zero_turns_it_off():
    past = [40, 41, 42, 43]
    # "new" takes a place when it starts: with room for 2, starting it evicts "old"
    for cached, expected in ((0, []), (1, []), (2, []), (3, [42, 43])):
        cache = SuffixCache(SuffixOptions(max_cached_requests=cached))
        run_request(cache, "old", [1], past)
        run_request(cache, "other", [2], [50, 51])
        cache.start("new", [3, 40, 41])
        assert cache.draft("new", 2).token_ids == expected, cached
        assert len(cache.cached) == min(cached, 3)


def test_a_running_requests_response_is_global_at_once():
    cache = SuffixCache(SuffixOptions())
    cache.start("a", [1])
    cache.start("b", [2])
    cache.commit("a", [60, 61, 62, 63])
    cache.commit("b", [60, 61])
    assert cache.draft("b", 4).token_ids == [62, 63]  # from a's response, a still running


def test_options_problems_name_each_bad_value():
    assert SuffixOptions().problems() == []
    bad = SuffixOptions(max_tree_depth=0, max_cached_requests=-1, max_spec_factor=-0.5, min_token_prob=1.5)
    assert [p.split(":")[0] for p in bad.problems()] == [
        "max tree depth 0",
        "max cached requests -1",
        "max spec factor -0.5",
        "min token prob 1.5",
    ]
    assert SuffixOptions(max_spec_factor=float("nan")).problems()


# -- an independent brute-force rule -------------------------------------------------------------


class Tie(Exception):
    """The brute force's answer would depend on the order among equal-count children."""


def brute_count(seqs, pattern, depth):
    if len(pattern) > depth:
        return 0
    n = len(pattern)
    return sum(1 for s in seqs for i in range(len(s) - n + 1) if s[i : i + n] == pattern)


def brute_draft(seqs, context, depth, max_tokens, factor, min_prob):
    """(tokens, score) recomputed from occurrence counts alone; raises Tie when a choice ties."""
    best, best_score = [], 0.0
    for m in range(1, len(context)):
        pattern = context[-m:]
        if brute_count(seqs, pattern, depth) == 0:
            break
        cap = max(min(max_tokens, int(f32(f32(float(m)) * f32(factor)) + 1e-6)), 0)
        out, prob, score, path = [], 1.0, 0.0, list(pattern)
        while len(out) < cap:
            parent = brute_count(seqs, path, depth)
            counts = {t: brute_count(seqs, path + [t], depth) for t in {x for s in seqs for x in s}}
            top = max(counts.values(), default=0)
            if top == 0:
                break
            p = f32(prob * f32(f32(float(top)) / f32(float(parent))))
            if p < f32(min_prob):
                break
            winners = [t for t, c in counts.items() if c == top]
            if len(winners) > 1:
                raise Tie
            out.append(winners[0])
            prob, score, path = p, f32(score + p), path + winners
        if score >= best_score:
            best, best_score = out, score
    return best, best_score


@pytest.mark.parametrize("seed", range(3))
def test_the_tree_agrees_with_a_brute_force_rule(seed):
    rng = random.Random(seed)
    compared = drafted = 0
    for _ in range(150):
        depth = rng.choice([2, 3, 5, 24])
        seqs = [[rng.randrange(4) for _ in range(rng.randrange(1, 25))] for _ in range(rng.randrange(1, 4))]
        tree = tree_of(depth, *seqs)
        if rng.random() < 0.3 and len(seqs) > 1:
            gone = rng.randrange(len(seqs))
            tree.remove(gone)
            seqs = [s for i, s in enumerate(seqs) if i != gone]
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
        args = (rng.randrange(0, 6), rng.choice([0.5, 1.0, 2.0]), rng.choice([0.0, 0.1, 0.3, 0.5]))
        try:
            expected = brute_draft(seqs, context[-depth:], depth, *args)
        except Tie:
            continue
        got = tree.speculate(context[-depth:], *args)
        assert (got.token_ids, got.score) == expected, (depth, seqs, context, args)
        compared += 1
        drafted += bool(expected[0])
    assert compared >= 40 and drafted >= 15, (compared, drafted)  # the check was not vacuous


# -- the proposer: the runner's model-free contract around one cache ------------------------------


def make_request(request_id, prompt, max_tokens=8):
    from alcheck.runner.request import Request

    return Request(
        request_id=request_id, token_ids=list(prompt), num_prompt_tokens=len(prompt), max_tokens=max_tokens
    )


def test_the_proposer_feeds_prompt_then_each_commit_and_the_finished_response():
    from alcheck.runner.proposers.suffix import SuffixProposer

    proposer = SuffixProposer(SuffixOptions())
    first = make_request(0, [1, 2, 3])
    first.token_ids += [70]  # the prefill's token
    assert proposer.propose_tokens([first], 3) == [[]]  # nothing seen yet follows 70
    first.token_ids += [71, 72, 73, 74]  # later steps
    proposer.propose_tokens([first], 3)
    first.token_ids += [75]  # the last step: no draft asked for after it
    proposer.request_finished(first)
    assert proposer.cache.active == set()
    second = make_request(1, [9, 9, 70, 71])
    second.token_ids += [72]
    # "70 71 72" matched in the first response, 73 74 75 follow (75 came in at request_finished)
    assert proposer.propose_tokens([second], 3) == [[73, 74, 75]]


@pytest.mark.parametrize("cached, order_free", [(0, True), (10000, False)])
def test_with_the_global_tree_off_drafts_do_not_depend_on_request_order(cached, order_free):
    from alcheck.runner.proposers.suffix import SuffixProposer

    responses = {0: [5, 6, 7, 8, 9], 1: [6, 7, 8, 9, 4]}

    def drafts_in(order):
        proposer = SuffixProposer(SuffixOptions(max_cached_requests=cached))
        seen = {}
        for rid in order:
            req = make_request(rid, [1, 2])
            out = []
            for tok in responses[rid]:
                req.token_ids.append(tok)
                out.append(proposer.propose_tokens([req], 2)[0])
            proposer.request_finished(req)
            seen[rid] = out
        return seen

    assert (drafts_in([0, 1]) == drafts_in([1, 0])) is order_free
