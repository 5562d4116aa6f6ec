"""The K x repeat sweep behind `alcheck run`: plan the cells, pick where they run, record each one.

The sweep owns three things: the run directory (a RunStore, run_store.py), the plan every cell
shares (alcheck/sweep/cells.py: prompts, the context check, the backend's name), and the choice of
executor (alcheck/executors/: this process, one worker per device, or tensor-parallel ranks).
Whatever decodes is a Backend built through backends/registry.py. Events go to one events
object; the sweep records each finished cell before passing it on.

Two phases: `prepare()` finds the target, lets the backend check what it needs (the head's
config, devices, or the server), builds every prompt and checks it against the target's context
(seconds, nothing allocated); only then do the weights load (or the server connection). The
caller claims the run directory (alcheck.rundir.folder) before either.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from alcheck.backends.registry import backend_name, make_backend
from alcheck.config import RunConfig
from alcheck.errors import AlcheckError
from alcheck.executors.choice import ExecutorChoice
from alcheck.executors.processes import signals_deferred
from alcheck.models.compat import context_limit, positions_needed, shorten_fix
from alcheck.prompts.dataset import dataset_name, resolve_dataset_path
from alcheck.prompts.dataset_list import dataset_labels, load_run_questions
from alcheck.prompts.protocols import build_prompt_ids, protocol_of
from alcheck.prompts.tokenizer import load_tokenizer, prompt_hash
from alcheck.references.tables import load_references, select_references
from alcheck.rundir.fingerprint import (
    checkpoint_fingerprint,
    file_fingerprint,
    prompts_fingerprint,
    questions_fingerprint,
)
from alcheck.rundir.resume_checks import DATASET
from alcheck.rundir.shard import Shard, sweep_cells, sweep_fingerprint
from alcheck.rundir.store import RunStore
from alcheck.sweep.cells import Cell, CellPlan, history_across_requests
from alcheck.sweep.events import SweepEvents


class AuditFailure(Exception):
    """A normal run (lookahead on) wrote KV outside a request's blocks: a runner bug."""


def default_out_dir(cfg: RunConfig) -> Path:
    """results/runs/<time>-<target>-<draft or engine>; claim_run_dir(fresh=True) makes it unique."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

    def short(spec):
        return Path(spec.rstrip("/")).name.replace("/", "_") or "model"

    second = cfg.engine if cfg.engine else short(cfg.draft)
    return Path("results") / "runs" / f"{stamp}-{short(cfg.target)}-{second}"


class _Recorder(SweepEvents):
    """The sweep's own events: record what the run directory needs, then pass every event on."""

    def __init__(self, sweep: Sweep, events: SweepEvents):
        self.sweep, self.events = sweep, events

    def environment(self, environment):
        self.sweep.meta["environment"] = environment
        self.sweep.store.write_meta()
        self.events.environment(environment)

    def cell_started(self, k, repeat):
        self.events.cell_started(k, repeat)

    def progress(self, k, repeat, finished, tokens):
        self.events.progress(k, repeat, finished, tokens)

    def cell_finished(self, cell: Cell):
        sampler = self.sweep.sampler
        if sampler is not None:  # scored before it is recorded: run.json keeps the statistics
            cell.lossless_statistics = sampler.score(cell)
        with (
            signals_deferred()
        ):  # a Ctrl-C or SIGTERM now would leave rows in questions.csv that run.json lacks
            self.sweep.store.record_cell(cell)
        self.sweep.run_sampler_tests()
        self.events.cell_finished(cell)
        self.sweep.check_audit(cell)


