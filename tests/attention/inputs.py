"""Random attention inputs and upstream gradients shared by the tests of the variants
(flash, linear, sliding window, block-sparse, ProbSparse), so that every variant is checked
on inputs made the same way."""

from __future__ import annotations

import torch


def random_qkv(b, h, lq, lk, e, ev, dtype=torch.float64, seed=0, requires_grad=False, *, hk=None):
    """Seeded q ``(b, h, lq, e)``, k ``(b, hk, lk, e)``, v ``(b, hk, lk, ev)``; ``hk`` defaults
    to ``h`` (fewer key/value heads for grouped-query tests)."""
    g = torch.Generator().manual_seed(seed)
    hk = h if hk is None else hk
    q = torch.randn(b, h, lq, e, generator=g, dtype=dtype)
    k = torch.randn(b, hk, lk, e, generator=g, dtype=dtype)
    v = torch.randn(b, hk, lk, ev, generator=g, dtype=dtype)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def input_grads(out, inputs, seed=1):
    """Gradients of ``out`` w.r.t. ``inputs`` for a fixed random upstream gradient."""
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(out, inputs, upstream.to(out.dtype))
