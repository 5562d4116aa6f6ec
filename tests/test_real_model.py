"""The real model (SmolLM2-135M-Instruct, `make real-models`) through every path that applies (issue 48).

Oracles: transformers' own LlamaForCausalLM for the logits; target-only greedy decoding for the
speculative output (--check-lossless at temperature 0: every answer token for token); and the built-in
paged runner's rows for every other path (contiguous and static runners, --devices workers, tensor
parallelism, alcheck serve). The seed's bug must show on real weights: without the lookahead slots
the draft writes through unallocated block-table entries. Skipped, with one line, when the real model
is not prepared.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import invoke_run, one_line_error

from alcheck.testing import real_model

pytestmark = pytest.mark.skipif(
    not real_model.prepared(), reason="the real model is not prepared: run `make real-models`"
)

SAME = ["k", "repeat", "question_id", "turn", "prompt_hash", "generated_tokens", "steps", "accepted"]
SAME += ["accepted_per_pos"]
SMALL = ["--repeats", "1", "--limit", "4", "--max-tokens", "32", "--reference", "none"]
SMALL += ["--max-batch-size", "4", "--block-size", "16"]


def draft_args() -> list[str]:
    return ["--target", str(real_model.target_dir()), "--draft", str(real_model.draft_dir())]


def rows(out) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv")[SAME]


@pytest.fixture(scope="module")
def paged(tmp_path_factory):
    """The built-in paged runner with the layer-skip draft, K=1 and 3, audited and checked against
    target-only greedy."""
    out = tmp_path_factory.mktemp("real") / "paged"
    result = invoke_run(
        [*draft_args(), "--ks", "1,3", *SMALL, "--check-lossless", "--audit-slots", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


class Req:
    def __init__(self, request_id: int):
        self.request_id, self.num_computed_tokens = request_id, 0


def test_logits_equal_transformers():
    """Two prompts of different lengths prefilled in one paged forward (block size 4), then a
    verification-shaped chunk of 3 tokens each through the cache: every position's logits equal
    transformers' full-sequence logits (float32; 30 layers and logits up to about 30, so 1e-3), and
    so does every argmax."""
    import torch
    from conftest import paged_batch
    from transformers import LlamaForCausalLM

    from alcheck.kv.manager import KVCacheManager
    from alcheck.models.attention import bind_kv_cache
    from alcheck.models.loading import load_target

    seqs = [[1, 504, 3458, 282, 4053, 30, 1041, 346, 9, 7, 2, 88, 1534], [42, 7, 9001, 15, 3, 5, 6]]
    ours = load_target(str(real_model.target_dir())).model
    ref = LlamaForCausalLM.from_pretrained(str(real_model.target_dir()), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = [ref(torch.tensor([s])).logits[0] for s in seqs]
    reqs = [Req(0), Req(1)]
    kv = KVCacheManager(16, 4)
    for r, seq in zip(reqs, seqs):
        assert kv.allocate_slots(r, len(seq)) is not None
    bind_kv_cache(ours.attention_layers, 16, 4, torch.float32, torch.device("cpu"))
    got = [[], []]
    for start, size in ((0, None), (None, 3)):
        starts = [0, 0] if start == 0 else [len(s) - 3 for s in seqs]
        lens = [len(s) - 3 for s in seqs] if size is None else [3, 3]
        batch = paged_batch(kv, reqs, starts, lens)
        ids = torch.tensor([t for s, a, n in zip(seqs, starts, lens) for t in s[a : a + n]])
        with torch.no_grad():
            logits = ours.compute_logits(ours(ids, batch))
        got[0].append(logits[: lens[0]])
        got[1].append(logits[lens[0] :])
    for parts, want in zip(got, expected):
        have = torch.cat(parts)
        torch.testing.assert_close(have, want, atol=1e-3, rtol=0)
        assert (have.argmax(-1) == want.argmax(-1)).all()


def test_speculative_output_is_target_greedy_and_slots_are_owned(paged):
    meta = json.loads((paged / "run.json").read_text())
    for cell in meta["summary"]:
        assert cell["lossless_rate"] == 1.0, cell  # every answer equals target-only greedy
        assert cell["slot_violations"] == 0
    al = {s["k"]: s["al_mean"] for s in meta["summary"]}
    assert al[3] > al[1] > 1.1, al  # the layer-skip draft is a real drafter, not a no-op


@pytest.mark.parametrize(
    "extra",
    [["--runner", "contiguous"], ["--runner", "static"], ["--devices", "cpu,cpu"]],
    ids=["contiguous", "static", "devices"],
)
def test_every_runner_and_executor_gives_the_paged_rows(paged, tmp_path, extra):
    out = tmp_path / "run"
    result = invoke_run([*draft_args(), "--ks", "1,3", *SMALL, *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(rows(out), rows(paged))


def test_tensor_parallel_over_the_heads_it_divides(paged, tmp_path):
    """9 query heads and 3 KV heads: TP=2 cannot split them and is refused in one line; TP=3 gives the
    paged rows."""
    one_line_error(
        invoke_run([*draft_args(), "--ks", "1", *SMALL, "--tensor-parallel-size", "2"]),
        "--tensor-parallel-size 2",
    )
    out = tmp_path / "tp3"
    result = invoke_run(
        [*draft_args(), "--ks", "1,3", *SMALL, "--tensor-parallel-size", "3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(rows(out), rows(paged))


def test_ablation_shows_the_seeds_bug_on_real_weights(tmp_path):
    out = tmp_path / "ablate"
    args = ["ablate", "kv-lookahead", *draft_args(), "--ks", "3", "--repeats", "1", "--limit", "4"]
    from conftest import invoke

    result = invoke(
        [*args, "--max-tokens", "32", "--block-size", "4", "--max-batch-size", "4", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads((out / "ablation.json").read_text())["summary"]
    assert row["slot_violations_with"] == 0
    assert row["slot_violations_without"] > 0


@pytest.fixture(scope="module")
def server():
    """alcheck serve on the real pair (vLLM's dialect), K=3, every waiting request in one call."""
    from alcheck.serve.app import create_app
    from alcheck.serve.config import ServeConfig
    from alcheck.serve.listen import start_in_thread
    from alcheck.serve.pair import load_served_pair

    cfg = ServeConfig(
        target=str(real_model.target_dir()), draft=str(real_model.draft_dir()), k=3, port=0, max_batch_size=4
    )
    started = start_in_thread(create_app(load_served_pair(cfg), cfg))
    yield started
    started.stop()


def engine_args(url: str) -> list[str]:
    target = ["--target", str(real_model.target_dir())]
    return [*target, "--engine", "vllm", "--endpoint", url, "--concurrency", "4", "--ks", "3"]


def test_serve_gives_the_paged_rows(paged, server, tmp_path):
    out = tmp_path / "served"
    result = invoke_run([*engine_args(server.url), *SMALL[:8], "--out", str(out)])
    assert result.exit_code == 0, result.output
    built_in = rows(paged)
    pd.testing.assert_frame_equal(rows(out), built_in[built_in["k"] == 3].reset_index(drop=True))


def test_served_sampling_at_temperature_1_is_lossless(server, tmp_path):
    """--check-lossless at T=1: the served samples against alcheck's target-only samples (one seeded
    draw: under losslessness its p-value is uniform)."""
    out = tmp_path / "t1"
    args = ["--temperature", "1", "--check-lossless", "--repeats", "2", "--limit", "8", "--max-tokens", "16"]
    result = invoke_run([*engine_args(server.url), *args, "--reference", "none", "--out", str(out)])
    assert result.exit_code == 0, result.output
    test = json.loads((out / "run.json").read_text())["summary"][0]["lossless_test"]
    assert test["lossless"], test


def test_a_gguf_target_gives_the_converted_folders_rows(tmp_path):
    """`--target FILE.gguf` (converted once into the user cache, as a user's run would) against the
    folder `make real-models` wrote: the same prompt hashes and rows, and run.json names the file."""
    runs = {}
    ngram = ["--method", "ngram", "--ks", "3", *SMALL]
    for name, target in (("gguf", real_model.gguf_file()), ("folder", real_model.target_dir())):
        runs[name] = tmp_path / name
        result = invoke_run(["--target", str(target), *ngram, "--out", str(runs[name])])
        assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(rows(runs["gguf"]), rows(runs["folder"]))
    source = json.loads((runs["gguf"] / "run.json").read_text())["gguf"]["target"]
    assert source["sha256"] == real_model.GGUF_SHA256
    assert source["quantization"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}


def test_a_truncated_gguf_is_refused_in_one_line(tmp_path):
    cut = tmp_path / "cut.gguf"
    with real_model.gguf_file().open("rb") as f:
        cut.write_bytes(f.read(40_000_000))
    one_line_error(invoke_run(["--target", str(cut), "--method", "ngram", *SMALL]), "truncated", "cut.gguf")
