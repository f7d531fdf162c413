"""Measurement is shared by the book and the benchmark, so it imports neither: nothing under
``measure/`` imports ``book``, ``bench`` or ``tests``, statically or at run time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import import_every_module_without, imported_modules

MEASURE = Path(__file__).resolve().parents[2] / "measure"
FORBIDDEN = ("book", "bench", "tests")


@pytest.mark.parametrize(
    "path", sorted(MEASURE.rglob("*.py")), ids=lambda p: str(p.relative_to(MEASURE))
)
def test_no_measure_file_imports_the_book_or_the_benchmark(path):
    names = imported_modules(path.read_text(encoding="utf-8"))
    assert not names & set(FORBIDDEN), f"{path.name} imports {sorted(names & set(FORBIDDEN))}"


@pytest.mark.slow
def test_every_measure_module_imports_with_the_book_and_the_benchmark_absent():
    assert "measure.cost" in import_every_module_without("measure", FORBIDDEN)
