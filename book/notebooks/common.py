"""Shared helpers of the notebook tools: reading pairs, hashing sources, executing.

The ``.py`` twin (jupytext ``py:percent``) is the source of every notebook; the ``.ipynb`` is
generated from it. What the tools record lives under one metadata key, ``attention_book``,
which ``jupytext.toml`` keeps out of the ``.py``:

- code cell: ``{"source_sha256": ...}``, the hash of the source the stored outputs came from
  (written by ``execute_notebooks.py``);
- notebook: ``{"executed_from": ..., "execution_seconds": ...}`` (executed notebooks) or
  ``{"generated_from": ..., "generated_sha256": ...}`` (exercise notebooks).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import jupytext
import nbformat
from jupytext.config import load_jupytext_configuration_file
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]  # book/notebooks/ -> the repository
NOTEBOOK_DIRS = ("chapters", "solutions", "exercises")
META_KEY = "attention_book"
PY_FORMAT = "py:percent"
# Every generated .ipynb names the same kernel, whatever machine made it (no diff churn).
KERNELSPEC = {"display_name": "Python 3 (attention-book)", "language": "python", "name": "python3"}
# Stored figures go through the inline backend, whatever MPLBACKEND the caller has (Agg would
# hide them). The kernel spec that `make venv` installs sets it too, for JupyterLab's kernels.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](\d{2}\.\d+)["']""")


