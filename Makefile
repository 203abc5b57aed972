# The two commands: `make demo` and `make test`. Each does its own set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
ENGINE ?= vllm
PYTEST_ARGS ?=

.PHONY: setup engines test test-fast demo clean

# The development environment: this package, editable, with its test tools.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

# Real engines: their own virtualenvs under .engines/ (git-ignored), made once and reused.
engines: setup
	bash scripts/setup-engines.sh all

# Everything: unit tests, the contract suite against the stub, both engines' fakes, and the
# real SGLang and vLLM servers.
test: setup engines
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# Only what needs no real engine (seconds).
test-fast: setup
	$(VENV)/bin/python -m pytest -m "not real" --target stub $(PYTEST_ARGS)

# A real engine with the plugin, driven by the client: ENGINE=vllm (default) or ENGINE=sglang.
demo: setup
	$(VENV)/bin/engine-plugins demo --engine $(ENGINE)

clean:
	rm -rf $(VENV) .engines .pytest_cache
