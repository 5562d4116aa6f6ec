"""The K x repeat sweep behind `alcheck run`: prompts per turn -> a backend -> questions.csv rows.

The sweep owns the cell loop and nothing else: the run directory is a RunStore (run_store.py),
and whatever decodes is a Backend (backends/): the built-in runner, or a running vLLM / SGLang
server. Each cell depends only on (config, K, repeat): request order is shuffled from
(seed, repeat), and the sampling seed (temperature > 0) from (seed, K, repeat, turn), so a
resumed run equals an uninterrupted one.

Two phases: `prepare()` finds the target, lets the backend check what it needs (the head's
config, devices, or nothing for an engine), builds every prompt and checks it against the
target's context (seconds, nothing allocated); only then `load_weights()` loads the backend
(weights, or a connection to the server). The caller claims the run directory
(alcheck.run_dir) before either.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from alcheck.backends.base import make_backend
from alcheck.config import RunConfig
from alcheck.device_info import device_name  # noqa: F401 - bench/bench_loading.py imports it from here
from alcheck.engine.runner import NonFiniteLogits
from alcheck.errors import AlcheckError
from alcheck.models.compat import context_limit, positions_needed, shorten_fix
from alcheck.prompts.dataset import dataset_name, load_questions
from alcheck.prompts.protocols import answer_text, build_prompt_ids, protocol_of
from alcheck.prompts.tokenizer import load_tokenizer, prompt_hash
from alcheck.references import load_references, select_references
from alcheck.run_store import RunStore


class AuditFailure(Exception):
    """A normal run (lookahead on) wrote KV outside a request's blocks: a runner bug."""


