"""Issue 13 oracles for tree drafting (EAGLE-2 dynamic trees) in the paged runner.

`ReferenceTree` is written here from TREE-NOTES section 1, with no KV cache that outlives one
forward: every step it runs the target over the whole committed sequence, rebuilds the tree
node by node (each fed node's hidden from a full-sequence head forward over the committed rows
plus its own path, with plain causal masks), reranks with Python sorts under the documented tie
rule, and checks each node against a full-sequence target forward over the committed tokens plus
the node's path. It shares no code with runner/drafting.py, runner/tree.py or the runner.
The paged runner (block size 4, batched, with lookahead) must give exactly its per-question steps,
accepted counts by depth and tokens, for EAGLE-1 and EAGLE-3 heads and several (steps, topk, T),
including T below the candidate pool; its output must equal target-only greedy decoding.
"""

from __future__ import annotations

import pytest
import torch
from eagle3_pair import build_pair, make_prompts

from alcheck.methods.table import proposer_for
from alcheck.models.attention import AttnBatch, bind_kv_cache
from alcheck.models.eagle3_loading import load_eagle3
from alcheck.models.loading import load_target
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

MAX_TOKENS = 16
SETTINGS = [(2, 2, 4), (3, 3, 9), (3, 2, 5), (4, 2, 10)]  # (steps, topk, T); the pools hold 7, 21, 11, 14


def fresh_batch(layers, n: int) -> AttnBatch:
    """A throwaway contiguous cache for one causal forward over positions 0..n-1."""
    bind_kv_cache(layers, 1, n, torch.float32, "cpu")
    pos = torch.arange(n)
    return AttnBatch.build(pos, pos.clone(), torch.zeros(1, 1, dtype=torch.int32), [n], [n], n, "torch")


class ReferenceTree:
    def __init__(self, target, head, eos):
        self.target, self.head, self.eos = target, head, set(eos)
        self.eagle3 = hasattr(head, "aux_layers")

    def target_rows(self, tokens):
        """(logits, draft features) of every position, one causal forward over `tokens`."""
        ids = torch.tensor(tokens)
        batch = fresh_batch(self.target.attention_layers, len(tokens))
        if self.eagle3:
            hidden, feats = self.target(ids, batch, aux_layers=self.head.aux_layers)
        else:
            hidden = feats = self.target(ids, batch)
        return self.target.compute_logits(hidden), feats

    def head_rows(self, tokens, hidden):
        ids = torch.tensor(tokens)
        batch = fresh_batch(self.head.attention_layers, len(tokens))
        embeds = self.head.embed(self.target, ids) if self.eagle3 else self.target.embed(ids)
        return self.head(embeds, hidden, batch)

    def log_probs(self, y):
        logits = self.head.compute_logits(y[None]) if self.eagle3 else self.target.compute_logits(y[None])
        return torch.log_softmax(logits.float(), -1)[0]

    @staticmethod
    def best(values, k):  # indices of the k largest; ties to the lower index
        values = values.tolist() if isinstance(values, torch.Tensor) else [float(v) for v in values]
        return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]

    def tree(self, tokens, steps, topk, num_tokens):
        """[(token, parent node)] for nodes 1..T-1 (0 = the root, tokens[-1])."""
        _, feats = self.target_rows(tokens[:-1])
        base = self.head.combine(feats) if self.eagle3 else feats
        inputs = tokens[1:]  # row p pairs x_{p+1} with the target's feature at p
        out = {(): self.head_rows(inputs, base)[-1]}  # a fed node's path -> its output hidden
        lp = self.log_probs(out[()])
        cands = [(lp[t], t, -1, (t,)) for t in self.best(lp, topk)]  # (score, token, parent, path)
        frontier = list(range(topk))
        for _level in range(1, steps):
            children = []
            for c in frontier:
                path = cands[c][3]
                hidden = torch.cat([base, torch.stack([out[path[:j]] for j in range(len(path))])])
                out[path] = self.head_rows(inputs + list(path), hidden)[-1]
                lp = self.log_probs(out[path])
                children += [(cands[c][0] + lp[t], t, c, path + (t,)) for t in self.best(lp, topk)]
            first = len(cands)
            cands += children
            frontier = [first + i for i in self.best([ch[0] for ch in children], topk)]
        chosen = sorted(self.best([c[0] for c in cands], num_tokens - 1))
        node = {c: i + 1 for i, c in enumerate(chosen)}
        return [(cands[c][1], node[cands[c][2]] if cands[c][2] >= 0 else 0) for c in chosen]

    @torch.inference_mode()
    def generate(self, prompt, max_tokens, steps, topk, num_tokens):
        logits, _ = self.target_rows(prompt)
        tokens, out = list(prompt), []
        finish = None

        def commit(new):
            nonlocal finish
            for t in new:
                tokens.append(t)
                out.append(t)
                if t in self.eos:
                    finish = "eos"
                elif len(out) >= max_tokens:
                    finish = "length"
                if finish:
                    return

        commit([int(logits[-1].argmax())])
        num_steps = accepted = 0
        per_depth = [0] * steps
        while finish is None:
            nodes = self.tree(tokens, steps, topk, num_tokens)
            paths = {0: []}
            for i, (tok, parent) in enumerate(nodes, start=1):
                paths[i] = paths[parent] + [tok]
            argmax = {}  # node -> the target's argmax after the committed tokens plus its path
            for i, path in paths.items():
                if i not in argmax:
                    logits, _ = self.target_rows(tokens + path)
                    for j in range(len(path) + 1):  # the same forward answers every node on the path
                        on_path = [n for n, p in paths.items() if p == path[:j]]
                        argmax[on_path[0]] = int(logits[len(tokens) - 1 + j].argmax())
            cur, emitted = 0, []
            while True:
                nxt = [
                    i
                    for i, (tok, parent) in enumerate(nodes, start=1)
                    if parent == cur and tok == argmax[cur]
                ]
                if not nxt:
                    break
                cur = nxt[0]
                emitted.append(nodes[cur - 1][0])
            num_steps += 1
            accepted += len(emitted)
            for d in range(len(emitted)):
                per_depth[d] += 1
            commit(emitted + [argmax[cur]])
        return out, num_steps, accepted, per_depth, finish


