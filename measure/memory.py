"""Peak extra memory of a call, counted tensor by tensor (exact and deterministic, on any device).

CPU torch has no allocator statistics (``torch.cuda.max_memory_allocated`` has no CPU twin),
``tracemalloc`` does not see torch's allocations and the process's peak RSS mixes in the
allocator's caching and everything else the process did. So :class:`PeakMemory` watches the
operators instead: it is a ``TorchDispatchMode``, which sees every aten operator that runs
while it is active, including the backward pass's. After each operator it records the storages
of the output tensors that are new (not a storage of one of the operator's inputs), with their
size in bytes, keeps only a *weak* reference to each, and sums the bytes of those still alive.
The peak of that sum over the call is the answer: the bytes the call itself allocated and held
at once, inputs excluded, outputs and tensors saved for the backward included.

What it cannot see: scratch memory an operator allocates and frees inside its own C++ kernel
(torch's fused CPU SDPA uses a few per-thread tile buffers, kilobytes to a few MiB, constant in
the sequence length). A storage resized in place after its creation is counted at its creation
size. The benchmark measures memory in a separate call from the timed ones: the mode costs
Python work per operator.

:func:`kv_cache_bytes` is the formula a decoder's key/value cache follows, which a cache's own
tensors can be checked against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attention.checks import check_positive_int


def _storages(tree: object) -> list[torch.UntypedStorage]:
    return [x.untyped_storage() for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]


# Whether a weak reference's storage has been freed: the C function behind
# ``StorageWeakRef.expired``, called directly because a sweep calls it once per live storage.
_expired = torch.UntypedStorage._expired


class PeakMemory(TorchDispatchMode):
    """Context manager: ``peak_bytes`` = most bytes allocated inside it and alive at once.

    ``current_bytes`` is what is still alive when it is read. Usage::

        with PeakMemory() as mem:
            out = f(x)
        mem.peak_bytes
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}  # storage id -> (ref, bytes)
        # The bytes of ``live``: every storage in it is alive or was freed since the last sweep,
        # so this never falls below the bytes alive. Sweeping only when it passes the peak
        # keeps the peak exact and saves a pass over every live storage after most operators.
        # A freed storage cannot pass its id on while it is in ``live``: the weak reference
        # keeps the id's storage object (not its memory) allocated until the sweep drops it.
        self._held = 0
        self.peak_bytes = 0

    @property
    def current_bytes(self) -> int:
        """Bytes allocated inside the mode and alive now."""
        self._sweep()
        return self._held

    def _sweep(self) -> None:
        """Forget the storages that were freed since the last sweep."""
        dead = [key for key in self.live if _expired(key)]
        for key in dead:
            self._held -= self.live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {StorageWeakRef(s).cdata for s in _storages((args, kwargs))}
        out = func(*args, **kwargs)
        for storage in _storages(out):
            ref = StorageWeakRef(storage)
            if ref.cdata in inputs or ref.cdata in self.live:
                continue  # an input returned or written in place: not a new allocation
            self.live[ref.cdata] = (ref, storage.nbytes())
            self._held += storage.nbytes()
        if self._held > self.peak_bytes:  # a new peak, unless freed storages make up the excess
            self._sweep()
            self.peak_bytes = max(self.peak_bytes, self._held)
        return out

    def __exit__(self, *exc) -> None:
        self._sweep()
        return super().__exit__(*exc)


def peak_extra_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes that ``fn()`` allocates and holds at once (its result included, its inputs
    not). The result is dropped before returning."""
    with PeakMemory() as mem:
        result = fn()
        del result
    return mem.peak_bytes


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    *,
    batch_size: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes a decoder keeps to avoid recomputing keys and values: K and V, for every layer,
    key/value head, position and sequence: ``2 · layers · H_kv · d_head · L · B · bytes``.

    ``bytes_per_element`` is 2 for fp16/bf16, 4 for fp32. Query heads do not appear: a GQA
    model with ``H`` query heads caches only its ``H_kv`` key/value heads.
    """
    factors = {
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "bytes_per_element": bytes_per_element,
    }
    out = 2
    for name, value in factors.items():
        out *= check_positive_int(name, value)
    return out