class Sweep:
    """Plans the cells, runs every missing (K, repeat) cell on an executor, and saves it.

    write=False: the same loop, but nothing is written (a torchrun rank other than 0).
    shard: only that share of the cells (--shard I/N, alcheck/rundir/shard.py)."""

    def __init__(
        self,
        cfg: RunConfig,
        out_dir: Path,
        resume: bool = False,
        write: bool = True,
        shard: Shard | None = None,
        executor: ExecutorChoice | None = None,
    ):
        self.executor = executor or ExecutorChoice()
        self.cfg, self.out_dir = cfg, Path(out_dir) if out_dir is not None else None
        self.shard = shard
        self.questions = load_run_questions(cfg.dataset, cfg.limit)
        refs, tables = [], load_references()  # each dataset's tables: their verdicts come from its rows only
        for label in dataset_labels(cfg.dataset):
            refs += [
                r
                for r in select_references(
                    tables, cfg.reference, cfg.target, cfg.draft or "", cfg.method, label, topk=cfg.topk
                )
                if r not in refs
            ]
        self.store = RunStore(
            cfg, self.out_dir, resume=resume, references=[r.to_dict() for r in refs], write=write
        )
        self.plan: CellPlan | None = None
        self.backend = None
        self.loaded = False
        self.sampler = None  # --check-lossless with --engine: alcheck/diagnostics/sampler_check.py

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
        target_dir = resolve_checkpoint(cfg.target, "target")
        target_raw = read_config(target_dir, "target")
        context = context_limit(target_raw, target_dir)
        tokenizer = load_tokenizer(target_dir, "target", cfg.chat_template)
        self.backend = make_backend(
            cfg, target_dir, target_raw, tokenizer, previous=self.meta.get("environment")
        )
        checkpoints = {"target": target_dir, **self.backend.checkpoints()}
        self._record_gguf(checkpoints)
        prompts = [build_prompt_ids(tokenizer, protocol_of(cfg), q.turns[:1]) for q in self.questions]
        hashes = {(q.dataset, str(q.question_id)): prompt_hash(p) for q, p in zip(self.questions, prompts)}
        self.store.check_fingerprints(
            {
                **{role: checkpoint_fingerprint(d) for role, d in checkpoints.items()},
                "runtime": self.backend.runtime(),
                "inputs": self._inputs(hashes),
            },
            hashes,
        )
        if self.shard is not None:  # merge compares the whole sweep's fingerprint, so it is known now
            self.meta["shard"] = self.shard.record(self.all_cells(), sweep_fingerprint(self.meta))
        self.plan = CellPlan(
            cfg,
            target_dir,
            self.questions,
            prompts,
            [min(cfg.turns, len(q.turns)) for q in self.questions],
            context,
            backend_name(cfg),
            self.backend.worker_state(),
            tokenizer,
        )
        self._fit_context()
        if history_across_requests(cfg):  # what its drafts depend on besides each question, in words
            from alcheck.methods.table import get_method

            self.meta["drafting_history"] = get_method(cfg.method).history(cfg)
        if cfg.sampler_test:
            from alcheck.diagnostics.sampler_check import SamplerCheck

            self.sampler = SamplerCheck(self.plan)

    def _record_gguf(self, checkpoints: dict):
        """run.json's `gguf`: per role read from a GGUF file, its sha256 and quantization types."""
        from alcheck.models.gguf import read_source

        sources = {role: read_source(d) for role, d in checkpoints.items()}
        sources = {role: s for role, s in sources.items() if s is not None}
        if sources:
            self.meta["gguf"] = sources

    def _inputs(self, prompt_hashes: dict) -> dict[str, str]:
        """The run's inputs fingerprints: each dataset's contents, the chat template file, the prompts."""
        out = {}
        for spec in self.cfg.datasets:
            path, label = resolve_dataset_path(spec), dataset_name(spec)
            out[DATASET + spec] = (
                file_fingerprint(path)
                if path is not None
                # a hub dataset: its questions
                else questions_fingerprint([q for q in self.questions if q.dataset in ("", label)])
            )
        if self.cfg.chat_template:
            out["chat_template"] = file_fingerprint(Path(self.cfg.chat_template).expanduser())
        out["prompts"] = prompts_fingerprint(prompt_hashes)
        return out

    def _fit_context(self):
        """Every generation must fit the target's context: prompt + max_tokens + K - 1 positions.

        A later turn's prompt holds the earlier answers, known only once they are generated, so
        it is bounded here by the prompt with one-letter answers plus max_tokens per earlier answer
        (answers re-tokenized as text can in rare cases exceed that; run_cell checks again).
        Too long: exit 2 naming the longest, or with --skip-long drop the question from that turn on.
        """
        cfg, plan, k = self.cfg, self.plan, max(self.cfg.ks)
        too_long, longest = [], 0
        for i, q in enumerate(self.questions):
            for turn in range(1, plan.turns_to_run[i] + 1):
                if turn == 1:
                    prompt = len(plan.prompts_turn1[i])
                else:
                    # "x", not "": FastChat formats treat an empty message as no message at all
                    short = build_prompt_ids(
                        plan.tokenizer, protocol_of(cfg), q.turns[:turn], ["x"] * (turn - 1)
                    )
                    prompt = len(short) + (turn - 1) * cfg.max_tokens
                need = positions_needed(prompt, cfg.max_tokens, k)
                if need > plan.context:
                    too_long.append(
                        {
                            **({"dataset": q.dataset} if q.dataset else {}),
                            "question_id": q.question_id,
                            "turn": turn,
                            "positions": need,
                            "prompt_tokens": prompt,
                        }
                    )
                    plan.turns_to_run[i] = turn - 1
                    break
                longest = max(longest, need)
        if too_long and not cfg.skip_long:
            worst = max(too_long, key=lambda x: x["positions"])
            earlier = ", counting each earlier answer at --max-tokens" if worst["turn"] > 1 else ""
            which = f"{worst['dataset']} question" if "dataset" in worst else "question"
            raise AlcheckError(
                f"{which} {worst['question_id']} turn {worst['turn']} needs {worst['positions']} positions "
                f"({worst['prompt_tokens']} prompt tokens{earlier} + "
                f"{cfg.max_tokens} new + {k - 1} for K={k}'s drafts) "
                f"but the target's context (max_position_embeddings) is {plan.context}; "
                f"{len(too_long)} of {len(self.questions)} questions do not fit: "
                f"{shorten_fix(cfg.max_tokens, k)}, or pass --skip-long to skip them"
            )
        if not any(plan.turns_to_run):
            raise AlcheckError(
                f"no question fits the target's context of {plan.context} positions with "
                f"--max-tokens {cfg.max_tokens} and K={k}: {shorten_fix(cfg.max_tokens, k)}"
            )
        self.backend.check_positions(longest)  # e.g. a sliding-window target: exact only inside its window
        self.meta["context"] = {"limit": plan.context, "skip_long": cfg.skip_long, "skipped": too_long}

    # -- the sweep ---------------------------------------------------------------------------

    def all_cells(self) -> list[tuple[int, int]]:
        return sweep_cells(self.cfg.ks, self.cfg.repeats)

    def cells(self) -> list[tuple[int, int]]:
        """The cells this run measures: all of them, or its share's."""
        cells = self.all_cells()
        return cells if self.shard is None else self.shard.cells(cells)

    def pending(self) -> list[tuple[int, int]]:
        return [cell for cell in self.cells() if cell not in self.done]

    def num_generations(self) -> int:
        return self.plan.num_generations() if self.plan is not None else 0

    def runs_here(self) -> bool:
        """Whether the cells run in this process (not on --devices workers or tensor-parallel ranks)."""
        if self.executor.is_ray:
            return False
        return self.cfg.tensor_parallel_size == 1 and len(self.backend.devices) <= 1

    def load(self, events: SweepEvents | None = None):
        """The backend's weights (or server connection), when the cells run in this process: after
        prepare(), before any progress is shown, so a pair that fails to load says so alone."""
        if self.plan is None:
            self.prepare()
        if self.runs_here() and not self.loaded and self.pending():
            self.backend.load()
            self.loaded = True
            _Recorder(self, events or SweepEvents()).environment(self.backend.describe())

    def run(self, events: SweepEvents | None = None) -> dict:
        """Every pending cell, recorded as it finishes; `events` sees every event after that."""
        if self.plan is None:
            self.prepare()
        recorder = _Recorder(self, events or SweepEvents())
        pending = self.pending()
        cfg, devices = self.cfg, self.backend.devices
        if not pending:
            self.backend.close()
        elif self.executor.is_ray:  # one Ray task per cell, on a local Ray or a cluster
            from alcheck.executors.ray_tasks import run_on_ray

            self.backend.close()  # the workers build their own
            run_on_ray(self.plan, pending, recorder, self.executor, self.backend.device, self.saved_note)
        elif cfg.tensor_parallel_size > 1:  # N ranks, each with its shard of the target
            from alcheck.executors.tensor_parallel import run_tensor_parallel

            self.backend.close()  # the ranks build their own
            run_tensor_parallel(
                self.plan, pending, recorder, self.backend.device, cfg.devices, self.saved_note
            )
        elif len(devices) > 1:  # --devices: one worker process per device
            from alcheck.executors.devices import run_on_devices

            self.backend.close()  # each worker builds its own
            run_on_devices(self.plan, pending, devices, recorder, self.saved_note)
        else:
            from alcheck.executors.local import run_local

            try:
                self.load(events)
                run_local(self.plan, self.backend, pending, recorder, oracle={})
            finally:
                self.backend.close()
        self.run_sampler_tests()  # a resumed run whose last test was cut off
        return self.store.finish()

    def run_sampler_tests(self):
        """Each K whose repeats are all recorded gets its temperature > 0 lossless test, once."""
        if self.sampler is None:
            return
        for k in self.cfg.ks:
            records = [c for c in self.meta["cells"] if c["k"] == k]
            if k not in self.store.lossless_tests and len(records) == self.cfg.repeats:
                self.store.set_lossless_test(k, self.sampler.test(k, records))

    def check_audit(self, cell: Cell):
        if cell.slot_violations and self.cfg.kv_lookahead:
            raise AuditFailure(
                f"slot audit: {cell.slot_violations} KV writes landed "
                f"outside their request's blocks at K={cell.k} "
                f"repeat {cell.repeat} with lookahead slots on: this "
                f"is a runner bug (results kept in {self.out_dir})"
            )

    def saved_note(self) -> str:
        """'; N finished cells saved in DIR: finish with: alcheck run --resume DIR', or ''."""
        n = len(self.meta.get("cells") or [])
        if not n or not self.store.saved_on_disk():
            return ""
        return (
            f"; {n} finished (K, repeat) cell{'s' * (n != 1)} saved in {self.out_dir}: "
            f"finish with: alcheck run --resume {self.out_dir}"
        )
