# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BUILD := pyproject.toml setup.py src/gpucomm/runtime/_stream.c Makefile
STAMP := $(VENV)/.installed-$(shell cat $(BUILD) | cksum | cut -d' ' -f1)

.PHONY: demo test clean

$(STAMP): $(BUILD)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot,html,mpi,torch,cluster]'
	rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/gpucomm demo

# the venv's tools on PATH: mpiexec (mpich wheel) and torchrun, so engine tests run, not skip
test: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -n 2

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
