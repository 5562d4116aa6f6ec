"""Files in the exact shapes other tools write them, for `alcheck import` tests (issue 21).

Each writer follows the source's own code (see the reader modules in alcheck/imports/ for the
fields): the EAGLE repo's gen_*_answer_*.py lines, Spec-Bench's eval.py lines, AIPerf's
profile_export.jsonl records, both versions of vLLM's spec_decode.py printout, `vllm bench serve
--save-result` JSON and SGLang's bench_speculative.py lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def write_lines(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def eagle_line(
    qid: int,
    idxs: list[int],
    new_tokens: list[int],
    wall: list[float] | None = None,
    model_id: str = "tiny-ea-in-temperature-0.0",
    texts: list[str] | None = None,
) -> dict:
    """gen_ea_answer_*.py: question_id, answer_id, model_id, choices[{index, turns, idxs, new_tokens,
    wall_time}], tstamp."""
    turns = texts or [f"answer {qid} turn {j + 1}" for j in range(len(idxs))]
    return {
        "question_id": qid,
        "answer_id": f"a{qid}",
        "model_id": model_id,
        "choices": [
            {
                "index": 0,
                "turns": turns,
                "idxs": idxs,
                "new_tokens": new_tokens,
                "wall_time": wall or [1.0] * len(idxs),
            }
        ],
        "tstamp": 1700000000.0,
    }


def spec_bench_line(
    qid: int, category: str, choices: list[dict], model_id: str = "tiny-eagle3-float16"
) -> dict:
    """eval.py: question_id, category, answer_id, model_id, choices, tstamp."""
    return {
        "question_id": qid,
        "category": category,
        "answer_id": f"a{qid}",
        "model_id": model_id,
        "choices": choices,
        "tstamp": 1700000000.0,
    }


def spec_bench_choice(
    index: int,
    per_turn_entries: list[list[int]],
    new_tokens: list[int],
    wall: list[float] | None = None,
    texts: list[str] | None = None,
) -> dict:
    """One choice: per-turn lists and the flat accept_lengths over all turns (one entry a + 1 per step)."""
    return {
        "index": index,
        "turns": texts or [f"turn {j + 1}" for j in range(len(per_turn_entries))],
        "decoding_steps": [len(e) for e in per_turn_entries],
        "new_tokens": new_tokens,
        "wall_time": wall or [0.5] * len(per_turn_entries),
        "accept_lengths": [x for entries in per_turn_entries for x in entries],
    }


def entries_from_row(row, k: int) -> list[int]:
    """A questions.csv row's steps as Spec-Bench entries (a + 1 each): the steps with exactly j
    accepted drafts come from accepted_per_pos (steps with a >= i+1); their order is not recorded,
    and nothing computed from a turn depends on it."""
    at_least = [int(row.steps)] + [int(x) for x in str(row.accepted_per_pos).split(";")]
    at_least += [0] * (k + 1 - len(at_least))
    exactly = [at_least[j] - (at_least[j + 1] if j < k else 0) for j in range(k + 1)]
    return [j + 1 for j in range(k + 1) for _ in range(exactly[j])]


def spec_bench_from_run(
    run_dir: Path, out: Path, model_id: str = "tiny-eagle3-float32", texts: bool = False
) -> Path:
    """A built-in run's questions.csv (one K) written as Spec-Bench writes answers: one line per
    question, one choice per repeat, in the run's question order; texts: the run's answer texts
    (answers.jsonl) as the turns' texts, else placeholders."""
    rows = pd.read_csv(run_dir / "questions.csv", dtype={"accepted_per_pos": str})
    said = {}
    if texts:
        for line in (run_dir / "answers.jsonl").read_text().splitlines():
            a = json.loads(line)
            said[a["repeat"], a["question_id"], a["turn"]] = a["text"]
    k = int(rows.k.iloc[0])
    lines = []
    for qid in dict.fromkeys(rows.question_id):
        mine = rows[rows.question_id == qid]
        choices = []
        for repeat, turns in mine.groupby("repeat", sort=True):
            turns = turns.sort_values("turn")
            choices.append(
                spec_bench_choice(
                    int(repeat),
                    [entries_from_row(r, k) for r in turns.itertuples()],
                    [int(t) for t in turns.generated_tokens],
                    texts=[said[int(repeat), int(qid), int(t)] for t in turns.turn] if texts else None,
                )
            )
        lines.append(spec_bench_line(int(qid), str(mine.category.iloc[0]), choices, model_id))
    return write_lines(out, lines)


