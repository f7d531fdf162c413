"""Wall-clock timing for the chapters' demonstrations (shown, never asserted: machines differ).

Both report the fastest of several calls: on a shared machine other processes only ever add
time, so the minimum is the estimate that noise moves least (a median of three, under a
browser running beside the kernel, put n = 512 below n = 256).

- :func:`time_forward`: the fastest of a few forward calls, without autograd.
- :func:`min_seconds`: the fastest of a few calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from attention.checks import check_positive_int


def time_forward(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Fastest wall-clock seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` runs,
    without autograd. For showing, never for asserting: machines differ."""
    repeats = check_positive_int("repeats", repeats)
    warmup = check_positive_int("warmup", warmup, allow_zero=True)
    with torch.no_grad():
        return min_seconds(fn, repeats=repeats, warmup=warmup)


def min_seconds(fn: Callable[[], object], *, repeats: int = 7, warmup: int = 2) -> float:
    """Fastest wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed ones.

    The minimum, not the mean: on a shared machine other processes only ever add time, so the
    fastest run is the best estimate of what ``fn`` itself costs.
    """
    repeats = check_positive_int("repeats", repeats)
    warmup = check_positive_int("warmup", warmup, allow_zero=True)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
