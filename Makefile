# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Each creates or refreshes .venv from pyproject.toml before running.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) demo.py --output-dir demo_output

# --durations: the slowest tests in every run, to keep the suite under ~20 min on 2 cores.
# Two pytest processes (one per core, at most two), a test file each at a time, so a module's fixtures
# are built once; tests/conftest.py gives each process its share of the cores' TensorFlow threads and
# orders the files longest first, which --no-loadscope-reorder keeps (xdist would sort by test count).
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q --durations=15 -n auto --maxprocesses 2 --dist loadfile --no-loadscope-reorder tests

clean:
	rm -rf $(VENV) demo_output
