"""Repository-wide pytest configuration.

- When pytest runs notebooks under nbval (``make test-notebooks``):
  the kernels get the environment ``make execute`` used (inline figures, fixed hash seed);
  the ``check(...)`` cells of solution notebooks have their output compared even in
  ``--nbval-lax`` mode, so CI fails if a solution stops passing its own check; exercise
  notebooks (committed without outputs) are only checked for errors; every checked cell is
  compared by ``book.notebooks.tolerance``: words and integers exactly, decimals within the
  tolerance class its metadata names (exactly if it names none), progress bars left out;
  and the run ends with each notebook's execution time, the
  total, and the instruction set the kernels ran under.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

_durations: dict[str, float] = defaultdict(float)


def _nbval_active(config) -> bool:
    return bool(
        getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False)
    )


def pytest_configure(config):
    if _nbval_active(config):
        from book.notebooks.common import kernel_env

        # nbval starts each kernel with this process's environment.
        env = kernel_env()
        os.environ.update(env)
        for name in set(os.environ) - set(env):
            del os.environ[name]


def pytest_collection_modifyitems(config, items):
    if not _nbval_active(config):
        return
    from book.notebooks.common import CHECK_CALL
    from book.notebooks.tolerance import TOLERANCES, install, tolerance_of

    for item in items:
        cell = getattr(item, "cell", None)
        options = getattr(item, "options", None)
        if cell is None or options is None:
            continue
        folder = Path(str(item.fspath)).parent.name
        if folder == "exercises":
            options["check"] = False  # committed without outputs: nothing to compare
        elif folder == "solutions" and CHECK_CALL.search(cell.source):
            options["check"] = True  # its stored output is "✓ Exercise NN.k — ..."
        if options.get("check"):
            install(item, tolerance_of(cell) or TOLERANCES["exact"])


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):  # setup (kernel start) + call + teardown of every cell
        _durations[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _durations:
        return
    tr = terminalreporter
    tr.write_sep("-", "notebook execution times")
    width = max(len(path) for path in _durations)
    for path, seconds in sorted(_durations.items()):
        tr.write_line(f"{path.ljust(width)}  {seconds:7.1f} s")
    tr.write_line(f"{'total'.ljust(width)}  {sum(_durations.values()):7.1f} s")
    from book.notebooks.isa import describe_environment

    tr.write_line(describe_environment())
