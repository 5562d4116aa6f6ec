"""The K x repeat sweep behind `alcheck run`: prompts -> runner -> questions.csv + run.json.

Results are written after every (K, repeat) cell (CSV rows first, then run.json atomically), so
an interrupted run is a valid partial run and `--resume` recomputes only the missing cells. Each
cell depends only on (config, K, repeat): request order is shuffled from (seed, repeat), and the
sampling seed (temperature > 0) from (seed, K, repeat, turn), so a resumed run equals an
uninterrupted one.

Models load in two phases: `prepare()` finds both checkpoints, checks the draft's config against
the target's, builds every prompt and checks it against the target's context (seconds, nothing
allocated); only then `load_weights()` reads the weights. The caller claims the run directory
(alcheck.run_dir) before either.
"""

from __future__ import annotations

import csv
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
from alcheck.engine.kv_budget import check_device_weights
from alcheck.engine.runner import NonFiniteLogits, SpecRunner
from alcheck.device_info import device_name
from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize
from alcheck.metrics.noise import declared_deterministic
from alcheck.models.attention import pick_backend
from alcheck.models.compat import check_draft_config, context_limit, positions_needed
from alcheck.prompts.dataset import dataset_name, load_questions
from alcheck.prompts.protocols import answer_text, build_prompt_ids, protocol_of
from alcheck.prompts.tokenizer import load_tokenizer, prompt_hash
from alcheck.references import load_references, select_references
from alcheck.report.run_io import (LOSSLESS_COLUMNS, QUESTIONS_FILE, RUN_FILE, RUN_SCHEMA, read_json,
                                   read_questions, written_columns)
from alcheck.run_dir import write_json_atomic

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class AuditFailure(Exception):
    """A normal run (lookahead on) wrote KV outside a request's blocks: a runner bug."""


def resolve_device(spec: str, flag: str = "--device") -> str:
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise AlcheckError(f"{flag} {spec}: no CUDA device is visible: use {flag} cpu"
                           f"{' (or auto)' if flag == '--device' else ''}")
    if spec.startswith("cuda:") and int(spec[5:]) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise AlcheckError(f"{flag} {spec}: this machine has {count} CUDA device{'s' * (count != 1)} "
                           f"(cuda:0..cuda:{count - 1}): pass one of those")
    return spec


def resolve_dtype(spec: str, device: str, target_config: dict) -> str:
    if spec != "auto":
        return spec
    if device == "cpu":
        return "float32"  # the lossless check is exact only in float32
    dtype = target_config.get("torch_dtype") or target_config.get("dtype") or "bfloat16"
    return dtype if dtype in DTYPES else "bfloat16"


def default_out_dir(cfg: RunConfig) -> Path:
    """results/runs/<time>-<target>-<draft>; claim_run_dir(fresh=True) makes it unique."""
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
    skipped: list[dict] | None = None  # later turns that outgrew the context (--skip-long)

    def record(self) -> dict:
        out = {"k": self.k, "repeat": self.repeat, "wall_s": round(self.wall_s, 4),
               "generated_tokens": self.generated_tokens, "steps": self.steps, "varied": self.varied}
        if self.slot_violations is not None:
            out["slot_violations"] = self.slot_violations
        if self.skipped:
            out["skipped"] = self.skipped
        return out


