# alcheck: the two set-up commands are `make demo` (the main job on the embedded demo pair)
# and `make test` (the test suite). Both install what they need first.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# the CPU build of torch keeps a fresh install small; CUDA users install torch themselves first
TORCH_SPEC ?= torch==2.13.0

.PHONY: install test demo bench demo-models ci-gate ci-baseline

install: .install.stamp

# re-installs when pyproject.toml changes; a fresh clone has no stamp, so it installs
.install.stamp: pyproject.toml
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test]"
	touch $@

test: install
	$(PYTHON) -m pytest tests -q

demo: install
	$(PYTHON) -m alcheck run

bench: install
	$(PYTHON) bench/bench_runner.py

# regenerate the embedded demo pair from scratch (deterministic given the seed)
demo-models: install
	$(PYTHON) -m alcheck.demo.train --out alcheck/demo/models --seed 0

# CI's AL regression gate: the demo pair on 16 MT-Bench questions against a committed baseline
CI_GATE_ARGS = --ks 1-3 --repeats 1 --limit 16 --max-tokens 96 --reference none
ci-gate: install
	rm -rf results/runs/ci-gate
	$(PYTHON) -m alcheck run $(CI_GATE_ARGS) --out results/runs/ci-gate --gate results/baselines/ci-demo --tolerance 0.02

ci-baseline: install
	rm -rf results/baselines/ci-demo
	$(PYTHON) -m alcheck run $(CI_GATE_ARGS) --out results/baselines/ci-demo
