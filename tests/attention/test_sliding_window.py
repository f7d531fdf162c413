"""sliding_window_attention equals dense attention under sliding_window_mask, in O(n·w)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient.sliding_window import sliding_window_attention
from attention.functional import scaled_dot_product_attention
from attention.masks import sliding_window_mask
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import input_grads, random_qkv
from tests.reference import naive_attention_float64


def _global_mask(g_pos, n):
    is_global = torch.zeros(n, dtype=torch.bool)
    is_global[g_pos] = True
    return is_global[:, None] | is_global[None, :]  # (L, L): global rows and global columns


shapes = st.fixed_dictionaries(
    {
        "b": st.integers(1, 2),
        "h": st.integers(1, 3),
        "lq": st.integers(1, 40),
        "lk": st.integers(1, 40),
        "e": st.integers(1, 6),
        "ev": st.integers(1, 5),
        "left": st.integers(0, 45),
        "right": st.integers(0, 45),
        "block_size": st.one_of(st.none(), st.integers(1, 17)),
    }
)


@settings(max_examples=50, deadline=None)
@given(s=shapes, square=st.booleans())
def test_matches_dense_band_mask(s, square):
    lk = s["lq"] if square else s["lk"]
    q, k, v = random_qkv(s["b"], s["h"], s["lq"], lk, s["e"], s["ev"])
    out = sliding_window_attention(
        q, k, v, left=s["left"], right=s["right"], block_size=s["block_size"]
    )
    mask = sliding_window_mask(s["lq"], lk, left=s["left"], right=s["right"])  # (Lq, Lk)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask))
    torch.testing.assert_close(out, naive_attention_float64(q, k, v, mask))
    assert torch.isfinite(out).all()


@settings(max_examples=25, deadline=None)
@given(s=shapes)
def test_gradients_match_dense(s):
    q, k, v = random_qkv(s["b"], s["h"], s["lq"], s["lk"], s["e"], s["ev"], requires_grad=True)
    out = sliding_window_attention(
        q, k, v, left=s["left"], right=s["right"], block_size=s["block_size"]
    )
    mask = sliding_window_mask(s["lq"], s["lk"], left=s["left"], right=s["right"])
    ref = scaled_dot_product_attention(q, k, v, mask)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)


@settings(max_examples=40, deadline=None)
@given(
    s=shapes,
    data=st.data(),
    as_bool=st.booleans(),
)
def test_global_tokens_match_dense(s, data, as_bool):
    n = s["lq"]
    positions = data.draw(st.lists(st.integers(0, n - 1), max_size=5))  # duplicates allowed
    q, k, v = random_qkv(s["b"], s["h"], n, n, s["e"], s["ev"], requires_grad=True)
    g = torch.tensor(positions, dtype=torch.long)
    if as_bool:
        g = torch.zeros(n, dtype=torch.bool).index_fill(0, g, True)
    out = sliding_window_attention(
        q, k, v, left=s["left"], right=s["right"], global_tokens=g, block_size=s["block_size"]
    )
    band = sliding_window_mask(n, left=s["left"], right=s["right"])  # (L, L)
    mask = band | _global_mask(positions, n) if positions else band
    ref = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


@settings(max_examples=25, deadline=None)
@given(s=shapes, tile=st.integers(1, 64), with_globals=st.booleans())
def test_query_block_groups_match_dense(s, tile, with_globals):
    # A tiny score tile splits every head's query blocks into many groups (the cache-sized
    # grouping long sequences use); forward and gradients must not change.
    from attention.efficient import sliding_window as sw

    n = s["lq"]
    q, k, v = random_qkv(s["b"], s["h"], n, n, s["e"], s["ev"], requires_grad=True)
    g_pos = torch.tensor([0, n // 2]).unique() if with_globals else None
    allowed = sliding_window_mask(n, n, left=s["left"], right=s["right"])
    if g_pos is not None:
        allowed = allowed | _global_mask(g_pos, n)
    old = sw.SCORE_TILE_ELEMENTS
    sw.SCORE_TILE_ELEMENTS = tile
    try:
        out = sliding_window_attention(
            q, k, v, left=s["left"], right=s["right"], global_tokens=g_pos,
            block_size=s["block_size"],
        )  # fmt: skip
    finally:
        sw.SCORE_TILE_ELEMENTS = old
    ref = scaled_dot_product_attention(q, k, v, allowed)
    torch.testing.assert_close(out, ref)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


def test_global_key_inside_band_counts_once():
    # Key 2 is global and in every query's band: a double count would change the weights.
    q, k, v = random_qkv(1, 1, 6, 6, 3, 2)
    g = torch.tensor([2, 2])
    out = sliding_window_attention(q, k, v, left=5, right=5, global_tokens=g)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_causal_window_wider_than_sequence_is_causal_attention():
    q, k, v = random_qkv(2, 2, 23, 23, 8, 8, dtype=torch.float32)
    out = sliding_window_attention(q, k, v, left=1000, right=0, block_size=5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_zero_window_sees_only_itself():
    q, k, v = random_qkv(2, 3, 11, 11, 4, 5)
    out = sliding_window_attention(q, k, v, left=0, right=0, block_size=4)
    torch.testing.assert_close(out, v)


def test_fully_masked_rows_are_zero_with_finite_gradients():
    # Queries 7.. have no key in their window when Lk = 5 and left = 2: zeros, not NaN.
    q, k, v = random_qkv(1, 2, 12, 5, 4, 3, requires_grad=True)
    out = sliding_window_attention(q, k, v, left=2, right=1, block_size=5)
    assert torch.equal(out[:, :, 7:], torch.zeros_like(out[:, :, 7:]))
    assert torch.isfinite(out).all()
    grads = input_grads(out, (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    mask = sliding_window_mask(12, 5, left=2, right=1)
    ref = scaled_dot_product_attention(q, k, v, mask)
    for got, want in zip(grads, input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_close_to_float32(dtype):
    q, k, v = random_qkv(2, 2, 37, 37, 16, 16, dtype=torch.float32)
    ref = sliding_window_attention(q, k, v, left=6, right=3)
    out = sliding_window_attention(q.to(dtype), k.to(dtype), v.to(dtype), left=6, right=3)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_never_allocates_an_n_by_n_tensor():
    n, left, right = 2**15, 8, 8
    q, k, v = random_qkv(1, 1, n, n, 4, 4, dtype=torch.float32, requires_grad=True)
    g = torch.tensor([0, 5, n - 1])
    with AllocationProbe() as probe:
        out = sliding_window_attention(q, k, v, left=left, right=right, global_tokens=g)
        out.sum().backward()
    # The largest tensors are the (n, block + left + right) score strips: a few MB, while a
    # single n × n float32 tensor would be 4 GiB.
    assert probe.largest <= 64 * n * (left + right + 16)
    assert probe.largest < n * n // 100
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("with_globals", [False, True])
def test_training_keeps_o_n_between_forward_and_backward(with_globals):
    """What autograd holds for the backward: q, k, v (views), the output and the row
    log-sum-exp, O(n·E) per head, plus the band mask (bool, shared by the heads); never the
    O(n·w) weights, which the backward recomputes tile by tile."""
    b, h, n, e, left, right = 1, 2, 1024, 8, 256, 256
    q, k, v = random_qkv(b, h, n, n, e, e, dtype=torch.float32, requires_grad=True)
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = (t.dtype, t.untyped_storage().nbytes())
        return t

    g = torch.tensor([0, 500]) if with_globals else None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = sliding_window_attention(q, k, v, left=left, right=right, global_tokens=g)
    floats = sum(nbytes for dtype, nbytes in storages.values() if dtype != torch.bool)
    width = 512 + 64  # the strip of one query block: left + right + block_size (64 here)
    weights_bytes = b * h * n * width * 4  # what autograd would keep, more than once
    assert floats <= 6 * b * h * (n + left + right) * e * 4 + b * h * n * 4
    assert floats * 4 < weights_bytes
    out.sum().backward()  # and the recomputing backward still runs
    assert torch.isfinite(k.grad).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"left": -1, "right": 0}, ValueError, "left"),
        ({"left": 0, "right": -2}, ValueError, "right"),
        ({"left": 1.5, "right": 0}, TypeError, "left"),
        ({"left": 1, "right": 1, "block_size": 0}, ValueError, "block_size"),
        ({"left": 1, "right": 1, "global_tokens": torch.tensor([0, 9])}, ValueError, "global"),
        ({"left": 1, "right": 1, "global_tokens": torch.tensor([-1])}, ValueError, "global"),
        ({"left": 1, "right": 1, "global_tokens": torch.tensor([[0]])}, ValueError, "global"),
        ({"left": 1, "right": 1, "global_tokens": torch.tensor([0.0])}, TypeError, "global"),
        ({"left": 1, "right": 1, "global_tokens": torch.ones(4, dtype=bool)}, ValueError, "global"),
        ({"left": 1, "right": 1, "global_tokens": [0]}, TypeError, "global"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, match):
    q, k, v = random_qkv(1, 2, 9, 9, 4, 4)
    with pytest.raises(error, match=match):
        sliding_window_attention(q, k, v, **kwargs)


def test_bad_tensors_raise_clear_errors():
    q, k, v = random_qkv(1, 2, 9, 9, 4, 4)
    with pytest.raises(ValueError, match="key"):
        sliding_window_attention(q, k[..., :3], v, left=1, right=1)
    with pytest.raises(TypeError, match="query"):
        sliding_window_attention(q.long(), k, v, left=1, right=1)
    with pytest.raises(ValueError, match="global_tokens"):
        sliding_window_attention(q, k[:, :, :5], v[:, :, :5], left=1, right=1, global_tokens=[0])


@pytest.mark.parametrize(("lq", "lk"), [(0, 5), (4, 0), (0, 0)])
def test_empty_sequences_behave_like_torch(lq, lk):
    q, k, v = random_qkv(1, 2, lq, lk, 4, 3)
    out = sliding_window_attention(q, k, v, left=2, right=1)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))  # zeros or empty