def jupytext_config():
    """The repository's jupytext settings (used for every read/write, wherever the file is)."""
    return load_jupytext_configuration_file(str(REPO / "jupytext.toml"))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def rel(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (for messages)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def notebook_files(folders=NOTEBOOK_DIRS, suffix: str = ".ipynb", root: Path = REPO) -> list[Path]:
    """Every ``*.ipynb`` (or ``*.py``) directly in the given folders, sorted."""
    found: list[Path] = []
    for folder in folders:
        found.extend(sorted((Path(root) / folder).glob(f"*{suffix}")))
    return found


def read_py(path: Path) -> nbformat.NotebookNode:
    """Read a py:percent twin as a notebook."""
    return jupytext.read(str(path), fmt=PY_FORMAT, config=jupytext_config())


def read_ipynb(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def py_text(nb: nbformat.NotebookNode) -> str:
    """The py:percent text of ``nb``, exactly as jupytext (CLI or JupyterLab) would save it."""
    return jupytext.writes(nb, fmt=PY_FORMAT, config=jupytext_config())


def write_ipynb(nb: nbformat.NotebookNode, path: Path) -> None:
    jupytext.write(nb, str(path), fmt="ipynb", config=jupytext_config())


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def set_stable_ids(nb: nbformat.NotebookNode) -> None:
    """Cell ids derived from the cell's content, so that regenerating a notebook from an
    unchanged ``.py`` gives the same ids (random ids would change every line of the diff)."""
    seen: dict[str, int] = {}
    for cell in nb.cells:
        base = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:12]
        seen[base] = seen.get(base, 0) + 1
        cell["id"] = base if seen[base] == 1 else f"{base}-{seen[base]}"


def prepare_for_execution(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Kernel, ids, and no outputs: a notebook ready to run top to bottom."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.pop(META_KEY, None)
    set_stable_ids(nb)
    for cell in nb.cells:
        cell.metadata.pop(META_KEY, None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


# What every kernel of the book gets (here and in the kernel spec JupyterLab starts).
KERNEL_ENV = {"MPLBACKEND": INLINE_BACKEND, "PYTHONHASHSEED": "0"}
# A folder whose sitecustomize.py refuses non-loopback connections (the book is offline).
OFFLINE_SITE = str(Path(__file__).resolve().parent / "offline_site")
# ipykernel warns on stderr that its loopback TCP transport is not encrypted: noise in
# `make check` and `make execute`, whose kernels never leave this machine.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]


def kernel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a notebook kernel runs in: inline figures, fixed hash seed, offline.

    Progress bars stay on: ``book.progress`` leaves a line without timings in the output, the
    same in every run, so the stored notebook is what a reader's Run All gives. The offline
    guard (:data:`OFFLINE_SITE`) comes first on ``PYTHONPATH``: the kernel refuses every
    connection that leaves the machine."""
    env = dict(os.environ)
    env.update(KERNEL_ENV)
    env.setdefault("OMP_NUM_THREADS", "2")
    env.pop("TQDM_DISABLE", None)
    env.pop("ATTENTION_CHECK_RESULTS", None)
    env.update(extra or {})
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != OFFLINE_SITE]
    env["PYTHONPATH"] = os.pathsep.join([OFFLINE_SITE, *paths])
    return env


def execute(
    nb: nbformat.NotebookNode,
    cwd: Path,
    *,
    timeout: int = 300,
    allow_errors: bool = False,
    env: dict[str, str] | None = None,
) -> float:
    """Run every cell of ``nb`` in a fresh ``python3`` kernel (in place); return seconds.

    ``cwd`` is the kernel's working directory. Raises ``nbclient.exceptions.CellExecutionError``
    on the first error unless ``allow_errors`` (cells tagged ``raises-exception`` may always
    raise).
    """
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=allow_errors,
        record_timing=False,
        extra_arguments=list(KERNEL_ARGS),
        store_widget_state=False,  # widget state is large and changes every run
        resources={"metadata": {"path": str(cwd)}},
    )
    start = time.perf_counter()
    client.execute(env=kernel_env(env))
    return time.perf_counter() - start


def widget_outputs(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the cells that store a widget view: widget state is not saved, so a reopened
    notebook shows "Error displaying widget" there (``book.progress`` draws text instead)."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and any(WIDGET_MIME in out.get("data", {}) for out in cell.get("outputs", []))
    ]


def record_sources(nb: nbformat.NotebookNode) -> None:
    """Store, in each code cell, the hash of the source its outputs were computed from."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata[META_KEY] = {"source_sha256": source_hash(cell.source)}


def content_hash(nb: nbformat.NotebookNode) -> str:
    """Hash of what a learner can edit: the cell types and sources, in order."""
    cells = [[cell.cell_type, cell.source] for cell in nb.cells]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode()).hexdigest()[:16]


def error_outputs(nb: nbformat.NotebookNode) -> list[tuple[int, dict]]:
    """``(cell index, output)`` for every error output stored in ``nb``."""
    return [
        (i, out)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]


def check_ids(nb: nbformat.NotebookNode) -> list[str]:
    """The exercise ids of the ``check("NN.k", ...)`` calls in ``nb``, in order, unique."""
    ids: list[str] = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            for exercise_id in CHECK_CALL.findall(cell.source):
                if exercise_id not in ids:
                    ids.append(exercise_id)
    return ids


# --- the checks behind tests/test_notebook_pairing.py and tests/test_notebook_freshness.py --


def _first_difference(a: str, b: str) -> str:
    a_lines, b_lines = a.splitlines(), b.splitlines()
    for n, (x, y) in enumerate(zip(a_lines, b_lines, strict=False), start=1):
        if x != y:
            return f"line {n}: .py has {x!r}, .ipynb has {y!r}"
    n = min(len(a_lines), len(b_lines)) + 1
    if len(a_lines) > len(b_lines):
        return f"line {n}: only the .py has {a_lines[n - 1]!r}"
    if len(b_lines) > len(a_lines):
        return f"line {n}: only the .ipynb has {b_lines[n - 1]!r}"
    return "whitespace at the end differs"


def pair_problems(py_path: Path, ipynb_path: Path) -> list[str]:
    """How the cells of a ``.py``/``.ipynb`` pair differ (types, sources, tags); [] if none."""
    name = rel(ipynb_path)
    if not Path(py_path).exists():
        return [f"{name}: no py:percent twin {rel(py_path)} (run `make execute` or jupytext)"]
    if not Path(ipynb_path).exists():
        return [f"{rel(py_path)}: no .ipynb twin {name} (run `make execute`)"]
    py_cells = read_py(py_path).cells
    nb_cells = read_ipynb(ipynb_path).cells
    problems = []
    for i, (a, b) in enumerate(zip(py_cells, nb_cells, strict=False)):
        where = f"{name}, cell {i}"
        if a.cell_type != b.cell_type:
            problems.append(f"{where}: .py has a {a.cell_type} cell, .ipynb a {b.cell_type} cell")
        elif a.source != b.source:
            problems.append(f"{where}: sources differ, {_first_difference(a.source, b.source)}")
        elif tags(a) != tags(b):
            problems.append(f"{where}: tags differ, .py has {tags(a)}, .ipynb has {tags(b)}")
    if len(py_cells) != len(nb_cells):
        problems.append(
            f"{name}: the .py has {len(py_cells)} cells, the .ipynb has {len(nb_cells)}"
        )
    stored = read_ipynb(ipynb_path).metadata.get("jupytext", {})
    config = jupytext_config()
    for key in ("notebook_metadata_filter",):  # (it keeps the cell filter out of the .py)
        # ("-all" is what jupytext records for a .py without a header: nothing to differ.)
        if stored.get(key, "-all") not in ("-all", getattr(config, key)):
            # jupytext's contents manager writes the .ipynb as py:percent with this filter when
            # the .ipynb is the newer file (after a pull, say), finds header lines the .py
            # lacks, and JupyterLab refuses to open the chapter.
            problems.append(
                f"{name}: its metadata has {key} {stored[key]!r}, jupytext.toml says "
                f"{getattr(config, key)!r}; JupyterLab would refuse to open it once the .ipynb "
                f"is newer: run `make execute` (or `make exercises`)"
            )
    return problems


def stale_problems(ipynb_path: Path) -> list[str]:
    """Why the stored outputs of an executed notebook cannot be trusted; [] if they can.

    Every non-empty code cell must carry the hash of the source it ran from, equal to the
    hash of its current source; execution counts must be 1..n in order (one top-to-bottom
    run); no error output, except in cells tagged ``raises-exception``; no widget view.
    """
    name = rel(ipynb_path)
    nb = read_ipynb(ipynb_path)
    problems = []
    expected_count = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        where = f"{name}, cell {i}"
        expected_count += 1
        record = cell.metadata.get(META_KEY, {}).get("source_sha256")
        if record is None:
            problems.append(f"{where}: never executed by `make execute` (no source hash)")
        elif record != source_hash(cell.source):
            first = cell.source.strip().splitlines()[0][:60]
            problems.append(f"{where}: source changed since it was executed ({first!r})")
        if cell.execution_count != expected_count:
            problems.append(
                f"{where}: execution count {cell.execution_count}, expected {expected_count} "
                f"(not one top-to-bottom run)"
            )
    for i, out in error_outputs(nb):
        if "raises-exception" not in tags(nb.cells[i]):
            problems.append(
                f"{name}, cell {i}: stored error {out.get('ename')}: {out.get('evalue')}"
            )
    problems += [
        f"{name}, cell {i}: stores a widget view, which a reopened notebook shows as an error "
        f"(draw progress with book.progress.progress, not tqdm.auto or ipywidgets)"
        for i in widget_outputs(nb)
    ]
    if problems:
        problems.append(f"{name}: run `make execute NB={rel(Path(ipynb_path).with_suffix('.py'))}`")
    return problems
