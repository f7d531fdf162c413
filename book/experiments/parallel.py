"""Independent runs side by side, one per core, with exactly the numbers of a plain loop.

The book's models are so small that a training step is a few milliseconds of single-threaded
work: a second thread inside each matrix product only adds synchronisation, but a second
*run* on the second core halves the wait. :func:`run_each` is ``[fn(x) for x in items]``
with the items shared among worker processes::

    runs = run_each(lambda seed: train(seed=seed), SEEDS, desc="seeds")

Each run must seed what it draws (the book's training functions do: parameters from
``seed``, batches from their own generator), so that its result does not depend on which
process ran it or on what ran before it; then the results are bit-identical to the loop's
(``tests/book/test_experiments_parallel.py`` checks a training run both ways).

- Workers are forked from the running process (a notebook's kernel included), so ``fn`` may
  be a lambda or a function defined in a notebook: only the items' positions and the results
  travel between processes, and the results must be picklable (tensors, models, numbers).
- Each worker computes with one torch thread, as the book's training loops do, and draws no
  progress bar (:func:`book.progress.silence`); ``fn`` should not draw figures either.
- One process (no worker) where forking is unsafe or unavailable (macOS, Windows, a process
  that has started CUDA), inside a worker (no nesting), with one item, or with
  ``BOOK_WORKERS=1``; ``BOOK_WORKERS=N`` sets the number of workers (default: the cores this
  process may use, at most one per item).
- The parent's global random state is left as it was, where a plain loop would leave it
  wherever the last run did; a cell after the loop that draws from it must seed it first.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from book.progress import progress as progress_bar
from book.progress import silence as silence_progress_bars

T = TypeVar("T")
R = TypeVar("R")

WORKERS_ENV = "BOOK_WORKERS"

# What a forked worker runs: set by run_each in the parent just before the fork, inherited by
# the workers (so fn need not be picklable), cleared afterwards.
_job: tuple[Callable, Sequence] | None = None
_in_worker = False


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def worker_count(n_items: int) -> int:
    """How many worker processes :func:`run_each` uses for ``n_items`` items (1: none, the
    loop runs in this process): ``BOOK_WORKERS`` if set, else :func:`available_cores`, at
    most ``n_items``; 1 where forking is unsafe (macOS, Windows, after CUDA has started) or
    inside a worker."""
    setting = os.environ.get(WORKERS_ENV, "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(f"{WORKERS_ENV} must be a whole number >= 1, got {setting!r}")
        wanted = int(setting)
    else:
        wanted = available_cores()
    if _in_worker or not sys.platform.startswith("linux"):
        return 1  # torch (and Apple's libraries) are not fork-safe on macOS; no fork on Windows
    if torch.cuda.is_initialized():
        return 1  # a forked child cannot use the CUDA context its parent started
    return max(1, min(wanted, n_items))


def _start_worker() -> None:
    global _in_worker
    _in_worker = True
    torch.set_num_threads(1)
    silence_progress_bars()  # a worker's bar would draw into the parent's notebook output


def _run_item(index: int):
    fn, items = _job
    return fn(items[index])


def run_each(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    desc: str | None = None,
    leave: bool = False,
) -> list[R]:
    """``[fn(item) for item in items]``, the items shared among :func:`worker_count`
    processes; results in the order of ``items``. ``desc``: a progress bar over the finished
    items (erased when done unless ``leave``)."""
    global _job
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    items = list(items)
    workers = worker_count(len(items)) if items else 1

    def shown(results):
        if desc is None:
            return results
        return progress_bar(results, desc=desc, total=len(items), leave=leave)

    if workers == 1:
        return list(shown(fn(item) for item in items))
    _job = (fn, items)
    try:
        context = multiprocessing.get_context("fork")
        with context.Pool(workers, initializer=_start_worker) as pool:
            return list(shown(pool.imap(_run_item, range(len(items)), chunksize=1)))
    finally:
        _job = None


def run_keyed(
    fn: Callable[[T], R], keys: Sequence[T], *, desc: str | None = None, leave: bool = False
) -> dict[T, R]:
    """``{key: fn(key) for key in keys}``, by :func:`run_each` (keys must be distinct)."""
    keys = list(keys)
    if len(set(keys)) != len(keys):
        raise ValueError(f"keys must be distinct, got {keys!r}")
    return dict(zip(keys, run_each(fn, keys, desc=desc, leave=leave), strict=True))
