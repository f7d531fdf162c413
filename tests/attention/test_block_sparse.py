"""block_sparse_attention equals dense attention under block_layout_to_mask; bigbird_layout."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient.block_sparse import bigbird_layout, block_sparse_attention
from attention.functional import scaled_dot_product_attention
from attention.masks import block_layout_to_mask
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import input_grads, random_qkv
from tests.reference import naive_attention_float64

cases = st.fixed_dictionaries(
    {
        "b": st.integers(1, 2),
        "h": st.integers(1, 3),
        "lq": st.integers(1, 30),
        "lk": st.integers(1, 30),
        "e": st.integers(1, 5),
        "ev": st.integers(1, 4),
        "block_size": st.integers(1, 9),
        "per_head": st.booleans(),
        "density": st.floats(0.0, 1.0),
        "seed": st.integers(0, 2**16),
    }
)


def _random_layout(c):
    n_qb, n_kb = -(-c["lq"] // c["block_size"]), -(-c["lk"] // c["block_size"])
    shape = (c["h"], n_qb, n_kb) if c["per_head"] else (n_qb, n_kb)
    g = torch.Generator().manual_seed(c["seed"])
    return torch.rand(shape, generator=g) < c["density"]


@settings(max_examples=50, deadline=None)
@given(c=cases)
def test_matches_dense_block_mask(c):
    q, k, v = random_qkv(c["b"], c["h"], c["lq"], c["lk"], c["e"], c["ev"], seed=c["seed"])
    layout = _random_layout(c)  # empty rows included: density can be 0
    out = block_sparse_attention(q, k, v, layout, block_size=c["block_size"])
    mask = block_layout_to_mask(layout, c["block_size"], c["lq"], c["lk"])  # (.., Lq, Lk)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask))
    torch.testing.assert_close(out, naive_attention_float64(q, k, v, mask))
    assert torch.isfinite(out).all()


@settings(max_examples=25, deadline=None)
@given(c=cases)
def test_gradients_match_dense(c):
    q, k, v = random_qkv(c["b"], c["h"], c["lq"], c["lk"], c["e"], c["ev"], requires_grad=True)
    layout = _random_layout(c)
    out = block_sparse_attention(q, k, v, layout, block_size=c["block_size"])
    mask = block_layout_to_mask(layout, c["block_size"], c["lq"], c["lk"])
    ref = scaled_dot_product_attention(q, k, v, mask)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)


def test_partial_last_key_block_gets_no_weight():
    # Lk = 10, blocks of 4: key block 2 holds keys 8, 9 and two padding slots. Query block 0
    # attends only key block 2, so its weights must spread over exactly keys 8 and 9.
    q, k, v = random_qkv(1, 1, 4, 10, 3, 2)
    layout = torch.tensor([[False, False, True]])
    out = block_sparse_attention(q, k, v, layout, block_size=4)
    ref = scaled_dot_product_attention(q, k[:, :, 8:], v[:, :, 8:])
    torch.testing.assert_close(out, ref)


def test_all_true_layout_is_dense_attention():
    q, k, v = random_qkv(2, 2, 13, 13, 8, 8, dtype=torch.float32)
    layout = torch.ones(4, 4, dtype=torch.bool)
    out = block_sparse_attention(q, k, v, layout, block_size=4)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_empty_row_gives_zeros_and_finite_gradients():
    q, k, v = random_qkv(1, 2, 8, 8, 4, 3, requires_grad=True)
    layout = torch.tensor([[True, False], [False, False]])
    out = block_sparse_attention(q, k, v, layout, block_size=4)
    assert torch.equal(out[:, :, 4:], torch.zeros_like(out[:, :, 4:]))
    assert all(torch.isfinite(g).all() for g in input_grads(out, (q, k, v)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_close_to_float32(dtype):
    q, k, v = random_qkv(2, 2, 30, 30, 16, 16, dtype=torch.float32)
    layout = bigbird_layout(4, n_window=0, n_random=1)
    ref = block_sparse_attention(q, k, v, layout, block_size=8)
    out = block_sparse_attention(q.to(dtype), k.to(dtype), v.to(dtype), layout, block_size=8)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_cost_is_proportional_to_active_blocks():
    # n = 2**15: one n × n float32 tensor would be 4 GiB.
    n, bs, b, h, ev = 2**15, 32, 1, 1, 4
    q, k, v = random_qkv(b, h, n, n, 4, ev, dtype=torch.float32)
    layout = bigbird_layout(n // bs, n_window=1, n_global=1, n_random=2)
    active, rows = int(layout.sum()), int(layout.any(-1).sum())
    with AllocationProbe() as probe:
        block_sparse_attention(q, k, v, layout, block_size=bs)
    # The products computed are exactly the active score blocks plus one output block per row.
    assert sum(probe.bmm_numels) == b * h * (active * bs * bs + rows * bs * ev)
    assert probe.largest <= 16 * b * h * active * bs * bs
    assert probe.largest < 4 * n * n // 100  # under 1% of one n × n float32 tensor


def test_bigbird_layout_rule():
    n, n_window, n_global, n_random = 12, 1, 2, 3
    layout = bigbird_layout(
        n, n_window=n_window, n_global=n_global, n_random=n_random, generator=torch.Generator()
    )
    assert layout.shape == (n, n) and layout.dtype == torch.bool
    for a in range(n):
        for b in range(n):
            if abs(a - b) <= n_window or a < n_global or b < n_global:
                assert layout[a, b]
    # Each non-global row gets exactly n_random extra blocks outside window and global.
    for a in range(n_global, n):
        fixed = sum(1 for b in range(n) if abs(a - b) <= n_window or b < n_global)
        assert int(layout[a].sum()) == fixed + n_random


def test_bigbird_layout_is_seeded_and_saturates():
    a = bigbird_layout(16, generator=torch.Generator().manual_seed(3))
    b = bigbird_layout(16, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert torch.equal(bigbird_layout(16), bigbird_layout(16))  # default: seeded, reproducible
    draws = [bigbird_layout(16, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])
    # More random blocks than remain: the row fills up, no error.
    assert bigbird_layout(5, n_window=0, n_global=0, n_random=10).all()
    assert torch.equal(
        bigbird_layout(6, n_window=1, n_global=0, n_random=0),
        (torch.arange(6)[:, None] - torch.arange(6)).abs() <= 1,
    )


@pytest.mark.parametrize(
    ("layout", "block_size", "error", "match"),
    [
        (torch.ones(3, 3, dtype=torch.bool), 0, ValueError, "block_size"),
        (torch.ones(3, 3, dtype=torch.bool), 2.0, TypeError, "block_size"),
        (torch.ones(2, 3, dtype=torch.bool), 4, ValueError, "layout"),
        (torch.ones(3, 3, 3, dtype=torch.bool), 4, ValueError, "layout"),
        (torch.ones(1, 2, 3, 3, dtype=torch.bool), 4, ValueError, "layout"),
        (torch.ones(3, 3), 4, TypeError, "layout"),
        ([[True]], 4, TypeError, "layout"),
    ],
)
def test_bad_arguments_raise_clear_errors(layout, block_size, error, match):
    q, k, v = random_qkv(1, 2, 10, 10, 4, 4)  # 10 positions in blocks of 4: a 3 × 3 layout
    with pytest.raises(error, match=match):
        block_sparse_attention(q, k, v, layout, block_size=block_size)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_blocks": 0}, "n_blocks"),
        ({"n_blocks": 4, "n_window": -1}, "n_window"),
        ({"n_blocks": 4, "n_global": -1}, "n_global"),
        ({"n_blocks": 4, "n_random": -1}, "n_random"),
    ],
)
def test_bigbird_layout_bad_arguments(kwargs, match):
    n_blocks = kwargs.pop("n_blocks")
    with pytest.raises(ValueError, match=match):
        bigbird_layout(n_blocks, **kwargs)


@pytest.mark.parametrize(("lq", "lk"), [(0, 5), (4, 0), (0, 0)])
def test_empty_sequences_behave_like_torch(lq, lk):
    q, k, v = random_qkv(1, 2, lq, lk, 4, 3)
    layout = torch.ones(-(-lq // 2), -(-lk // 2), dtype=torch.bool)
    out = block_sparse_attention(q, k, v, layout, block_size=2)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_training_saves_gathered_inputs_not_weights():
    """What autograd holds for the backward: q, the gathered key and value blocks, the output
    and the row log-sum-exp; never the weights (active blocks × bs² per head), which the
    backward recomputes chunk by chunk."""
    b, h, n, e, bs = 1, 2, 1024, 8, 32
    q, k, v = random_qkv(b, h, n, n, e, e, dtype=torch.float32, requires_grad=True)
    layout = bigbird_layout(n // bs)
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = (t.dtype, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block_sparse_attention(q, k, v, layout, block_size=bs)
    floats = sum(nbytes for dtype, nbytes in storages.values() if dtype != torch.bool)
    active = int(layout.sum())
    gathered = 2 * active * bs * e  # key and value blocks, one copy per active block
    assert floats <= b * h * (3 * n * e + gathered + n) * 4  # + q (scaled, padded), out, lse
    weights_bytes = b * h * active * bs * bs * 4
    assert floats < weights_bytes  # autograd kept about 3x the weights here
    out.sum().backward()
    assert torch.isfinite(k.grad).all()
