"""AIPerf record exports (ai-dynamo/aiperf `profile_export.jsonl`): one JSON line per request,
`{metadata, metrics, trace_data?, spec_decode_acceptance, error}`.

`spec_decode_acceptance` (SpecDecodeAcceptanceRecord) is read from the engine's per-request
metrics (vLLM's `metrics.speculative_decoding`): `engine, mean_acceptance_length (1 + accepted /
steps), draft_acceptance_rate, acceptance_histogram {j: steps that accepted exactly j drafts},
num_accepted_draft_tokens, num_draft_tokens, num_spec_steps, num_spec_tokens (K, or null),
completion_tokens, per_step_accepted / per_step_drafted` (the last two with vLLM's `detailed`).
The bonus token and the prefill token are not in the counts; vLLM counts the drafts its last step
accepted past EOS.

A record names its dataset entry by `metadata.conversation_id` and `turn_index` (0-based). Whether
a conversation id is the dataset's question_id depends on how the dataset was given to AIPerf
(UNCERTAIN in shared/IMPORT-FORMATS.md); the import uses it as the question id as it stands.
Warm-up records and failed requests are left out, and the import says how many.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.backends.engines.table import VLLM, engine_named
from alcheck.imports.records import FILE, PerQuestion, Setting, TurnCounts
from alcheck.imports.source import bad, count, counts, json_lines

NAME = "aiperf"
KIND = "run"
FIX = "pass the profile_export.jsonl AIPerf writes with record export on"


def _counting(engines: set[str], skips: bool = False) -> dict:
    # one engine whose counting the engine table knows, or "unknown"
    entry = engine_named(next(iter(engines))) if len(engines) == 1 else None
    tail = {True: "counted", False: "excluded"}.get(entry and entry.counts_tail_past_eos, "unknown")
    if skips:  # n-gram on vLLM: num_spec_steps are the steps that drafted (num_drafts)
        return {
            "source": f"AIPerf spec_decode_acceptance (engine {', '.join(sorted(engines)) or 'unknown'})",
            "steps": "completion_tokens - 1 - num_accepted_draft_tokens, at least num_spec_steps "
            "(num_spec_steps counts only the steps that drafted; it is kept as drafted_steps)",
            "accepted": "num_accepted_draft_tokens (= Σ j · acceptance_histogram[j])",
            "prefill_token": "excluded",
            "bonus_token": "excluded from the counts; alcheck adds 1 per step",
            "tail_past_eos": tail,
            "extra_eos_step": False,
            "converted": "steps from the tokens: exact unless a request's last step crossed EOS / "
            "max_tokens after plain steps (then up to K low, once per request); vLLM's drafted-steps "
            "AL = 1 + accepted / drafted_steps",
        }
    return {
        "source": f"AIPerf spec_decode_acceptance (engine {', '.join(sorted(engines)) or 'unknown'})",
        "steps": "num_spec_steps (= Σ acceptance_histogram)",
        "accepted": "num_accepted_draft_tokens (= Σ j · acceptance_histogram[j])",
        "prefill_token": "excluded",
        "bonus_token": "excluded from the counts; alcheck adds 1 per step",
        "tail_past_eos": tail,
        "extra_eos_step": False,
        "converted": "exact: AL = 1 + num_accepted_draft_tokens / num_spec_steps",
    }


def skips_steps(given, record: dict) -> bool:
    """A model-free method (--method ngram) served by vLLM, whose counts leave out the steps that
    drafted nothing (SGLang's NGRAM always drafts: its counts are every step)."""
    from alcheck.methods.table import all_methods

    method = (getattr(given, "method", None) or "").strip().lower()
    model_free = method in {m.name for m in all_methods() if not m.needs_checkpoint}
    entry = engine_named(str(record.get("engine") or VLLM.name).lower())
    return model_free and (entry is None or entry.steps_are_drafted_only)


def _histogram(record: dict, path: Path, line: int) -> dict[int, int]:
    raw = record.get("acceptance_histogram")
    if not isinstance(raw, dict):
        raise bad(path, line, "spec_decode_acceptance has no acceptance_histogram object", FIX)
    out = {}
    for key, value in raw.items():
        try:
            j = int(key)
        except (TypeError, ValueError):
            raise bad(
                path, line, f"acceptance_histogram key {key!r} is not an accepted-draft count", FIX
            ) from None
        out[j] = count({"acceptance_histogram": value}, "acceptance_histogram", path, line, FIX)
    return out


def _question_id(metadata: dict, path: Path, line: int):
    qid = metadata.get("conversation_id")
    if qid is None or qid == "":
        raise bad(path, line, "metadata has no conversation_id to match the question by", FIX)
    text = str(qid)
    return int(text) if text.isdigit() else text


def read(path: Path, given) -> PerQuestion:
    turns: list[TurnCounts] = []
    engines: set[str] = set()
    stated: dict[str, Setting] = {}
    skipped = {"warmup": 0, "failed": 0, "no spec-decode data": 0}
    for line, obj in json_lines(path, "AIPerf"):
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict) or "metrics" not in obj:
            raise bad(path, line, "not an AIPerf record (no metadata / metrics)", FIX)
        if str(metadata.get("benchmark_phase", "profiling")) == "warmup":
            skipped["warmup"] += 1
            continue
        if obj.get("error"):
            skipped["failed"] += 1
            continue
        record = obj.get("spec_decode_acceptance")
        if record is None:
            skipped["no spec-decode data"] += 1
            continue
        if not isinstance(record, dict):
            raise bad(path, line, "spec_decode_acceptance is not an object", FIX)
        steps = count(record, "num_spec_steps", path, line, FIX)
        accepted = count(record, "num_accepted_draft_tokens", path, line, FIX)
        histogram = _histogram(record, path, line)
        if sum(histogram.values()) != steps or sum(j * n for j, n in histogram.items()) != accepted:
            raise bad(
                path,
                line,
                f"acceptance_histogram ({sum(histogram.values())} steps, "
                f"{sum(j * n for j, n in histogram.items())} "
                f"accepted) disagrees with num_spec_steps {steps} / "
                f"num_accepted_draft_tokens {accepted}",
                "restore the file",
            )
        per_step = None
        if record.get("per_step_accepted") is not None:
            per_step = counts(record, "per_step_accepted", path, line, FIX)
            if len(per_step) != steps or sum(per_step) != accepted:
                raise bad(
                    path,
                    line,
                    f"per_step_accepted has {len(per_step)} steps summing to {sum(per_step)}, "
                    f"but num_spec_steps is {steps} and num_accepted_draft_tokens {accepted}",
                    "restore the file",
                )
        if record.get("num_spec_tokens") is not None:
            k = count(record, "num_spec_tokens", path, line, FIX, minimum=1)
            previous = stated.get("k")
            if previous is not None and previous.value != k:
                raise bad(
                    path,
                    line,
                    f"num_spec_tokens {k} differs from {previous.value} ({previous.where})",
                    "import one K per file",
                )
            stated.setdefault("k", Setting(k, FILE, f"num_spec_tokens on line {line}"))
        engines.add(str(record.get("engine") or "unknown"))
        completion = record.get("completion_tokens")
        skips = skips_steps(given, record)
        if skips and completion is None:
            raise bad(
                path,
                line,
                f"--method {given.method}: vLLM's num_spec_steps counts only the steps that drafted, so "
                "the steps come from the answer's length, and this record has no completion_tokens",
                "export the records with completion_tokens",
            )
        generated = (
            count(record, "completion_tokens", path, line, FIX)
            if completion is not None
            else 1 + steps + accepted
        )
        turn = 1 if metadata.get("turn_index") is None else count(metadata, "turn_index", path, line, FIX) + 1
        turns.append(
            TurnCounts(
                line=line,
                question_id=_question_id(metadata, path, line),
                turn=turn,
                steps=steps,
                accepted=accepted,
                generated_tokens=generated,
                step_accepted=per_step,
                histogram=histogram,
                drafted_steps_only=skips,
                drafted=count(record, "num_draft_tokens", path, line, FIX)
                if record.get("num_draft_tokens") is not None
                else None,
            )
        )
    if not turns:
        raise bad(
            path,
            None,
            "no profiling record carries spec_decode_acceptance",
            "run AIPerf against an engine that reports per-request spec-decode metrics (vLLM: "
            "--per-request-spec-decode-metrics summary)",
        )
    notes = [f"left out {n} {what} record{'s' * (n != 1)}" for what, n in skipped.items() if n]
    notes.append(
        "question ids are AIPerf's metadata.conversation_id as it stands (whether that is the "
        "dataset's question_id depends on how the dataset was given to AIPerf)"
    )
    skips = any(t.drafted_steps_only for t in turns)
    return PerQuestion(NAME, path, turns, stated, _counting(engines, skips), notes)
