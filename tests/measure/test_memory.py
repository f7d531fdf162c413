"""measure.memory: peak extra memory counted tensor by tensor, against known allocations
and a simulation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient.sliding_window import sliding_window_attention
from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention
from measure.memory import PeakMemory, kv_cache_bytes, peak_extra_bytes


def test_peak_memory_of_known_allocations():
    assert peak_extra_bytes(lambda: torch.empty(1000, 1000)) == 4_000_000

    def one_then_two():
        a = torch.empty(250_000)  # 1 MB, freed before the next one
        del a
        b = torch.empty(500_000, dtype=torch.float64)  # 4 MB
        c = torch.empty(100, dtype=torch.uint8)  # both alive: 4 MB + 100 B
        return b, c

    assert peak_extra_bytes(one_then_two) == 4_000_100


def test_inputs_views_and_in_place_writes_are_not_counted():
    x = torch.zeros(1000)
    buffer = torch.empty(1000)
    with PeakMemory() as mem:
        x.add_(1.0)  # in place on an input
        y = x[:10].view(2, 5)  # a view: no new storage
        torch.mul(x, 2.0, out=buffer)  # out= into a buffer made outside
        assert mem.current_bytes == 0
        z = x * 2  # a new tensor: 4000 bytes, alive
        assert mem.current_bytes == 4000
        del z
    assert mem.peak_bytes == 4000 and mem.current_bytes == 0
    assert y.shape == (2, 5)


def test_peak_memory_sees_the_backward_pass():
    n = 10_000
    x = torch.randn(n, requires_grad=True)
    with PeakMemory() as mem:
        (x * 3).sum().backward()
    assert x.grad is not None
    # The gradient (n floats) is allocated by the backward; the product's n floats are freed
    # before it (sum saves nothing): peak = n floats plus a few scalars.
    assert 4 * n <= mem.peak_bytes <= 4 * n + 64


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.booleans()), min_size=1, max_size=12))
def test_peak_memory_matches_a_simulation(steps):
    """Allocate tensors of the given byte sizes in order, dropping each one unless kept: the
    peak is the simulated peak of live bytes."""

    def run():
        kept = []
        for size, keep in steps:
            t = torch.empty(size, dtype=torch.uint8)
            if keep:
                kept.append(t)
            del t
        return kept

    live = peak = 0
    for size, keep in steps:
        peak = max(peak, live + size)
        live += size if keep else 0
    assert peak_extra_bytes(run) == peak


def test_dense_attention_memory_is_quadratic_and_torch_sdpa_linear():
    b, h, n, d = 1, 2, 256, 16
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    scores_bytes = b * h * n * n * 4
    naive = peak_extra_bytes(lambda: scaled_dot_product_attention(q, k, v))
    assert naive >= 2 * scores_bytes  # scores and weights alive at once
    fused = peak_extra_bytes(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert b * h * n * d * 4 <= fused < scores_bytes  # the output, never the scores


class _EagerPeak(PeakMemory):
    """The definition computed the slow way: every storage's liveness checked after every
    operator, so the peak is the most bytes alive after any operator."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return out


def _forward_backward_of_attention_layers():
    """Many operators and short-lived temporaries: a sliding window's blocked kernel and a
    multi-head layer, forward and backward (on new inputs and weights at each call)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 8, requires_grad=True) for _ in range(3))
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 12, 16, requires_grad=True)

    def run():
        out = sliding_window_attention(q, k, v, left=3, right=2, block_size=8)
        (out.square().sum() + mha(x).sum()).backward()
        return out

    return run


def test_the_peak_skips_no_operator_that_sets_it():
    """Liveness is checked only when the bytes held pass the peak (freed storages can only
    lower what is alive): the same peak as checking after every operator, on a workload whose
    temporaries die between operators."""
    first, second = _forward_backward_of_attention_layers(), _forward_backward_of_attention_layers()
    with _EagerPeak() as eager:
        first()
    with PeakMemory() as lazy:  # new inputs: no gradient left to accumulate into
        second()
    assert lazy.peak_bytes == eager.peak_bytes > 0
    assert lazy.current_bytes == eager.current_bytes


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_kv_cache_bytes_equals_the_size_of_real_key_value_tensors(num_kv_heads):
    num_layers, batch_size, seq_len, d_model, num_heads = 3, 2, 7, 32, 4
    layers = [
        MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads).to(torch.bfloat16)
        for _ in range(num_layers)
    ]
    x = torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16)  # (B, L, D)
    cached = sum(m.k_proj(x).nbytes + m.v_proj(x).nbytes for m in layers)  # what a cache holds
    got = kv_cache_bytes(
        num_layers, num_kv_heads, d_model // num_heads, seq_len, batch_size=batch_size
    )
    assert got == cached


def test_kv_cache_bytes_realistic_config_and_bad_input():
    assert kv_cache_bytes(32, 32, 128, 4096) == 2 * 1024**3  # 2 GiB in fp16
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_cache_bytes(32, 0, 128, 4096)
