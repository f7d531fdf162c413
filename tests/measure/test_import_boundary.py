"""Measurement is shared by the book and the benchmark, so it imports neither: nothing under
``measure/`` imports ``book``, ``bench`` or ``tests``, statically or at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.attention.test_import_boundary import imported_modules

MEASURE = Path(__file__).resolve().parents[2] / "measure"
FORBIDDEN = ("book", "bench", "tests")


@pytest.mark.parametrize(
    "path", sorted(MEASURE.rglob("*.py")), ids=lambda p: str(p.relative_to(MEASURE))
)
def test_no_measure_file_imports_the_book_or_the_benchmark(path):
    names = imported_modules(path.read_text(encoding="utf-8"))
    assert not names & set(FORBIDDEN), f"{path.name} imports {sorted(names & set(FORBIDDEN))}"


CHILD = """
import importlib, pkgutil, sys
for name in {forbidden!r}:
    sys.modules[name] = None  # any import of it now raises ImportError
import measure
for m in pkgutil.walk_packages(measure.__path__, "measure."):
    importlib.import_module(m.name)
"""


@pytest.mark.slow
def test_every_measure_module_imports_with_the_book_and_the_benchmark_absent():
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD.format(forbidden=FORBIDDEN)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=MEASURE.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
