"""Random attention inputs, upstream gradients and a tolerance comparison shared by the tests
of the variants and modules (flash, linear, sliding window, block-sparse, ProbSparse, flex,
dispatch, normalizers, heads, blocks), so that every one is checked on inputs made the same
way and to the same tolerance."""

from __future__ import annotations

import torch


def random_qkv(
    b=2,
    h=2,
    lq=8,
    lk=8,
    e=8,
    ev=None,
    dtype=torch.float64,
    seed=0,
    requires_grad=False,
    *,
    hk=None,
):
    """Seeded q ``(b, h, lq, e)``, k ``(b, hk, lk, e)``, v ``(b, hk, lk, ev)``; ``ev`` defaults
    to ``e``, ``hk`` to ``h`` (fewer key/value heads for grouped-query tests)."""
    g = torch.Generator().manual_seed(seed)
    hk = h if hk is None else hk
    ev = e if ev is None else ev
    q = torch.randn(b, h, lq, e, generator=g, dtype=dtype)
    k = torch.randn(b, hk, lk, e, generator=g, dtype=dtype)
    v = torch.randn(b, hk, lk, ev, generator=g, dtype=dtype)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def input_grads(out, inputs, seed=1):
    """Gradients of ``out`` w.r.t. ``inputs`` for a fixed random upstream gradient."""
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(out, inputs, upstream.to(out.dtype))


TOL = {torch.float32: 1e-5, torch.float64: 1e-10}  # atol = rtol of close, by dtype


def close(a, b, dtype=torch.float32):
    """``assert_close`` to the tolerance :data:`TOL` gives ``dtype``."""
    torch.testing.assert_close(a, b, atol=TOL[dtype], rtol=TOL[dtype])
