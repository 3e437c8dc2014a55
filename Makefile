# The two commands of README: `make dev` (set up + start the embedded service and grade the
# reference kit) and `make test` (the whole test suite; GPU tests skip without a GPU).
# `make dev` installs what the service needs; `make test` and `make check` add the test tools.
VENV ?= .venv
PORT ?= 8000
PY := $(VENV)/bin/python
NVCC ?= $(or $(KG_NVCC),nvcc)
SERVE := $(VENV)/.installed
TOOLS := $(VENV)/.installed-test
# pip's output goes to a log, shown only when it fails: the console keeps what matters
PIP = $(PY) -m pip install --disable-pip-version-check >>$(VENV)/install.log 2>&1
SHOW_LOG = { tail -n 40 $(VENV)/install.log; echo "pip failed: the whole log is $(VENV)/install.log"; exit 1; }

.PHONY: dev test check gpu-suite starter

# The service's packages and, meanwhile, the CUDA headers the assignments include where nvcc
# lacks them (tools/cuda_headers.py: the nvidia wheels' headers alone).
$(SERVE): pyproject.toml
	@echo "setting up $(VENV): the service's packages (pip's log: $(VENV)/install.log)"
	@python3 -m venv $(VENV)
	@$(PY) tools/cuda_headers.py --nvcc $(NVCC) >$(VENV)/cuda-headers.log 2>&1 & headers=$$!; \
	  $(PIP) -e . || $(SHOW_LOG); \
	  wait $$headers; status=$$?; cat $(VENV)/cuda-headers.log; exit $$status
	@touch $@

# The test tools (pyproject's `test` extra) on top.
$(TOOLS): $(SERVE)
	@echo "adding the test tools to $(VENV)"
	@$(PIP) -e '.[test]' || $(SHOW_LOG)
	@touch $@

dev: $(SERVE)
	@$(VENV)/bin/grader dev --port $(PORT)

# The 30 slowest tests close the report: where the suite's time goes. The test files are spread
# over WORKERS pytest-xdist processes, each with its own database, queues and Celery worker: two
# by default (on 2 cores, 11.9 min against 19.6 in one process: docs/benchmarks/cpu-suite.md); WORKERS=1 runs
# them in this process.
WORKERS ?= 2
test: $(TOOLS)
	$(PY) -m pytest $(if $(filter-out 0 1,$(WORKERS)),-n $(WORKERS) --dist loadfile )--durations=30

# Static checks (configured in pyproject.toml): ruff on the project, mypy (strict on worker/).
check: $(TOOLS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

starter: $(SERVE)
	$(VENV)/bin/grader starter build hw4 --out hw4-starter.zip

# On a GPU machine (see README): the whole GPU suite and the speedup benchmark.
gpu-suite:
	bash tests/gpu/suite.sh
