"""Per-step traces (alcheck/rundir/traces.py) and where two runs diverge (alcheck/report/divergence.py), issue
23.

Expectations come from an independent re-count: each test replays the generation token by token
and block by block (which positions the draft writes, which blocks a step without lookahead slots
has allocated), instead of the module's closed forms.
"""

from __future__ import annotations

import json
import math
import random

import pandas as pd
import pytest

from alcheck.errors import AlcheckError
from alcheck.report.divergence import (
    LOOKAHEAD_CLASS,
    binomial_upper_tail,
    diverge,
    divergence_of_runs,
    exposed,
)
from alcheck.rundir.traces import TRACES_FILE, Trace, append_traces, read_traces


def replay(prompt: int, accepted: list[int], k: int, block: int):
    """Per step: (output tokens before it, sequence length, whether the drafts it verifies were written
    past the blocks allocated without lookahead), by walking positions one by one."""
    out = []
    allocated = math.ceil(prompt / block)  # the prompt's blocks
    written = list(range(prompt)) + [prompt + j for j in range(k - 1)]  # draft after the prefill
    emitted = 1  # the prefill token
    for a in accepted:
        n = prompt + emitted
        out.append((emitted, n, max(written) >= allocated * block))
        allocated = max(allocated, math.ceil((n + k) / block))  # verify [x_{n-1}, d_1..d_K]: n + K positions
        written = [n - 1 + j for j in range(a + 1)] + [n + a + j for j in range(k - 1)]
        emitted += 1 + a
    return out


def questions(traces: list[Trace]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "k": t.k,
                "repeat": t.repeat,
                "question_id": t.question_id,
                "turn": t.turn,
                "steps": t.steps,
                "accepted": sum(t.accepted),
                "accepted_per_pos": ";".join(map(str, t.per_position())),
            }
            for t in traces
        ]
    )


def random_traces(k: int, n: int, seed: int, steps=(20, 60)) -> list[Trace]:
    rng = random.Random(seed)
    return [
        Trace(
            k, 0, str(100 + i), 1, rng.randint(3, 40), [rng.randint(0, k) for _ in range(rng.randint(*steps))]
        )
        for i in range(n)
    ]


def changed(trace: Trace, step: int) -> Trace:
    """The same turn with another accepted count at `step` (and whatever follows)."""
    acc = list(trace.accepted)
    acc[step] = (acc[step] + 1) % (trace.k + 1)
    return Trace(
        trace.k, trace.repeat, trace.question_id, trace.turn, trace.prompt_tokens, acc[: step + 1] + [0] * 3
    )


def test_exposure_equals_a_block_by_block_replay():
    for k in range(1, 6):
        for block in (1, 2, 4, 16):
            for t in random_traces(k, 30, seed=k * 100 + block):
                want = [e for _, _, e in replay(t.prompt_tokens, t.accepted, k, block)]
                assert [exposed(s, t.prompt_tokens, t.accepted, k, block) for s in range(t.steps)] == want
                if k == 1:
                    assert not any(want)  # one draft never outruns the verify's slots


def test_identical_runs_have_no_divergence():
    a = random_traces(3, 10, seed=1)
    report = diverge(questions(a), questions(a), {t.key: t for t in a}, {t.key: t for t in a}, 4)
    assert report.summary() == {
        3: {
            "turns": 10,
            "identical": 10,
            "traced": 10,
            "traced_identical": 10,
            "totals_only": 0,
            "totals_identical": 0,
        }
    }
    assert report.divergence_map() == {3: [0, 0, 0, 0]} and not report.names_lookahead
    assert sum(report.steps_by_offset[3]) == sum(t.steps for t in a)


def test_first_step_position_and_block_offset():
    k, block = 4, 4
    a = Trace(
        k, 0, "7", 1, 13, [2, 0, 3, 1, 4, 0, 2], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]
    )
    b = Trace(k, 0, "7", 1, 13, [2, 0, 3, 2, 1], [11, 12, 13, 14, 15, 16, 17, 18, 99, 98])
    report = diverge(
        questions([a]),
        questions([b]),
        {a.key: a},
        {b.key: b},
        block,
        decode=lambda ids: " ".join(map(str, ids)),
    )
    (turn,) = report.turns
    emitted, length, was_exposed = replay(13, a.accepted, k, block)[3]
    assert (turn.step, turn.accepted_a, turn.accepted_b) == (3, 1, 2)
    assert (turn.position, turn.seq_len) == (emitted, length) == (9, 22)
    assert (turn.block_offset, turn.slots_left, turn.exposed) == (22 % 4, 2, was_exposed)
    assert (
        turn.first_token_diff == 8 and turn.context == "...11 12 13 14 15 16 17 18⟦19 20 21 22 23 24 | 99 98⟧"
    )
    assert report.divergence_map() == {4: [0, 0, 1, 0]}
    from alcheck.report.divergence_text import divergence_markdown

    lengths = [n for _, n, _ in replay(13, a.accepted, k, block)]
    steps = [sum(n % block == i for n in lengths) for i in range(block)]
    text = divergence_markdown(report)
    assert "| 4 | 0 | 0 | 1 | 0 |" in text and f"| 4 (steps) | {' | '.join(map(str, steps))} |" in text
    # step 3: A accepted 1 draft, B 2, so they part at draft position 2 (A rejected it, B accepted it)
    assert report.position_map() == {4: [0, 1, 0, 0]}
    assert "| 4 | 0 | 1 | 0 | 0 |" in divergence_markdown(report, {4: 2}) and "K=4 position 2" in text + (
        divergence_markdown(report, {4: 2})
    )