class Sweep:
    """Loads the pair, builds prompts, runs and saves every missing (K, repeat) cell."""

    def __init__(self, cfg: RunConfig, out_dir: Path, resume: bool = False):
        self.cfg, self.out_dir = cfg, Path(out_dir)
        from alcheck.models.head_kind import resolve_method

        cfg.method = resolve_method(cfg.method, cfg.draft)  # auto -> eagle/eagle3 before references and run.json
        self.questions = load_questions(cfg.dataset, cfg.limit)
        refs = select_references(load_references(), cfg.reference, cfg.target, cfg.draft, cfg.method,
                                 dataset_name(cfg.dataset))
        self.references = [r.to_dict() for r in refs]
        self.meta = self._open(resume)
        self.done = {(c["k"], c["repeat"]) for c in self.meta["cells"]}
        self.target = self.head = self.tokenizer = None
        self.turns_to_run = [min(cfg.turns, len(q.turns)) for q in self.questions]
        self._reference_outputs: dict[tuple[int, ...], list[int]] = {}

    # -- run directory -----------------------------------------------------------------------

    def _open(self, resume: bool) -> dict:
        run_json = self.out_dir / RUN_FILE
        if resume:
            if not run_json.is_file():
                raise AlcheckError(f"--resume {self.out_dir}: no {RUN_FILE} there: pass a directory an earlier run wrote")
            try:
                meta = read_json(run_json, RUN_FILE)
                if meta.get("schema") != RUN_SCHEMA:
                    raise AlcheckError(f"--resume {self.out_dir}: {RUN_FILE} is not an {RUN_SCHEMA} run: start a new run")
                old = RunConfig.from_dict(meta["config"]).result_settings()
                meta["cells"] = [c for c in meta["cells"] if {"k", "repeat"} <= set(c)]
            except (AlcheckError, AttributeError, KeyError, TypeError, ValueError):
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
        """Rows of a cell that was cut off before run.json recorded it are recomputed. The file is
        rewritten with today's columns: rows of older runs get an empty prompt_hash."""
        csv_path = self.out_dir / QUESTIONS_FILE
        if not csv_path.is_file():
            return
        done = {(c["k"], c["repeat"]) for c in meta["cells"]}
        try:
            frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
            keep = frame[[(int(k), int(r)) in done for k, r in zip(frame["k"], frame["repeat"])]]
        except (KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            raise AlcheckError(f"--resume {self.out_dir}: {QUESTIONS_FILE} is corrupt: start a new run with another --out") from None
        # "\r\n" as csv.DictWriter's appends end: a resumed file is byte for byte an uninterrupted one
        keep.reindex(columns=self._columns(), fill_value="").to_csv(csv_path, index=False, lineterminator="\r\n")

    def _columns(self) -> list[str]:
        return written_columns(LOSSLESS_COLUMNS if self.cfg.check_lossless else [])

    def _append_rows(self, rows: list[dict]):
        csv_path = self.out_dir / QUESTIONS_FILE
        columns = self._columns()
        new = not csv_path.is_file() or csv_path.stat().st_size == 0
        with csv_path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())

    def _write_meta(self):
        write_json_atomic(self.out_dir / RUN_FILE, self.meta)

    # -- models ------------------------------------------------------------------------------

    def load_models(self):
        self.prepare()
        self.load_weights()

    def prepare(self):
        """Everything before the weights, so a bad pair or prompt fails in seconds: find both
        checkpoints, check the draft's config against the target's, build the prompts, check
        them against the target's context."""
        from alcheck.models.loading import read_config, resolve_checkpoint

        cfg = self.cfg
        self.target_dir = resolve_checkpoint(cfg.target, "target")
        self.draft_dir = resolve_checkpoint(cfg.draft, "draft")
        target_raw, draft_raw = read_config(self.target_dir, "target"), read_config(self.draft_dir, "draft")
        if cfg.method == "eagle3":
            from alcheck.models.eagle3_loading import check_config

            check_config(target_raw, draft_raw, self.target_dir, self.draft_dir)
        else:
            check_draft_config(target_raw, draft_raw, self.target_dir, self.draft_dir)
        self.context = context_limit(target_raw, self.target_dir)
        # --devices: one worker per device (alcheck.parallel); RunConfig made them all one kind, so one dtype
        self.devices = ([resolve_device(d, "--devices") for d in cfg.devices] if cfg.devices
                        else [resolve_device(cfg.device)])
        self.device = self.devices[0]
        self.dtype = resolve_dtype(cfg.dtype, self.device, target_raw)
        for device in dict.fromkeys(self.devices):  # on a GPU: exit 2 if they cannot fit
            check_device_weights(target_raw, draft_raw, self.dtype, device)
        self.tokenizer = load_tokenizer(self.target_dir, "target", cfg.chat_template)
        self.prompts_turn1 = [build_prompt_ids(self.tokenizer, protocol_of(cfg), q.turns[:1]) for q in self.questions]
        self._fit_context()

    def _fit_context(self):
        """Every generation must fit the target's context: prompt + max_tokens + K - 1 positions.

        A later turn's prompt holds the earlier answers, known only once they are generated, so
        it is bounded here by the prompt with one-letter answers plus max_tokens per earlier answer
        (answers re-tokenized as text can in rare cases exceed that; run_cell checks again).
        Too long: exit 2 naming the longest, or with --skip-long drop the question from that turn on.
        """
        cfg, k = self.cfg, max(self.cfg.ks)
        too_long = []
        for i, q in enumerate(self.questions):
            for turn in range(1, self.turns_to_run[i] + 1):
                if turn == 1:
                    prompt = len(self.prompts_turn1[i])
                else:
                    # "x", not "": FastChat formats treat an empty message as no message at all
                    short = build_prompt_ids(self.tokenizer, protocol_of(cfg), q.turns[:turn], ["x"] * (turn - 1))
                    prompt = len(short) + (turn - 1) * cfg.max_tokens
                need = positions_needed(prompt, cfg.max_tokens, k)
                if need > self.context:
                    too_long.append({"question_id": q.question_id, "turn": turn, "positions": need,
                                     "prompt_tokens": prompt})
                    self.turns_to_run[i] = turn - 1
                    break
        if too_long and not cfg.skip_long:
            worst = max(too_long, key=lambda x: x["positions"])
            earlier = (", counting each earlier answer at --max-tokens" if worst["turn"] > 1 else "")
            raise AlcheckError(
                f"question {worst['question_id']} turn {worst['turn']} needs {worst['positions']} positions "
                f"({worst['prompt_tokens']} prompt tokens{earlier} + {cfg.max_tokens} new + {k - 1} for K={k}'s drafts) "
                f"but the target's context (max_position_embeddings) is {self.context}; "
                f"{len(too_long)} of {len(self.questions)} questions do not fit: "
                "lower --max-tokens, or pass --skip-long to skip them")
        kept = [i for i, n in enumerate(self.turns_to_run) if n > 0]
        if not kept:
            raise AlcheckError(f"no question fits the target's context of {self.context} positions with "
                               f"--max-tokens {cfg.max_tokens}: lower --max-tokens")
        self.meta["context"] = {"limit": self.context, "skip_long": cfg.skip_long, "skipped": too_long}

    def load_weights(self):
        from alcheck.models.loading import load_eagle, load_target

        cfg, device, dtype = self.cfg, self.device, self.dtype
        self.target = load_target(str(self.target_dir), DTYPES[dtype], device, chat_template=cfg.chat_template)
        if cfg.method == "eagle3":
            from alcheck.models.eagle3_loading import load_eagle3

            self.head = load_eagle3(str(self.draft_dir), self.target, DTYPES[dtype], device)
        else:
            self.head = load_eagle(str(self.draft_dir), self.target, DTYPES[dtype], device)
        backend = pick_backend(torch.device(device), cfg.block_size, DTYPES[dtype])
        if cfg.runner == "contiguous":
            backend = "torch-sdpa (contiguous)"
        self.meta["environment"] = {
            "alcheck": __version__, "torch": torch.__version__, "transformers": _version("transformers"),
            "python": platform.python_version(), "platform": platform.platform(),
            "device": device, "device_name": device_name(device), "dtype": dtype,
            "attention_backend": "torch-sdpa" if backend == "torch" else backend,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "devices": list(self.devices),  # --devices: the parent records every worker's device
        }

    # -- worker processes (--devices, alcheck.parallel) --------------------------------------

    def worker_state(self) -> dict:
        """What a worker needs to compute cells, after prepare(): the prompts, not the run directory."""
        return {"config": self.cfg.to_dict(), "questions": self.questions, "prompts_turn1": self.prompts_turn1,
                "turns_to_run": self.turns_to_run, "context": self.context, "target_dir": str(self.target_dir),
                "draft_dir": str(self.draft_dir), "dtype": self.dtype}

    @classmethod
    def for_worker(cls, state: dict, device: str) -> "Sweep":
        """A sweep inside a worker process: run_cell() on `device`; it never touches the run directory."""
        self = cls.__new__(cls)
        self.cfg = RunConfig.from_dict(state["config"])
        self.out_dir, self.meta, self.done, self.references = None, {}, set(), []
        self.questions, self.prompts_turn1 = state["questions"], state["prompts_turn1"]
        self.turns_to_run, self.context = state["turns_to_run"], state["context"]
        self.target_dir, self.draft_dir = Path(state["target_dir"]), Path(state["draft_dir"])
        self.devices, self.device, self.dtype = [device], device, state["dtype"]
        self.target = self.head = None
        self._reference_outputs = {}
        self.tokenizer = None  # the target brings it (load_target calls load_tokenizer as prepare() does)
        return self

    # -- the sweep ---------------------------------------------------------------------------

    def pending(self) -> list[tuple[int, int]]:
        return [(k, r) for k in self.cfg.ks for r in range(self.cfg.repeats) if (k, r) not in self.done]

    def num_generations(self) -> int:
        return sum(self.turns_to_run)

    def run(self, on_cell_start=None, on_progress=None, on_cell_done=None) -> dict:
        if self.tokenizer is None:
            self.prepare()
        if len(self.devices) > 1:  # --devices: one worker process per device
            from alcheck.parallel import run_parallel

            return run_parallel(self, on_cell_start, on_progress, on_cell_done)
        if self.target is None:
            self.load_weights()
        self._write_meta()
        for k, repeat in self.pending():
            if on_cell_start:
                on_cell_start(k, repeat)
            cell = self.run_cell(k, repeat, on_progress)
            self.record_cell(cell)
            if on_cell_done:
                on_cell_done(cell)
            self.check_audit(cell)
        return self.finish()

    def _cell_order(self, k: int, repeat: int) -> tuple[int, int]:
        return self.cfg.ks.index(int(k)), int(repeat)  # pending()'s order: the files' order

    def record_cell(self, cell: Cell):
        """Save a finished cell: its rows into questions.csv, then run.json (atomically). A cell that
        finishes before an earlier one (--devices) is put in its place, so both files are those of
        a one-device run."""
        later = all(self._cell_order(cell.k, cell.repeat) > self._cell_order(c["k"], c["repeat"])
                    for c in self.meta["cells"])
        if later:
            self._append_rows(cell.rows)
        else:
            self._insert_rows(cell.rows)
        self.meta["cells"].append(cell.record())
        self.meta["cells"].sort(key=lambda c: self._cell_order(c["k"], c["repeat"]))
        self.done.add((cell.k, cell.repeat))
        self._refresh_summary()
        self._write_meta()

    def _insert_rows(self, rows: list[dict]):
        """questions.csv rewritten (temp file, then rename) with `rows` in their cell's place. The
        csv module both ways, so the bytes are those _append_rows would have written in order."""
        csv_path = self.out_dir / QUESTIONS_FILE
        columns = self._columns()
        with csv_path.open(newline="") as f:
            old = list(csv.DictReader(f, restval=""))
        merged = sorted(old + [{c: "" if r.get(c) is None else str(r[c]) for c in columns} for r in rows],
                        key=lambda r: self._cell_order(r["k"], r["repeat"]))  # stable: rows keep their order
        tmp = csv_path.with_name(f".{csv_path.name}.{os.getpid()}.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
            writer.writeheader()
            writer.writerows(merged)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, csv_path)

    def check_audit(self, cell: Cell):
        if cell.slot_violations and self.cfg.kv_lookahead:
            raise AuditFailure(
                f"slot audit: {cell.slot_violations} KV writes landed outside their request's blocks at K={cell.k} "
                f"repeat {cell.repeat} with lookahead slots on: this is a runner bug (results kept in {self.out_dir})"
            )

    def finish(self) -> dict:
        self.meta["status"] = "complete"
        self._write_meta()
        return self.meta

    def _refresh_summary(self):
        questions = read_questions(self.out_dir / QUESTIONS_FILE)
        self.meta["summary"] = summarize(questions, self.meta["cells"], seed=self.cfg.seed,
                                         declared=declared_deterministic(self.meta))

    def run_cell(self, k: int, repeat: int, on_progress=None) -> Cell:
        cfg, tok = self.cfg, self.tokenizer
        order = list(range(len(self.questions)))
        random.Random(f"{cfg.seed}:{repeat}").shuffle(order)
        varied = f"request order and batch composition shuffled with seed {cfg.seed}:{repeat}"
        if cfg.temperature > 0:
            varied += "; sampling seed varies per K, repeat and turn"
        rows, violations, start = [], 0 if cfg.audit_slots else None, time.perf_counter()
        answers: dict[int, list[str]] = {i: [] for i in order}
        skipped: list[dict] = []
        for turn in range(1, cfg.turns + 1):
            idx = [i for i in order if self.turns_to_run[i] >= turn and len(answers[i]) == turn - 1]
            if not idx:
                break
            if turn == 1:
                prompts = [self.prompts_turn1[i] for i in idx]
            else:
                prompts = [build_prompt_ids(tok, protocol_of(cfg), self.questions[i].turns[:turn], answers[i]) for i in idx]
                idx, prompts = self._fit_later_turn(idx, prompts, turn, k, skipped)
                if not idx:
                    break
            seed = cfg.seed + 7919 * repeat + 104729 * k + 13 * turn
            try:
                results, cell_violations = self._generate(prompts, k, seed, on_progress)
            except NonFiniteLogits as exc:  # name the question, not the runner's request index
                qid = self.questions[idx[exc.request_id]].question_id
                raise NonFiniteLogits(exc.request_id, exc.step, f"question {qid} turn {turn} (K={k}, repeat {repeat})") from None
            if violations is not None:
                violations += cell_violations
            refs = self._target_only(prompts) if cfg.check_lossless else None
            for j, (i, res) in enumerate(zip(idx, results)):
                q = self.questions[i]
                answers[i].append(answer_text(tok, res.output_ids, self.target.eos_token_ids))
                row = {
                    "k": k, "repeat": repeat, "question_id": q.question_id, "turn": turn, "category": q.category,
                    "prompt_tokens": res.prompt_tokens, "prompt_hash": prompt_hash(prompts[j]),
                    "generated_tokens": len(res.output_ids), "steps": res.steps,
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
        skipped.sort(key=lambda r: (position[r["question_id"]], r["turn"]))
        return Cell(k, repeat, rows, time.perf_counter() - start, sum(r["generated_tokens"] for r in rows),
                    sum(r["steps"] for r in rows), violations, varied, skipped)

    def _fit_later_turn(self, idx, prompts, turn, k, skipped):
        """The exact check of a later turn, now that its prompt is known (prepare() bounded it;
        re-tokenized answers can in rare cases come out longer than they were generated)."""
        keep = []
        for i, prompt in zip(idx, prompts):
            need = positions_needed(len(prompt), self.cfg.max_tokens, k)
            if need <= self.context:
                keep.append((i, prompt))
                continue
            qid = self.questions[i].question_id
            if not self.cfg.skip_long:
                raise AlcheckError(
                    f"question {qid} turn {turn} grew to {need} positions ({len(prompt)} prompt tokens with the "
                    f"earlier answers re-tokenized) at K={k}, over the target's context of {self.context}: "
                    "lower --max-tokens, or pass --skip-long to skip it")
            skipped.append({"question_id": qid, "turn": turn, "positions": need, "prompt_tokens": len(prompt)})
        return [i for i, _ in keep], [p for _, p in keep]

    def _runner_config(self, k: int, seed: int) -> RunnerConfig:
        cfg = self.cfg
        return RunnerConfig(num_spec_tokens=k, block_size=cfg.block_size, num_blocks=cfg.num_blocks,
                            max_batch_size=cfg.max_batch_size, kv_lookahead=cfg.kv_lookahead,
                            temperature=cfg.temperature, draft_sampling=cfg.draft_sampling, seed=seed,
                            audit_slots=cfg.audit_slots, device=self.device,
                            gpu_memory_utilization=cfg.gpu_memory_utilization)

    def _generate(self, prompts, k, seed, on_progress):
        cfg = self.cfg
        if cfg.runner == "contiguous":
            from alcheck.engine.contiguous import generate_contiguous

            results = generate_contiguous(self.target.model, self.head, self.target.eos_token_ids, prompts,
                                          cfg.max_tokens, k, temperature=cfg.temperature, seed=seed,
                                          draft_sampling=cfg.draft_sampling)
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
