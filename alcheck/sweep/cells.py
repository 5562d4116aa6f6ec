"""One (K, repeat) cell of a sweep: the plan every cell shares, and the free function that runs one.

A cell depends only on the plan, K and the repeat: request order is shuffled from (seed, repeat)
and the sampling seed (temperature > 0) comes from (seed, K, repeat, turn), so which process ran
it changes no number, and a resumed run equals an uninterrupted one. The sweep (alcheck/sweep/driver.py)
and the executors (alcheck/executors/) call run_cell; nothing here knows which of them did.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from alcheck.config import RunConfig
from alcheck.errors import AlcheckError, NonFiniteLogits
from alcheck.models.compat import positions_needed
from alcheck.prompts.dataset_list import several
from alcheck.prompts.protocols import answer_text, build_prompt_ids, protocol_of
from alcheck.prompts.tokenizer import load_tokenizer, prompt_hash
from alcheck.rundir.answers import answer_line
from alcheck.rundir.traces import PARTIAL, PER_STEP, TOTALS_ONLY, Trace
from alcheck.sweep.events import SweepEvents


@dataclass
class Cell:
    k: int
    repeat: int
    rows: list[dict]  # questions.csv rows, in question file order then turn
    wall_s: float
    generated_tokens: int
    steps: int
    slot_violations: int | None
    varied: str
    skipped: list[dict] | None = None  # later turns that outgrew the context (--skip-long)
    # --check-lossless: the seconds of wall_s spent decoding target-only, and the tokens it made
    # (0 and 0 when every prompt's oracle was computed by an earlier cell): the run's speedup
    target_only_wall_s: float | None = None
    target_only_tokens: int | None = None
    traces: list[Trace] = field(default_factory=list)  # traces.csv rows, in the rows' order; [] = totals only
    # an engine's --check-lossless (temperature > 0): turn-1 output ids by question id (text), kept in memory
    # until the sweep scores them; then the per-sequence statistics run.json keeps
    # (alcheck/diagnostics/sampler_check.py)
    outputs: dict[str, list[int] | None] | None = None
    lossless_statistics: list[list] | None = None
    answers: list[dict] = field(
        default_factory=list
    )  # answers.jsonl lines (alcheck/rundir/answers.py), in the rows' order
    # a method whose drafts depend on other requests (suffix decoding): the question ids (as traces.csv
    # names them) in the order the cell ran them, each turn in that order; None for the others
    request_order: list[str] | None = None
    ran_on: dict | None = None  # --executor ray: the node and worker that computed it (run.json only)
    # several --endpoint: requests each server answered (run.json only; answers.jsonl says which)
    served_by: dict[str, int] | None = None

    @property
    def trace_kind(self) -> str:
        """Whether every turn, none or some has a per-step trace (an engine without per-step data: none)."""
        if len(self.traces) == len(self.rows):
            return PER_STEP
        return TOTALS_ONLY if not self.traces else PARTIAL

    @property
    def accepted(self) -> int:
        """Drafts accepted over the cell's rows: recorded so a resume checks the rows add up to it."""
        return sum(int(r["accepted"]) for r in self.rows)

    def record(self) -> dict:
        """The cell's entry in run.json's `cells`."""
        out = {
            "k": self.k,
            "repeat": self.repeat,
            "wall_s": round(self.wall_s, 4),
            "rows": len(self.rows),
            "generated_tokens": self.generated_tokens,
            "steps": self.steps,
            "accepted": self.accepted,
            "varied": self.varied,
            "traces": self.trace_kind,
        }
        if self.slot_violations is not None:
            out["slot_violations"] = self.slot_violations
        if self.skipped:
            out["skipped"] = self.skipped
        if self.target_only_wall_s is not None:
            out["target_only_wall_s"] = round(self.target_only_wall_s, 4)
            out["target_only_tokens"] = self.target_only_tokens
        if self.lossless_statistics is not None:
            out["lossless_statistics"] = self.lossless_statistics
        if self.request_order is not None:
            out["request_order"] = self.request_order
        if self.ran_on is not None:
            out["ran_on"] = self.ran_on
        if self.served_by:
            out["served_by"] = self.served_by
        return out


