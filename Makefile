# One Makefile for readers, learners, maintainers and CI.
#   make lab        set up .venv (if needed) and open JupyterLab on the book
#   make test       set up .venv (if needed) and run every test (CI runs exactly this)
# See README.md for the rest.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Torch uses every core by default; the book's budgets assume two.
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: claims venv lab test test-fast test-unit test-notebooks lint execute exercises check bench bench-quick gpu-check clean

venv: $(STAMP)

$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention-book)" >/dev/null
	$(PY) -m book.notebooks.lab_settings $(VENV)
	touch $(STAMP)

# LAB_ARGS: extra jupyter options (e.g. LAB_ARGS="--no-browser --port=8890"); tests use it.
lab: venv
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/chapters \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check attention book bench tests conftest.py

test: venv
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint && \
	$(MAKE) --no-print-directory test-unit && \
	$(MAKE) --no-print-directory test-notebooks && \
	echo "make test: all passed in $$(( $$(date +%s) - start )) s"

test-unit: venv
	$(PY) -m pytest -q -n 2 --dist loadfile tests

# The quick loop while editing: lint and the unit tests not marked slow (no notebooks).
test-fast: venv
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow" tests

# Notebooks: the .py twin is the source; `make execute` regenerates the executed .ipynb.
NOTEBOOKS := $(wildcard chapters/*.ipynb solutions/*.ipynb exercises/*.ipynb)
NBVAL     := --nbval-lax --nbval-current-env --nbval-cell-timeout=300 \
             --nbval-sanitize-with book/notebooks/nbval_sanitize.cfg

# Two notebooks at a time, one thread each (two cores).
test-notebooks: venv
ifeq ($(strip $(NOTEBOOKS)),)
	@echo "test-notebooks: no notebooks yet"
else
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile $(NBVAL) $(NOTEBOOKS)
endif

# make execute [NB="chapters/02_scaled_dot_product.py ..."]   (default: chapters + solutions)
execute: venv
	$(PY) -m book.notebooks.execute $(NB)

# make exercises [FORCE=1]   regenerate exercises/ from solutions/
exercises: venv
	$(PY) -m book.notebooks.exercises $(if $(FORCE),--force)

# make check CH=03   check your exercises (runs a copy of exercises/03_*.ipynb)
check: venv
	@test -n "$(CH)" || { echo "usage: make check CH=03"; exit 2; }
	$(PY) -m book.notebooks.check $(CH)

# make claims [CHECK=1]   regenerate (or check) chapters/README.md, the claims index
claims: venv
	$(PY) -m book.claims_index $(if $(CHECK),--check)

bench: venv
	$(PY) -m bench

# On a CUDA machine: verify the Triton kernel and time it against torch SDPA (see bench/).
gpu-check: venv
	$(PY) -m bench.gpu_check

bench-quick: venv
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
