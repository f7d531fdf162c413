"""Regenerate executed notebooks from their py:percent sources: ``make execute``.

For each notebook: read the ``.py`` (the source), run it top to bottom in a fresh ``python3``
kernel with the notebook's folder as working directory, record in each code cell the hash of
the source it ran from, and write the ``.ipynb`` next to the ``.py``. A notebook that fails is
not written (the committed one stays as it was) and the run exits non-zero.

Usage:
    python -m book.notebooks.execute                      # every chapter and solution
    python -m book.notebooks.execute chapters/02_scaled_dot_product.py [more paths...]
    python -m book.notebooks.execute --timeout 600 solutions/

Paths may be ``.py`` or ``.ipynb`` twins or folders. Exercise notebooks are not executed: they
are committed with outputs cleared (``make exercises`` writes them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from book.notebooks.common import (
    META_KEY,
    REPO,
    error_outputs,
    prepare_for_execution,
    read_py,
    record_sources,
    rel,
    write_ipynb,
)
from book.notebooks.common import execute as run_notebook
from book.notebooks.isa import kernel_cpu_capability

DEFAULT_FOLDERS = ("chapters", "solutions")


def resolve(paths: list[str]) -> list[Path]:
    """The ``.py`` sources named by ``paths`` (files or folders); default: chapters, solutions."""
    if not paths:
        paths = [str(REPO / folder) for folder in DEFAULT_FOLDERS]
    sources: list[Path] = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            sources.extend(sorted(path.glob("*.py")))
            continue
        path = path.with_suffix(".py")
        if not path.exists():
            raise SystemExit(f"error: no py:percent source {path} (from argument {arg!r})")
        sources.append(path)
    for path in sources:
        if path.resolve().parent.name == "exercises":
            raise SystemExit(
                f"error: {rel(path)} is an exercise notebook; exercises are committed without "
                f"outputs (run `make exercises`)"
            )
    return sources


def execute_one(py_path: Path, timeout: int) -> float:
    """Execute ``py_path`` and write its ``.ipynb`` twin; return the seconds it took."""
    nb = prepare_for_execution(read_py(py_path))
    try:
        seconds = run_notebook(nb, cwd=py_path.resolve().parent, timeout=timeout)
    except CellExecutionError as err:
        failing = [i for i, _ in error_outputs(nb)]
        where = f"cell {failing[0]}" if failing else "a cell"
        raise CellExecutionError(
            f"{rel(py_path)}, {where}:\n{err}", err.ename, err.evalue
        ) from None
    record_sources(nb)
    nb.metadata[META_KEY] = {
        "executed_from": py_path.name,
        "execution_seconds": round(seconds, 1),
        # The instruction set torch's kernels used: `make test` checks the stored outputs
        # under another one (book.notebooks.isa).
        "cpu_capability": kernel_cpu_capability(),
    }
    write_ipynb(nb, py_path.with_suffix(".ipynb"))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help=".py/.ipynb files or folders")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (300)")
    args = parser.parse_args(argv)

    failed = []
    total = 0.0
    for py_path in resolve(args.paths):
        print(f"executing {rel(py_path)} ...", flush=True)
        try:
            seconds = execute_one(py_path, args.timeout)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
            print(f"FAILED {rel(py_path)} (not written):\n{err}", file=sys.stderr)
            failed.append(py_path)
            continue
        total += seconds
        print(f"  wrote {rel(py_path.with_suffix('.ipynb'))} in {seconds:.1f} s", flush=True)
    print(f"total {total:.1f} s")
    if failed:
        print("failed: " + ", ".join(rel(p) for p in failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
