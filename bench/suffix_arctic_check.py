#!/usr/bin/env python3
"""alcheck's suffix decoding rule against arctic-inference's own SuffixDecodingCache, draft for draft.

    python bench/suffix_arctic_check.py [--seeds 3] [--trials 200]

Runs itself under the arctic venv (bench/arctic_env.py builds it). Each trial draws options
(tree depth, cached requests including 0, spec factor, min token prob), a small vocabulary (many
equal counts: ties), and a schedule of up to 3 requests at a time that start with a prompt, commit
1-3 tokens a step, draft with a random K and stop, with request ids reused (a restarted id's old
response is evicted first, as vLLM's proposer does). Both caches get the same calls; every draft's
tokens, probabilities, score and match length must be equal, and so must the set of cached
requests after each trial. Prints the counts; exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def compare(seed: int, trials: int) -> tuple[int, int, int]:
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    from alcheck.runner.proposers.suffix_cache import SuffixCache, SuffixOptions

    drafts = nonempty = differ = 0
    for trial in range(trials):
        rng = random.Random(seed * 100_003 + trial)
        depth = rng.choice([1, 2, 3, 5, 8, 24])
        cached = rng.choice([0, 1, 2, 3, 10000])
        factor = rng.choice([0.0, 0.5, 1.0, 1.5, 2.0])
        min_prob = rng.choice([0.0, 0.1, 0.25, 1 / 3, 0.5, 1.0])
        vocab = rng.choice([2, 3, 5, 20])
        theirs = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=cached)
        ours = SuffixCache(SuffixOptions(depth, cached, factor, min_prob))
        running: dict[str, list[int]] = {}
        started = 0
        for _ in range(60):
            rid = f"r{started % 5}"
            if len(running) < 3 and rng.random() < 0.4 and rid not in running:
                started += 1
                prompt = [rng.randrange(vocab) for _ in range(rng.randrange(1, 30))]
                if rid in theirs.cached_requests:
                    theirs.evict_cached_response(rid)
                theirs.start_request(rid, prompt)
                ours.start(rid, prompt)
                running[rid] = list(prompt)
            for req in list(running):
                tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]
                theirs.add_active_response(req, tokens)
                ours.commit(req, tokens)
                running[req] += tokens
                k = rng.randrange(0, 8)
                a = theirs.speculate(
                    req,
                    running[req][-depth:],
                    max_spec_tokens=k,
                    max_spec_factor=factor,
                    min_token_prob=min_prob,
                )
                b = ours.draft(req, k)
                drafts += 1
                nonempty += bool(a.token_ids)
                same = (list(a.token_ids), list(a.probs), a.score) == (b.token_ids, b.probs, b.score)
                if not same or (a.token_ids and a.match_len != b.match_len):
                    differ += 1
                    if differ <= 3:
                        print(f"differ: seed {seed} trial {trial} {req}: arctic {a} alcheck {b}")
                if rng.random() < 0.1:
                    theirs.stop_request(req)
                    ours.stop(req)
                    del running[req]
        if set(theirs.cached_requests) != set(ours.cached):
            differ += 1
            print(
                f"differ: seed {seed} trial {trial}: cached {list(theirs.cached_requests)} vs {ours.cached}"
            )
    return drafts, nonempty, differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.inside:
        env = subprocess.run([sys.executable, str(HERE / "arctic_env.py")], capture_output=True, text=True)
        if env.returncode != 0:
            print((env.stderr or env.stdout).strip().splitlines()[-1])
            return 2
        python = env.stdout.strip().splitlines()[-1]
        paths = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)
        cmd = [python, __file__, "--inside", "--seeds", str(args.seeds), "--trials", str(args.trials)]
        return subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=paths)).returncode
    total = [0, 0, 0]
    for seed in range(args.seeds):
        total = [t + n for t, n in zip(total, compare(seed, args.trials), strict=True)]
    drafts, nonempty, differ = total
    print(
        f"suffix rule vs arctic-inference: {drafts} drafts compared ({nonempty} non-empty), {differ} differ"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
