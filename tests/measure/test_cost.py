"""measure.cost against known counts: the FLOPs of dense attention in closed form, the flash
loop counted like dense attention, an allocation of known size, and exact power laws."""

from __future__ import annotations

import math

import pytest
import torch

from attention.efficient.flash import flash_attention
from attention.functional import scaled_dot_product_attention
from measure.cost import fit_power, make_qkv, measure_cost


def test_measure_cost_of_dense_attention_is_exact():
    n, h, e = 64, 2, 8
    cost = measure_cost(scaled_dot_product_attention, n, num_heads=h, head_dim=e, timed=False)
    assert cost.flops == 4 * h * n * n * e  # QKᵀ and AV, 2 FLOPs per multiply-add
    weights_bytes = h * n * n * 4
    assert 2 * weights_bytes < cost.peak_bytes < 4 * weights_bytes  # ≈ 3 score-sized tensors
    assert math.isnan(cost.seconds)
    doubled = measure_cost(
        scaled_dot_product_attention, 2 * n, num_heads=h, head_dim=e, timed=False
    )
    assert doubled.flops == 4 * cost.flops


def test_measure_cost_counts_the_flash_loop_like_dense_attention():
    # Several tiles: the loop accumulates with in-place products, which must be counted too.
    n, h, e = 200, 2, 8
    tiled = measure_cost(
        lambda q, k, v: flash_attention(q, k, v, block_q=64, block_k=64),
        n,
        num_heads=h,
        head_dim=e,
        timed=False,
    )
    assert tiled.flops == 4 * h * n * n * e


def test_measure_cost_counts_only_what_the_call_allocates():
    n, e = 32, 8

    def alloc(q, k, v):
        return torch.empty(1000, dtype=torch.float64)  # exactly 8000 bytes, nothing else

    cost = measure_cost(alloc, n, head_dim=e, timed=False)
    assert cost.peak_bytes == 8000 and cost.flops == 0
    timed = measure_cost(alloc, n, head_dim=e, repeats=2)
    assert timed.seconds >= 0.0
    with pytest.raises(TypeError, match="attn"):
        measure_cost("dense", n)


def test_make_qkv_is_reproducible():
    a, b = make_qkv(5, seed=1), make_qkv(5, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert a[0].shape == (1, 2, 5, 32)


def test_fit_power_recovers_exponents():
    lengths = [16, 32, 64, 128]
    assert math.isclose(fit_power(lengths, [3 * n**2 for n in lengths]), 2.0, abs_tol=1e-9)
    assert math.isclose(fit_power(lengths, [5.0 / n for n in lengths]), -1.0, abs_tol=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        fit_power([4], [1.0])
    with pytest.raises(ValueError, match="> 0"):
        fit_power([4, 8], [0.0, 1.0])
