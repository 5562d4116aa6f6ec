"""Guards on the package's layout (issues 19, 29): a root of a few modules, no import cycles, and
each choice made in its table (methods, runners, engines).

Both read the source with `ast`, so they see every import, the ones inside functions included: a
lazy import that closes a cycle is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "alcheck"


def module_name(path: Path) -> str:
    if not path.is_relative_to(PACKAGE.parent):  # a file outside the package (the guard's own tests)
        return path.stem
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The alcheck modules `path` imports anywhere in its body (`from x import y` counts x.y when
    y is a module of ours, else x). Imports under `if TYPE_CHECKING:` are not run: left out."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "alcheck")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "alcheck":
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            found.update(subs or [base])
    return {m for m in found if m in known and m != this}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    graph = {name: imported_modules(path, known) for name, path in mods.items()}
    # importing a.b.c runs a/__init__ and a/b/__init__ first
    for name, deps in graph.items():
        for dep in list(deps):
            parts = dep.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in known)
        deps.discard(name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# the package's face and its true leaves; every other module lives in a room (a subpackage)
ROOT_MODULES = {"__init__", "__main__", "config", "device_info", "errors", "options", "paths", "versions"}
MAX_ROOT_MODULES = 8


def test_the_root_holds_only_its_few_modules():
    found = {p.stem for p in PACKAGE.glob("*.py")}
    assert len(ROOT_MODULES) <= MAX_ROOT_MODULES
    assert found == ROOT_MODULES, (
        f"alcheck/ holds {sorted(found - ROOT_MODULES)} beyond its {len(ROOT_MODULES)} modules "
        f"(missing: {sorted(ROOT_MODULES - found)}): put a new module in the subpackage of its concern"
    )


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    """The guard itself: a function-local import that closes a loop is reported."""
    graph = {
        "alcheck.a": {"alcheck.b"},
        "alcheck.b": {"alcheck.c"},
        "alcheck.c": {"alcheck.a"},
        "alcheck.d": set(),
    }
    assert find_cycles(graph) == [["alcheck.a", "alcheck.b", "alcheck.c"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from alcheck.sweep.driver import Sweep\n")
    assert imported_modules(source, {"alcheck.sweep.driver"}) == {"alcheck.sweep.driver"}


def test_no_import_cycles_in_the_package():
    cycles = find_cycles(import_graph())
    shown = "; ".join(" <-> ".join(c) for c in cycles)
    assert not cycles, f"import cycles (lazy imports count): {shown}"


# -- names tested outside their tables ------------------------------------------------------------

# name -> the modules allowed to spell it as a literal in a comparison: the table that owns it
TABLE_NAMES = {
    "eagle": {"alcheck.methods.table", "alcheck.methods.eagle"},
    "eagle3": {"alcheck.methods.table", "alcheck.methods.eagle3"},
    "ngram": {"alcheck.methods.table", "alcheck.methods.ngram"},
    "paged": {"alcheck.runner.table"},
    "contiguous": {"alcheck.runner.table"},
    "static": {"alcheck.runner.table"},
    "vllm": {"alcheck.backends.engines.table"},
    "sglang": {"alcheck.backends.engines.table"},
}


# modules that may spell a name as a dict key or value or a keyword's value (never in a
# comparison), and why: the string is another format's own, or a builder keyed by each method
SPELLED_ELSEWHERE = {
    "alcheck.testing.tiny": "writes the speculators format, whose algorithm and model type read 'eagle3'",
    "alcheck.testing.tiny_arch": "builds one tiny head per method for the tests, keyed by the method's name",
    "alcheck.imports.spec_bench": "Spec-Bench's own method names (its answer files'), not alcheck's",
}


def _names_in(node) -> list[str]:
    """TABLE_NAMES spelled by node: a string literal, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and node.value in TABLE_NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in TABLE_NAMES]
    return []


def literal_tests(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each ==, !=, in or not-in whose operand is one of TABLE_NAMES as a string
    literal (or a tuple/list/set of them)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            for operand in [node.left, *node.comparators]:
                hits += [(node.lineno, name) for name in _names_in(operand)]
    return hits


def literal_choices(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each of TABLE_NAMES spelled as a dict key or value, a keyword argument's
    value or an assigned value: a choice made outside its table (`runner="paged"`,
    `{"runner": "paged"}`, `HEADS = ("eagle", "eagle3")`)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Dict):
            operands = [n for n in (*node.keys, *node.values) if n is not None]  # a None key: a ** spread
        elif isinstance(node, (ast.keyword, ast.Assign, ast.AnnAssign)) and node.value is not None:
            operands = [node.value]
        else:
            continue
        hits += [(operand.lineno, name) for operand in operands for name in _names_in(operand)]
    return sorted(hits)


def test_the_literal_finder_sees_method_tests(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "if cfg.method == 'eagle3':\n    pass\nif runner in ('paged', 'x'):\n    pass\nok = {'eagle': 1}\n"
        "d = {'runner': 'contiguous', **other}\nreplace(cfg, runner='paged')\nfine = {'x': 'eagle2'}\n"
        "HEADS = ('eagle', 'eagle3')\nKIND: str = 'static'\nif cfg.engine == 'sglang':\n    pass\n"
        "DIALECTS = {'vllm': make_router}\n"
    )
    assert literal_tests(source) == [(1, "eagle3"), (3, "paged"), (11, "sglang")]
    assert literal_choices(source) == [
        (5, "eagle"),
        (6, "contiguous"),
        (7, "paged"),
        (9, "eagle"),
        (9, "eagle3"),
        (10, "static"),
        (13, "vllm"),
    ]


@pytest.mark.parametrize("name", sorted(TABLE_NAMES))
def test_method_runner_and_engine_names_are_tested_only_in_their_tables(name):
    offenders = [
        f"{module}:{line}"
        for module, path in sorted(modules().items())
        for line, found in literal_tests(path)
        if found == name and module not in TABLE_NAMES[name]
    ]
    assert not offenders, f"{name!r} compared as a string literal outside its table: {', '.join(offenders)}"


@pytest.mark.parametrize("name", sorted(TABLE_NAMES))
def test_method_runner_and_engine_names_are_chosen_only_in_their_tables(name):
    allowed = TABLE_NAMES[name] | set(SPELLED_ELSEWHERE)
    offenders = [
        f"{module}:{line}"
        for module, path in sorted(modules().items())
        for line, found in literal_choices(path)
        if found == name and module not in allowed
    ]
    assert not offenders, (
        f"{name!r} spelled as a dict key or value or a keyword's value outside its table: "
        f"{', '.join(offenders)}: use the table's constant (e.g. DEFAULT_RUNNER)"
    )
