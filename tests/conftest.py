"""Shared session fixtures: tiny checkpoints in the real on-disk formats, built once per session.

- `pair_dirs` / `pair`: a one-layer target with unit-RMS embeddings and an EAGLE-1 head that
  copies its layer (fc = [I | 0]). The head misses token 0's context, so acceptance is partial:
  AL about 1.9 at K=1 and 4.6 at K=5 on `prompts`, which makes it a good oracle pair.
- `prompts`: 8 random prompts of 3..30 tokens; `greedy`: target-only greedy results for them
  (our paged path, K=0, block size 4, MAX_TOKENS), the oracle every speculative run must equal.
- `spec_results(k)`: the paged runner's results for `prompts` at K=k (default config), cached.
- `random_dirs`: a two-layer GQA target and a random (non-copy) EAGLE-1 head with fc bias.
"""

from __future__ import annotations

import random
import signal

import pytest
import torch

MAX_TOKENS = 60
BLOCK_SIZE = 4

# tiny models: intra-op threads only add synchronisation (10x slower on 2 shared cores)
torch.set_num_threads(1)

# a suite started in the background by a script (`cmd &` without job control, nohup) inherits SIGINT
# ignored, and Python then installs no KeyboardInterrupt handler: the Ctrl-C tests need it
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_spec(target, head, eos_ids, prompts, max_tokens=MAX_TOKENS, k=0, proposer=None, **cfg):
    """PagedRunner.generate with block size 4 unless told otherwise; returns (results, runner)."""
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    cfg.setdefault("block_size", BLOCK_SIZE)
    from alcheck.methods.table import proposer_for

    if proposer is None:
        proposer = proposer_for(head) if k else None
    runner = PagedRunner(target, proposer, eos_ids, RunnerConfig(num_spec_tokens=k, **cfg))
    return runner.generate(prompts, max_tokens), runner


def run_contiguous(
    target,
    head,
    eos_ids,
    prompts,
    max_tokens,
    k,
    proposer=None,
    temperature=0.0,
    seed=0,
    draft_sampling="onehot",
    topk=1,
    num_draft_tokens=None,
):
    """The contiguous reference runner's results (its proposer: the head's, unless given)."""
    from alcheck.methods.table import proposer_for
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.contiguous import ContiguousRunner

    if proposer is None:
        proposer = proposer_for(head) if k else None
    config = RunnerConfig(
        num_spec_tokens=k,
        topk=topk,
        num_draft_tokens=num_draft_tokens,
        temperature=temperature,
        seed=seed,
        draft_sampling=draft_sampling,
    )
    return ContiguousRunner(target, proposer, eos_ids, config).generate(prompts, max_tokens)


def paged_batch(kv, reqs, starts, lens, block_size=BLOCK_SIZE, kernel="torch", device="cpu"):
    """AttnBatch for request b feeding lens[b] tokens at positions starts[b].., built from the
    KVCacheManager's own strict slot mapping (not the runner's)."""
    from alcheck.models.attention import AttnBatch

    width = max(len(kv.block_ids(r.request_id)) for r in reqs)
    positions, slots = [], []
    for r, s, n in zip(reqs, starts, lens):
        pos = list(range(s, s + n))
        positions += pos
        slots += kv.slot_mapping(r.request_id, pos)
    table = torch.tensor(
        [kv.block_table(r.request_id, width) for r in reqs], dtype=torch.int32, device=device
    )
    seq_lens = [s + n for s, n in zip(starts, lens)]
    return AttnBatch.build(
        torch.tensor(positions, device=device),
        torch.tensor(slots, device=device),
        table,
        lens,
        seq_lens,
        block_size,
        kernel,
    )


