"""FLOP counts of the attention variants, and this machine's matrix-multiply rate to compare them
with.

Dense attention does two matrix products of ``n × n × d`` per head (``Q Kᵀ`` and ``P V``), two
FLOPs per multiply-add: ``4·B·H·n²·d`` forward. The convention (FlashAttention's) counts every
variant by the (query, key) pairs it must score, so a causal mask halves the count and a
sliding window counts only its band; the exponentials and the softmax bookkeeping are not
counted. Forward+backward is ``3.5×`` the forward: the backward does five ``n × n × d``
products against the forward's two (``2 + 5 = 7 = 3.5 · 2``).
"""

from __future__ import annotations

import math
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

FORWARD_BACKWARD_FACTOR = 3.5


def pair_flops(batch: int, heads: int, head_dim: int, n_pairs: int) -> float:
    """Forward FLOPs of attention that scores ``n_pairs`` (query, key) pairs per head:
    ``4·B·H·pairs·d`` (one multiply-add for the score, one for the weighted value)."""
    return 4.0 * batch * heads * n_pairs * head_dim


def dense_flops(batch: int, heads: int, n: int, head_dim: int, *, causal: bool = False) -> float:
    """Forward FLOPs of dense attention: ``4·B·H·n²·d``, halved when causal."""
    flops = pair_flops(batch, heads, head_dim, n * n)
    return flops / 2 if causal else flops


def band_pairs(n: int, left: int, right: int) -> int:
    """How many (query, key) pairs a band ``i - left <= j <= i + right`` holds in ``n × n``:
    the number of ``True`` in ``attention.masks.sliding_window_mask(n, left=left, right=right)``,
    without building the ``n × n`` mask."""
    i = torch.arange(n, dtype=torch.long)
    first = (i - left).clamp(min=0)
    last = (i + right).clamp(max=n - 1)
    return int((last - first + 1).sum())


def linear_attention_flops(batch: int, heads: int, n: int, head_dim: int) -> float:
    """Forward FLOPs of kernelised linear attention: ``φ(K)ᵀ V`` and ``φ(Q) · state`` are two
    ``n × d × d`` products per head, ``4·B·H·n·d²`` (causal or not: the causal form computes
    the same sums as prefixes)."""
    return 4.0 * batch * heads * n * head_dim * head_dim


def _accumulating_product_flops(self_shape, a_shape, b_shape, *_, out_shape=None, **__) -> int:
    """``x.baddbmm_(a, b)`` / ``x.addmm_(a, b)``: ``2·batch·M·N·K``, like ``baddbmm``."""
    *batch, m, k = a_shape
    return 2 * math.prod(batch) * m * b_shape[-1] * k


def matmul_flop_counter() -> FlopCounterMode:
    """torch's ``FlopCounterMode`` (no display), also counting the in-place accumulating
    products ``baddbmm_`` and ``addmm_``, which torch's table leaves out; the flash loop
    accumulates its tiles with them (``acc.baddbmm_(p, v)``), so without this it would seem
    to do about half its work. Use as ``with counter: ...; counter.get_total_flops()``."""
    aten = torch.ops.aten
    mapping = {aten.baddbmm_: _accumulating_product_flops, aten.addmm_: _accumulating_product_flops}
    return FlopCounterMode(display=False, custom_mapping=mapping)


def matmul_rate(size: int, repeats: int = 5, dtype: torch.dtype = torch.float32) -> dict:
    """This machine's matrix-multiply rate: the median time of ``torch.mm`` on two ``size ×
    size`` matrices (``2·size³`` FLOPs), after one warm-up product.

    Returns ``{"size", "repeats", "times_s", "gflops"}`` (GFLOP/s from the median time).
    """
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator, dtype=dtype)
    b = torch.randn(size, size, generator=generator, dtype=dtype)
    out = torch.empty(size, size, dtype=dtype)
    torch.mm(a, b, out=out)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {
        "size": size,
        "repeats": repeats,
        "times_s": times,
        "gflops": 2.0 * size**3 / median / 1e9,
    }
