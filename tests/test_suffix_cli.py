"""`alcheck run --method suffix` (suffix decoding, no --draft): end to end on the demo target, the
request order in run.json, resume, bad input (one line, exit 2, nothing written), and the built-in
runners' rows against an independent oracle.

The oracle (`oracle_rows`) shares nothing with the runner or the suffix tree: transformers' own
model gives the greedy continuation from scratch (no KV cache), each draft is recounted from the
token sequences on every call (occurrence counts of the matched suffix and of what follows it),
and the schedule (requests admitted up to the batch size, each verification step committing
every running request in order, then each drafting in order) is written out by hand. Ties among
equally frequent children would follow arctic's sibling order, which only a replay of the tree
knows, so the exact comparisons use min_token_prob > 0.5: a tied child's probability is then at
most 1/2, the chain stops there, and no draft hangs on a tie (the tie order itself is pinned in
test_suffix_rule.py and against arctic-inference in bench/suffix_arctic_check.py).
"""

from __future__ import annotations

import json
import random
from collections import Counter, deque

import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from conftest import interrupt_at_cell, invoke, one_line_error
from test_suffix_rule import Tie

from alcheck.cli.main import cli
from alcheck.runner.config import RunnerConfig
from alcheck.runner.proposers.suffix import SuffixProposer
from alcheck.runner.proposers.suffix_cache import SuffixOptions
from alcheck.runner.proposers.suffix_tree import f32

DEMO = ["--ks", "1,3", "--repeats", "2", "--limit", "3", "--max-tokens", "32"]
TINY = ["--ks", "2", "--repeats", "1", "--limit", "2", "--max-tokens", "8", "--block-size", "4"]
MAX_TOKENS = 24


# -- end to end on the demo target ------------------------------------------------------------