@dataclass
class CellPlan:
    """Everything a cell needs besides a loaded backend. Plain data: it travels to worker
    processes and tensor-parallel ranks, which build their backend from `backend` (a name in
    backends/registry.py) and `backend_state`."""

    cfg: RunConfig
    target_dir: Path
    questions: list  # prompts.dataset.Question, in file order
    prompts_turn1: list[list[int]]  # each question's first-turn prompt ids
    turns_to_run: list[int]  # per question: its turns that fit the context (0: skipped)
    context: int  # the target's max_position_embeddings
    backend: str
    backend_state: dict = field(default_factory=dict)
    tokenizer: object = field(default=None, repr=False, compare=False)  # not pickled: loaded once per process

    def __getstate__(self):
        state = dict(self.__dict__)
        state["tokenizer"] = None
        return state

    def get_tokenizer(self):
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(self.target_dir, "target", self.cfg.chat_template)
        return self.tokenizer

    def load_worker_backend(self, device: str, tp=None):
        """The backend of a --devices worker or a tensor-parallel rank, loaded; it and the cells
        share this process's one tokenizer load."""
        from alcheck.backends.registry import worker_backend

        backend = worker_backend(
            self.backend, self.cfg, self.backend_state, device, tp=tp, tokenizer=self.get_tokenizer()
        )
        backend.load()
        return backend

    def num_generations(self) -> int:
        return sum(self.turns_to_run)


def run_cell(
    plan: CellPlan,
    backend,
    k: int,
    repeat: int,
    events: SweepEvents | None = None,
    oracle: dict | None = None,
) -> Cell:
    """Every question turn of one (K, repeat) cell through `backend`, as questions.csv rows.

    oracle: target-only outputs by prompt (--check-lossless), kept across cells by the caller."""
    cfg, tok = plan.cfg, plan.get_tokenizer()
    events = events or SweepEvents()
    oracle = {} if oracle is None else oracle
    order = list(range(len(plan.questions)))
    random.Random(f"{cfg.seed}:{repeat}").shuffle(order)
    varied = f"request order and batch composition shuffled with seed {cfg.seed}:{repeat}"
    if cfg.temperature > 0:
        varied += "; sampling seed varies per K, repeat and turn"
    several_datasets = several(cfg.dataset)
    ran = [_trace_id(plan.questions[i], several_datasets) for i in order if plan.turns_to_run[i] >= 1]
    rows, traces, violations, start = [], [], 0 if cfg.audit_slots else None, time.perf_counter()
    target_only = [0.0, 0] if cfg.greedy_oracle else None  # seconds, tokens
    answers: dict[int, list[str]] = {i: [] for i in order}
    answer_lines: list[dict] = []
    outputs: dict[str, list[int] | None] | None = {} if cfg.sampler_test else None
    skipped: list[dict] = []
    served: dict[str, int] = {}
    for turn in range(1, cfg.turns + 1):
        idx = [i for i in order if plan.turns_to_run[i] >= turn and len(answers[i]) == turn - 1]
        if not idx:
            break
        if turn == 1:
            prompts = [plan.prompts_turn1[i] for i in idx]
        else:
            prompts = [
                build_prompt_ids(tok, protocol_of(cfg), plan.questions[i].turns[:turn], answers[i])
                for i in idx
            ]
            idx, prompts = _fit_later_turn(plan, idx, prompts, turn, skipped)
            if not idx:
                break
        seed = cfg.seed + 7919 * repeat + 104729 * k + 13 * turn
        try:
            out = backend.generate(
                prompts, k, seed, lambda finished, tokens: events.progress(k, repeat, finished, tokens)
            )
        except NonFiniteLogits as exc:  # name the question, not the runner's request index
            qid = plan.questions[idx[exc.request_id]].question_id
            raise NonFiniteLogits(
                exc.request_id, exc.step, f"question {qid} turn {turn} (K={k}, repeat {repeat})"
            ) from None
        if violations is not None:
            violations += out.slot_violations or 0
        refs = _target_only(backend, prompts, oracle, target_only) if cfg.greedy_oracle else None
        for j, (i, res) in enumerate(zip(idx, out.results)):
            q = plan.questions[i]
            answers[i].append(_answer(tok, res, backend.eos_token_ids))
            answer_lines.append(answer_line(k, repeat, q, turn, answers[i][-1]))
            if res.served_by is not None:  # several servers: which answered (questions.csv stays as one's)
                answer_lines[-1]["endpoint"] = res.served_by
                served[res.served_by] = served.get(res.served_by, 0) + 1
            row = {
                "k": k,
                "repeat": repeat,
                "question_id": q.question_id,
                "turn": turn,
                "category": q.category,
                "prompt_tokens": res.prompt_tokens,
                "prompt_hash": prompt_hash(prompts[j]),
                "generated_tokens": res.generated_tokens,
                "steps": res.steps,
                "drafted_steps": res.steps_drafted,
                "drafted": res.drafted,
                "accepted": res.accepted,
                "accepted_per_pos": ";".join(str(x) for x in res.accepted_per_pos),
            }
            if q.dataset:  # a run of several datasets: their question ids overlap
                row["dataset"] = q.dataset
            if cfg.is_tree:  # a tree run: its shape on every row, so rows compare on their own
                row.update(topk=cfg.topk, num_draft_tokens=cfg.num_draft_tokens)
            if refs is not None:
                diff = first_difference(res.output_ids, refs[j])
                row["identical"] = int(diff is None)
                row["first_diff"] = "" if diff is None else diff
            rows.append(row)
            if outputs is not None and turn == 1:
                outputs[str(q.question_id)] = res.output_ids
            if res.per_step_accepted is not None:
                traces.append(
                    Trace(
                        k,
                        repeat,
                        _trace_id(q, several_datasets),
                        turn,
                        res.prompt_tokens,
                        list(res.per_step_accepted),
                        res.output_ids,
                    )
                )
    position = {(q.dataset, q.question_id): i for i, q in enumerate(plan.questions)}
    rows.sort(
        key=lambda r: (position[r.get("dataset", ""), r["question_id"]], r["turn"])
    )  # file order, whatever ran first
    skipped.sort(key=lambda r: (position[r.get("dataset", ""), r["question_id"]], r["turn"]))
    # a trace names its question as text (dataset-qualified when several share ids): sort by the same key
    by_text = {_trace_id(q, several_datasets): i for i, q in enumerate(plan.questions)}
    traces.sort(key=lambda t: (by_text[t.question_id], t.turn))
    answer_lines.sort(key=lambda a: (position[a.get("dataset", ""), a["question_id"]], a["turn"]))
    return Cell(
        k,
        repeat,
        rows,
        time.perf_counter() - start,
        sum(r["generated_tokens"] for r in rows),
        sum(r["steps"] for r in rows),
        violations,
        varied,
        skipped,
        *(target_only if target_only is not None else (None, None)),
        traces,
        outputs,
        answers=answer_lines,
        request_order=ran if history_across_requests(cfg) else None,
        served_by=dict(sorted(served.items())) or None,
    )


