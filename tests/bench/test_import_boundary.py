"""The benchmark measures the library with the shared ``measure`` package; it never imports the
book's machinery (``book``), statically or at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.attention.test_import_boundary import imported_modules

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.rglob("*.py")), ids=lambda p: p.name)
def test_no_bench_file_imports_the_book(path):
    assert "book" not in imported_modules(path.read_text(encoding="utf-8")), path.name


CHILD = """
import sys
sys.modules["book"] = None  # any import of it now raises ImportError
import bench, bench.cli, bench.methods, bench.report, bench.runner
"""


@pytest.mark.slow
def test_the_benchmark_imports_with_the_book_absent():
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