def test_same_counts_but_other_tokens_is_a_divergence_at_the_token():
    a = Trace(2, 0, "1", 1, 5, [1, 1], [3, 4, 5, 6, 7])
    b = Trace(2, 0, "1", 1, 5, [1, 1], [3, 4, 9, 6, 7])
    (turn,) = diverge(questions([a]), questions([b]), {a.key: a}, {b.key: b}, 16).turns
    assert not turn.identical and turn.step is None and turn.first_token_diff == 2 and turn.context is None


@pytest.mark.parametrize("at_exposed", [True, False])
def test_divergences_at_exposed_steps_name_the_lookahead_class(at_exposed):
    k, block = 3, 4
    a = random_traces(k, 40, seed=5)
    b = []
    for t in a:  # change each turn at its first step that is (or is not) exposed, by the replay
        flags = [e for _, _, e in replay(t.prompt_tokens, t.accepted, k, block)]
        step = next((s for s, e in enumerate(flags) if e == at_exposed and s > 0), None)
        b.append(t if step is None else changed(t, step))
    report = diverge(questions(a), questions(b), {t.key: t for t in a}, {t.key: t for t in b}, block)
    differing = [t for t in report.turns if not t.identical]
    assert len(differing) == sum(x is not y for x, y in zip(a, b)) >= 30
    assert all(t.exposed == at_exposed for t in differing)
    (finding,) = report.lookahead()
    replays = [e for t in a for _, _, e in replay(t.prompt_tokens, t.accepted, k, block)]
    share = sum(replays) / len(replays)
    assert finding.expected_share == pytest.approx(share) and 0.1 < share < 0.9
    assert finding.at_exposed == (len(differing) if at_exposed else 0)
    assert finding.p_value == pytest.approx(binomial_upper_tail(finding.at_exposed, len(differing), share))
    assert finding.named == at_exposed == report.names_lookahead
    assert (LOOKAHEAD_CLASS in finding.line()) == at_exposed


def test_binomial_tail_against_a_direct_sum():
    assert binomial_upper_tail(3, 3, 0.5) == pytest.approx(0.125)
    assert binomial_upper_tail(0, 10, 0.3) == 1.0
    assert binomial_upper_tail(2, 4, 0.25) == pytest.approx(1 - 0.75**4 - 4 * 0.25 * 0.75**3)


def test_a_side_without_traces_falls_back_to_totals_and_says_so():
    a = random_traces(2, 6, seed=9)
    b = [changed(a[0], 4)] + a[1:]
    report = diverge(questions(a), questions(b), {t.key: t for t in a}, None, 16)
    assert report.without_traces == {"B": 6}
    assert [t.basis for t in report.turns] == ["totals"] * 6
    differs = [t.question_id for t in report.turns if not t.identical]
    assert differs == [a[0].question_id] and report.turns[0].step is None
    assert report.summary()[2]["totals_only"] == 6 and report.summary()[2]["totals_identical"] == 5


def test_traces_file_round_trip_and_damage(tmp_path):
    traces = random_traces(3, 4, seed=2) + [Trace(3, 1, "q-x", 2, 9, [], [4])]
    append_traces(tmp_path, traces[:2])
    append_traces(tmp_path, traces[2:])
    back = read_traces(tmp_path)
    assert list(back.values()) == traces
    header = (tmp_path / TRACES_FILE).read_text().splitlines()[0]
    assert header == "k,repeat,question_id,turn,prompt_tokens,accepted,output_ids"
    assert read_traces(tmp_path / "none") is None
    with (tmp_path / TRACES_FILE).open("a") as f:
        f.write("3,0,5,1,7,1;x;2,\n")
    with pytest.raises(AlcheckError, match="not ';'-joined integers"):
        read_traces(tmp_path)


