# The two commands: `make demo` and `make test`. Each does its own set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
ENGINE ?= vllm
PYTEST_ARGS ?=
DEMO_ARGS ?=
# make demo DEPLOY=ray: the engine held in-process by a Ray actor, driven through Fleet([actor_handle]).
DEPLOY ?=
# make bench: which figures (1-8, comma-separated; all by default) and rounds per figure (10).
BENCH_FIGURES ?=
BENCH_ROUNDS ?=

.PHONY: setup engines test test-releases test-quick test-fast demo bench clean fresh-machine-check

# Set-up output (pip's) goes to this log, named with its tail if a step fails.
SETUP_LOG := $(VENV)-setup.log
LOGGED := bash scripts/logged.sh $(SETUP_LOG)

# The development environment: this package, editable, with its test tools.
$(VENV)/.installed: pyproject.toml
	@echo "setting up $(VENV) (this package and its test tools; pip's output in $(SETUP_LOG)) ..."
	@$(LOGGED) $(PYTHON) -m venv $(VENV)
	@$(LOGGED) $(VENV)/bin/pip install --upgrade pip
	@$(LOGGED) $(VENV)/bin/pip install -e '.[test]'
	@touch $@

# The benchmarks' plots need matplotlib, which the tests do not.
$(VENV)/.bench-installed: $(VENV)/.installed
	@echo "adding matplotlib to $(VENV) (for the plots) ..."
	@$(LOGGED) $(VENV)/bin/pip install -e '.[test,bench]'
	@touch $@

setup: $(VENV)/.installed

# Real engines: their own virtualenvs under .engines/ (git-ignored), made once and reused.
engines: setup
	bash scripts/setup-engines.sh all

# Everything: unit tests, the contract suite against the stub, both engines' fakes, and the
# real SGLang and vLLM servers. In two runs: first every test that needs no real engine, on
# TEST_WORKERS pytest-xdist workers (each target's tests on one of them; they mostly wait on their
# servers), with all the fuzz examples and soak rounds; then the real engines' tests, one at a
# time, since each real engine takes the cores it is placed on. (Exit status 5, "no tests
# collected", is not a failure: PYTEST_ARGS may name tests of one kind only.)
TEST_WORKERS ?= 4
test: setup engines
	$(VENV)/bin/python -m pytest -m "not real" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(VENV)/bin/python -m pytest -m real $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The smoke subset on the releases with a CPU build that no RL framework pins (make test runs it on
# those a framework pins): the 5th column of requirements/engine-versions.txt is "-".
# And the patched servers of the refused releases that have one (tests/patched/, each in its layered
# venv; requirements/engine-refused.txt: "patch" and a base venv).
RELEASE_TARGETS = $(shell awk '!/^\#/ && NF && $$4 == "real" && $$5 == "-" { printf " --target %s@%s", $$1, $$2 }' requirements/engine-versions.txt)
PATCHED_TARGETS = $(shell awk '!/^\#/ && NF >= 7 && $$6 == "patch" { printf " --target %s@%s-patched", $$1, $$2 }' requirements/engine-refused.txt)
test-releases: setup engines
	$(VENV)/bin/python -m pytest tests/contract tests/sglang tests/vllm tests/test_engine_versions.py tests/patched$(RELEASE_TARGETS)$(PATCHED_TARGETS) $(PYTEST_ARGS)

# The quick loop: everything that needs no real engine (the contract suite on the stub and on the
# fakes of both engines' pinned releases, single and multi-process, the unit and client tests),
# with a tenth of the fuzz examples and soak rounds (--quick), on QUICK_WORKERS pytest-xdist
# workers, each target's tests on one of them. make test runs all of it in full, one test at a
# time, with the other releases' fakes (vllm-0.26-stub, vllm-0.31-stub, vllm-0.34-stub) and
# the real engines.
QUICK_WORKERS ?= 4
QUICK_TARGETS ?= stub sglang-stub sglang-stub-dp2 vllm-stub vllm-stub-api3
test-quick: setup
	$(VENV)/bin/python -m pytest -m "not real" --quick -n $(QUICK_WORKERS) --dist loadgroup $(addprefix --target ,$(QUICK_TARGETS)) $(PYTEST_ARGS)

# The former name of test-quick.
test-fast: test-quick

# An asynchronous RL loop on a real engine with the plugin (examples/): ENGINE=vllm (default) or
# ENGINE=sglang; DEPLOY=ray: the engine in a Ray actor instead of a server; DEMO_ARGS e.g.
# "--steps 12 --swap-mode abort". Its plot needs matplotlib.
demo: $(VENV)/.bench-installed
	@PYTHONPATH=$(CURDIR) $(VENV)/bin/python examples/rl_demo.py --engine $(ENGINE) $(if $(DEPLOY),--deploy $(DEPLOY)) $(DEMO_ARGS)

# Every figure of the benchmark (or BENCH_FIGURES), BENCH_ROUNDS rounds each: writes
# benchmarks/results/ (README.md with the tables, the raw JSON, PNG plots). Set BENCH_LOCK to a
# file to hold it (flock) while each real-engine figure runs.
bench: $(VENV)/.bench-installed engines
	BENCH_FIGURES=$(BENCH_FIGURES) BENCH_ROUNDS=$(BENCH_ROUNDS) $(VENV)/bin/python -m benchmarks.run

# A new user's first run, on this machine: a fresh clone with every cache empty, the set-up, make demo
# on each engine, make test-quick (FULL=1: and make test); prints each step's time and disk, cleans up.
fresh-machine-check:
	bash scripts/fresh-machine-check.sh $(if $(FULL),--full)

clean:
	rm -rf $(VENV) $(SETUP_LOG) .engines .pytest_cache