@pytest.fixture(scope="module")
def eagle3_dirs(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("tree-eagle3"))


@pytest.fixture(scope="module")
def pairs(pair, eagle3_dirs):
    """name -> (target module, head, eos ids, prompts): the copy-layer EAGLE-1 pair and an EAGLE-3 pair."""
    target, head = pair
    t3 = load_target(str(eagle3_dirs["target"]))
    h3 = load_eagle3(str(eagle3_dirs["eagle"]), t3)
    vocab = target.model.config.vocab_size
    return {
        "eagle": (target.model, head, target.eos_token_ids, make_prompts(vocab, n=4, seed=1)),
        "eagle3": (t3.model, h3, t3.eos_token_ids, make_prompts(t3.model.config.vocab_size, n=4, seed=2)),
    }


def run_tree(target, head, eos, prompts, steps, topk, num_tokens, max_tokens=MAX_TOKENS, **cfg):
    cfg.setdefault("block_size", 4)
    config = RunnerConfig(num_spec_tokens=steps, topk=topk, num_draft_tokens=num_tokens, **cfg)
    runner = PagedRunner(target, proposer_for(head), eos, config)
    return runner.generate(prompts, max_tokens), runner


def key(r):
    return (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason)


@pytest.fixture(scope="module")
def greedy_outputs(pairs):
    out = {}
    for name, (target, _, eos, prompts) in pairs.items():
        runner = PagedRunner(target, None, eos, RunnerConfig(num_spec_tokens=0, block_size=4))
        out[name] = [r.output_ids for r in runner.generate(prompts, MAX_TOKENS)]
    return out


@pytest.mark.parametrize("name", ["eagle", "eagle3"])
@pytest.mark.parametrize("steps, topk, num_tokens", SETTINGS)
def test_paged_tree_equals_the_reference(pairs, greedy_outputs, name, steps, topk, num_tokens):
    target, head, eos, prompts = pairs[name]
    results, runner = run_tree(target, head, eos, prompts, steps, topk, num_tokens, audit_slots=True)
    reference = ReferenceTree(target, head, eos)
    for i, (got, prompt) in enumerate(zip(results, prompts)):
        want = reference.generate(prompt, MAX_TOKENS, steps, topk, num_tokens)
        assert key(got) == want, f"{name} question {i}"
        assert got.output_ids == greedy_outputs[name][i], f"{name} question {i}: not lossless"
    assert runner.auditor.violations == 0, runner.auditor.summary()
    steps_total = sum(r.steps for r in results)
    assert steps_total + sum(r.accepted for r in results) > steps_total  # some drafts accepted: a real test