@pytest.fixture(scope="module")
def suffix_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("suffix") / "run"
    result = invoke(["run", "--method", "suffix", *DEMO, "--check-lossless", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_a_demo_run_writes_rows_lossless_with_the_options_and_order_recorded(suffix_run):
    meta = json.loads((suffix_run / "run.json").read_text())
    cfg = meta["config"]
    assert (cfg["method"], cfg["draft"]) == ("suffix", "")
    assert {k: v for k, v in cfg.items() if k.startswith("suffix_decoding_")} == {
        "suffix_decoding_max_tree_depth": 24,  # vLLM's defaults
        "suffix_decoding_max_cached_requests": 10000,
        "suffix_decoding_max_spec_factor": 1.0,
        "suffix_decoding_min_token_prob": 0.1,
    }
    rows = pd.read_csv(suffix_run / "questions.csv")
    assert len(rows) == 2 * 2 * 3 and (rows.identical == 1).all()  # plain greedy decoding, every row
    assert rows.accepted.sum() > 0 and (rows.drafted_steps < rows.steps).any()
    assert (rows.accepted <= rows.drafted).all() and (rows.drafted <= rows.steps * rows.k).all()
    ids = [str(q) for q in sorted(rows.question_id.unique())]
    for cell in meta["cells"]:  # the order the cell ran, the sweep's shuffle of (seed, repeat)
        order = list(range(3))
        random.Random(f"0:{cell['repeat']}").shuffle(order)
        assert cell["request_order"] == [ids[i] for i in order]
    assert (
        "request_order" in meta["drafting_history"]
        and "starts empty at each pass" in (meta["drafting_history"])
    )


def test_resume_of_a_finished_run_changes_nothing(suffix_run):
    rows = (suffix_run / "questions.csv").read_text()
    result = invoke(["run", "--resume", str(suffix_run)])
    assert result.exit_code == 0, result.output
    assert (suffix_run / "questions.csv").read_text() == rows


def test_an_interrupted_run_resumes_to_the_same_rows(suffix_run, tmp_path, monkeypatch):
    """The global tree starts empty at each pass, so a cell's rows do not depend on the cells this
    process ran before it: a resumed run equals an uninterrupted one."""
    out = tmp_path / "run"
    interrupt_at_cell(monkeypatch, 3)
    result = CliRunner().invoke(
        cli, ["run", "--method", "suffix", *DEMO, "--check-lossless", "--out", str(out)]
    )
    assert result.exit_code != 0
    monkeypatch.undo()
    assert len(json.loads((out / "run.json").read_text())["cells"]) == 2
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (suffix_run / "questions.csv").read_bytes()


@pytest.mark.parametrize(
    "extra",
    [
        ["--suffix-max-tree-depth", "8"],
        ["--suffix-decoding-max-cached-requests", "0"],
        ["--suffix-max-spec-factor", "2"],
        ["--suffix-min-token-prob", "0.3"],
    ],
)
def test_resume_with_other_suffix_options_is_refused(suffix_run, extra):
    before = {p.name: p.read_bytes() for p in suffix_run.iterdir() if p.is_file()}
    assert "resume" in one_line_error(invoke(["run", "--resume", str(suffix_run), *extra]))
    assert {p.name: p.read_bytes() for p in suffix_run.iterdir() if p.is_file()} == before


def test_with_the_global_tree_off_every_order_gives_the_same_rows(tmp_path):
    out = tmp_path / "off"
    result = invoke(
        ["run", "--method", "suffix", *DEMO, "--suffix-max-cached-requests", "0", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())
    assert "global tree off" in meta["drafting_history"]
    orders = {tuple(c["request_order"]) for c in meta["cells"]}
    assert len(orders) == 2  # the two repeats ran the questions in two orders ...
    rows = pd.read_csv(out / "questions.csv")
    counts = ["steps", "drafted_steps", "accepted", "accepted_per_pos"]
    first, second = (rows[rows.repeat == r].set_index(["k", "question_id"])[counts] for r in (0, 1))
    assert first.equals(second)  # ... and every row is the same


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra,needles",
    [
        (["--suffix-max-tree-depth", "0"], ["--suffix-decoding-max-tree-depth 0", ">= 1"]),
        (["--suffix-max-cached-requests", "-1"], ["--suffix-decoding-max-cached-requests -1", ">= 0"]),
        (["--suffix-max-spec-factor", "-0.5"], ["--suffix-decoding-max-spec-factor -0.5", ">= 0"]),
        (["--suffix-max-spec-factor", "inf"], ["--suffix-decoding-max-spec-factor inf", "finite"]),
        (["--suffix-min-token-prob", "1.5"], ["--suffix-decoding-min-token-prob 1.5", "[0, 1]"]),
        (["--suffix-min-token-prob", "nan"], ["--suffix-decoding-min-token-prob nan"]),
        (["--draft", "DRAFT"], ["--draft", "needs no checkpoint"]),
        (["--topk", "2", "--num-draft-tokens", "4"], ["--topk 2", "suffix"]),
        (["--draft-sampling", "sampled", "--temperature", "1"], ["--draft-sampling sampled"]),
        (["--prompt-lookup-max", "3"], ["--prompt-lookup-max", "--method ngram"]),
        (["--engine", "vllm", "--endpoint", "http://127.0.0.1:9"], ["--engine vllm", "suffix"]),
    ],
)
def test_bad_suffix_input_is_one_line_and_writes_nothing(pair_dirs, tmp_path, extra, needles):
    out = tmp_path / "out"
    extra = [str(pair_dirs[1]) if a == "DRAFT" else a for a in extra]
    args = ["run", "--target", str(pair_dirs[0]), "--method", "suffix", *TINY, *extra, "--out", str(out)]
    one_line_error(invoke(args), *needles)
    assert not out.exists()


@pytest.mark.parametrize("method", [[], ["--method", "ngram"]])
def test_suffix_options_need_the_suffix_method(pair_args, pair_dirs, tmp_path, method):
    out = tmp_path / "out"
    args = ["--target", str(pair_dirs[0]), *method] if method else pair_args
    one_line_error(
        invoke(["run", *args, *TINY, "--suffix-max-cached-requests", "0", "--out", str(out)]),
        "--suffix-decoding-max-cached-requests",
        "--method suffix",
    )
    assert not out.exists()


# -- the runners against an independent oracle ------------------------------------------------


@pytest.fixture(scope="module")
def markov(tmp_path_factory):
    """(alcheck Target, transformers model) of a Llama whose layers write nothing to the residual:
    its next token is a function of the current one, so greedy answers fall into cycles and
    prompts ending in one token share their answers (the global tree then drafts well)."""
    from transformers import AutoModelForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny import damp_target_layers, make_tiny_target

    folder = make_tiny_target(tmp_path_factory.mktemp("markov") / "t", num_layers=1, unit_rms_embeddings=True)
    damp_target_layers(folder, 0, 0.0)
    ref = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return load_target(str(folder)), ref


def oracle_prompts(ref, seed: int = 0) -> list[list[int]]:
    """Random prompts, some ending in the same token (their answers agree: the global tree drafts),
    and two X + A + X + A + X, A the target's answer to X: after the last X the request's own tree
    drafts A again (X seen three times, twice followed by A: probability 2/3)."""
    rng = random.Random(seed)
    vocab = ref.config.vocab_size
    base = [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 9))] for _ in range(6)]
    tail = rng.randrange(5, vocab)
    echo = [(b + greedy_from_scratch(ref, b, 10)) * 2 + b for b in base[4:]]
    return [base[0] + [tail], base[1] + base[1], base[2] + [tail], base[3], base[0][:2] + [tail], *echo]


