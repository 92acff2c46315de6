# kagglekit: every target sets itself up (a .venv with the pinned requirements).
SHELL := bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kagglekit-installed
NB ?=
P ?=
PYTEST_ARGS ?=

.PHONY: help setup run runs view test bench lint clean build push status output compare

# V=1: keep the warnings the kit silences because they carry nothing for the user.
ifdef V
export KAGGLEKIT_VERBOSE := 1
endif

## help: this list
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed -e 's/^## /  make /'

## setup: .venv with the pinned requirements, the kit, and the notebook kernel
setup: $(STAMP)

# The Jupyter kernel papermill uses is registered inside the venv (--sys-prefix),
# never in the user's home.
$(STAMP): requirements.txt pyproject.toml setup/ipython_kernel_config.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (kagglekit)"
	mkdir -p $(VENV)/etc/ipython && cp setup/ipython_kernel_config.py $(VENV)/etc/ipython/
	touch $@

## run: execute the notebooks locally into runs/<NB>/<config>/ (NB=name for one, P="epochs=3 seed=1")
run: $(STAMP)
	$(PY) -m kagglekit.cli run $(NB) $(foreach p,$(P),-p $(p))

## runs: every local run (one folder per configuration) with its status and headline results
runs: $(STAMP)
	$(PY) -m kagglekit.cli runs

## view: the executed notebook as a person sees it: runs/<NB>/latest/<NB>.html (+ .png with Chromium)
view: $(STAMP)
	$(PY) -m kagglekit.cli view $(NB)

## test: the whole suite on CPU (GPU tests are skipped without a GPU)
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

## build / push / status / output / compare: the Kaggle pipeline (NB=name for one notebook; WAIT=1 polls)
build push output compare: $(STAMP)
	$(PY) -m kagglekit.cli $@ $(NB)

status: $(STAMP)
	$(PY) -m kagglekit.cli status $(NB) $(if $(WAIT),--wait)

## bench: measured ratios against baselines taken in the same run
bench: $(STAMP)
	$(PY) benchmarks/loop_overhead.py
	$(PY) benchmarks/cache_rerun.py
	$(PY) benchmarks/tune_workers.py
	$(PY) benchmarks/graph_sampling.py
	$(PY) benchmarks/gpu_figures.py

## lint: byte-compile everything and check the notebooks are committed clean
lint: $(STAMP)
	$(PY) -m compileall -q kagglekit tests benchmarks
	$(PY) -m pytest -q tests/test_notebooks.py -k clean

## clean: remove .venv, build/, dist/ and runs/
clean:
	rm -rf $(VENV) build dist runs *.egg-info
