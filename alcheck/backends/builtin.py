"""The built-in runner as a backend: alcheck's own paged engine (or the contiguous reference
runner) on the target and EAGLE head loaded from their checkpoints."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from alcheck import __version__
from alcheck.backends.base import BackendOutput
from alcheck.device_info import device_name
from alcheck.runner.config import RunnerConfig
from alcheck.runner.kv_budget import check_device_weights
from alcheck.runner.paged import PagedRunner
from alcheck.errors import AlcheckError
from alcheck.models.attention import pick_attention
from alcheck.versions import package_version
from alcheck.models.compat import check_draft_config, check_topk_fits_vocab

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


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


def runner_config(cfg, k: int, seed: int, device: str) -> RunnerConfig:
    """The one place a RunConfig becomes the runner's settings for one K."""
    return RunnerConfig(num_spec_tokens=k, block_size=cfg.block_size, num_blocks=cfg.num_blocks,
                        max_batch_size=cfg.max_batch_size, kv_lookahead=cfg.kv_lookahead,
                        temperature=cfg.temperature, draft_sampling=cfg.draft_sampling, seed=seed,
                        audit_slots=cfg.audit_slots, device=device,
                        gpu_memory_utilization=cfg.gpu_memory_utilization,
                        topk=cfg.topk if k else 1, num_draft_tokens=cfg.num_draft_tokens if k else None)


class BuiltinBackend:
    def __init__(self, cfg, target_dir: Path, draft_dir: Path, devices: list[str], dtype: str, tp=None):
        self.cfg, self.target_dir, self.draft_dir, self.tp = cfg, Path(target_dir), Path(draft_dir), tp
        self.devices, self.device, self.dtype = list(devices), devices[0], dtype
        self.target = self.head = None
        self.eos_token_ids: list[int] = []
        self.tokenizer = None
        self._environment: dict | None = None

    @classmethod
    def prepare(cls, cfg, target_dir: Path, target_raw: dict) -> "BuiltinBackend":
        """Find the head, check its config against the target's, resolve devices and dtype, and on
        a GPU check that the weights fit: all before any weight is read."""
        from alcheck.models.loading import read_config, resolve_checkpoint

        draft_dir = resolve_checkpoint(cfg.draft, "draft")
        draft_raw = read_config(draft_dir, "draft")
        if cfg.method == "eagle3":
            from alcheck.models.eagle3_loading import check_config

            check_config(target_raw, draft_raw, target_dir, draft_dir)
        else:
            check_draft_config(target_raw, draft_raw, target_dir, draft_dir)
        check_topk_fits_vocab(cfg.topk, target_raw, draft_raw, cfg.method, draft_dir)
        # --devices: one worker per device (alcheck.parallel), or with --tensor-parallel-size one
        # device per rank; RunConfig made them all one kind, so one dtype
        devices = ([resolve_device(d, "--devices") for d in cfg.devices] if cfg.devices
                   else [resolve_device(cfg.device)])
        dtype = resolve_dtype(cfg.dtype, devices[0], target_raw)
        weight_bytes = None
        if cfg.tensor_parallel_size > 1:
            from alcheck.tp.checks import check_tensor_parallel, rank_weight_bytes
            from alcheck.tp.launch import rank_devices

            check_tensor_parallel(cfg.tensor_parallel_size, target_raw, devices[0], cfg.devices and devices)
            devices = rank_devices(cfg.tensor_parallel_size, devices[0], cfg.devices and devices)
            weight_bytes = rank_weight_bytes(target_raw, draft_raw, DTYPES[dtype].itemsize, cfg.tensor_parallel_size)
        for device in dict.fromkeys(devices):  # on a GPU: exit 2 if they cannot fit
            check_device_weights(target_raw, draft_raw, dtype, device, weight_bytes)
        return cls(cfg, target_dir, draft_dir, devices, dtype)

    def worker_state(self) -> dict:
        return {"draft_dir": str(self.draft_dir), "dtype": self.dtype}

    @classmethod
    def for_worker(cls, cfg, target_dir, state: dict, device: str, tp=None) -> "BuiltinBackend":
        return cls(cfg, target_dir, state["draft_dir"], [device], state["dtype"], tp=tp)

    def load(self):
        from alcheck.models.loading import load_eagle, load_target

        cfg, device, dtype = self.cfg, self.device, DTYPES[self.dtype]
        if self.tp is not None:  # a tensor-parallel rank: its shard of the target, the whole head
            from alcheck.tp.pair import load_pair

            self.target, self.head = load_pair(self.tp, str(self.target_dir), str(self.draft_dir), cfg.method,
                                               dtype, cfg.chat_template)
        else:
            self.target = load_target(str(self.target_dir), dtype, device, chat_template=cfg.chat_template)
            if cfg.method == "eagle3":
                from alcheck.models.eagle3_loading import load_eagle3

                self.head = load_eagle3(str(self.draft_dir), self.target, dtype, device)
            else:
                self.head = load_eagle(str(self.draft_dir), self.target, dtype, device)
        self.eos_token_ids = self.target.eos_token_ids
        self.tokenizer = self.target.tokenizer

    def describe(self) -> dict:
        if self._environment is None:
            self._environment = self._environment_now()
        return dict(self._environment)

    def _environment_now(self) -> dict:
        cfg, device = self.cfg, self.device
        backend = pick_attention(torch.device(device), cfg.block_size, DTYPES[self.dtype])
        if cfg.runner == "contiguous":
            backend = "torch-sdpa (contiguous)"
        return {
            "alcheck": __version__, "torch": torch.__version__, "transformers": package_version("transformers"),
            "python": platform.python_version(), "platform": platform.platform(),
            "device": device, "device_name": device_name(device), "dtype": self.dtype,
            "attention_backend": "torch-sdpa" if backend == "torch" else backend,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "devices": list(self.devices),  # --devices: the parent records every worker's device
            **({"tensor_parallel": self.tp.record()} if self.tp is not None else {}),
        }

    def use_k(self, k: int):
        pass  # one runner is built per generate() call

    def generate(self, prompts, k, seed, on_progress=None) -> BackendOutput:
        cfg = self.cfg
        if cfg.runner == "contiguous":
            from alcheck.runner.contiguous import generate_contiguous

            results = generate_contiguous(self.target.model, self.head, self.eos_token_ids, prompts,
                                          cfg.max_tokens, k, temperature=cfg.temperature, seed=seed,
                                          draft_sampling=cfg.draft_sampling, topk=cfg.topk,
                                          num_draft_tokens=cfg.num_draft_tokens)
            if on_progress:
                on_progress(len(prompts), sum(len(r.output_ids) for r in results))
            return BackendOutput(results, 0 if cfg.audit_slots else None)
        runner = PagedRunner(self.target.model, self.head, self.eos_token_ids, runner_config(cfg, k, seed, self.device))
        results = runner.generate(prompts, cfg.max_tokens, progress=on_progress)
        violations = runner.auditor.violations if runner.auditor else 0
        return BackendOutput(results, violations if cfg.audit_slots else None)

    def target_only(self, prompts) -> list[list[int]]:
        runner = PagedRunner(self.target.model, None, self.eos_token_ids, runner_config(self.cfg, 0, self.cfg.seed, self.device))
        return [res.output_ids for res in runner.generate([list(p) for p in prompts], self.cfg.max_tokens)]

    def close(self):
        pass
