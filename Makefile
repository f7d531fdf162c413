# One Makefile for readers, learners, maintainers and CI.
#   make lab        set up .venv (if needed) and open JupyterLab on the book
#   make test       set up .venv (if needed) and run every test (CI runs exactly this)
#   make book       the book as a static HTML site in _build/book (from the stored outputs)
# See README.md for the rest.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JUPYTER_STAMP := $(VENV)/.jupyter-configured
# Torch uses every core by default; the book's budgets assume two.
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0
# Off-screen figures for scripts and unit tests only. Never exported: JupyterLab's kernels
# would inherit it and show no figure (their kernel spec sets the inline backend).
AGG := MPLBACKEND=Agg
# What a make invoked from a JupyterLab terminal must not inherit from `make lab`.
NOT_FROM_MAKE := -u MAKELEVEL -u MAKEFLAGS -u MFLAGS -u MAKEOVERRIDES -u MAKE_TERMOUT \
                 -u MAKE_TERMERR -u MPLBACKEND
PYTEST := $(PY) -m pytest -q -n 2 --dist loadfile
# The Debian package browser tests drive (CI=true installs it when missing).
CHROMIUM ?= /usr/bin/chromium
BOOK_OUT ?= _build/book

.PHONY: venv lab test test-fast test-unit test-notebooks test-browser browser lint execute \
        export exercises check claims sceptic book bench bench-quick gpu-check clean

venv: $(STAMP) $(JUPYTER_STAMP)

$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# The kernel spec (with the book's kernel environment), JupyterLab's and the server's settings.
$(JUPYTER_STAMP): $(STAMP) book/notebooks/lab_settings.py book/notebooks/common.py
	$(PY) -m book.notebooks.lab_settings $(VENV)
	touch $(JUPYTER_STAMP)

# LAB_ARGS: extra jupyter options (e.g. LAB_ARGS="--no-browser --port=8890"); tests use it.
# Before starting, copies new exercise notebooks into my-exercises/ (never overwrites one).
lab: venv
	@$(PY) -m book.notebooks.workbook --root $(CURDIR)
	env $(NOT_FROM_MAKE) $(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR) \
		--LabApp.default_url=/lab/tree/chapters \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check attention book measure bench tests conftest.py docs

test: venv
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint && \
	$(MAKE) --no-print-directory test-unit && \
	$(MAKE) --no-print-directory test-notebooks && \
	$(MAKE) --no-print-directory test-browser && \
	echo "make test: all passed in $$(( $$(date +%s) - start )) s"

test-unit: venv
	$(AGG) $(PYTEST) -m "not browser" tests

# The quick loop while editing: the unit tests not marked slow (no notebooks, no browser).
test-fast: venv
	$(AGG) $(PYTEST) -m "not slow and not browser" tests

# Notebooks: the .py twin is the source; `make execute` regenerates the executed .ipynb.
NOTEBOOKS := $(wildcard chapters/*.ipynb solutions/*.ipynb exercises/*.ipynb)
NBVAL     := --nbval-lax --nbval-current-env --nbval-cell-timeout=300 \
             --nbval-sanitize-with book/notebooks/nbval_sanitize.cfg

# Two notebooks at a time, one thread each (two cores). The stored outputs are checked under
# an instruction set other than the one that executed them, where this CPU has one
# (book/notebooks/isa.py says which, on the first line); rounding-sensitive numbers are
# compared within their cell's tolerance class (book/notebooks/tolerance.py).
# With no executed notebook, pytest would be handed no path and run every test instead.
test-notebooks: venv
	@test -n "$(strip $(NOTEBOOKS))" || { echo "test-notebooks: no executed notebook found (run make execute)"; exit 1; }
	@isa_env="$$($(PY) -m book.notebooks.isa $(filter-out exercises/%,$(NOTEBOOKS)))" && \
	echo "env $$isa_env OMP_NUM_THREADS=1 pytest --nbval-lax ..." && \
	env $$isa_env OMP_NUM_THREADS=1 $(PYTEST) $(NBVAL) $(NOTEBOOKS)

# The reader's path in a real browser (JupyterLab, and the HTML book): tests/browser/.
# Skipped, with one line saying how to enable them, where Chromium is missing (not under CI).
test-browser: venv browser
	$(PYTEST) -m browser -p no:cacheprovider tests/browser

browser:
ifeq ($(CI),true)
	@test -x $(CHROMIUM) || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
endif

# make execute [NB="chapters/02_scaled_dot_product.py ..."]   (default: chapters + solutions)
execute: venv
	$(PY) -m book.notebooks.execute $(NB)

# make export [NB=chapters/08_attention_by_hand.py]   write book/pages/chNN.py from the cells
# the chapters mark `#| export` (nbdev's nb_export); default: every chapter
export: venv
	$(PY) -m book.notebooks.export $(NB)

# make exercises [FORCE=1]   regenerate exercises/ from solutions/
exercises: venv
	$(PY) -m book.notebooks.exercises $(if $(FORCE),--force)

# make check CH=03   check your exercises: runs a copy of my-exercises/03_* and prints ✓/✗
# per exercise (exit status 0 once the table is printed; python -m book.notebooks.check
# without --exit-zero exits 1 unless every exercise passes).
check: venv
	@test -n "$(CH)" || { echo "usage: make check CH=03"; exit 2; }
	@$(PY) -m book.notebooks.workbook --root $(CURDIR) --quiet
	@$(PY) -m book.notebooks.check --root $(CURDIR) --exit-zero $(CH)

# make book   the static HTML book in _build/book (open _build/book/index.html); the stored
# outputs of chapters/NN_*.ipynb, not re-executed.
book: venv
	$(PY) -m sphinx -b html -q -c docs . $(BOOK_OUT)
	@echo "make book: open $(BOOK_OUT)/index.html"

# make claims [CHECK=1]   regenerate (or check) chapters/README.md, the claims index
claims: venv
	$(PY) -m book.claims_index $(if $(CHECK),--check)

# make sceptic [CH=02] [CLAIM=C7]   re-run claims' verdicts under a sceptic's changes (other
# seeds, a longer budget, the standard initialisation, the claim's knobs) and store the results
# in chapters/sceptic/NN_slug.json (book/sceptic.py). Not part of make test: one chapter takes
# up to 15 minutes on two cores; tests/book/test_sceptic.py fails when a stored sweep is
# missing or stale.
sceptic: venv
	$(AGG) $(PY) -m book.sceptic $(if $(CH),--chapter $(CH)) $(if $(CLAIM),--claim $(CLAIM))

bench: venv
	$(AGG) $(PY) -m bench

# On a CUDA machine: verify the Triton kernel and time it against torch SDPA (see bench/).
gpu-check: venv
	$(AGG) $(PY) -m bench.gpu_check

bench-quick: venv
	$(AGG) $(PY) -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis _build
