# The two commands of README: `make dev` (set up + start the embedded service and grade the
# reference kit) and `make test` (the whole test suite; GPU tests skip without a GPU).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: dev test check gpu-suite starter

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

dev: $(STAMP)
	$(VENV)/bin/grader dev

test: $(STAMP)
	$(PY) -m pytest

# Static checks (configured in pyproject.toml): ruff on the project, mypy (strict on worker/).
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

starter: $(STAMP)
	$(VENV)/bin/grader starter build hw4 --out hw4-starter.zip

# On a GPU machine (see README): the whole GPU suite and the speedup benchmark.
gpu-suite:
	bash tests/gpu/suite.sh