@torch.no_grad()
def greedy_from_scratch(ref, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after prompt, each from a full forward over everything before it, never
    stopping at EOS: what the target's argmax is after any accepted draft (drafts past the end of
    an answer are checked against it too)."""
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(ref(torch.tensor([tokens])).logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def follow_counts(seqs, pattern, depth):
    """(occurrences of pattern, Counter of the token after each), a pattern over `depth` long counting 0."""
    n, total, after = len(pattern), 0, Counter()
    if n > depth:
        return 0, after
    for s in seqs:
        for i in range(len(s) - n + 1):
            if s[i : i + n] == pattern:
                total += 1
                if n < depth and i + n < len(s):
                    after[s[i + n]] += 1
    return total, after


def oracle_draft(seqs, context, depth, k, factor, min_prob):
    """(tokens, score): for each match length, the most frequent next token while the product of
    count ratios stays >= min_prob, at most factor * match length (and k) tokens; the best sum of
    those probabilities wins, a longer match on a tie. float32 as arctic's C++."""
    best, best_score = [], 0.0
    for m in range(1, len(context)):
        pattern = context[-m:]
        if follow_counts(seqs, pattern, depth)[0] == 0:
            break
        cap = max(min(k, int(f32(f32(float(m)) * f32(factor)) + 1e-6)), 0)
        out, prob, score, path = [], 1.0, 0.0, list(pattern)
        while len(out) < cap:
            parent, after = follow_counts(seqs, path, depth)
            if not after:
                break
            top = max(after.values())
            p = f32(prob * f32(f32(float(top)) / f32(float(parent))))
            if p < f32(min_prob):
                break
            winners = [t for t, c in after.items() if c == top]
            if len(winners) > 1:
                raise Tie
            out.append(winners[0])
            prob, score, path = p, f32(score + p), path + winners
        if score >= best_score:
            best, best_score = out, score
    return best, best_score


def oracle_rows(prompts, continuations, eos, k, options: SuffixOptions, batch_size: int):
    """Per prompt {steps, drafted_steps, accepted, accepted_per_pos, output}, by the schedule."""
    o, n = options, len(prompts)
    out = [[] for _ in range(n)]
    rows = [dict(steps=0, drafted_steps=0, accepted=0, accepted_per_pos=[0] * k) for _ in range(n)]
    response: dict[int, list[int]] = {}  # what the history holds of each request's answer
    started: list[int] = []  # requests in the order the history first saw them
    drafts: dict[int, list[int]] = {}

    def emit(i, tokens) -> bool:  # True: finished (EOS kept, or max_tokens)
        for t in tokens:
            out[i].append(t)
            if t in eos or len(out[i]) >= MAX_TOKENS:
                return True
        return False

    def learn(i):
        if i not in response:
            started.append(i)
        response[i] = list(out[i])

    def draft(i):
        learn(i)
        context = (prompts[i] + out[i])[-o.max_tree_depth :]
        args = (context, o.max_tree_depth, k, o.max_spec_factor, o.min_token_prob)
        local = oracle_draft([prompts[i] + out[i]], *args)
        kept = started[-o.max_cached_requests :] if o.max_cached_requests else []
        shared = oracle_draft([response[j] for j in kept], *args)
        return (local if local[1] >= shared[1] else shared)[0]

    waiting, running = deque(range(n)), []
    while waiting or running:
        new = []
        while waiting and len(running) + len(new) < batch_size:
            new.append(waiting.popleft())
        finished = {i for i in new if emit(i, continuations[i][:1])}  # the prefill's token
        for i in new:
            if i in finished:
                learn(i)
        for i in new:
            if i not in finished:
                drafts[i] = draft(i)
                running.append(i)
        alive = []
        for i in running:  # one verification step each, in order
            d, greedy = drafts[i], continuations[i][len(out[i]) :]
            a = 0
            while a < len(d) and d[a] == greedy[a]:
                a += 1
            row = rows[i]
            row["steps"] += 1
            row["drafted_steps"] += bool(d)
            row["accepted"] += a
            for j in range(a):
                row["accepted_per_pos"][j] += 1
            if emit(i, greedy[: a + 1]):
                learn(i)
            else:
                alive.append(i)
        for i in alive:
            drafts[i] = draft(i)
        running = alive
    return [dict(row, output=out[i]) for i, row in enumerate(rows)]


def runner_rows(target, prompts, k, options, runner="paged", proposer=None, **cfg):
    from alcheck.runner.table import runner_class

    proposer = proposer or SuffixProposer(options)
    config = RunnerConfig(num_spec_tokens=k, block_size=4, **cfg)
    results = runner_class(runner)(target.model, proposer, target.eos_token_ids, config).generate(
        prompts, MAX_TOKENS
    )
    return [
        dict(
            steps=r.steps,
            drafted_steps=r.drafted_steps,
            accepted=r.accepted,
            accepted_per_pos=r.accepted_per_pos,
            output=r.output_ids,
        )
        for r in results
    ]


# (runner, batch size, options): every batch at once, two at a time (admissions mid-run, a
# global tree of one response evicting while requests still run), one at a time, the tree off
CASES = [
    ("paged", 128, SuffixOptions(24, 10000, 1.0, 0.6)),
    ("paged", 2, SuffixOptions(5, 1, 2.0, 0.55)),
    ("contiguous", 1, SuffixOptions(24, 10000, 1.0, 0.6)),
    ("static", 128, SuffixOptions(8, 0, 1.5, 0.6)),
]


@pytest.mark.parametrize("runner,batch,options", CASES)
def test_runner_rows_equal_the_oracle(markov, runner, batch, options):
    target, ref = markov
    eos = frozenset(target.eos_token_ids)
    prompts = oracle_prompts(ref)
    continuations = [greedy_from_scratch(ref, p, MAX_TOKENS + 6) for p in prompts]
    accepted = undrafted = 0
    for k in (1, 3, 5):
        cfg = dict(max_batch_size=batch) if runner != "contiguous" else {}
        got = runner_rows(target, prompts, k, options, runner, **cfg)
        want = oracle_rows(prompts, continuations, eos, k, options, batch)
        for i, (row, expected) in enumerate(zip(got, want)):
            assert row == expected, f"{runner} batch {batch} K={k} prompt {i}"
            assert row["output"] == continuations[i][: len(row["output"])], "not plain greedy decoding"
            accepted += row["accepted"]
            undrafted += row["steps"] - row["drafted_steps"]
    assert accepted > 0 and undrafted > 0  # drafts were accepted, and some steps drafted nothing


def test_the_global_tree_changes_rows_and_each_pass_starts_it_afresh(markov):
    target, ref = markov
    prompts = oracle_prompts(ref)
    on, off = SuffixOptions(min_token_prob=0.6), SuffixOptions(max_cached_requests=0, min_token_prob=0.6)
    proposer = SuffixProposer(on)
    first = runner_rows(target, prompts, 3, on, proposer=proposer, max_batch_size=1)
    assert runner_rows(target, prompts, 3, on, proposer=proposer, max_batch_size=1) == first  # same proposer
    assert runner_rows(target, prompts, 3, off, max_batch_size=1) != first  # past answers drafted


def test_default_options_every_runner_and_batching_agree_and_stay_lossless(markov):
    """vLLM's defaults (min_token_prob 0.1, where ties decide drafts): no oracle, but the paged,
    static and contiguous runners give the same rows one request at a time, and every output is
    plain greedy decoding at any batch size."""
    target, ref = markov
    prompts = oracle_prompts(ref, seed=1)
    options = SuffixOptions()
    want = runner_rows(target, prompts, 4, options, max_batch_size=1)
    assert runner_rows(target, prompts, 4, options, "contiguous") == want
    assert runner_rows(target, prompts, 4, options, "static", max_batch_size=1) == want
    batched = runner_rows(target, prompts, 4, options)
    for prompt, row in zip(prompts, batched):
        assert row["output"] == greedy_from_scratch(ref, prompt, len(row["output"]))
    assert sum(r["accepted"] for r in batched) > 0
