"""attention.heads against independent references: torch's nn.MultiheadAttention and SDPA."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention.heads import MultiHeadAttention, SelfAttention, merge_heads, split_heads
from attention.masks import (
    causal_mask,
    from_key_padding_mask,
    from_torch_attn_mask,
    padding_mask,
)
from attention.positional import RotaryEmbedding, apply_rope
from tests.attention.inputs import close
from tests.reference import naive_attention_float64

FAST = settings(max_examples=30, deadline=None)


# --- split / merge ------------------------------------------------------------------------------


@FAST
@given(
    b=st.integers(1, 3),
    l=st.integers(1, 6),
    h=st.integers(1, 4),
    dh=st.integers(1, 5),
)
def test_split_merge_round_trip_and_contiguous_head_slices(b, l, h, dh):
    g = torch.Generator().manual_seed(b * 100 + l * 10 + h)
    x = torch.randn(b, l, h * dh, generator=g)  # (B, L, D)
    heads = split_heads(x, num_heads=h)  # (B, H, L, Dh)
    assert heads.shape == (b, h, l, dh)
    assert torch.equal(merge_heads(heads), x)
    for i in range(h):  # head i is the i-th contiguous slice of every token's features
        assert torch.equal(heads[:, i], x[..., i * dh : (i + 1) * dh])


def test_wrong_transpose_order_mixes_tokens_across_heads():
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))  # (B, L, D)
    wrong = x.view(2, 3, 5, 4)  # (B, H, L, Dh) without the transpose: the bug of ch. 8
    assert not torch.equal(wrong, split_heads(x, num_heads=3))
    # The wrong split followed by the *right* merge does not give x back.
    assert not torch.equal(merge_heads(wrong), x)


# --- SelfAttention ------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_equals_float64_formula(causal):
    torch.manual_seed(0)
    sa = SelfAttention(8, head_dim=6)
    x = torch.randn(2, 5, 8)  # (B, L, D)
    out, weights = sa(x, causal=causal, need_weights=True)
    q, k, v = (w(x).unsqueeze(1) for w in (sa.w_q, sa.w_k, sa.w_v))  # (B, 1, L, d_k)
    allowed = causal_mask(5) if causal else None
    ref = naive_attention_float64(q, k, v, allowed).squeeze(1)  # (B, L, d_k)
    assert out.shape == (2, 5, 6) and weights.shape == (2, 5, 5)
    close(out.double(), ref, torch.float32)
    scores = (q @ k.transpose(-2, -1)).squeeze(1) / math.sqrt(6)  # (B, L, L)
    if causal:
        scores = scores.masked_fill(~causal_mask(5), float("-inf"))
    close(weights, torch.softmax(scores, dim=-1))


# --- MultiHeadAttention vs nn.MultiheadAttention -------------------------------------------------


def _torch_mha(d_model, heads, dtype, bias=True, seed=0):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True, dtype=dtype)
    with torch.no_grad():  # non-zero biases so that a dropped bias would show
        if bias:
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
def test_mha_matches_torch(dtype, cross, padded, direction):
    b, lq, d, h = 3, 5, 16, 4
    lk = 7 if cross else lq
    if direction == "from_torch":
        ref = _torch_mha(d, h, dtype)
        mine = MultiHeadAttention.from_torch(ref).eval()
    else:
        torch.manual_seed(1)
        mine = MultiHeadAttention(d, h).to(dtype).eval()
        ref = mine.to_torch().eval()
    assert isinstance(ref, nn.MultiheadAttention) and ref.batch_first
    g = torch.Generator().manual_seed(2)
    x = torch.randn(b, lq, d, generator=g, dtype=dtype)  # (B, Lq, D)
    ctx = torch.randn(b, lk, d, generator=g, dtype=dtype) if cross else x  # (B, Lk, D)
    kpm = None
    if padded:
        kpm = ~padding_mask(torch.tensor([lk, 2, 1]), lk)[:, 0, 0]  # (B, Lk), True = ignore
    with torch.no_grad():
        want, want_avg = ref(x, ctx, ctx, key_padding_mask=kpm, need_weights=True)
        _, want_heads = ref(
            x, ctx, ctx, key_padding_mask=kpm, need_weights=True, average_attn_weights=False
        )
        mask = None if kpm is None else from_key_padding_mask(kpm)  # (B, 1, 1, Lk)
        context = ctx if cross else None
        out = mine(x, context, mask=mask)
        out_avg, w_avg = mine(x, context, mask=mask, need_weights=True, average_attn_weights=True)
        out_heads, w_heads = mine(x, context, mask=mask, need_weights=True)
    assert out.shape == (b, lq, d) and out.dtype == dtype
    assert w_avg.shape == (b, lq, lk) and w_heads.shape == (b, h, lq, lk)
    for o in (out, out_avg, out_heads):
        close(o, want, dtype)
    close(w_avg, want_avg, dtype)
    close(w_heads, want_heads, dtype)


def test_mha_matches_torch_with_causal_attn_mask_and_no_bias():
    ref = _torch_mha(8, 2, torch.float32, bias=False)
    mine = MultiHeadAttention.from_torch(ref)
    assert mine.q_proj.bias is None and mine.out_proj.bias is None
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(3))  # (B, L, D)
    torch_mask = ~causal_mask(6)  # (L, L), torch polarity: True = not allowed
    with torch.no_grad():
        want, _ = ref(x, x, x, attn_mask=torch_mask, need_weights=False)
        close(mine(x, causal=True), want)
        close(mine(x, mask=from_torch_attn_mask(torch_mask)), want)


def test_from_torch_then_to_torch_is_an_exact_copy():
    ref = _torch_mha(12, 3, torch.float32)
    back = MultiHeadAttention.from_torch(ref).to_torch()
    for name, p in ref.state_dict().items():
        assert torch.equal(p, back.state_dict()[name]), name


# --- GQA / MQA --------------------------------------------------------------------------------


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gqa_equals_manual_repeat_of_kv_heads(num_kv_heads):
    torch.manual_seed(0)
    d, h = 16, 4
    dh = d // h
    mha = MultiHeadAttention(d, h, num_kv_heads=num_kv_heads).eval()
    assert mha.k_proj.weight.shape == (num_kv_heads * dh, d)
    assert mha.v_proj.weight.shape == (num_kv_heads * dh, d)
    assert mha.q_proj.weight.shape == (d, d)
    x = torch.randn(2, 5, d)  # (B, L, D)
    group = h // num_kv_heads
    q = mha.q_proj(x).view(2, 5, h, dh).transpose(1, 2)  # (B, H, L, Dh)
    k = mha.k_proj(x).view(2, 5, num_kv_heads, dh).transpose(1, 2)  # (B, H_kv, L, Dh)
    v = mha.v_proj(x).view(2, 5, num_kv_heads, dh).transpose(1, 2)  # (B, H_kv, L, Dh)
    k = k.repeat_interleave(group, dim=1)  # (B, H, L, Dh): query head i reads kv head i//group
    v = v.repeat_interleave(group, dim=1)  # (B, H, L, Dh)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, Dh)
    want = mha.out_proj(o.transpose(1, 2).reshape(2, 5, d))  # (B, L, D)
    with torch.no_grad():
        close(mha(x, causal=True), want.detach())


def test_attn_fn_is_called_with_full_heads_and_gives_the_same_result():
    calls = []

    def torch_sdpa(q, k, v, mask=None, causal=False):
        calls.append((q.shape, k.shape))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    torch.manual_seed(0)
    ref = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    swapped = MultiHeadAttention(16, 4, num_kv_heads=2, attn_fn=torch_sdpa).eval()
    swapped.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, 16)  # (B, L, D)
    mask = padding_mask(torch.tensor([6, 3]))  # (B, 1, 1, L)
    with torch.no_grad():
        close(swapped(x, mask=mask), ref(x, mask=mask))
        close(swapped(x, causal=True), ref(x, causal=True))
    assert calls[0] == ((2, 4, 6, 4), (2, 4, 6, 4))


def test_rotary_is_applied_to_q_and_k_after_the_split():
    torch.manual_seed(0)
    rot = RotaryEmbedding(4)
    mha = MultiHeadAttention(8, 2, rotary=rot).eval()
    x = torch.randn(1, 6, 8)  # (B, L, D)
    q = apply_rope(mha.q_proj(x).view(1, 6, 2, 4).transpose(1, 2))  # (B, H, L, Dh)
    k = apply_rope(mha.k_proj(x).view(1, 6, 2, 4).transpose(1, 2))  # (B, H, L, Dh)
    v = mha.v_proj(x).view(1, 6, 2, 4).transpose(1, 2)  # (B, H, L, Dh)
    o = F.scaled_dot_product_attention(q, k, v)  # (B, H, L, Dh)
    want = mha.out_proj(o.transpose(1, 2).reshape(1, 6, 8))  # (B, L, D)
    with torch.no_grad():
        close(mha(x), want.detach())
    # RoPE makes the output depend on order: reversing the tokens no longer just reverses it.
    with torch.no_grad():
        flipped = mha(x.flip(1)).flip(1)
    assert not torch.allclose(flipped, mha(x).detach(), atol=1e-4)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)  # (B, L, D)
    mha.train()
    assert not torch.allclose(mha(x), mha(x))  # two dropout draws differ
    mha.eval()
    ref = MultiHeadAttention(8, 2)
    ref.load_state_dict(mha.state_dict())
    close(mha(x), ref(x))


# --- properties ---------------------------------------------------------------------------------


@FAST
@given(l=st.integers(2, 6), h=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_mha_is_permutation_equivariant_without_positions(l, h, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, h).eval()
    x = torch.randn(2, l, 8, generator=g)  # (B, L, D)
    keep = torch.rand(2, l, generator=g) < 0.7
    keep[:, 0] = True  # at least one real key per sequence
    perm = torch.randperm(l, generator=g)
    with torch.no_grad():
        out = mha(x, mask=keep[:, None, None, :])  # (B, L, D)
        out_perm = mha(x[:, perm], mask=keep[:, perm][:, None, None, :])  # (B, L, D)
    close(out_perm, out[:, perm])


@settings(max_examples=20, deadline=None)
@given(l=st.integers(2, 5), kv=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_mha_causal_output_has_no_gradient_from_future_inputs(l, kv, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2, num_kv_heads=kv).double()
    x = torch.randn(1, l, 8, dtype=torch.float64)  # (B, L, D)
    jac = torch.autograd.functional.jacobian(lambda t: mha(t, causal=True), x)
    jac = jac[0, :, :, 0].abs().sum(dim=(1, 3))  # (L_out, L_in): |d out_i / d x_j|
    future = torch.triu(torch.ones(l, l, dtype=torch.bool), diagonal=1)
    assert torch.all(jac[future] == 0)
    assert torch.all(jac[~future] > 0)  # the past does flow: the test can fail
