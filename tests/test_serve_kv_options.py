"""`alcheck serve` takes `alcheck run`'s KV options (--block-size, --num-blocks): through the real
command line they reach the served runner, so the seed's bug (--no-kv-lookahead) is served at a
small block size and each answer's counts are the runner's own at those settings (the oracle),
while the fixed runner's counts differ. Bad values exit 2 in one line before any weight loads."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402 - after the skip: the serve extra may be missing

K, BLOCK, MAX_TOKENS = 4, 4, 40


def served_app(monkeypatch, pair_dirs, *flags):
    """The app `alcheck serve ... flags` would serve (serve_forever stood in for: no socket loop)."""
    import alcheck.serve.listen as listen

    served = {}

    def capture(app, host, sock):
        sock.close()
        served["app"] = app

    monkeypatch.setattr(listen, "serve_forever", capture)
    args = ["serve", "--target", str(pair_dirs[0]), "--draft", str(pair_dirs[1]), "--k", str(K)]
    args += ["--dialect", "vllm", "--port", "0", "--device", "cpu", "--dtype", "float32", *flags]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return served["app"]


def runner_counts(pair, prompt, **settings):
    target, head = pair
    cfg = RunnerConfig(num_spec_tokens=K, **settings)
    result = PagedRunner(target.model, proposer_for(head), target.eos_token_ids, cfg).generate(
        [prompt], MAX_TOKENS
    )[0]
    return result.output_ids, result.steps, result.accepted


def test_serve_at_a_small_block_size_reproduces_the_seeds_bug(monkeypatch, pair_dirs, pair, prompts):
    app = served_app(monkeypatch, pair_dirs, "--block-size", str(BLOCK), "--no-kv-lookahead")
    served = app.state.ctx.pair
    assert (served.block_size, served.num_blocks, served.kv_lookahead) == (BLOCK, None, False)
    moved = 0
    with TestClient(app) as client:
        for prompt in prompts:
            body = client.post(
                "/v1/completions",
                json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True},
            ).json()
            spec = body["metrics"]["speculative_decoding"]
            got = (body["choices"][0]["token_ids"], spec["num_spec_steps"], spec["num_accepted_draft_tokens"])
            assert got == runner_counts(pair, prompt, block_size=BLOCK, kv_lookahead=False)
            fixed = runner_counts(pair, prompt, block_size=BLOCK, kv_lookahead=True)
            assert got[0] == fixed[0]  # greedy and lossless either way: only the acceptance moves
            moved += got[1:] != fixed[1:]
    assert moved >= len(prompts) // 2  # the bug is live at this block size, not a no-op


def test_serve_passes_num_blocks_to_its_runner(monkeypatch, pair_dirs):
    app = served_app(monkeypatch, pair_dirs, "--block-size", "8", "--num-blocks", "64")
    served = app.state.ctx.pair
    cfg = served.runner_config(temperature=0.0, seed=0, batch=1)
    assert (cfg.block_size, cfg.num_blocks, cfg.kv_lookahead) == (8, 64, True)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--num-blocks", "1"], "--num-blocks 1: must be an integer >= 2"),
        (["--block-size", "0"], "--block-size 0: must be an integer >= 1"),
        (["--block-size", "4096"], "--block-size 4096 is longer than the target's context of 2048"),
    ],
)
def test_serve_refuses_bad_kv_options_in_one_line(monkeypatch, pair_dirs, flags, needle):
    import alcheck.methods.pair as pair_mod

    def no_weights(*args, **kwargs):
        raise AssertionError("weights loaded before the KV options were checked")

    monkeypatch.setattr(pair_mod, "load_pair", no_weights)
    args = ["serve", "--target", str(pair_dirs[0]), "--draft", str(pair_dirs[1]), "--k", str(K)]
    result = CliRunner().invoke(cli, [*args, "--dialect", "vllm", "--port", "0", "--device", "cpu", *flags])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
