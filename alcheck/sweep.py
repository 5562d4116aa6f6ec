"""The K x repeat sweep behind `alcheck run`: prompts -> runner -> questions.csv + run.json.

Results are written after every (K, repeat) cell (CSV rows first, then run.json atomically), so
an interrupted run is a valid partial run and `--resume` recomputes only the missing cells. Each
cell depends only on (config, K, repeat): request order is shuffled from (seed, repeat), and the
sampling seed (temperature > 0) from (seed, K, repeat, turn), so a resumed run equals an
uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from alcheck import __version__
from alcheck.config import RunConfig
from alcheck.engine.config import RunnerConfig
from alcheck.engine.runner import SpecRunner
from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize
from alcheck.models.attention import pick_backend
from alcheck.prompts.dataset import dataset_name, load_questions
from alcheck.prompts.protocols import answer_text, build_prompt_ids
from alcheck.references import load_references, select_references
from alcheck.report.run_io import QUESTION_COLUMNS, QUESTIONS_FILE, RUN_FILE, RUN_SCHEMA, read_questions

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class AuditFailure(Exception):
    """A normal run (lookahead on) wrote KV outside a request's blocks: a runner bug."""


def resolve_device(spec: str) -> str:
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cuda" and not torch.cuda.is_available():
        raise AlcheckError("--device cuda: no CUDA device is visible: use --device cpu (or auto)")
    return spec


def resolve_dtype(spec: str, device: str, checkpoint_dir: Path) -> str:
    if spec != "auto":
        return spec
    if device == "cpu":
        return "float32"  # the lossless check is exact only in float32
    raw = json.loads((checkpoint_dir / "config.json").read_text())
    dtype = raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"
    return dtype if dtype in DTYPES else "bfloat16"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def default_out_dir(cfg: RunConfig) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

    def short(spec):
        return Path(spec.rstrip("/")).name.replace("/", "_") or "model"

    return Path("results") / "runs" / f"{stamp}-{short(cfg.target)}-{short(cfg.draft)}"


@dataclass
class Cell:
    k: int
    repeat: int
    rows: list[dict]
    wall_s: float
    generated_tokens: int
    steps: int
    slot_violations: int | None
    varied: str

    def record(self) -> dict:
        out = {"k": self.k, "repeat": self.repeat, "wall_s": round(self.wall_s, 4),
               "generated_tokens": self.generated_tokens, "steps": self.steps, "varied": self.varied}
        if self.slot_violations is not None:
            out["slot_violations"] = self.slot_violations
        return out


