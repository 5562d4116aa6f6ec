"""vLLM's whole-run spec-decode counters, shared by its example printout and `bench serve` JSON.

vLLM counts per verification step that carried drafts: num_drafts += 1, num_draft_tokens += K,
num_accepted_tokens += accepted drafts (the bonus token excluded), and per_pos[i] += 1 for each
i < accepted. The counts come before the stop check, so the drafts the last step accepted past
EOS are counted, as alcheck counts them. AL = 1 + accepted / drafts, P(a >= i+1) = per_pos[i] /
drafts.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.imports.records import FILE, KCounts, Setting
from alcheck.imports.source import bad

COUNTING = {
    "source": "vLLM spec-decode counters (vllm:spec_decode_num_drafts, _num_accepted_tokens, _per_pos)",
    "steps": "num_drafts (verification steps that carried drafts)",
    "accepted": "num_accepted_tokens (drafts accepted, the bonus token excluded)",
    "prefill_token": "excluded (the prefill step carries no drafts)",
    "bonus_token": "excluded from the counts; AL = 1 + accepted / drafts adds it",
    "tail_past_eos": "counted",
    "extra_eos_step": False,
    "converted": "exact: AL = 1 + num_accepted_tokens / num_drafts",
}


def refuse_model_free(given, path: Path, what: str) -> None:
    """vLLM's whole-run counters count only the steps that drafted: for a method that skips steps
    (n-gram) their AL is vLLM's drafted-steps AL, and the plain steps are in no line of the file."""
    from alcheck.methods.table import all_methods

    method = (getattr(given, "method", None) or "").strip().lower()
    if method in {m.name for m in all_methods() if not m.needs_checkpoint}:
        raise AlcheckError(
            f"{path}: --method {method}: {what} counts only the steps that drafted (num_drafts), so its "
            "AL is vLLM's drafted-steps AL and the plain steps are not in the file: import the run's "
            "per-request metrics (AIPerf records with completion_tokens) instead"
        )


def k_of(
    drafts: int,
    draft_tokens: int | None,
    positions: int | None,
    given_k: int | None,
    path: Path,
    line: int,
    fix: str,
) -> int:
    """K from the counts (k_from_counts), else --k; --k that contradicts the counts exits 2."""
    found = k_from_counts(drafts, draft_tokens, positions, path, line, fix)
    if found is None:
        if given_k is None:
            raise bad(
                path,
                line,
                "K does not follow from the counts (no draft-token count or per-position rates that give it)",
                "pass --k",
            )
        return given_k
    if given_k is not None and given_k != found.value:
        raise bad(
            path,
            line,
            f"--k {given_k} contradicts the file, whose {found.where.split(' on line')[0]} "
            f"give K={found.value}",
            "drop --k or pass the right file",
        )
    return found.value


def k_from_counts(
    drafts: int, draft_tokens: int | None, positions: int | None, path: Path, line: int, fix: str
) -> Setting | None:
    """K from draft_tokens / drafts (a chain drafts K per step) or from the per-position count
    (one entry per drafted position); both present must agree."""
    ratio = (
        draft_tokens // drafts if draft_tokens is not None and drafts and draft_tokens % drafts == 0 else None
    )
    if ratio is not None and positions and ratio != positions:
        raise bad(path, line, f"draft tokens / drafts = {ratio} but {positions} per-position rates", fix)
    k = ratio or positions
    if not k:
        return None
    what = "draft tokens / drafts" if ratio else "the number of per-position rates"
    return Setting(k, FILE, f"{what} on line {line}")


def checked(
    k: int,
    drafts: int,
    draft_tokens: int | None,
    accepted: int,
    printed_al: float | None,
    per_position: list[float] | None,
    tolerance: float,
    path: Path,
    line: int,
    fix: str,
) -> KCounts:
    """The counts at K, checked against each other and against what the source printed beside
    them (`tolerance`: half the printed rounding step)."""
    if drafts < 1:
        raise bad(path, line, "no drafts were counted (num_drafts 0)", "import a run that drafted")
    if accepted > k * drafts:
        raise bad(
            path,
            line,
            f"{accepted} accepted drafts in {drafts} steps is more than K={k} per step allows",
            "check --k or the file",
        )
    al = 1 + accepted / drafts
    if printed_al is not None and abs(printed_al - al) > tolerance + 1e-9:
        raise bad(
            path,
            line,
            f"the printed acceptance length {printed_al} disagrees with 1 + accepted / drafts = {al:.4f}",
            fix,
        )
    if per_position is not None:
        if (
            len(per_position) > k
            or any(not 0 <= p <= 1 for p in per_position)
            or any(b > a + tolerance + 1e-9 for a, b in zip(per_position, per_position[1:]))
        ):
            raise bad(path, line, f"per-position rates {per_position} are not P(a >= i+1) for K={k}", fix)
        if abs(1 + sum(per_position) - al) > tolerance * len(per_position) + 1e-9:
            raise bad(
                path,
                line,
                f"1 + Σ per-position rates = {1 + sum(per_position):.4f} disagrees with AL {al:.4f}",
                fix,
            )
    drafted = k * drafts if draft_tokens is None else draft_tokens
    return KCounts(
        k=k, al=al, line=line, steps=drafts, accepted=accepted, drafted=drafted, per_position=per_position
    )