def test_divergence_of_two_run_directories(tmp_path):
    from fake_runs import make_meta, write_run_dir

    a = random_traces(2, 5, seed=4)
    b = [a[0], changed(a[1], 2)] + a[2:]
    dirs = []
    for name, traces in (("a", a), ("b", b)):
        frame = questions(traces)
        for column, value in (("category", "writing"), ("prompt_tokens", 10), ("generated_tokens", 50)):
            frame[column] = value
        frame["drafted"] = frame["steps"] * 2
        d = write_run_dir(tmp_path / name, make_meta(frame), frame)
        append_traces(d, traces)
        dirs.append(d)
    report = divergence_of_runs(*dirs, block_size=4)
    assert [t.question_id for t in report.turns if not t.identical] == [a[1].question_id]
    assert report.turns[1].step == 2
    # `alcheck compare` says it too, and --json carries it
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    shown = CliRunner().invoke(cli, ["compare", *map(str, dirs), "--block-size", "4"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    emitted, length, _ = replay(a[1].prompt_tokens, a[1].accepted, 2, 4)[2]
    assert "K=2: 4 of 5 turns identical step by step; 1 diverge" in shown.output
    assert (
        f"question {a[1].question_id} turn 1 repeat 1: step 2 ({a[1].accepted[2]} accepted vs "
        f"{b[1].accepted[2]} accepted) at output token {emitted}, sequence length {length} "
        f"(offset {length % 4} in its block"
    ) in shown.output
    as_json = CliRunner().invoke(cli, ["compare", *map(str, dirs), "--json"], catch_exceptions=False)
    data = json.loads(as_json.output)["divergence"]
    assert data["block_size"] == 16 and data["summary"]["2"]["identical"] == 4  # run A's block size
    # one side without traces: totals, and it says so
    (dirs[1] / TRACES_FILE).unlink()
    shown = CliRunner().invoke(cli, ["compare", *map(str, dirs)], catch_exceptions=False)
    assert "run B has no per-step traces for 5 turns: those are compared on totals" in shown.output
    assert f"question {a[1].question_id} turn 1 repeat 1: totals differ" in shown.output


# -- real traces from the built-in runner: the seed's bug, localized ----------------------------------


def recorded_run(pair, prompts, k: int, block: int, kv_lookahead: bool) -> list[Trace]:
    """The paged runner on the copy-layer pair, each step's accepted count as it records it."""
    from conftest import run_spec

    target, head = pair
    results, _ = run_spec(
        target.model, head, target.eos_token_ids, prompts, k=k, block_size=block, kv_lookahead=kv_lookahead
    )
    return [
        Trace(k, 0, str(r.request_id), 1, len(prompts[r.request_id]), r.per_step_accepted, r.output_ids)
        for r in results
    ]


@pytest.fixture(scope="module")
def many_prompts(pair):
    """32 prompts: enough first divergences for the binomial test at block size 4, where most steps are
    exposed."""
    vocab = pair[0].model.config.vocab_size
    rng = random.Random(0)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(32)]


@pytest.mark.parametrize("k", [4, 5])
def test_the_no_lookahead_runner_diverges_at_exposed_steps(pair, many_prompts, k):
    """The seed's bug in the built-in runner (copy-layer pair, block size 4, where it costs 0.4-0.5 AL):
    the traces find the divergences and name the lookahead slots; two correct runs are identical."""
    fixed = recorded_run(pair, many_prompts, k, 4, kv_lookahead=True)
    again = recorded_run(pair, many_prompts, k, 4, kv_lookahead=True)
    buggy = recorded_run(pair, many_prompts, k, 4, kv_lookahead=False)
    clean = diverge(
        questions(fixed), questions(again), {t.key: t for t in fixed}, {t.key: t for t in again}, 4
    )
    assert all(t.identical for t in clean.turns) and not clean.names_lookahead
    report = diverge(
        questions(fixed), questions(buggy), {t.key: t for t in fixed}, {t.key: t for t in buggy}, 4
    )
    differing = [t for t in report.turns if not t.identical]
    assert len(differing) >= 10 and all(
        t.first_token_diff is None for t in differing
    )  # lossless: same tokens
    # a writer diverges at the step that verifies its misplaced drafts; only the owner of block 0 (whose
    # draft KV the others overwrite) may diverge elsewhere
    assert sum(not t.exposed for t in differing) <= 1, [(t.question_id, t.step) for t in differing]
    assert report.names_lookahead
    replays = [e for t in fixed for _, _, e in replay(t.prompt_tokens, t.accepted, k, 4)]
    assert report.lookahead()[0].expected_share == pytest.approx(sum(replays) / len(replays))


def test_compare_names_a_lossless_failure_as_the_likely_cause(tmp_path):
    """A run whose summary says it failed the T > 0 lossless check at a K gets a note at that K."""
    from click.testing import CliRunner
    from fake_runs import make_run

    from alcheck.cli.main import cli

    a = make_run(tmp_path / "a", {3: 1.30}, seed=1, n_questions=16, repeats=2)
    b = make_run(tmp_path / "b", {3: 1.13}, seed=2, n_questions=16, repeats=2)
    meta = json.loads((b / "run.json").read_text())
    meta["summary"][0]["lossless_test"] = {"lossless": False, "p_value": 5e-05}
    (b / "run.json").write_text(json.dumps(meta))
    shown = CliRunner().invoke(cli, ["compare", str(a), str(b)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert (
        "K=3: B (p = 5e-05) failed the temperature > 0 lossless check: that sampler does not draw from the "
        "target's distribution, the likely cause of an AL gap between the runs"
    ) in " ".join(shown.output.split())
    data = json.loads(CliRunner().invoke(cli, ["compare", str(a), str(b), "--json"]).output)
    assert data["rows"][0]["lossless_note"].startswith("K=3: B (p = 5e-05)")
    assert "divergence" not in data  # no traces on either side
