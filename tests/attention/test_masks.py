"""attention.masks: every builder against an explicit double loop; the conversions from
nn.MultiheadAttention's polarity checked by running torch's MHA itself."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.functional import scaled_dot_product_attention
from attention.masks import (
    block_layout_to_mask,
    causal_mask,
    combine_masks,
    from_key_padding_mask,
    from_torch_attn_mask,
    padding_mask,
    padding_mask_from_keep,
    sliding_window_mask,
    to_additive,
)

FAST = settings(max_examples=40, deadline=None)


def _loop(n_rows: int, n_cols: int, rule) -> torch.Tensor:
    out = torch.zeros(n_rows, n_cols, dtype=torch.bool)
    for i in range(n_rows):
        for j in range(n_cols):
            out[i, j] = bool(rule(i, j))
    return out


@FAST
@given(lq=st.integers(1, 9), lk=st.integers(1, 9))
def test_causal_mask_matches_loop(lq, lk):
    top = causal_mask(lq, lk)
    assert top.dtype == torch.bool and top.shape == (lq, lk)
    assert torch.equal(top, _loop(lq, lk, lambda i, j: j <= i))
    bottom = causal_mask(lq, lk, causal_alignment="bottom_right")
    assert torch.equal(bottom, _loop(lq, lk, lambda i, j: j <= i + lk - lq))
    assert torch.equal(causal_mask(lq), _loop(lq, lq, lambda i, j: j <= i))


def test_causal_mask_bottom_right_last_query_sees_every_key():
    assert causal_mask(1, 5, causal_alignment="bottom_right").all()  # one decoding step, cache of 5
    assert causal_mask(1, 5)[0].tolist() == [True, False, False, False, False]


@FAST
@given(
    lq=st.integers(1, 9),
    lk=st.integers(1, 9),
    left=st.one_of(st.none(), st.integers(0, 5)),
    right=st.one_of(st.none(), st.integers(0, 5)),
)
def test_sliding_window_mask_matches_loop(lq, lk, left, right):
    got = sliding_window_mask(lq, lk, left=left, right=right)
    lo = -math.inf if left is None else -left
    hi = math.inf if right is None else right
    assert torch.equal(got, _loop(lq, lk, lambda i, j: lo <= j - i <= hi))


def test_sliding_window_special_cases():
    assert torch.equal(sliding_window_mask(5, left=None, right=0), causal_mask(5))
    assert torch.equal(sliding_window_mask(4, left=0, right=0), torch.eye(4, dtype=torch.bool))
    assert sliding_window_mask(3, 6, left=None, right=None).all()
    assert sliding_window_mask(6, left=2, right=0).sum(-1).tolist() == [1, 2, 3, 3, 3, 3]


@FAST
@given(lengths=st.lists(st.integers(0, 7), min_size=1, max_size=4), extra=st.integers(0, 3))
def test_padding_mask_matches_loop(lengths, extra):
    max_len = max(max(lengths), 1) + extra
    got = padding_mask(torch.tensor(lengths), max_len)
    assert got.shape == (len(lengths), 1, 1, max_len) and got.dtype == torch.bool
    want = _loop(len(lengths), max_len, lambda b, j: j < lengths[b])
    assert torch.equal(got[:, 0, 0], want)
    assert torch.equal(padding_mask_from_keep(want), got)


def test_padding_mask_default_max_len_is_the_longest():
    assert padding_mask(torch.tensor([2, 4, 1])).shape == (3, 1, 1, 4)


def test_padding_mask_makes_padded_keys_irrelevant():
    """Whatever sits in the padded key/value slots, the output does not change."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    mask = padding_mask(torch.tensor([3, 5]), 5)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 3:] = 100.0
    v2[0, :, 3:] = -7.0
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask), scaled_dot_product_attention(q, k2, v2, mask)
    )


@FAST
@given(b=st.integers(1, 3), seq=st.integers(1, 6), seed=st.integers(0, 1000))
def test_combine_masks_is_broadcast_and(b, seq, seed):
    g = torch.Generator().manual_seed(seed)
    tri = causal_mask(seq)  # (L, L)
    pad = torch.rand(b, 1, 1, seq, generator=g) < 0.6  # (B, 1, 1, L)
    head = torch.rand(1, 2, seq, seq, generator=g) < 0.6  # (1, H, L, L)
    got = combine_masks(tri, None, pad, head)
    assert got.shape == (b, 2, seq, seq)
    for bi in range(b):
        for h in range(2):
            for i in range(seq):
                for j in range(seq):
                    want = bool(tri[i, j]) and bool(pad[bi, 0, 0, j]) and bool(head[0, h, i, j])
                    assert bool(got[bi, h, i, j]) == want


