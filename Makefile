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

.PHONY: venv lab test test-unit test-notebooks lint execute exercises check bench bench-quick clean

venv: $(STAMP)

$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention-book)" >/dev/null
	$(PY) tools/lab_settings.py $(VENV)
	touch $(STAMP)

lab: venv
	$(VENV)/bin/jupyter lab --notebook-dir=. --ServerApp.root_dir=. chapters/

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check attention tests tools

test: venv
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint && \
	$(MAKE) --no-print-directory test-unit && \
	$(MAKE) --no-print-directory test-notebooks && \
	echo "make test: all passed in $$(( $$(date +%s) - start )) s"

test-unit: venv
	$(PY) -m pytest -q -n 2 --dist loadfile tests

test-notebooks: venv
	@echo "(no notebooks yet)"

bench: venv
	$(PY) -m attention.bench

bench-quick: venv
	$(PY) -m attention.bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
