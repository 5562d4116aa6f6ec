"""Training text for the demo pair: documentation that ships inside every CPython.

Corpus: (1) `pydoc_data.topics` -- the Python Language Reference / Library Reference sections
that `help()` shows (about 0.47 MB of English prose on 3.11), and (2) the docstrings of the
standard library's own modules, classes and functions, read with `ast` from the `.py` files of
the running interpreter's stdlib (never imported, so nothing executes).

Why this corpus:
- it is on every machine that can run alcheck (it is part of Python itself): no download, no
  network, no dataset hub, no extra package;
- it is real English prose written by people (explanations, definitions, examples) with some
  code, so a tiny model learns a language with predictable structure -- what speculative
  decoding needs to show realistic acceptance;
- it contains no MT-Bench questions or answers (MT-Bench is creative writing, role play,
  reasoning, math, coding, extraction, STEM and humanities questions written for FastChat;
  CPython's docs predate and never quote it);
- it is licensed under the PSF licence, so training on it and shipping the weights is fine.

Determinism: files are visited in sorted order of their path relative to the stdlib folder and
all text is produced by pure functions of the file contents, so the corpus is identical on two
machines with the same CPython version (the text changes between CPython minor versions; the
shipped models were trained on 3.11).

Chat formatting: every sample is one user turn and one assistant turn, so the target learns the
Llama-3 chat template and learns to stop with `<|eot_id|>`:
- reference sections: user = the section heading, assistant = the section's opening paragraphs;
- paragraph pairs: user = the first sentence of a paragraph, assistant = the rest of it and the
  paragraph after it;
- docstrings: user = the summary line, assistant = the body; one-paragraph docstrings become
  user = "What does <module>.<name> do?", assistant = the docstring.
Answers are whole paragraphs up to about 700 characters; doctest sessions (`>>>`) are dropped.
"""

from __future__ import annotations

import ast
import re
import sysconfig
from pathlib import Path

# Stdlib folders that hold tests, test data, GUI/IDE code or vendored wheels, not documentation.
_SKIP_PARTS = {
    "test",
    "tests",
    "idle_test",
    "idlelib",
    "site-packages",
    "dist-packages",
    "_bundled",
    "__pycache__",
    "lib2to3",
    "turtledemo",
    "config-3.11-x86_64-linux-gnu",
}
_HEADING_UNDERLINE = re.compile(r"^(\*{3,}|={3,}|-{3,}|~{3,})$")
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z\"'(])")

MAX_ANSWER_CHARS = 700
MIN_ANSWER_CHARS = 40


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks; prose lines are joined, indented (code) blocks kept as is."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.rstrip().split("\n")
        if not lines or not block.strip():
            continue
        if all(line.startswith((" ", "\t")) for line in lines if line.strip()):
            body = "\n".join(line.rstrip() for line in lines)  # code / grammar / table block
            indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
            out.append("\n".join(line[indent:] for line in body.split("\n")))
        else:
            out.append(" ".join(line.strip() for line in lines))
    return [p for p in out if ">>>" not in p]  # doctest sessions: code, not prose


def _take(paragraphs: list[str], limit: int = MAX_ANSWER_CHARS) -> str:
    """Whole paragraphs from the start while they fit in `limit` characters (at least one)."""
    taken, size = [], 0
    for p in paragraphs:
        if taken and size + len(p) > limit:
            break
        taken.append(p)
        size += len(p) + 2
    text = "\n\n".join(taken)
    return text[: limit * 2]


def _first_sentence(paragraph: str) -> tuple[str, str]:
    parts = _SENTENCE_END.split(paragraph, maxsplit=1)
    if len(parts) == 1:
        return paragraph, ""
    return parts[0], parts[1]


def _is_prose(p: str) -> bool:
    return "\n" not in p and len(p) >= 60 and p[:1].isalpha()


def _pairs_from_paragraphs(paragraphs: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for i, p in enumerate(paragraphs):
        if not _is_prose(p):
            continue
        first, rest = _first_sentence(p)
        if not rest or len(first) > 200:
            continue
        answer = rest if i + 1 >= len(paragraphs) else rest + "\n\n" + _take(paragraphs[i + 1 : i + 2])
        pairs.append((first, answer))
    return pairs


def topic_samples() -> list[tuple[str, str]]:
    """(user, assistant) pairs from the reference sections in pydoc_data.topics."""
    from pydoc_data.topics import topics

    pairs = []
    for key in sorted(topics):
        lines = topics[key].split("\n")
        sections, heading, body = [], None, []
        for i, line in enumerate(lines):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if (
                line.strip()
                and _HEADING_UNDERLINE.match(nxt.strip())
                and len(nxt.strip()) >= len(line.strip()) - 2
            ):
                if heading is not None:
                    sections.append((heading, "\n".join(body)))
                heading, body = line.strip(), []
            elif _HEADING_UNDERLINE.match(line.strip()):
                continue
            else:
                body.append(line)
        if heading is not None:
            sections.append((heading, "\n".join(body)))
        for heading, text in sections:
            paras = _paragraphs(text)
            if not paras:
                continue
            pairs.append((heading, _take(paras)))
            pairs.extend(_pairs_from_paragraphs(paras))
    return pairs


def _stdlib_files() -> list[tuple[str, Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if any(part in _SKIP_PARTS or part.startswith("config-") for part in rel.parts):
            continue
        files.append((rel.as_posix(), path))
    return sorted(files)


def docstring_samples() -> list[tuple[str, str]]:
    """(user, assistant) pairs from docstrings of stdlib modules, classes and functions."""
    pairs = []
    for rel, path in _stdlib_files():
        try:
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError):
            continue
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        nodes = [(module, tree)]
        stack = [(module, tree)]
        while stack:  # depth-first in source order, deterministic
            prefix, node = stack.pop(0)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}.{child.name}"
                    nodes.append((name, child))
                    if isinstance(child, ast.ClassDef):
                        stack.append((name, child))
        for name, node in nodes:
            doc = ast.get_docstring(node, clean=True)
            if not doc or len(doc) < MIN_ANSWER_CHARS:
                continue
            paras = _paragraphs(doc)
            if len(paras) >= 2 and len(paras[0]) <= 200 and "\n" not in paras[0]:
                pairs.append((paras[0], _take(paras[1:])))
            else:
                pairs.append((f"What does {name} do?", _take(paras)))
            pairs.extend(_pairs_from_paragraphs(paras))
    return pairs


def samples() -> list[tuple[str, str]]:
    """All (user, assistant) pairs, deterministic order, duplicates and tiny answers removed."""
    seen, out = set(), []
    for user, answer in topic_samples() + docstring_samples():
        user, answer = user.strip(), answer.strip()
        if len(answer) < MIN_ANSWER_CHARS or not user or (user, answer) in seen:
            continue
        seen.add((user, answer))
        out.append((user, answer))
    return out


if __name__ == "__main__":
    s = samples()
    print(len(s), "samples,", sum(len(u) + len(a) for u, a in s), "chars")
    for u, a in s[:3] + s[5000:5003]:
        print("USER:", u, "\nASSISTANT:", a[:400], "\n---")
