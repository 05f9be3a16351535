# fleetsim: every target builds .venv from nothing when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test bench clean install

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first: the CPU build of this exact version is on disk; anything else
# pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	touch $@

$(DEV_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[dev]'
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fleetsim run scenarios/quickstart.yaml --out results/quickstart --force

# the tests marked serial time the CPU (a real engine against its prediction): they run
# alone, after the rest
test: $(DEV_STAMP)
	$(PY) -m pytest -n 2 -q -m "not bench and not serial"
	$(PY) -m pytest -q -m serial

bench: $(DEV_STAMP)
	$(PY) -m pytest -m bench -q -s tests/bench

clean:
	rm -rf $(VENV) results build dist *.egg-info
