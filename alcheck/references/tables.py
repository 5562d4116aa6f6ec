"""Published reference AL tables: `results/references/<name>.json`, one file per published row
(shipped as package data; `alcheck import` writes more under the current folder, alcheck/paths.py).

Each file is a JSON object with these keys (FIELDS, in this order):
  name, source, target, draft, method, protocol, dataset, limit, max_tokens, temperature,
  draft_sampling, topk, num_draft_tokens, noise, notes, values
where `values` maps K (as a string) to the published AL (1 + accepted drafts per verification
step). `max_tokens` may be null where the source did not state it. `limit` is the number of
questions measured (null: the whole dataset). `draft_sampling` is the temperature > 0
convention of the engine ("onehot": greedy drafts accepted with probability p(d), as vLLM and
the EAGLE repo do; "sampled": drafts sampled from q, accepted with min(1, p/q)); null when
unknown. `noise` is the run-to-run standard deviation of one published value where the source
states one (its "±0.01" read as one SD), else null. `topk` and `num_draft_tokens` give the
drafting shape: 1 and null for a chain of K drafts; for a tree (EAGLE-2/3, TREE-NOTES) the
branching and the tokens verified per step, root included, with K = draft steps (the longest
path; the EAGLE repo's --depth + 1). limit, draft_sampling, topk, num_draft_tokens and noise
were added later: files without them load with null (a tree shape not stated).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from alcheck import paths
from alcheck.errors import AlcheckError
from alcheck.options import DRAFT_SAMPLING, is_count, is_tree

FIELDS = (
    "name",
    "source",
    "target",
    "draft",
    "method",
    "protocol",
    "dataset",
    "limit",
    "max_tokens",
    "temperature",
    "draft_sampling",
    "topk",
    "num_draft_tokens",
    "noise",
    "notes",
    "values",
)
OPTIONAL_FIELDS = ("limit", "draft_sampling", "topk", "num_draft_tokens", "noise")  # default null when absent
# written by `alcheck import` after FIELDS (absent from the published tables): where each setting
# came from ("file", "tool", "user", "unstated"), how the source counted, and the import's record
IMPORT_FIELDS = ("origins", "counting", "imported")
# after them, only when the table is not in alcheck's counting convention (metrics/conventions.py):
# its numbers are then met with the run's number in that convention (report/table.py run_value)
CONVENTION_FIELD = "convention"
ORIGINS = ("file", "tool", "user", "unstated")
_STRING_FIELDS = ("name", "source", "target", "draft", "method", "protocol", "dataset", "notes")


@dataclass
class Reference:
    name: str
    source: str
    target: str
    draft: str
    method: str
    protocol: str
    dataset: str
    max_tokens: int | None
    temperature: float | None  # null: the source does not state it (imports)
    notes: str
    values: dict[str, float] = field(default_factory=dict)
    limit: int | None = None
    draft_sampling: str | None = None
    noise: float | None = None
    topk: int | None = None  # 1 = chain; null = not stated
    num_draft_tokens: int | None = None  # trees: tokens verified per step, root included
    origins: dict | None = None  # imports: setting -> where its value came from
    counting: dict | None = None  # imports: how the source counted
    imported: dict | None = None  # imports: format, file, sha256, counts
    convention: str | None = None  # null: alcheck's (tokens per verification step, pooled)

    def to_dict(self) -> dict:
        """The file's contents (keys in the canonical order; an import's own keys after them)."""
        d = asdict(self)
        tail = (*IMPORT_FIELDS, CONVENTION_FIELD)
        return {**{k: d[k] for k in FIELDS}, **{k: d[k] for k in tail if d[k] is not None}}

    def value(self, k: int | str) -> float | None:
        """The published AL at K=k, or None if this table has no value for k."""
        v = self.values.get(str(k))
        return None if v is None else float(v)

    @property
    def ks(self) -> list[int]:
        return sorted(int(k) for k in self.values)


# --------------------------------------------------------------------------- loading


def reference_from_dict(data, origin: str = "reference") -> Reference:
    """Validate a reference object; errors name `origin` (the file)."""
    if not isinstance(data, dict):
        raise AlcheckError(
            f"{origin}: expected a JSON object: see docs/reference/tables.md for the reference format"
        )
    missing = [k for k in FIELDS if k not in data and k not in OPTIONAL_FIELDS]
    if missing:
        raise AlcheckError(
            f"{origin}: missing key(s) {', '.join(missing)}: keys must be exactly {', '.join(FIELDS)}"
        )
    extra = [k for k in data if k not in FIELDS and k not in IMPORT_FIELDS and k != CONVENTION_FIELD]
    if extra:
        raise AlcheckError(
            f"{origin}: unknown key(s) {', '.join(extra)}: keys must be exactly {', '.join(FIELDS)}"
        )
    for k in _STRING_FIELDS:
        if not isinstance(data[k], str):
            raise AlcheckError(f"{origin}: '{k}' must be a string: fix the file")
    if not data["name"].strip():
        raise AlcheckError(f"{origin}: 'name' is empty: give the reference a name")
    if "," in data["name"]:
        raise AlcheckError(f"{origin}: 'name' must not contain commas: rename it")
    mt = data["max_tokens"]
    if mt is not None and not is_count(mt):
        raise AlcheckError(f"{origin}: 'max_tokens' must be a positive integer or null: fix the file")
    temp = data["temperature"]
    if temp is None and (data.get("origins") or {}).get("temperature") != "unstated":
        raise AlcheckError(f"{origin}: 'temperature' must be a number >= 0: fix the file")
    if temp is not None and (isinstance(temp, bool) or not isinstance(temp, (int, float)) or temp < 0):
        raise AlcheckError(f"{origin}: 'temperature' must be a number >= 0: fix the file")
    for key in IMPORT_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise AlcheckError(f"{origin}: '{key}' must be an object or absent: fix the file")
    bad_origin = [f"{k}: {v!r}" for k, v in (data.get("origins") or {}).items() if v not in ORIGINS]
    if bad_origin:
        raise AlcheckError(f"{origin}: 'origins' has {bad_origin[0]}: use one of {', '.join(ORIGINS)}")
    limit = data.get("limit")
    if limit is not None and not is_count(limit):
        raise AlcheckError(
            f"{origin}: 'limit' must be a positive integer (questions measured) or null: fix the file"
        )
    sampling = data.get("draft_sampling")
    if sampling is not None and sampling not in DRAFT_SAMPLING:
        raise AlcheckError(
            f"{origin}: 'draft_sampling' must be one of {', '.join(DRAFT_SAMPLING)} or null: fix the file"
        )
    noise = data.get("noise")
    if noise is not None and (
        isinstance(noise, bool)
        or not isinstance(noise, (int, float))
        or not math.isfinite(noise)
        or noise < 0
    ):
        raise AlcheckError(
            f"{origin}: 'noise' must be a number >= 0 (one SD, run to run) or null: fix the file"
        )
    topk, num_tokens = data.get("topk"), data.get("num_draft_tokens")
    if topk is not None and not is_count(topk):
        raise AlcheckError(f"{origin}: 'topk' must be an integer >= 1 (1 = chain) or null: fix the file")
    if num_tokens is not None and not is_count(num_tokens, 2):
        raise AlcheckError(
            f"{origin}: 'num_draft_tokens' must be an integer >= 2 (tokens verified per step) "
            "or null: fix the file"
        )
    convention = data.get(CONVENTION_FIELD)
    bonus = True
    if convention is not None:
        from alcheck.metrics import conventions

        bonus = conventions.get(
            convention if isinstance(convention, str) else repr(convention), f"{origin}: 'convention'"
        ).bonus
    values = data["values"]
    if not isinstance(values, dict) or not values:
        raise AlcheckError(f"{origin}: 'values' must be a non-empty object from K to AL: fix the file")
    clean: dict[str, float] = {}
    for k, v in values.items():
        if not re.fullmatch(r"[1-9][0-9]*", str(k)):
            raise AlcheckError(
                f'{origin}: values key {k!r} is not a positive integer K: use keys like "1", "2"'
            )
        # a convention without the bonus token (AL - 1) lies one lower
        shown = v + 1 if bonus is False and isinstance(v, (int, float)) and not isinstance(v, bool) else v
        check_al(shown, int(k), f"{origin}: values[{k!r}]" + ("" if bonus else " + 1"), "fix the file")
        clean[str(int(k))] = float(v)
    clean = dict(sorted(clean.items(), key=lambda kv: int(kv[0])))
    return Reference(
        name=data["name"],
        source=data["source"],
        target=data["target"],
        draft=data["draft"],
        method=data["method"],
        protocol=data["protocol"],
        dataset=data["dataset"],
        max_tokens=mt,
        temperature=None if temp is None else float(temp),
        notes=data["notes"],
        values=clean,
        limit=limit,
        draft_sampling=sampling,
        noise=None if noise is None else float(noise),
        topk=topk,
        num_draft_tokens=num_tokens,
        origins=data.get("origins"),
        counting=data.get("counting"),
        imported=data.get("imported"),
        convention=convention,
    )


def load_references(directory: str | Path | None = None, on_bad=None) -> list[Reference]:
    """Every `*.json` in `directory` (default: the shipped tables, then the current folder's
    results/references/, paths.reference_dirs), sorted by name.

    A bad file (not JSON, not a reference, a name taken) is an error, one line; with
    `on_bad(path, message)` it is reported there instead and the others load (`alcheck references`)."""
    dirs = [Path(directory)] if directory is not None else paths.reference_dirs()
    for d in dirs:
        if not d.is_dir():
            raise AlcheckError(f"reference directory {d} not found: create it or pass an existing one")
    refs: list[Reference] = []
    seen: dict[str, Path] = {}
    for path in [p for d in dirs for p in sorted(d.glob("*.json"))]:
        try:
            ref = _load_file(path)
            if ref.name in seen:
                raise AlcheckError(
                    f"reference name '{ref.name}' is used by both {seen[ref.name]} and {path}: "
                    "make names unique"
                )
        except AlcheckError as e:
            if on_bad is None:
                raise
            on_bad(path, str(e))
            continue
        seen[ref.name] = path
        refs.append(ref)
    return sorted(refs, key=lambda r: r.name)


def _load_file(path: Path) -> Reference:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise AlcheckError(
            f"cannot read reference file {path}: {e.strerror or e}: check its permissions"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"line {e.lineno}" if isinstance(e, json.JSONDecodeError) else "encoding"
        raise AlcheckError(f"reference file {path} is not valid JSON ({where}): fix or remove it") from None
    return reference_from_dict(data, origin=f"reference file {path}")


# --------------------------------------------------------------------------- selection


def _model_name(name: str) -> str:
    # Meta renamed meta-llama/Meta-Llama-3.1-8B-Instruct to meta-llama/Llama-3.1-8B-Instruct
    name = name.lower()
    return name[len("meta-") :] if name.startswith("meta-") else name


def _split_model_id(model_id: str) -> tuple[str | None, str]:
    """(org or None, name), lower-cased, for a hub id, a local dir or an HF cache snapshot path
    (.../models--org--name/snapshots/<hash> -> org/name). Local paths have no org: they match
    by their last path component alone."""
    s = str(model_id).strip().replace("\\", "/").rstrip("/")
    parts = [p for p in s.split("/") if p and p != "."]
    for i, p in enumerate(parts):
        if p.startswith("models--") and i + 1 < len(parts) and parts[i + 1] == "snapshots":
            org_name = p[len("models--") :].split("--", 1)
            if len(org_name) == 2:
                return org_name[0].lower(), _model_name(org_name[1])
            return None, _model_name(org_name[0])
    if not parts:
        return None, ""
    local = s.startswith(("/", ".", "~")) or len(parts) > 2 or Path(s).expanduser().exists()
    org = None if local or len(parts) < 2 else parts[-2].lower()
    return org, _model_name(parts[-1])


def model_matches(ref_id: str, run_id: str) -> bool:
    """Whether a reference's model id names the run's model: hub ids compare case-insensitively
    (org and name); a local directory matches by its last path component (a dir named like the
    hub repo matches it)."""
    ref_org, ref_name = _split_model_id(ref_id)
    run_org, run_name = _split_model_id(run_id)
    if not ref_name or ref_name != run_name:
        return False
    return ref_org is None or run_org is None or ref_org == run_org


def select_references(
    refs: list[Reference],
    spec: str,
    target: str,
    draft: str,
    method: str,
    dataset: str | None = "mt_bench",
    topk: int = 1,
) -> list[Reference]:
    """References to show next to a run.

    spec: "auto" (tables whose target, draft and method match the run's, whose dataset
    equals `dataset` unless that is None, and that draft the same way: a chain run (topk 1)
    gets chain tables, a tree run tree tables and tables that state no shape; a tree of
    another shape is then shown as not comparable), "none", or a comma-separated list of names.
    """
    spec = (spec or "").strip()
    if spec.lower() == "none" or spec == "":
        return []
    if spec.lower() == "auto":
        return [
            r
            for r in refs
            if model_matches(r.target, target)
            and model_matches(r.draft, draft)
            and r.method.strip().lower() == str(method).strip().lower()
            and (dataset is None or r.dataset.strip().lower() == str(dataset).strip().lower())
            and _same_kind(r.topk, topk)
        ]
    by_name = {r.name: r for r in refs}
    chosen: list[Reference] = []
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        if name not in by_name:
            available = ", ".join(sorted(by_name)) or "(none)"
            raise AlcheckError(f"unknown reference '{name}': use auto, none, or names from {available}")
        if by_name[name] not in chosen:
            chosen.append(by_name[name])
    return chosen


def _same_kind(ref_topk: int | None, run_topk: int | None) -> bool:
    """Chain tables for chain runs; tree tables (and tables with no stated shape) for tree runs."""
    return ref_topk is None or is_tree(ref_topk) == is_tree(run_topk)


def _same_number(x, y) -> bool:
    return float(x) == float(y)


def check_al(value, k: int, where: str, fix: str) -> float:
    """An AL for K drafted tokens: a real number (not a string, not a bool) in [1, K+1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AlcheckError(f"{where} is {value!r}, not a finite number: {fix}")
    if not 1 <= value <= k + 1:
        raise AlcheckError(
            f"{where} is {value!r}, not a possible AL at K={k} (AL lies in [1, {k + 1}]): {fix}"
        )
    return float(value)


# settings an import may leave unstated and every comparison then names (`origins`)
STATED_KEYS = (
    "target",
    "draft",
    "method",
    "dataset",
    "protocol",
    "limit",
    "max_tokens",
    "temperature",
    "draft_sampling",
    "topk",
    "num_draft_tokens",
)


def unstated_keys(table: dict) -> list[str]:
    """The settings a reference file or a run's config marks as not stated by its source."""
    origins = table.get("origins") or {}
    greedy = table.get("temperature") is not None and float(table["temperature"]) == 0
    chain_or_unknown = origins.get("topk") == "unstated" or (table.get("topk") or 1) == 1
    return [
        k
        for k in STATED_KEYS
        if origins.get(k) == "unstated"
        and not (k == "draft_sampling" and greedy)  # greedy decoding has no sampling convention
        and not (k == "num_draft_tokens" and chain_or_unknown)
    ]  # named with topk, or K + 1 for a chain


def _differences(ref: dict, config: dict, skip: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
    """_stated_differences, plus one soft phrase per setting an import does not state (on
    either side: a reference or baseline from `alcheck import`, or an imported run); those
    settings are not compared otherwise."""
    theirs, mine = unstated_keys(ref), unstated_keys(config)
    out = [(f"{key} not stated by the source", False) for key in theirs if key not in skip]
    out += [
        (f"{key} not stated by this run's source", False)
        for key in mine
        if key not in skip and key not in theirs
    ]
    ignore = set(theirs) | set(mine)
    out += _stated_differences(
        {k: v for k, v in ref.items() if k not in ignore},
        {k: v for k, v in config.items() if k not in ignore},
        skip,
        shape="topk" not in ignore,
    )
    seen: set[str] = set()
    return [(phrase, hard) for phrase, hard in out if not (phrase in seen or seen.add(phrase))]


def _stated_differences(
    ref: dict, config: dict, skip: tuple[str, ...] = (), shape: bool = True
) -> list[tuple[str, bool]]:
    """What makes a run (its run.json `config`) not directly comparable with a reference (its
    file contents): one phrase per setting that differs or that the reference does not state.
    Checked: target, draft, method, dataset, protocol, limit, max_tokens, temperature, the
    temperature > 0 draft convention, and the drafting shape (topk, num_draft_tokens). `skip` names settings
    not to check (e.g. "limit" when
    the comparison is paired on common questions anyway). Each phrase comes with `hard`: True
    when both sides state the setting and it differs, False when the source does not state it."""
    out: list[tuple[str, bool]] = []
    for key in ("target", "draft"):
        theirs, mine = ref.get(key), config.get(key)
        if theirs and mine and not model_matches(str(theirs), str(mine)):
            out.append((f"{key} {theirs} (this run: {mine})", True))
    if (
        ref.get("method")
        and config.get("method")
        and (str(ref["method"]).lower() != str(config["method"]).lower())
    ):
        out.append((f"method {ref['method']} (this run: {config['method']})", True))
    if ref.get("dataset") and config.get("dataset"):
        from alcheck.prompts.dataset_list import dataset_labels

        # a run of several datasets (a list) is comparable with what measured one of them
        theirs, mine = dataset_labels(ref["dataset"]), dataset_labels(config["dataset"])
        if not {t.lower() for t in theirs} & {m.lower() for m in mine}:
            out.append((f"dataset {', '.join(theirs)} (this run: {', '.join(mine)})", True))
    if ref.get("protocol") and config.get("protocol") and ref["protocol"] != config["protocol"]:
        out.append(
            (f"protocol '{ref['protocol']}' (this run: '{config['protocol']}')", ref["protocol"] != "unknown")
        )
    if "limit" not in skip and "limit" in config and ref.get("limit") != config.get("limit"):

        def questions(n):
            return "all questions" if n is None else f"{n} questions"

        out.append(
            (f"{questions(ref.get('limit'))} (this run: {questions(config.get('limit'))})", "limit" in ref)
        )
    if config.get("max_tokens") is not None:
        if ref.get("max_tokens") is None:
            out.append(("max_tokens not stated by the source", False))
        elif not _same_number(ref["max_tokens"], config["max_tokens"]):
            out.append((f"max_tokens {ref['max_tokens']} (this run: {config['max_tokens']})", True))
    t_ref, t_run = ref.get("temperature"), config.get("temperature")
    if t_ref is not None and t_run is not None and not _same_number(t_ref, t_run):

        def kind(t):
            return "greedy" if float(t) == 0 else f"temperature {float(t):g}"

        out.append((f"{kind(t_ref)} (this run: {kind(t_run)})", True))
    elif t_run is not None and float(t_run) > 0:
        mine, theirs = config.get("draft_sampling"), ref.get("draft_sampling")
        if not theirs:
            out.append(("its temperature > 0 draft convention is not stated", False))
        elif mine and mine != theirs:
            out.append((f"draft sampling '{theirs}' (this run: '{mine}')", True))
    if shape:
        out += _shape_differences(ref, config)
    return out


def drafting_shape(topk, num_draft_tokens) -> str:
    """'chain', or 'tree topk 4, 16 tokens' (the tokens verified per step, root included)."""
    topk = 1 if topk is None else int(topk)
    if not is_tree(topk):
        return "chain"
    return f"tree topk {topk}, {num_draft_tokens} tokens"


def _shape_differences(ref: dict, config: dict) -> list[tuple[str, bool]]:
    """Chain vs tree, or two trees of another shape: AL is not comparable (a tree accepts more).
    A run without the keys (saved before trees) is a chain; a reference without them states no
    shape, which only matters against a tree run."""
    mine = drafting_shape(config.get("topk"), config.get("num_draft_tokens"))
    if ref.get("topk") is None:
        return (
            [(f"its drafting shape (topk, num_draft_tokens) is not stated (this run: {mine})", False)]
            if mine != "chain"
            else []
        )
    theirs = drafting_shape(ref.get("topk"), ref.get("num_draft_tokens"))
    return [(f"{theirs} (this run: {mine})", True)] if theirs != mine else []


def mismatches(ref: dict, config: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """Every reason a run is not directly comparable with a reference (see _differences)."""
    return [phrase for phrase, _ in _differences(ref, config, skip)]


def hard_mismatches(ref: dict, config: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """Settings both sides state and that differ: then a difference in AL may come from the
    settings, not the runner, and no verdict can be given (the table says "not comparable")."""
    return [phrase for phrase, hard in _differences(ref, config, skip) if hard]


def short_source(source: str) -> str:
    """'https://github.com/vllm-project/vllm/pull/16370#issuecomment-1' -> 'vllm-project/vllm#16370'."""
    m = re.match(r"https?://github\.com/([^/]+/[^/]+)/(?:pull|issues)/(\d+)", source)
    return f"{m.group(1)}#{m.group(2)}" if m else source
