"""The benchmark measures the library with the shared ``measure`` package; it never imports the
book's machinery (``book``), statically or at run time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import import_every_module_without, imported_modules

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.rglob("*.py")), ids=lambda p: p.name)
def test_no_bench_file_imports_the_book(path):
    assert "book" not in imported_modules(path.read_text(encoding="utf-8")), path.name


@pytest.mark.slow
def test_the_benchmark_imports_with_the_book_absent():
    assert "bench.report" in import_every_module_without("bench", ["book"])