def default_out_dir(cfg: RunConfig) -> Path:
    """results/runs/<time>-<target>-<draft or engine>; claim_run_dir(fresh=True) makes it unique."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

    def short(spec):
        return Path(spec.rstrip("/")).name.replace("/", "_") or "model"

    second = cfg.engine if getattr(cfg, "engine", None) else short(cfg.draft)
    return Path("results") / "runs" / f"{stamp}-{short(cfg.target)}-{second}"


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
    """Builds prompts, runs every missing (K, repeat) cell on a backend and saves it.

    write=False: the same loop, but nothing is written (a process other than the writer)."""

    def __init__(self, cfg: RunConfig, out_dir: Path, resume: bool = False, write: bool = True):
        self.cfg, self.out_dir = cfg, Path(out_dir) if out_dir is not None else None
        if cfg.draft:
            from alcheck.models.head_kind import resolve_method

            cfg.method = resolve_method(cfg.method, cfg.draft)  # auto -> eagle/eagle3 before references and run.json
        self.questions = load_questions(cfg.dataset, cfg.limit)
        refs = select_references(load_references(), cfg.reference, cfg.target, cfg.draft or "", cfg.method,
                                 dataset_name(cfg.dataset), topk=cfg.topk)
        self.store = RunStore(cfg, self.out_dir, resume=resume, references=[r.to_dict() for r in refs], write=write)
        self.backend = self.tokenizer = None
        self.loaded = False
        self.turns_to_run = [min(cfg.turns, len(q.turns)) for q in self.questions]
        self._reference_outputs: dict[tuple[int, ...], list[int]] = {}

    @property
    def meta(self) -> dict:
        return self.store.meta

    @property
    def done(self) -> set:
        return self.store.done

    # -- before the weights ------------------------------------------------------------------

    def prepare(self):
        """Everything before the weights, so a bad pair or prompt fails in seconds: find the
        target, let the backend check its side, build the prompts, check them against the
        target's context."""
        from alcheck.models.loading import read_config, resolve_checkpoint

        cfg = self.cfg
        self.target_dir = resolve_checkpoint(cfg.target, "target")
        target_raw = read_config(self.target_dir, "target")
        self.context = context_limit(target_raw, self.target_dir)
        self.tokenizer = load_tokenizer(self.target_dir, "target", cfg.chat_template)
        self.backend = make_backend(cfg, self.target_dir, target_raw, self.tokenizer, previous=self.meta.get("environment"))
        self.devices = list(getattr(self.backend, "devices", None) or ["-"])
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
                f"{shorten_fix(cfg.max_tokens, k)}, or pass --skip-long to skip them")
        kept = [i for i, n in enumerate(self.turns_to_run) if n > 0]
        if not kept:
            raise AlcheckError(f"no question fits the target's context of {self.context} positions with "
                               f"--max-tokens {cfg.max_tokens} and K={k}: {shorten_fix(cfg.max_tokens, k)}")
        self.meta["context"] = {"limit": self.context, "skip_long": cfg.skip_long, "skipped": too_long}

    def load_models(self):
        self.prepare()
        self.load_weights()

    def load_weights(self):
        """The backend's heavy part: the pair's weights, or the server connection and its checks."""
        self.backend.load()
        self.loaded = True
        self.meta["environment"] = self.backend.describe()

    # -- worker processes (--devices, alcheck.parallel) --------------------------------------

    def worker_state(self) -> dict:
        """What a worker needs to compute cells, after prepare(): the prompts, not the run directory."""
        return {"config": self.cfg.to_dict(), "questions": self.questions, "prompts_turn1": self.prompts_turn1,
                "turns_to_run": self.turns_to_run, "context": self.context, "target_dir": str(self.target_dir),
                "backend": self.backend.worker_state()}

    @classmethod
    def for_worker(cls, state: dict, device: str, tp=None) -> "Sweep":
        """A sweep inside a worker process: run_cell() on `device`; it never touches the run directory.
        tp: this process is a tensor-parallel rank (alcheck.tp.sweep_ranks) and loads its shard."""
        from alcheck.backends.builtin import BuiltinBackend

        self = cls.__new__(cls)
        self.cfg = RunConfig.from_dict(state["config"])
        self.out_dir, self.store = None, RunStore.in_memory(self.cfg)
        self.questions, self.prompts_turn1 = state["questions"], state["prompts_turn1"]
        self.turns_to_run, self.context = state["turns_to_run"], state["context"]
        self.target_dir = Path(state["target_dir"])
        self.backend = BuiltinBackend.for_worker(self.cfg, self.target_dir, state["backend"], device, tp=tp)
        self.devices, self.loaded = [device], False
        self._reference_outputs = {}
        self.tokenizer = load_tokenizer(self.target_dir, "target", self.cfg.chat_template)  # as prepare() does
        return self

    # -- the sweep ---------------------------------------------------------------------------

    def pending(self) -> list[tuple[int, int]]:
        return [(k, r) for k in self.cfg.ks for r in range(self.cfg.repeats) if (k, r) not in self.done]

    def num_generations(self) -> int:
        return sum(self.turns_to_run)

    def run(self, on_cell_start=None, on_progress=None, on_cell_done=None) -> dict:
        if self.tokenizer is None:
            self.prepare()
        if self.cfg.tensor_parallel_size > 1:  # N ranks, each with its shard of the target
            from alcheck.tp.sweep_ranks import run_tensor_parallel

            return run_tensor_parallel(self, on_cell_start, on_progress, on_cell_done)
        if len(self.devices) > 1:  # --devices: one worker process per device
            from alcheck.parallel import run_parallel

            return run_parallel(self, on_cell_start, on_progress, on_cell_done)
        try:
            if not self.loaded:
                self.load_weights()
            self.store.write_meta()
            for k, repeat in self.pending():
                self.backend.use_k(k)  # outside the cell's clock: an engine may start a server here
                if on_cell_start:
                    on_cell_start(k, repeat)
                cell = self.run_cell(k, repeat, on_progress)
                self.meta["environment"] = self.backend.describe()  # an engine learns its server's settings as it runs
                self.record_cell(cell)
                if on_cell_done:
                    on_cell_done(cell)
                self.check_audit(cell)
        finally:
            self.backend.close()
        return self.finish()

    def record_cell(self, cell: Cell):
        self.store.record_cell(cell)

    def check_audit(self, cell: Cell):
        if cell.slot_violations and self.cfg.kv_lookahead:
            raise AuditFailure(
                f"slot audit: {cell.slot_violations} KV writes landed outside their request's blocks at K={cell.k} "
                f"repeat {cell.repeat} with lookahead slots on: this is a runner bug (results kept in {self.out_dir})"
            )

    def finish(self) -> dict:
        return self.store.finish()

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
                out = self.backend.generate(prompts, k, seed, on_progress)
            except NonFiniteLogits as exc:  # name the question, not the runner's request index
                qid = self.questions[idx[exc.request_id]].question_id
                raise NonFiniteLogits(exc.request_id, exc.step, f"question {qid} turn {turn} (K={k}, repeat {repeat})") from None
            if violations is not None:
                violations += out.slot_violations or 0
            refs = self._target_only(prompts) if cfg.check_lossless else None
            for j, (i, res) in enumerate(zip(idx, out.results)):
                q = self.questions[i]
                answers[i].append(self._answer(res))
                row = {
                    "k": k, "repeat": repeat, "question_id": q.question_id, "turn": turn, "category": q.category,
                    "prompt_tokens": res.prompt_tokens, "prompt_hash": prompt_hash(prompts[j]),
                    "generated_tokens": _generated(res), "steps": res.steps,
                    "drafted": res.drafted, "accepted": res.accepted,
                    "accepted_per_pos": ";".join(str(x) for x in res.accepted_per_pos),
                }
                if cfg.topk > 1:  # a tree run: its shape on every row, so rows compare on their own
                    row.update(topk=cfg.topk, num_draft_tokens=cfg.num_draft_tokens)
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

    def _answer(self, res) -> str:
        """The answer as the next turn sees it; a server that returned only text gives its text."""
        if res.output_ids is None:
            return (getattr(res, "text", None) or "").strip()
        return answer_text(self.tokenizer, res.output_ids, self.backend.eos_token_ids)

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

    def _target_only(self, prompts) -> list[list[int]]:
        """Target-only greedy outputs (the lossless oracle), computed once per distinct prompt."""
        missing = [p for p in dict.fromkeys(tuple(p) for p in prompts) if p not in self._reference_outputs]
        if missing:
            for p, ids in zip(missing, self.backend.target_only([list(p) for p in missing])):
                self._reference_outputs[p] = ids
        return [self._reference_outputs[tuple(p)] for p in prompts]


def _generated(res) -> int:
    return len(res.output_ids) if res.output_ids is not None else int(res.num_output_tokens or 0)


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