def test_combine_masks_none_and_single():
    assert combine_masks() is None and combine_masks(None, None) is None
    m = causal_mask(3)
    assert torch.equal(combine_masks(None, m), m)


@FAST
@given(
    nqb=st.integers(1, 4),
    nkb=st.integers(1, 4),
    bs=st.integers(1, 4),
    crop_q=st.integers(0, 3),
    crop_k=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_block_layout_to_mask_matches_loop_and_crops(nqb, nkb, bs, crop_q, crop_k, seed):
    layout = torch.rand(2, nqb, nkb, generator=torch.Generator().manual_seed(seed)) < 0.5
    lq = nqb * bs - min(crop_q, bs - 1)  # any length that still needs the last block
    lk = nkb * bs - min(crop_k, bs - 1)
    got = block_layout_to_mask(layout, bs, lq, lk)
    assert got.shape == (2, lq, lk)
    for h in range(2):
        want = _loop(lq, lk, lambda i, j, h=h: layout[h, i // bs, j // bs])
        assert torch.equal(got[h], want)
    assert block_layout_to_mask(layout, bs).shape == (2, nqb * bs, nkb * bs)


def test_to_additive_is_zero_or_minus_inf_and_means_the_same():
    mask = causal_mask(4) & (torch.arange(4) != 2)  # (4, 4)
    bias = to_additive(mask, dtype=torch.float64)
    assert bias.dtype == torch.float64
    assert torch.equal(bias == 0, mask) and torch.all(torch.isneginf(bias[~mask]))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, bias), scaled_dot_product_attention(q, k, v, mask)
    )


# ------------------------------------------------------------------------------------------
# nn.MultiheadAttention polarity, checked against torch's module
# ------------------------------------------------------------------------------------------


def _mha_by_hand(mha: torch.nn.MultiheadAttention, x: torch.Tensor, mask):
    """Run MHA's own projections through the book's attention (batch_first layout)."""
    b, seq, d = x.shape
    h = mha.num_heads
    q, k, v = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, -1)
    q, k, v = (t.reshape(b, seq, h, d // h).transpose(1, 2) for t in (q, k, v))  # (B, H, L, E)
    out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    out = mha.out_proj(out.transpose(1, 2).reshape(b, seq, d))  # (B, L, D)
    return out, w


@pytest.mark.parametrize("dtype", [torch.bool, torch.float64])
def test_conversions_reproduce_nn_multihead_attention(dtype):
    torch.manual_seed(0)
    b, seq, d, h = 2, 5, 8, 2
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(b, seq, d, dtype=torch.float64)
    # torch polarity: True = ignore. Pad the last two keys of sequence 0; forbid the future.
    ignore_key = torch.zeros(b, seq, dtype=torch.bool)
    ignore_key[0, 3:] = True
    ignore_pair = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    if dtype == torch.bool:
        kpm, am = ignore_key, ignore_pair
    else:
        kpm = torch.zeros(b, seq, dtype=dtype).masked_fill(ignore_key, -math.inf)
        am = torch.zeros(seq, seq, dtype=dtype).masked_fill(ignore_pair, -math.inf)
    ref_out, ref_w = mha(
        x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=False
    )
    kp, a = from_key_padding_mask(kpm), from_torch_attn_mask(am)
    assert kp.shape == (b, 1, 1, seq)
    mask = combine_masks(kp, a) if dtype == torch.bool else kp + a
    out, w = _mha_by_hand(mha, x, mask)
    torch.testing.assert_close(w, ref_w)
    torch.testing.assert_close(out, ref_out)


def test_bool_conversions_invert_polarity():
    kpm = torch.tensor([[False, True, False]])
    assert from_key_padding_mask(kpm)[0, 0, 0].tolist() == [True, False, True]
    am = torch.tensor([[False, True], [False, False]])
    assert torch.equal(from_torch_attn_mask(am), ~am)
    bias = torch.tensor([[0.0, -math.inf]])
    assert from_torch_attn_mask(bias) is bias  # additive in both conventions
