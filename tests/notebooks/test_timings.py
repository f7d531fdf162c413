"""A time a chapter shows comes from measure.timing: the fastest of several calls.

On a shared machine other programs only ever add time, so one reading, or the median of
three, can put n = 512 below n = 256 while a browser runs beside the kernel. The one clock
elsewhere is the training loop's own duration (book.experiments.training.fit), shown as how
long a run took, never compared."""

from __future__ import annotations

import re

import pytest

from book.notebooks.common import REPO, read_py

CLOCKS = re.compile(r"\btime\.(?:perf_counter|monotonic|process_time|time)\(\)|\btimeit\b")
NOTEBOOKS = sorted((REPO / "chapters").glob("[0-9][0-9]_*.py")) + sorted(
    (REPO / "solutions").glob("[0-9][0-9]_*.py")
)


def clock_calls(source: str) -> list[str]:
    return CLOCKS.findall(source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_notebook_reads_a_clock_itself(path):
    found = [
        (n, call)
        for n, cell in enumerate(read_py(path).cells)
        if cell.cell_type == "code"
        for call in clock_calls(cell.source)
    ]
    assert not found, f"{path.name}: time with measure.timing.min_seconds instead: {found}"


def test_the_check_finds_a_clock():
    assert clock_calls("start = time.perf_counter()\nt = time.time() - start") == [
        "time.perf_counter()",
        "time.time()",
    ]
    assert clock_calls("t = min_seconds(f, repeats=5)") == []
