"""Fabricate realistic run directories (run.json + questions.csv) without any model.

The simulation follows the EAGLE chain-drafting process closely enough for the statistics:
- every question has a difficulty z ~ N(0, 1) fixed by `question_seed` (shared by every K,
  repeat and run made with the same question_seed: "the same MT-Bench questions");
- a generation of question q at K accepts a ~ min(K, Geometric) drafts per step with
  P(a >= i) = p_q ** i, p_q = sigmoid(base_K + question_sd * z_q); base_K is calibrated so the
  expected pooled AL of the run equals the requested `al_by_k[K]`;
- each generation needs L - 1 tokens after the prefill token (L fixed per question and turn,
  many hit max_tokens); it takes steps until Σ(1 + a) >= L - 1; counts are taken before
  truncation, exactly as alcheck counts them;
- `seed` drives the step-level draws, so two runs with the same question_seed and different
  seeds differ the way two nondeterministic GPU runs of the same questions do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from alcheck.metrics.acceptance import summarize

MT_BENCH_CATEGORIES = [
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
]
QUESTION_COLUMNS = [
    "k",
    "repeat",
    "question_id",
    "turn",
    "category",
    "prompt_tokens",
    "generated_tokens",
    "steps",
    "drafted",
    "accepted",
    "accepted_per_pos",
]


def al_of_p(p, k: int):
    """Expected tokens per step when P(a >= i) = p**i, i <= k: 1 + Σ p**i."""
    p = np.asarray(p, dtype=float)
    return 1.0 + sum(p**i for i in range(1, k + 1))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _calibrate(target: float, k: int, z: np.ndarray, lengths: np.ndarray, sd: float) -> float:
    """base logit so that the expected pooled AL Σ L / Σ (L / AL_q) equals target."""
    if not 1.0 < target < 1.0 + k:
        raise ValueError(f"AL {target} impossible for K={k} (must lie in (1, {1 + k}))")
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = (lo + hi) / 2
        al_q = al_of_p(_sigmoid(mid + sd * z), k)
        pooled = lengths.sum() / (lengths / al_q).sum()
        lo, hi = (mid, hi) if pooled < target else (lo, mid)
    return (lo + hi) / 2


def _questions_frame(
    n_questions: int, turns: int, question_seed: int, max_tokens: int, categories, first_id: int
) -> pd.DataFrame:
    rng = np.random.default_rng(question_seed)
    ids = np.arange(first_id, first_id + n_questions)
    z = rng.standard_normal(n_questions)
    rows = []
    for turn in range(1, turns + 1):
        # turn 2 follows turn 1's difficulty with some change
        z_turn = z if turn == 1 else 0.8 * z + 0.6 * rng.standard_normal(n_questions)
        long = rng.random(n_questions) < 0.5
        lengths = np.where(
            long, max_tokens, rng.integers(max(2, max_tokens // 4), max_tokens + 1, n_questions)
        )
        prompts = rng.integers(20, 200, n_questions) + (turn - 1) * 300
        for i in range(n_questions):
            rows.append(
                {
                    "question_id": int(ids[i]),
                    "turn": turn,
                    "category": categories[(i * len(categories)) // n_questions],
                    "z": float(z_turn[i]),
                    "length": int(lengths[i]),
                    "prompt_tokens": int(prompts[i]),
                }
            )
    return pd.DataFrame(rows)


def make_questions(
    al_by_k: dict[int, float],
    *,
    n_questions: int = 80,
    turns: int = 1,
    repeats: int = 3,
    question_sd: float = 0.6,
    seed: int = 0,
    question_seed: int = 0,
    max_tokens: int = 256,
    categories=MT_BENCH_CATEGORIES,
    first_id: int = 81,
    lossless: bool = False,
    category_shift: dict[str, float] | None = None,
) -> pd.DataFrame:
    """questions.csv rows for the given true AL per K (see module docstring).

    category_shift adds a logit shift to every question of a category (run-specific effect).
    """
    base = _questions_frame(n_questions, turns, question_seed, max_tokens, categories, first_id)
    if category_shift:
        base["z_shift"] = base["category"].map(category_shift).fillna(0.0).astype(float)
    else:
        base["z_shift"] = 0.0
    frames = []
    for k in sorted(al_by_k):
        rng = np.random.default_rng([seed, k])  # per K: adding a K leaves the others unchanged
        b = _calibrate(al_by_k[k], k, base["z"].to_numpy(), base["length"].to_numpy(float), question_sd)
        p = np.clip(
            _sigmoid(b + question_sd * base["z"].to_numpy() + base["z_shift"].to_numpy()), 1e-9, 1 - 1e-9
        )
        need = base["length"].to_numpy() - 1  # tokens after the prefill token
        width = max(int(need.max()), 1)
        for repeat in range(repeats):
            u = rng.random((len(base), width))
            a = np.minimum(k, np.floor(np.log(u) / np.log(p)[:, None])).astype(np.int64)
            emitted = np.cumsum(1 + a, axis=1)
            steps = np.argmax(emitted >= np.maximum(need, 1)[:, None], axis=1) + 1
            steps = np.where(need <= 0, 0, steps)
            taken = np.arange(width)[None, :] < steps[:, None]
            a_taken = np.where(taken, a, 0)
            per_pos = np.stack([((a_taken >= i) & taken).sum(axis=1) for i in range(1, k + 1)], axis=1)
            frame = pd.DataFrame(
                {
                    "k": k,
                    "repeat": repeat,
                    "question_id": base["question_id"],
                    "turn": base["turn"],
                    "category": base["category"],
                    "prompt_tokens": base["prompt_tokens"],
                    "generated_tokens": base["length"],
                    "steps": steps,
                    "drafted": steps * k,
                    "accepted": a_taken.sum(axis=1),
                    "accepted_per_pos": [";".join(map(str, row)) for row in per_pos],
                }
            )
            if lossless:
                frame["identical"] = 1
                frame["first_diff"] = pd.Series([pd.NA] * len(frame), dtype="Int64")
            frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    order = ["k", "repeat", "question_id", "turn"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)


def reference(name: str, values: dict, *, protocol: str = "vllm-example", **fields) -> dict:
    """A reference table dict in the results/references format."""
    table = {
        "name": name,
        "source": "https://example.invalid/" + name,
        "target": "meta-llama/Llama-3.1-8B-Instruct",
        "draft": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
        "method": "eagle",
        "protocol": protocol,
        "dataset": "mt_bench",
        "max_tokens": 256,
        "temperature": 0.0,
        "notes": "fabricated for tests",
        "values": {str(k): v for k, v in values.items()},
    }
    table.update(fields)
    return table


def make_cells(
    questions: pd.DataFrame, *, tokens_per_s: float = 250.0, slot_violations: int | None = None
) -> list[dict]:
    cells = []
    for (k, repeat), group in questions.groupby(["k", "repeat"], sort=True):
        generated = int(group["generated_tokens"].sum())
        cell = {
            "k": int(k),
            "repeat": int(repeat),
            "wall_s": generated / tokens_per_s,
            "generated_tokens": generated,
            "steps": int(group["steps"].sum()),
            "varied": f"request order shuffled with seed {1000 + int(repeat)}",
        }
        if slot_violations is not None:
            cell["slot_violations"] = slot_violations
        cells.append(cell)
    return cells


def make_meta(
    questions: pd.DataFrame,
    *,
    status: str = "complete",
    references=(),
    config: dict | None = None,
    tokens_per_s: float = 250.0,
    slot_violations: int | None = None,
    n_boot: int = 500,
) -> dict:
    ks = sorted(int(k) for k in questions["k"].unique()) if len(questions) else []
    cfg = {
        "target": "meta-llama/Llama-3.1-8B-Instruct",
        "draft": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
        "method": "eagle",
        "ks": ks,
        "repeats": int(questions["repeat"].nunique()) if len(questions) else 1,
        "dataset": "mt_bench",
        "protocol": "vllm-example",
        "max_tokens": 256,
        "temperature": 0.0,
        "limit": None,
        "device": "cuda",
        "dtype": "float16",
        "max_batch_size": 16,
        "block_size": 16,
        "kv_lookahead": True,
        "seed": 0,
        "reference": "auto",
        "system_prompt": None,
        "turns": int(questions["turn"].max()) if len(questions) else 1,
        "runner": "alcheck",
        "check_lossless": "identical" in questions.columns,
        "audit_slots": slot_violations is not None,
    }
    cfg.update(config or {})
    cells = make_cells(questions, tokens_per_s=tokens_per_s, slot_violations=slot_violations)
    return {
        "schema": "alcheck.run/1",
        "status": status,
        "created": "2026-11-29T12:00:00Z",
        "config": cfg,
        "environment": {
            "alcheck": "0.1.0",
            "torch": "2.5.1",
            "transformers": "4.46.0",
            "python": "3.11.9",
            "device_name": "NVIDIA H200",
            "dtype": cfg["dtype"],
            "attention_backend": "torch-sdpa",
            "platform": "Linux",
            "cpu_count": 2,
        },
        "cells": cells,
        "summary": summarize(questions, cells, n_boot=n_boot),
        "references": list(references),
    }


def write_run_dir(path, meta: dict, questions: pd.DataFrame | None) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if questions is not None:
        extra = [c for c in ("identical", "first_diff") if c in questions.columns]
        questions[QUESTION_COLUMNS + extra].to_csv(path / "questions.csv", index=False)
    return path


def make_run(
    path,
    al_by_k: dict[int, float],
    *,
    status: str = "complete",
    references=(),
    config: dict | None = None,
    tokens_per_s: float = 250.0,
    slot_violations: int | None = None,
    write_questions: bool = True,
    **question_kwargs,
) -> Path:
    """Write a complete fake run dir; question_kwargs go to make_questions."""
    questions = make_questions(al_by_k, **question_kwargs)
    meta = make_meta(
        questions,
        status=status,
        references=references,
        config=config,
        tokens_per_s=tokens_per_s,
        slot_violations=slot_violations,
    )
    return write_run_dir(path, meta, questions if write_questions else None)
