# Two commands do all the set-up on a fresh machine: `make demo` and `make check` (lint + test).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BUILD := pyproject.toml setup.py src/gpucomm/runtime/_stream.c Makefile
STAMP := $(VENV)/.installed-$(shell cat $(BUILD) | cksum | cut -d' ' -f1)

.PHONY: demo test lint check test-fast clean

$(STAMP): $(BUILD)
	@echo "make: installing gpucomm and its extras (numpy, matplotlib, plotly, torch CPU, MPICH," \
	  "pytest, ruff, mypy) into $(VENV): about 1-2 minutes the first time, then cached"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# pip's download bars on a terminal (they need its default verbosity); quiet in CI logs
	$(PY) -m pip install $$([ -t 1 ] || echo -q) -e '.[test,lint,plot,html,mpi,torch,cluster]'
	rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/gpucomm demo

# the venv's tools on PATH: mpiexec (mpich wheel) and torchrun, so engine tests run, not skip
test: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -n 2

# the pure and in-process tiers only (no spawned ranks or subprocesses): seconds, for editing
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# ruff (pyproject [tool.ruff]) and mypy (pyproject [tool.mypy]: strict on the IR's packages)
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/mypy

# what CI runs (.ci/run) and the README's test command
check: lint test

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