def expect_error(fn, *needles) -> str:
    """fn() raises a one-line AlcheckError that names every needle; returns its message."""
    from alcheck.errors import AlcheckError

    with pytest.raises(AlcheckError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert str(needle) in message, f"{needle!r} not in {message!r}"
    return message


def invoke(args):
    """The alcheck CLI in-process, exceptions raised (a bug shows its traceback)."""
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    return CliRunner().invoke(cli, args, catch_exceptions=False)


def invoke_run(args):
    """`alcheck run ARGS`, in-process."""
    return invoke(["run", *args])


def one_line_error(result, *needles) -> str:
    """A CLI result that exited 2 with one "Error: " line (wrapped lines aside: the runner's
    terminal is 80 columns) naming every needle, no traceback; returns the message unwrapped."""
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("Error: ") and "Traceback" not in result.output, result.output
    assert not any(ln.startswith(("Error: ", "Usage: ")) for ln in lines[1:]), result.output
    message = " ".join(result.output.split())
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def pooled_al(results) -> float:
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """Output widths are the console's own (make_console honours COLUMNS): a COLUMNS in the shell
    that runs the tests must not narrow the tables the tests read."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def pair_dirs(tmp_path_factory):
    from alcheck.testing.tiny import make_tiny_eagle, make_tiny_target

    root = tmp_path_factory.mktemp("pair")
    target_dir = make_tiny_target(root / "target", num_layers=1, unit_rms_embeddings=True)
    eagle_dir = make_tiny_eagle(root / "eagle", target_dir, copy_target_layer=0, noise=0.0)
    return target_dir, eagle_dir


@pytest.fixture(scope="session")
def pair(pair_dirs):
    """(Target, EagleHead) loaded through alcheck's own loaders, float32 CPU."""
    from alcheck.models.loading import load_eagle, load_target

    target = load_target(str(pair_dirs[0]))
    head = load_eagle(str(pair_dirs[1]), target)
    return target, head


@pytest.fixture(scope="session")
def prompts(pair):
    vocab = pair[0].model.config.vocab_size
    rng = random.Random(0)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(8)]


@pytest.fixture(scope="session")
def greedy(pair, prompts):
    """Target-only greedy decoding through our paged path (K=0)."""
    target, _ = pair
    results, _ = run_spec(target.model, None, target.eos_token_ids, prompts, k=0)
    return results


@pytest.fixture(scope="session")
def spec_results(pair, prompts):
    """spec_results(k): the paged runner's results on `prompts` with default settings, cached."""
    target, head = pair
    cache: dict[int, list] = {}

    def get(k: int):
        if k not in cache:
            cache[k] = run_spec(target.model, head, target.eos_token_ids, prompts, k=k)[0]
        return cache[k]

    return get


@pytest.fixture(scope="session")
def random_dirs(tmp_path_factory):
    from alcheck.testing.tiny import make_tiny_eagle, make_tiny_target

    root = tmp_path_factory.mktemp("random")
    target_dir = make_tiny_target(root / "target", num_layers=2)
    eagle_dir = make_tiny_eagle(root / "eagle", target_dir, bias=True, seed=3)
    return target_dir, eagle_dir


@pytest.fixture(scope="session")
def pair_args(pair_dirs):
    """The copy-layer pair as `alcheck run` arguments."""
    return ["--target", str(pair_dirs[0]), "--draft", str(pair_dirs[1])]


def interrupt_at_cell(monkeypatch, n: int):
    """The n-th cell this process starts raises KeyboardInterrupt, as a Ctrl-C there would
    (monkeypatch.undo() ends it)."""
    from alcheck.executors import local as local_mod

    real, calls = local_mod.run_cell, {"n": 0}

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(local_mod, "run_cell", flaky)


@pytest.fixture(autouse=True)
def signal_handlers_restored(request):
    """A test that leaves a SIGINT or SIGTERM handler behind breaks the Ctrl-C tests that later run
    in the same pytest worker (a swallowed SIGINT never becomes KeyboardInterrupt): fail it here."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    left = [signal.Signals(s).name for s, h in before.items() if signal.getsignal(s) is not h]
    for s, h in before.items():
        signal.signal(s, h)
    assert not left, f"{request.node.nodeid} left its {', '.join(left)} handler installed"