def history_across_requests(cfg) -> bool:
    """Whether the run's drafts depend on other requests (its method's entry says)."""
    from alcheck.methods.table import METHOD_NAMES, get_method

    return cfg.method in METHOD_NAMES and get_method(cfg.method).history_across_requests


def _trace_id(question, several_datasets: bool) -> str:
    """A question's id on its traces.csv rows: qualified by its dataset when several datasets share ids."""
    return f"{question.dataset}:{question.question_id}" if several_datasets else str(question.question_id)


def _answer(tokenizer, res, eos_token_ids) -> str:
    """The answer as the next turn sees it; a server that returned only text gives its text."""
    if res.output_ids is None:
        return (res.text or "").strip()
    return answer_text(tokenizer, res.output_ids, eos_token_ids)


def _fit_later_turn(plan: CellPlan, idx, prompts, turn, skipped):
    """The exact check of a later turn, now that its prompt is known (the sweep bounded it before
    the run; re-tokenized answers can in rare cases come out longer than they were generated).
    Checked at the largest K of the sweep, as the sweep's own check, so every K skips the same turns."""
    k = max(plan.cfg.ks)
    keep = []
    for i, prompt in zip(idx, prompts):
        need = positions_needed(len(prompt), plan.cfg.max_tokens, k)
        if need <= plan.context:
            keep.append((i, prompt))
            continue
        qid, dataset = plan.questions[i].question_id, plan.questions[i].dataset
        if not plan.cfg.skip_long:
            raise AlcheckError(
                f"question {qid} turn {turn} grew to {need} positions ({len(prompt)} prompt tokens with the "
                f"earlier answers re-tokenized) at K={k} (the sweep's "
                f"largest), over the target's context of {plan.context}: "
                "lower --max-tokens, or pass --skip-long to skip it"
            )
        skipped.append(
            {
                **({"dataset": dataset} if dataset else {}),
                "question_id": qid,
                "turn": turn,
                "positions": need,
                "prompt_tokens": len(prompt),
            }
        )
    return [i for i, _ in keep], [p for _, p in keep]


def _target_only(backend, prompts, oracle: dict, spent: list) -> list[list[int]]:
    """Target-only greedy outputs (the lossless oracle), computed once per distinct prompt;
    spent[0] += the seconds that took, spent[1] += the tokens it made."""
    missing = [p for p in dict.fromkeys(tuple(p) for p in prompts) if p not in oracle]
    if missing:
        start = time.perf_counter()
        outputs = backend.target_only([list(p) for p in missing])
        spent[0] += time.perf_counter() - start
        spent[1] += sum(len(ids) for ids in outputs)
        for p, ids in zip(missing, outputs):
            oracle[p] = ids
    return [oracle[tuple(p)] for p in prompts]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
