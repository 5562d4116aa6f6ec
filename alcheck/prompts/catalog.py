"""The datasets `--dataset` knows by name: shipped question files, and the published ones alcheck
may not ship (their licences are uncertain), which still run from a local copy.

Each entry names its upstream file's sha256, so a local copy passed by path is recognised and
labelled by name (reference tables match runs by that label: a GSM8K row never meets an MT-Bench
run), and the protocol the EAGLE papers measured it under (the default when --protocol is not
given): the EAGLE repo's scripts run every benchmark with the same chat template and system
prompt, one turn per turn in the file, so the single-turn sets default to `eagle-repo`.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck import paths
from alcheck.errors import AlcheckError

EAGLE_REPO = "https://github.com/SafeAILab/EAGLE"
SPEC_BENCH_REPO = "https://github.com/hemingkx/Spec-Bench"


@dataclass(frozen=True)
class NamedDataset:
    name: str
    sha256: str  # of the question file (shipped, or upstream for the unshipped ones)
    protocol: str  # the default protocol for runs on it
    source: str  # where the file comes from
    shipped: bool = True  # datasets/<name>/question.jsonl
    why_not_shipped: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def path(self):
        return paths.DATASETS_DIR / self.name / "question.jsonl"


CATALOG: tuple[NamedDataset, ...] = (
    NamedDataset(
        "mt_bench",
        "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
        "vllm-example",
        "FastChat's MT-Bench (identical to the EAGLE repo's eagle/data/mt_bench/question.jsonl)",
    ),
    NamedDataset(
        "humaneval",
        "ce0244e2b228339e9a11afc63a151719beede1e389fdaec7cd9751d33902180e",
        "eagle-repo",
        f"{EAGLE_REPO} eagle/data/humaneval/question.jsonl",
    ),
    NamedDataset(
        "gsm8k",
        "a55920b2f2aac724241124c59e5b8e8168dbbeb2ab0fdbee17d5b0ab6db5ff27",
        "eagle-repo",
        f"{EAGLE_REPO} eagle/data/gsm8k/question.jsonl",
    ),
    NamedDataset(
        "qa",
        "04252e41ab00bcc03b11940b4a3766cf40ae0b76a09c4f56968ba952f0b029f3",
        "eagle-repo",
        f"{EAGLE_REPO} eagle/data/qa/question.jsonl (Natural Questions)",
    ),
    NamedDataset(
        "spec_bench_open",
        "f4705bd289f67defc6168173af24c357ad85057507b3ce4c03bee74663d36d15",
        "vllm-example",
        f"{SPEC_BENCH_REPO} data/spec_bench/question.jsonl without its translation and "
        "summarization parts (datasets/spec_bench_open/SOURCE.md)",
    ),
    NamedDataset(
        "spec_bench",
        "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04",
        "vllm-example",
        f"{SPEC_BENCH_REPO} data/spec_bench/question.jsonl",
        shipped=False,
        why_not_shipped="its translation (WMT14 news) and summarization (CNN/DailyMail) items are not "
        "licensed for redistribution; its other 320 questions ship as spec_bench_open",
    ),
    NamedDataset(
        "alpaca",
        "8ad3e5a7fc61b88d8e25edb81a52a2ce00a04494d5694c122cb11a5cc26a00df",
        "eagle-repo",
        f"{EAGLE_REPO} eagle/data/alpaca/question.jsonl",
        shipped=False,
        why_not_shipped="Stanford Alpaca's data licence is uncertain (CC BY-NC 4.0 per its README, and its "
        "DATA_LICENSE copy differs)",
    ),
    NamedDataset(
        "sum",
        "916876f0c42f938a944de96eed16e51425f29f27438cca5c9ef4737c0fedf771",
        "eagle-repo",
        f"{EAGLE_REPO} eagle/data/sum/question.jsonl",
        shipped=False,
        why_not_shipped="its CNN/DailyMail articles are (c) CNN / Daily Mail",
        aliases=("cnn_dm",),
    ),
)

_BY_NAME = {name: d for d in CATALOG for name in (d.name, *d.aliases)}
_BY_SHA = {d.sha256: d for d in CATALOG}


def named(spec: str) -> NamedDataset | None:
    """The catalog entry a short name (or alias) means; None for anything else."""
    return _BY_NAME.get(spec.strip().lower()) if isinstance(spec, str) else None


def by_sha256(digest: str) -> NamedDataset | None:
    return _BY_SHA.get(digest)


def shipped_file(entry: NamedDataset):
    """The shipped question file, or one line saying how to run an unshipped dataset locally."""
    if entry.shipped:
        return entry.path
    raise AlcheckError(
        f"dataset '{entry.name}' is not shipped with alcheck ({entry.why_not_shipped}): get {entry.source} "
        "yourself and pass its path, --dataset path/to/question.jsonl "
        f"(a copy with sha256 {entry.sha256[:12]}... "
        f"is recognised and labelled '{entry.name}')"
    )


def names() -> str:
    shipped = [d.name for d in CATALOG if d.shipped]
    local = [d.name for d in CATALOG if not d.shipped]
    return f"{', '.join(shipped)} (shipped); {', '.join(local)} (from a local copy)"
