"""CLI checks every model-drafting method passes the same way (draft_model, mtp, medusa): `serve`'s
pair answers as the built-in runner, two CPU workers equal one device, and `ablate kv-lookahead`
shows the method's own KV writes outside its blocks only without lookahead, with `report` reading
both runs. Each method's test file calls these with its own folders and arguments."""

from __future__ import annotations

import json

from conftest import invoke

SMALL = ["--ks", "3", "--repeats", "1", "--limit", "4", "--max-tokens", "24", "--block-size", "4"]


def serve_answers_as_the_runner(method, name: str, target_dir, draft_dir) -> None:
    """`alcheck serve`'s pair under --method auto and `name` drafts with `method`: its counts for one
    prompt equal the paged runner's."""
    import torch

    from alcheck.models.loading import load_target
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner
    from alcheck.serve.config import ServeConfig
    from alcheck.serve.pair import load_served_pair

    prompt = [10, 20, 30, 40, 50]
    target = load_target(str(target_dir))
    head = method.load(draft_dir, target, torch.float32, "cpu")
    config = RunnerConfig(num_spec_tokens=3, block_size=16)
    runner = PagedRunner(target.model, method.proposer(head), target.eos_token_ids, config)
    want = runner.generate([prompt], 16)[0]
    for asked in ("auto", name):
        cfg = ServeConfig(target=str(target_dir), draft=str(draft_dir), k=3, method=asked, device="cpu")
        pair = load_served_pair(cfg)
        got = pair.generate([prompt], 16, 0.0, 0)[0]
        assert pair.method == name, asked
        assert (got.output_ids, got.steps, got.accepted) == (want.output_ids, want.steps, want.accepted)
    assert want.accepted > 0


def two_cpu_workers_equal_one_device(args: list[str], one_device_run, tmp_path) -> None:
    """--devices cpu,cpu: each worker loads the pair itself; the merged rows equal one device's."""
    out = tmp_path / "two"
    result = invoke(["run", *args, "--devices", "cpu,cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (one_device_run / "questions.csv").read_bytes()


def ablate_kv_lookahead_and_report(pair: list[str], run, tmp_path) -> None:
    """Without lookahead some of the method's KV writes land outside its request's blocks, with it
    none do, the output stays lossless both ways, and `report` reads the ablation and `run`."""
    out = tmp_path / "abl"
    result = invoke(["ablate", "kv-lookahead", *pair, *SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = json.loads((out / "ablation.json").read_text())["summary"]
    assert row["slot_violations_with"] == 0 < row["slot_violations_without"]
    assert row["lossless_rate_with"] == 1.0 == row["lossless_rate_without"]
    for folder in (out, run):
        assert invoke(["report", str(folder)]).exit_code == 0
        assert (folder / "report.md").is_file()
