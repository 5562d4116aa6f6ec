"""The built-in runner as a backend: a runner from the runner table (runner/table.py) on the pair
planned and loaded by methods/pair.py."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from alcheck import __version__
from alcheck.backends.base import BackendOutput, RequestCounts
from alcheck.device_info import device_name
from alcheck.methods.pair import PairPlan, load_pair, plan_pair
from alcheck.methods.table import get_method
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.table import runner_class
from alcheck.versions import package_version


def runner_config(cfg, k: int, seed: int, device: str) -> RunnerConfig:
    """The one place a RunConfig becomes the runner's settings for one K."""
    return RunnerConfig(
        num_spec_tokens=k,
        block_size=cfg.block_size,
        num_blocks=cfg.num_blocks,
        max_batch_size=cfg.max_batch_size,
        kv_lookahead=cfg.kv_lookahead,
        temperature=cfg.temperature,
        draft_sampling=cfg.draft_sampling,
        seed=seed,
        audit_slots=cfg.audit_slots,
        prompt_cache=cfg.prompt_cache,
        device=device,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        topk=cfg.topk if k else 1,
        num_draft_tokens=cfg.num_draft_tokens if k else None,
    )


def request_counts(result) -> RequestCounts:
    """A runner's GenerationResult as the backend record."""
    return RequestCounts(
        result.prompt_tokens,
        result.output_ids,
        result.steps,
        result.drafted,
        result.accepted,
        result.accepted_per_pos,
        result.finish_reason,
        per_step_accepted=result.per_step_accepted,
        # a method that may propose nothing (n-gram) says how many steps did; every EAGLE step drafts
        drafted_steps=getattr(result, "drafted_steps", result.steps),
    )


class BuiltinBackend:
    def __init__(self, cfg, plan: PairPlan, tokenizer=None, device: str | None = None, tp=None):
        self.cfg, self.plan, self.tp = cfg, plan, tp
        self.devices = list(plan.devices)
        self.device = device or plan.devices[0]
        self.tokenizer = tokenizer  # loaded once per process: by the sweep, or here in a worker
        self.pair = None
        self.engine = None  # runner/engine.py: the KV pool and buffers, once per loaded pair
        self.eos_token_ids: list[int] = []
        self._environment: dict | None = None

    @classmethod
    def prepare(cls, cfg, target_dir: Path, target_raw: dict, tokenizer, previous: dict) -> BuiltinBackend:
        """Find the head, check it against the target, resolve devices and dtype, and on a GPU
        check that the weights fit: all before any weight is read."""
        plan = plan_pair(
            target_dir,
            target_raw,
            cfg.draft,
            cfg.method,
            topk=cfg.topk,
            device=cfg.device,
            devices=cfg.devices,
            dtype=cfg.dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            chat_template=cfg.chat_template,
            method_options=get_method(cfg.method).run_options(cfg),
        )
        return cls(cfg, plan, tokenizer)

    def worker_state(self) -> dict:
        return {"plan": self.plan}

    def checkpoints(self) -> dict[str, Path]:
        return {"draft": self.plan.draft_dir} if self.plan.draft_dir is not None else {}

    def runtime(self) -> dict[str, str]:
        """Device kind, dtype and attention kernel as resolved (--device/--dtype auto included)."""
        device = torch.device(self.device)
        attention = runner_class(self.cfg.runner).attention_name(device, self.cfg.block_size, self._dtype())
        return {"device": device.type, "dtype": self.plan.dtype, "attention": attention}

    def check_positions(self, positions: int) -> None:
        from alcheck.models.loading import read_config
        from alcheck.models.targets import check_fits_window

        check_fits_window(read_config(self.plan.target_dir, "target"), self.plan.target_dir, positions)

    @classmethod
    def for_worker(cls, cfg, state: dict, device: str, tp=None, tokenizer=None) -> BuiltinBackend:
        return cls(cfg, state["plan"], tokenizer, device=device, tp=tp)

    def load(self):
        self.pair = load_pair(self.plan, self.device, tokenizer=self.tokenizer, tp=self.tp)
        self.engine = Engine()
        self.eos_token_ids = self.pair.target.eos_token_ids
        self.tokenizer = self.pair.target.tokenizer

    def describe(self) -> dict:
        if self._environment is None:
            self._environment = self._environment_now()
        return dict(self._environment)

    def _environment_now(self) -> dict:
        device = self.device
        return {
            "alcheck": __version__,
            "torch": torch.__version__,
            "transformers": package_version("transformers"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "device": device,
            "device_name": device_name(device),
            "dtype": self.plan.dtype,
            "attention_backend": self.runtime()["attention"],
            **self._target_kind(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "devices": list(self.devices),  # --devices: the parent records every worker's device
            **({"tensor_parallel": self.tp.record()} if self.tp is not None else {}),
            **({"config_notes": notes} if (notes := self._config_notes()) else {}),
        }

    def _target_kind(self) -> dict:
        """Which target-table entry runs the target: alcheck's own model or transformers' code."""
        from alcheck.models.loading import read_config
        from alcheck.models.targets import find_target

        kind = find_target(read_config(self.plan.target_dir, "target"), self.plan.target_dir)
        return {"model_type": kind.model_type, "target_implementation": kind.implementation}

    def _config_notes(self) -> list[str]:
        """Keys the checkpoints' config.json files hold that alcheck read but ignored (an auto_map
        naming only speculators' config class): run.json says so rather than hiding it."""
        if self.pair is None:
            return []
        return [
            *getattr(self.pair.target.model.config, "notes", ()),
            *getattr(getattr(self.pair.head, "config", None), "notes", ()),
        ]

    def _dtype(self):
        from alcheck.sweep.placement import DTYPES

        return DTYPES[self.plan.dtype]

    def use_k(self, k: int):
        pass  # a runner per generate() call, all on the one engine: building one costs nothing

    def _runner(self, k: int, seed: int):
        return runner_class(self.cfg.runner)(
            self.pair.target.model,
            self.pair.proposer if k else None,
            self.eos_token_ids,
            runner_config(self.cfg, k, seed, self.device),
            engine=self.engine,
        )

    def generate(self, prompts, k, seed, progress=None) -> BackendOutput:
        runner = self._runner(k, seed)
        results = runner.generate(prompts, self.cfg.max_tokens, progress=progress)
        return BackendOutput(
            [request_counts(r) for r in results], runner.slot_violations if self.cfg.audit_slots else None
        )

    def target_only(self, prompts) -> list[list[int]]:
        runner = self._runner(0, self.cfg.seed)
        return [res.output_ids for res in runner.generate([list(p) for p in prompts], self.cfg.max_tokens)]

    def close(self):
        pass
