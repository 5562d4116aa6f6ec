"""`make gpu-check`: one prepared script for a bare one-GPU machine (torch + transformers, no
network, no `datasets` package), finishing in at most 9 minutes.

    python -m alcheck.gpu_check [--dry-run] [--out DIR] [--only a,b,...]

Pieces, each with its own time budget (a piece that cannot run is skipped with a note):
  a. the tests marked `gpu` (pytest -m gpu), output captured;
  b. the demo pair on CUDA in float32: lossless rate 1.0, and AL equal to the shipped CPU float32
     run (results/baselines/demo) and to a CPU run made here on a few questions;
  c. the demo pair in bfloat16 over 3 repeats with shuffled batches: lossless rate, AL spread;
  d. a random-weight Llama-3.1-8B-shaped target (bfloat16, built on the GPU) with a random EAGLE
     head: step time at batch 1, 16, 64 for K=0 and K=3 against the bandwidth floor and against
     transformers generate() on the same weights; peak memory, load and KV-pool sizes;
  e. paged attention on the GPU: the gather path against flex_attention (bench/bench_attention.py);
  f. tree drafting (EAGLE-2 dynamic trees) on the demo pair: float32 lossless and equal to a CPU
     run, tree AL above the chain's; bfloat16 and temperature 1.0 trees measured;
  g. the static runner and CUDA graphs on the demo pair: float32 equals the CPU, replay equals eager;
  h. the real model (SmolLM2-135M-Instruct and its layer-skip draft, `make real-models`): float32
     rows equal the committed CPU rows, bfloat16's AL against float32's per K with the questions it
     moved (run after c; skipped with a note where the real model is not prepared).

Writes summary.md and summary.json (and pytest-gpu.log) to $GPU_CHECK_OUT, default results/gpu/
(results/gpu/dry-run/ with --dry-run). Exit 1 when a check fails, else 0. `--dry-run` runs the
same code on the CPU with tiny shapes and small budgets (tests/test_gpu_check.py runs it).
"""
