"""measure.flops: the FLOP formulas against torch's own FlopCounterMode, and the counter
that also sees in-place products (the flash loop's)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attention.efficient.flash import flash_attention
from attention.functional import scaled_dot_product_attention
from attention.masks import sliding_window_mask
from measure.flops import (
    FORWARD_BACKWARD_FACTOR,
    band_pairs,
    dense_flops,
    linear_attention_flops,
    matmul_flop_counter,
    matmul_rate,
    pair_flops,
)


def _counted_flops(fn, counter=None) -> int:
    with counter or FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize(("b", "h", "n", "d"), [(1, 2, 16, 8), (2, 3, 40, 16)])
def test_dense_flops_match_torch_flop_counter(b, h, n, d):
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    forward = _counted_flops(lambda: scaled_dot_product_attention(q, k, v))
    assert dense_flops(b, h, n, d) == forward == 4 * b * h * n * n * d
    assert dense_flops(b, h, n, d, causal=True) == forward / 2

    # Autograd's backward does 4 products (3x forward in all); a flash-style backward also
    # recomputes Q Kᵀ: one more, which is where the 3.5 of the convention comes from.
    def train():
        scaled_dot_product_attention(q, k, v).backward(torch.ones(b, h, n, d))

    recompute = _counted_flops(lambda: q @ k.transpose(-2, -1))
    assert _counted_flops(train) + recompute == FORWARD_BACKWARD_FACTOR * forward


@pytest.mark.parametrize("n", [40, 300])
def test_matmul_flop_counter_counts_the_flash_loop_like_the_convention(n):
    b, h, d = 1, 2, 8
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, block_q=64, block_k=64)  # several tiles at n = 300
    # torch's own counter misses the in-place accumulations (acc.baddbmm_) of the tile loop.
    forward = _counted_flops(lambda: flash_attention(q, k, v, block_q=64, block_k=64),
                             matmul_flop_counter())  # fmt: skip
    assert forward == dense_flops(b, h, n, d)
    if n > 64:
        plain = _counted_flops(lambda: flash_attention(q, k, v, block_q=64, block_k=64))
        assert plain < forward
    backward = _counted_flops(lambda: out.backward(torch.ones_like(out)), matmul_flop_counter())
    assert forward + backward == FORWARD_BACKWARD_FACTOR * forward  # five products, QKᵀ again
    # Causal: the tiles above the diagonal are skipped, the diagonal ones computed whole.
    causal = _counted_flops(lambda: flash_attention(q, k, v, causal=True, block_q=64, block_k=64),
                            matmul_flop_counter())  # fmt: skip
    sizes = [min(64, n - start) for start in range(0, n, 64)]  # tile edges, the last partial
    pairs = sum(sizes[i] * sizes[j] for i in range(len(sizes)) for j in range(i + 1))
    assert causal == pair_flops(b, h, d, pairs)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), left=st.integers(0, 70), right=st.integers(0, 70))
def test_band_pairs_counts_the_mask(n, left, right):
    mask = sliding_window_mask(n, left=left, right=right)
    assert band_pairs(n, left, right) == int(mask.sum())


def test_pair_and_linear_flops():
    assert pair_flops(2, 3, 5, 7) == 4 * 2 * 3 * 5 * 7
    # φ(K)ᵀ V and φ(Q) S: two (n × d) @ (d × d) products per head, as torch counts them.
    b, h, n, d = 1, 2, 30, 8
    phi_q, phi_k, v = (torch.rand(b, h, n, d) for _ in range(3))
    counted = _counted_flops(lambda: phi_q @ (phi_k.transpose(-2, -1) @ v))
    assert linear_attention_flops(b, h, n, d) == counted


def test_matmul_rate_reports_the_median():
    rate = matmul_rate(64, repeats=3)
    assert rate["size"] == 64 and len(rate["times_s"]) == 3
    median = sorted(rate["times_s"])[1]
    assert rate["gflops"] == pytest.approx(2 * 64**3 / median / 1e9)