def aiperf_record(
    conversation: str,
    turn_index: int,
    histogram: dict[int, int],
    k: int | None,
    per_step: list[int] | None = None,
    completion_tokens: int | None = None,
    phase: str = "profiling",
    engine: str = "vllm",
) -> dict:
    """profile_export.jsonl: {metadata, metrics, spec_decode_acceptance, error}; histogram keys are
    strings on the wire."""
    steps = sum(histogram.values())
    accepted = sum(j * n for j, n in histogram.items())
    drafted = steps * (k or 0)
    record = {
        "engine": engine,
        "mean_acceptance_length": 1 + accepted / steps,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": {str(j): n for j, n in histogram.items() if n},
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_steps": steps,
        "num_spec_tokens": k,
        "completion_tokens": completion_tokens,
        "per_step_accepted": per_step,
        "per_step_drafted": None if per_step is None else [k] * len(per_step),
    }
    return {
        "metadata": {
            "session_num": 0,
            "x_request_id": "r",
            "x_correlation_id": "c",
            "conversation_id": conversation,
            "turn_index": turn_index,
            "request_start_ns": 1,
            "request_end_ns": 2,
            "worker_id": "w",
            "record_processor_id": "p",
            "benchmark_phase": phase,
            "was_cancelled": False,
            "cancellation_time_ns": None,
        },
        "metrics": {"output_sequence_length": {"value": completion_tokens, "unit": "tokens"}},
        "spec_decode_acceptance": record,
        "error": None,
    }


def vllm_printout_new(
    output_tokens: int, drafts: int, draft_tokens: int, accepted: int, per_pos_counts: list[int]
) -> str:
    """spec_decode.py (num_drafts: ... / acceptance at token i: ...), amid vLLM's log lines."""
    lines = [
        "INFO 01-01 00:00:00 [llm.py:1] Supported tasks: ['generate']",
        "-" * 50,
        f"total_num_output_tokens: {output_tokens}",
        f"num_drafts: {drafts}",
        f"num_draft_tokens: {draft_tokens}",
        f"num_accepted_tokens: {accepted}",
        f"mean acceptance length: {1 + accepted / drafts:.2f}",
        "-" * 50,
    ]
    lines += [f"acceptance at token {i}: {n / drafts:.2f}" for i, n in enumerate(per_pos_counts)]
    return "\n".join(lines) + "\n"


def vllm_printout_old(output_tokens: int, drafts: int, draft_tokens: int, accepted: int) -> str:
    """The other version: "{:<40} {:<10}"-style labels with values left-aligned in 10 columns."""
    lines = [
        "=========== Speculative Decoding Stats ============",
        f"Total input tokens:                      {12345:<10}",
        f"Total output tokens:                     {output_tokens:<10}",
        "",
        f"Input token throughput (tok/s):          {1234.5:<10.2f}",
        f"Output token throughput (tok/s):         {99.25:<10.2f}",
        "",
        f"Number of drafts:                        {drafts:<10}",
        f"Draft tokens generated:                  {draft_tokens:<10}",
        f"Draft utilization rate:                  {100 * accepted / draft_tokens:<10.1f}",
        f"Accepted tokens:                         {accepted:<10}",
        f"Mean acceptance length:                  {1 + accepted / drafts:<10.2f}",
        "====================================================",
    ]
    return "\n".join(lines) + "\n"


def bench_serve_result(
    model_id: str, drafts: int, draft_tokens: int, accepted: int, per_pos_counts: list[int]
) -> dict:
    """`vllm bench serve --save-result`: the run's settings, its metrics, then the spec-decode deltas."""
    return {
        "date": "20260101-000000",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": 80,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 1,
        "duration": 100.0,
        "completed": 80,
        "failed": 0,
        "total_input_tokens": 5000,
        "total_output_tokens": 20000,
        "request_throughput": 0.8,
        "request_goodput": None,
        "output_throughput": 200.0,
        "total_token_throughput": 250.0,
        "max_output_tokens_per_s": 250.0,
        "max_concurrent_requests": 1,
        "rtfx": 0.0,
        "spec_decode_acceptance_rate": 100 * accepted / draft_tokens,
        "spec_decode_acceptance_length": 1 + accepted / drafts,
        "spec_decode_num_drafts": drafts,
        "spec_decode_draft_tokens": draft_tokens,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_per_position_acceptance_rates": [n / drafts for n in per_pos_counts],
        "mean_ttft_ms": 20.0,
        "median_ttft_ms": 19.0,
        "std_ttft_ms": 2.0,
        "p99_ttft_ms": 30.0,
    }


def sglang_record(batch: int, steps: int, topk: int, tokens: int, acc_length: float) -> dict:
    """bench_speculative.py: one record per (batch, steps, topk, num_draft_tokens)."""
    step_time = 0.01234
    return {
        "batch_size": batch,
        "steps": steps,
        "topk": topk,
        "num_draft_tokens": tokens,
        "acc_length": acc_length,
        "step_time": step_time,
        "speed": round(acc_length / step_time, 3),
        "completion_tokens": 512.0,
    }