class Sweep:
    """Loads the pair, builds prompts, runs and saves every missing (K, repeat) cell."""

    def __init__(self, cfg: RunConfig, out_dir: Path, resume: bool = False):
        self.cfg, self.out_dir = cfg, Path(out_dir)
        self.questions = load_questions(cfg.dataset, cfg.limit)
        refs = select_references(load_references(), cfg.reference, cfg.target, cfg.draft, cfg.method,
                                 dataset_name(cfg.dataset))
        self.references = [r.to_dict() for r in refs]
        self.meta = self._open(resume)
        self.done = {(c["k"], c["repeat"]) for c in self.meta["cells"]}
        self.target = self.head = None
        self._reference_outputs: dict[tuple[int, ...], list[int]] = {}

    # -- run directory -----------------------------------------------------------------------

    def _open(self, resume: bool) -> dict:
        run_json = self.out_dir / RUN_FILE
        if resume:
            if not run_json.is_file():
                raise AlcheckError(f"--resume {self.out_dir}: no {RUN_FILE} there: pass a directory an earlier run wrote")
            try:
                meta = json.loads(run_json.read_text())
                if meta.get("schema") != RUN_SCHEMA:
                    raise AlcheckError(f"--resume {self.out_dir}: {RUN_FILE} is not an {RUN_SCHEMA} run: start a new run")
                old = RunConfig.from_dict(meta["config"]).result_settings()
                meta["cells"] = [c for c in meta["cells"] if {"k", "repeat"} <= set(c)]
            except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
                raise AlcheckError(f"--resume {self.out_dir}: {RUN_FILE} is corrupt: start a new run with another --out") from None
            new = self.cfg.result_settings()
            diff = [k for k in new if old.get(k) != new[k]]
            if diff:
                detail = ", ".join(f"{k}: {old.get(k)!r} there vs {new[k]!r} now" for k in diff[:3])
                raise AlcheckError(f"--resume {self.out_dir} was made with a different config ({detail}): "
                                   "resume with the same settings or use a new --out")
            self._drop_unrecorded_rows(meta)
            meta["config"] = self.cfg.to_dict()
            return meta
        if run_json.exists():
            raise AlcheckError(f"--out {self.out_dir} already holds a run: pass --resume {self.out_dir} to finish it, or another --out")
        if (self.out_dir / QUESTIONS_FILE).exists():
            raise AlcheckError(f"--out {self.out_dir} holds a {QUESTIONS_FILE} but no {RUN_FILE}: pass another --out or move that file away")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return {
            "schema": RUN_SCHEMA, "status": "partial",
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": self.cfg.to_dict(), "environment": {}, "cells": [], "summary": [],
            "references": self.references,
        }

    def _drop_unrecorded_rows(self, meta: dict):
        """Rows of a cell that was cut off before run.json recorded it are recomputed."""
        csv_path = self.out_dir / QUESTIONS_FILE
        if not csv_path.is_file():
            return
        done = {(c["k"], c["repeat"]) for c in meta["cells"]}
        try:
            frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
            keep = frame[[(int(k), int(r)) in done for k, r in zip(frame["k"], frame["repeat"])]]
        except (KeyError, ValueError, pd.errors.ParserError):
            raise AlcheckError(f"--resume {self.out_dir}: {QUESTIONS_FILE} is corrupt: start a new run with another --out") from None
        keep.to_csv(csv_path, index=False)

    def _append_rows(self, rows: list[dict]):
        csv_path = self.out_dir / QUESTIONS_FILE
        columns = QUESTION_COLUMNS + (["identical", "first_diff"] if self.cfg.check_lossless else [])
        new = not csv_path.is_file() or csv_path.stat().st_size == 0
        with csv_path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())

    def _write_meta(self):
        tmp = self.out_dir / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(self.meta, indent=2) + "\n")
        os.replace(tmp, self.out_dir / RUN_FILE)

    # -- models ------------------------------------------------------------------------------

    def load_models(self):
        from alcheck.models.loading import load_eagle, load_target, resolve_checkpoint

        cfg = self.cfg
        device = resolve_device(cfg.device)
        dtype = resolve_dtype(cfg.dtype, device, resolve_checkpoint(cfg.target, "target"))
        self.device, self.dtype = device, dtype
        self.target = load_target(cfg.target, DTYPES[dtype], device)
        self.head = load_eagle(cfg.draft, self.target, DTYPES[dtype], device)
        tok = self.target.tokenizer
        self.prompts_turn1 = [build_prompt_ids(tok, cfg.system_prompt, q.turns[:1]) for q in self.questions]
        backend = pick_backend(torch.device(device), cfg.block_size, DTYPES[dtype])
        if cfg.runner == "contiguous":
            backend = "torch-sdpa (contiguous)"
        self.meta["environment"] = {
            "alcheck": __version__, "torch": torch.__version__, "transformers": _version("transformers"),
            "python": platform.python_version(), "platform": platform.platform(),
            "device": device, "device_name": device_name(device), "dtype": dtype,
            "attention_backend": "torch-sdpa" if backend == "torch" else backend,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        }

    # -- the sweep ---------------------------------------------------------------------------

    def pending(self) -> list[tuple[int, int]]:
        return [(k, r) for k in self.cfg.ks for r in range(self.cfg.repeats) if (k, r) not in self.done]

    def num_generations(self) -> int:
        return sum(min(self.cfg.turns, len(q.turns)) for q in self.questions)

    def run(self, on_cell_start=None, on_progress=None, on_cell_done=None) -> dict:
        if self.target is None:
            self.load_models()
        self._write_meta()
        for k, repeat in self.pending():
            if on_cell_start:
                on_cell_start(k, repeat)
            cell = self.run_cell(k, repeat, on_progress)
            self._append_rows(cell.rows)
            self.meta["cells"].append(cell.record())
            self.done.add((k, repeat))
            self._refresh_summary()
            self._write_meta()
            if on_cell_done:
                on_cell_done(cell)
            if cell.slot_violations and self.cfg.kv_lookahead:
                raise AuditFailure(
                    f"slot audit: {cell.slot_violations} KV writes landed outside their request's blocks at K={k} "
                    f"repeat {repeat} with lookahead slots on: this is a runner bug (results kept in {self.out_dir})"
                )
        self.meta["status"] = "complete"
        self._write_meta()
        return self.meta

    def _refresh_summary(self):
        questions = read_questions(self.out_dir / QUESTIONS_FILE)
        self.meta["summary"] = summarize(questions, self.meta["cells"], seed=self.cfg.seed)

    def run_cell(self, k: int, repeat: int, on_progress=None) -> Cell:
        cfg, tok = self.cfg, self.target.tokenizer
        order = list(range(len(self.questions)))
        random.Random(f"{cfg.seed}:{repeat}").shuffle(order)
        varied = f"request order and batch composition shuffled with seed {cfg.seed}:{repeat}"
        if cfg.temperature > 0:
            varied += "; sampling seed varies per K, repeat and turn"
        rows, violations, start = [], 0 if cfg.audit_slots else None, time.perf_counter()
        answers: dict[int, str] = {}
        for turn in range(1, cfg.turns + 1):
            idx = [i for i in order if len(self.questions[i].turns) >= turn]
            if not idx:
                break
            if turn == 1:
                prompts = [self.prompts_turn1[i] for i in idx]
            else:
                prompts = [build_prompt_ids(tok, cfg.system_prompt, self.questions[i].turns[:turn], [answers[i]]) for i in idx]
            seed = cfg.seed + 7919 * repeat + 104729 * k + 13 * turn
            results, cell_violations = self._generate(prompts, k, seed, on_progress)
            if violations is not None:
                violations += cell_violations
            refs = self._target_only(prompts) if cfg.check_lossless else None
            for j, (i, res) in enumerate(zip(idx, results)):
                q = self.questions[i]
                answers[i] = answer_text(tok, res.output_ids, self.target.eos_token_ids)
                row = {
                    "k": k, "repeat": repeat, "question_id": q.question_id, "turn": turn, "category": q.category,
                    "prompt_tokens": res.prompt_tokens, "generated_tokens": len(res.output_ids), "steps": res.steps,
                    "drafted": res.drafted, "accepted": res.accepted,
                    "accepted_per_pos": ";".join(str(x) for x in res.accepted_per_pos),
                }
                if refs is not None:
                    diff = first_difference(res.output_ids, refs[j])
                    row["identical"] = int(diff is None)
                    row["first_diff"] = "" if diff is None else diff
                rows.append(row)
        position = {q.question_id: i for i, q in enumerate(self.questions)}
        rows.sort(key=lambda r: (position[r["question_id"]], r["turn"]))  # file order, whatever ran first
        return Cell(k, repeat, rows, time.perf_counter() - start, sum(r["generated_tokens"] for r in rows),
                    sum(r["steps"] for r in rows), violations, varied)

    def _runner_config(self, k: int, seed: int) -> RunnerConfig:
        cfg = self.cfg
        return RunnerConfig(num_spec_tokens=k, block_size=cfg.block_size, num_blocks=cfg.num_blocks,
                            max_batch_size=cfg.max_batch_size, kv_lookahead=cfg.kv_lookahead,
                            temperature=cfg.temperature, seed=seed, audit_slots=cfg.audit_slots, device=self.device)

    def _generate(self, prompts, k, seed, on_progress):
        cfg = self.cfg
        if cfg.runner == "contiguous":
            from alcheck.engine.contiguous import generate_contiguous

            results = generate_contiguous(self.target.model, self.head, self.target.eos_token_ids, prompts,
                                          cfg.max_tokens, k, temperature=cfg.temperature, seed=seed)
            if on_progress:
                on_progress(len(prompts), sum(len(r.output_ids) for r in results))
            return results, 0
        runner = SpecRunner(self.target.model, self.head, self.target.eos_token_ids, self._runner_config(k, seed))
        results = runner.generate(prompts, cfg.max_tokens, progress=on_progress)
        return results, (runner.auditor.violations if runner.auditor else 0)

    def _target_only(self, prompts) -> list[list[int]]:
        """Target-only greedy outputs (the lossless oracle), computed once per distinct prompt."""
        missing = [p for p in dict.fromkeys(tuple(p) for p in prompts) if p not in self._reference_outputs]
        if missing:
            runner = SpecRunner(self.target.model, None, self.target.eos_token_ids, self._runner_config(0, self.cfg.seed))
            for p, res in zip(missing, runner.generate([list(p) for p in missing], self.cfg.max_tokens)):
                self._reference_outputs[p] = res.output_ids
        return [self._reference_outputs[tuple(p)] for p in prompts]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001
        return "unknown"
