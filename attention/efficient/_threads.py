"""Running a tiled loop's heads on several CPU threads (used by flash, chunked and linear).

A tiled loop issues thousands of small torch ops. With torch's intra-op threading each is an
OpenMP fork/join, and on a busy machine every join waits for a descheduled thread. Here each
Python thread runs its own heads with single-threaded ops instead (torch releases the GIL inside
an op), so the threads meet once, at the end, like torch's fused CPU kernel does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

# Below this much work (multiply-adds) a call runs in the calling thread: starting threads
# would cost more than it saves (2**28 is ~10 ms on one core).
PARALLEL_MIN_WORK = 1 << 28

T = TypeVar("T")
_POOL: ThreadPoolExecutor | None = None
_POOL_KEY: tuple[int, int] | None = None  # (process id, workers) the pool was made for
_POOL_LOCK = threading.Lock()


def _worker_pool(n_workers: int) -> ThreadPoolExecutor:
    """A pool kept across calls (new threads would pay their start-up on every call). Remade
    after a fork (the child has none of the threads)."""
    global _POOL, _POOL_KEY
    with _POOL_LOCK:
        key = (os.getpid(), n_workers)
        if _POOL is None or _POOL_KEY != key:
            _POOL = ThreadPoolExecutor(n_workers, thread_name_prefix="attention-heads")
            _POOL_KEY = key
        return _POOL


def dispatch_mode_active() -> bool:
    """Whether a torch dispatch mode (memory or FLOP counting, fake tensors) is active in this
    thread: modes are per thread, so work handed to other threads would escape it."""
    return _get_current_dispatch_mode() is not None


def run_over_heads(
    fn: Callable[[slice], T], num_heads: int, *, work: int, device: torch.device | str
) -> list[T]:
    """``[fn(heads) for heads in slices]`` over a flattened batch·heads axis, in parallel on CPU.

    ``num_heads`` is the length of that axis; ``work`` the call's multiply-adds, roughly. A
    thread takes its op thread count from the global setting when it first runs an op, hence
    the temporary ``set_num_threads(1)``; the pool's threads keep that count.

    Runs ``[fn(slice(0, num_heads))]`` in the calling thread instead when: not on a CPU, one
    thread or head, less than ``PARALLEL_MIN_WORK`` multiply-adds, or a dispatch mode is
    active (:func:`dispatch_mode_active`).
    """
    n_threads = torch.get_num_threads()
    n_workers = min(n_threads, num_heads)
    if (
        torch.device(device).type != "cpu"
        or n_workers < 2
        or work < PARALLEL_MIN_WORK
        or dispatch_mode_active()
    ):
        return [fn(slice(0, num_heads))]
    grad_enabled = torch.is_grad_enabled()  # grad mode is per thread: carry the caller's

    def run(heads: slice) -> T:
        with torch.set_grad_enabled(grad_enabled):
            return fn(heads)

    bounds = [i * num_heads // n_workers for i in range(n_workers + 1)]
    pool = _worker_pool(n_workers)
    torch.set_num_threads(1)
    try:
        return list(pool.map(run, [slice(bounds[i], bounds[i + 1]) for i in range(n_workers)]))
    finally:
        torch.set_num_threads(n_threads)
