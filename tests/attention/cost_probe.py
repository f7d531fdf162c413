"""A dispatch-mode probe of what attention code allocates: the tests' check of claimed costs.

Counts bytes, not seconds: deterministic, so a test can hold an implementation to its cost
(``O(n·w)`` must not hide an ``n × n`` tensor, nor ``n`` allocations of size ``n``).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storages(tree) -> list[torch.UntypedStorage]:
    return [t.untyped_storage() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class AllocationProbe(TorchDispatchMode):
    """Records, for every aten op run while active (forward and backward alike):

    * ``largest``: the largest storage (bytes) an op returns, views included;
    * ``allocated``: the total bytes of the new storages ops return (views and in-place
      results share an input's storage and do not count);
    * ``calls``: the op names in order; ``bmm_numels``: the size of every ``bmm`` output.
    """

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.allocated = 0
        self.calls: list[str] = []
        self.bmm_numels: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append(func.overloadpacket.__name__)
        if func is torch.ops.aten.bmm.default:
            self.bmm_numels.append(out.numel())
        inputs = {s.data_ptr() for s in _storages((args, kwargs)) if s.nbytes()}
        for storage in _storages(out):
            self.largest = max(self.largest, storage.nbytes())
            if storage.nbytes() and storage.data_ptr() not in inputs:
                self.allocated += storage.nbytes()
        return out
