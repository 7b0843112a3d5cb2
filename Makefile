# The two commands of the README:  make demo  (the main job)  and  make test.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-slow lint docs clean

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/groupattn demo

test: setup
	$(PY) -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

test-slow: setup
	$(PY) -m pytest -n 2 -m slow $(PYTEST_ARGS)

LINT_PATHS := groupattn tests examples benchmarks

lint: setup
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy

docs: setup
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis
