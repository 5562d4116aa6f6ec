"""Issue 13: tree rows in the reference tables, and tree runs in reference matching and the tables.

The EAGLE-3 paper's Table 1 rows (TREE-NOTES 6.1) ship with topk 10 / 60 tokens and K = draft
steps, marked UNCERTAIN as the notes mark that config. A reference with another drafting shape
is not comparable with a run; one that states no shape warns against a tree run."""

from __future__ import annotations

from alcheck.references.tables import hard_mismatches, load_references, mismatches, select_references
from alcheck.report.table import markdown_table

L31, E1, E3 = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
)


def run_config(**kw):
    base = dict(
        target=L31,
        draft=E3,
        method="eagle3",
        dataset="mt_bench",
        protocol="eagle-repo",
        limit=None,
        max_tokens=512,
        temperature=0.0,
        draft_sampling="onehot",
        topk=10,
        num_draft_tokens=60,
    )
    return {**base, **kw}


def test_shipped_tree_rows():
    refs = {r.name: r for r in load_references()}
    tree = {name: r for name, r in refs.items() if (r.topk or 1) > 1}
    assert tree["eagle3-paper-eagle3-llama31-8b"].value(8) == 6.13
    assert tree["eagle3-paper-eagle2-llama31-8b"].value(6) == 4.05
    assert tree["eagle3-paper-eagle3-llama31-8b-t1"].value(8) == 4.24
    for r in tree.values():
        assert (r.topk, r.num_draft_tokens) == (10, 60) and "UNCERTAIN" in r.notes
    chains = [r for r in refs.values() if r.name not in tree]
    assert chains and all((r.topk, r.num_draft_tokens) == (1, None) for r in chains)


def test_shape_mismatches():
    refs = {r.name: r.to_dict() for r in load_references()}
    paper = refs["eagle3-paper-eagle3-llama31-8b"]
    assert not [m for m in mismatches(paper, run_config()) if "tree" in m or "chain" in m]
    other_tree = hard_mismatches(paper, run_config(topk=4, num_draft_tokens=16))
    assert other_tree == ["tree topk 10, 60 tokens (this run: tree topk 4, 16 tokens)"]
    assert "tree topk 10, 60 tokens (this run: chain)" in hard_mismatches(
        paper, run_config(topk=1, num_draft_tokens=None)
    )
    chain_ref = refs["vllm-ci-eagle3-llama31-8b"]
    assert "chain (this run: tree topk 10, 60 tokens)" in hard_mismatches(chain_ref, run_config())
    unstated = {k: v for k, v in chain_ref.items() if k not in ("topk", "num_draft_tokens")}
    unstated["topk"] = None
    soft = [m for m in mismatches(unstated, run_config()) if "drafting shape" in m]
    assert soft and not [m for m in hard_mismatches(unstated, run_config()) if "drafting shape" in m]
    assert not [m for m in mismatches(unstated, run_config(topk=1, num_draft_tokens=None)) if "drafting" in m]
    old_run = {k: v for k, v in run_config().items() if k not in ("topk", "num_draft_tokens")}  # before trees
    assert not [m for m in mismatches(chain_ref, old_run) if "chain" in m or "tree" in m]


def test_auto_selection_follows_the_drafting_kind():
    refs = load_references()
    names = lambda rs: {r.name for r in rs}  # noqa: E731
    chain = names(select_references(refs, "auto", L31, E3, "eagle3"))
    tree = names(select_references(refs, "auto", L31, E3, "eagle3", topk=10))
    assert chain == {"vllm-issue20780-eagle3-llama31-8b", "vllm-ci-eagle3-llama31-8b"}
    assert tree == {"eagle3-paper-eagle3-llama31-8b", "eagle3-paper-eagle3-llama31-8b-t1"}
    assert names(select_references(refs, "auto", L31, E1, "eagle", topk=4)) == {
        "eagle3-paper-eagle2-llama31-8b",
        "eagle3-paper-eagle2-llama31-8b-t1",
    }


def test_table_names_the_tree_shape():
    summary = [
        {
            "k": 3,
            "al_mean": 3.1,
            "al_std": 0.0,
            "al_ci95": [3.0, 3.2],
            "al_repeats": [3.1],
            "per_position": [0.9, 0.7, 0.5],
            "tokens_per_s": 10.0,
        }
    ]
    meta = {"config": run_config(topk=4, num_draft_tokens=16), "summary": summary, "references": []}
    text = markdown_table(meta)
    assert "tree topk 4, 16 tokens" in text and "by depth" in text
    meta["config"] = run_config(topk=1, num_draft_tokens=None)
    assert "Tree drafting" not in markdown_table(meta)
