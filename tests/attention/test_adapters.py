"""attention.efficient.adapters against independent references: each adapter equals its kernel
called directly, its ``allowed`` mask is the rule written out element by element (``True`` = may
attend), and its output is the float64 dense formula under that mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.blocks import SequenceClassifier
from attention.efficient import (
    BigBirdAttnFn,
    LinearAttnFn,
    MaskedAttnFn,
    SlidingWindowAttnFn,
    bigbird_layout,
    block_sparse_attention,
    linear_attention,
    sliding_window_attention,
)
from attention.masks import padding_mask
from tests.reference import naive_attention_float64

FAST = settings(max_examples=25, deadline=None)
SMALL = dict(d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=24)  # a tiny classifier


def _qkv(seq_len: int, *, batch_size: int = 1, num_heads: int = 2, head_dim: int = 4, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, num_heads, seq_len, head_dim)
    return tuple(torch.randn(shape, generator=g) for _ in range(3))  # (B, H, L, E) each


# ------------------------------------------------------------------------------------------
# Each adapter is its kernel, called with the arguments it was built with
# ------------------------------------------------------------------------------------------


def test_sliding_window_adapter_is_the_kernel():
    q, k, v = _qkv(20, batch_size=2, seed=1)
    got = SlidingWindowAttnFn(3, 1, global_tokens=(0, -1))(q, k, v)
    want = sliding_window_attention(q, k, v, left=3, right=1, global_tokens=torch.tensor([0, 19]))
    assert torch.equal(got, want)
    assert torch.equal(
        SlidingWindowAttnFn(2, 2)(q, k, v), sliding_window_attention(q, k, v, left=2, right=2)
    )


def test_bigbird_adapter_is_the_kernel_on_a_seeded_layout():
    q, k, v = _qkv(30, seed=2)
    attn = BigBirdAttnFn(4, n_window=1, n_global=1, n_random=2, seed=7)
    layout = bigbird_layout(
        8, n_window=1, n_global=1, n_random=2, generator=torch.Generator().manual_seed(7)
    )  # ceil(30 / 4) = 8 blocks
    assert torch.equal(attn.layout(30), layout)
    assert torch.equal(attn(q, k, v), block_sparse_attention(q, k, v, layout, block_size=4))


def test_linear_adapter_is_the_non_causal_kernel():
    q, k, v = _qkv(17, batch_size=2, num_heads=3, head_dim=5, seed=4)
    got = LinearAttnFn(eps=1e-4)(q, k, v)
    assert torch.equal(got, linear_attention(q, k, v, causal=False, eps=1e-4))


# ------------------------------------------------------------------------------------------
# allowed(): True = may attend, and the output is dense attention under it
# ------------------------------------------------------------------------------------------


@FAST
@given(
    seq_len=st.integers(1, 48),
    left=st.integers(0, 10),
    right=st.integers(0, 10),
    globals_=st.lists(st.integers(-48, 47), max_size=3),
    seed=st.integers(0, 1000),
)
def test_window_attention_matches_dense_with_its_mask(seq_len, left, right, globals_, seed):
    globals_ = [g for g in globals_ if -seq_len <= g < seq_len]
    attn = SlidingWindowAttnFn(left, right, global_tokens=globals_)
    q, k, v = _qkv(seq_len, batch_size=2, seed=seed)
    allowed = attn.allowed(seq_len)  # (L, L)
    # Independent reference for the mask: the rule written out element by element.
    glob = {g % seq_len for g in globals_}
    for i in range(seq_len):
        for j in range(seq_len):
            want = (i - left <= j <= i + right) or i in glob or j in glob
            assert bool(allowed[i, j]) == want
    want = naive_attention_float64(q, k, v, allowed)
    torch.testing.assert_close(attn(q, k, v).double(), want, atol=1e-5, rtol=1e-4)


@FAST
@given(
    seq_len=st.integers(1, 70),
    block=st.sampled_from([1, 4, 8]),
    n_random=st.integers(0, 2),
    seed=st.integers(0, 1000),
)
def test_bigbird_attention_matches_dense_with_its_mask(seq_len, block, n_random, seed):
    attn = BigBirdAttnFn(block, n_window=1, n_global=1, n_random=n_random, seed=seed)
    q, k, v = _qkv(seq_len, seed=seed)
    allowed = attn.allowed(seq_len)  # (L, L)
    layout = attn.layout(seq_len)
    for i in range(seq_len):  # the mask is the layout, expanded block by block
        for j in range(seq_len):
            assert bool(allowed[i, j]) == bool(layout[i // block, j // block])
    want = naive_attention_float64(q, k, v, allowed)
    torch.testing.assert_close(attn(q, k, v).double(), want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "attn", [SlidingWindowAttnFn(2, 1), BigBirdAttnFn(4, n_random=1, seed=3)], ids=repr
)
def test_a_key_outside_allowed_does_not_reach_the_query_and_one_inside_does(attn):
    q, k, v = _qkv(16, seed=5)
    allowed = attn.allowed(16)  # (L, L)
    out = attn(q, k, v)
    for j in range(16):
        v2 = v.clone()
        v2[..., j, :] += 10.0  # change key j's value only
        moved = (attn(q, k, v2) - out).abs().amax(dim=(0, 1, 3)) > 1e-4  # (L,) per query
        assert torch.equal(moved, allowed[:, j]), j


def test_linear_attention_matches_the_float64_formula():
    attn = LinearAttnFn()
    q, k, v = _qkv(17, batch_size=2, num_heads=3, head_dim=5, seed=4)
    phi_q, phi_k = (F.elu(t.double()) + 1 for t in (q, k))  # (B, H, L, E)
    kernel = phi_q @ phi_k.transpose(-2, -1)  # (B, H, L, L)
    want = (kernel / kernel.sum(-1, keepdim=True)) @ v.double()
    torch.testing.assert_close(attn(q, k, v).double(), want, atol=1e-5, rtol=1e-4)
    assert bool(attn.allowed(6).all())


@pytest.mark.parametrize("variant", [SlidingWindowAttnFn(3, 1, global_tokens=(4,)),
                                     BigBirdAttnFn(4, n_random=1)])  # fmt: skip
def test_masked_attn_fn_equals_the_variants_own_kernel(variant):
    q, k, v = (
        torch.randn(1, 2, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)
    )
    torch.testing.assert_close(MaskedAttnFn(variant)(q, k, v), variant(q, k, v), atol=1e-5,
                               rtol=1e-5)  # fmt: skip
    want = naive_attention_float64(q, k, v, variant.allowed(16))
    torch.testing.assert_close(MaskedAttnFn(variant)(q, k, v).double(), want, atol=1e-5, rtol=1e-4)
    assert torch.equal(MaskedAttnFn(variant).allowed(16), variant.allowed(16))
    with pytest.raises(TypeError, match="allowed"):
        MaskedAttnFn(lambda q, k, v: q)


# ------------------------------------------------------------------------------------------
# Masks, bad arguments, training
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attn", [SlidingWindowAttnFn(2, 2), BigBirdAttnFn(4), LinearAttnFn()], ids=repr
)
def test_wrappers_accept_an_all_true_padding_mask_and_refuse_others(attn):
    q, k, v = _qkv(8, batch_size=2, num_heads=1)
    full = padding_mask(torch.tensor([8, 8]), 8)  # (B, 1, 1, L), all True
    torch.testing.assert_close(attn(q, k, v, mask=full), attn(q, k, v))
    with pytest.raises(ValueError, match="hides 2 entries"):
        attn(q, k, v, mask=padding_mask(torch.tensor([8, 6]), 8))
    with pytest.raises(TypeError, match="additive"):
        attn(q, k, v, mask=torch.zeros(8, 8))
    with pytest.raises(ValueError, match="causal"):
        attn(q, k, v, causal=True)


def test_wrappers_reject_bad_arguments():
    with pytest.raises(ValueError, match="left"):
        SlidingWindowAttnFn(-1, 2)
    with pytest.raises(TypeError, match="global_tokens"):
        SlidingWindowAttnFn(1, 1, global_tokens=(0.5,))
    with pytest.raises(ValueError, match="outside"):
        SlidingWindowAttnFn(1, 1, global_tokens=(9,)).allowed(4)
    with pytest.raises(ValueError, match="block_size"):
        BigBirdAttnFn(0)


def test_bigbird_layout_is_fixed_per_length():
    attn = BigBirdAttnFn(4, n_random=2, seed=5)
    assert torch.equal(attn.layout(40), BigBirdAttnFn(4, n_random=2, seed=5).layout(40))
    assert attn.layout(40) is attn.layout(37)  # same number of blocks: the same layout


def test_wrappers_train_inside_a_classifier():
    """Gradients reach every parameter through each kernel."""
    tokens = torch.randint(0, 36, (3, 24), generator=torch.Generator().manual_seed(2))
    for fn in (SlidingWindowAttnFn(3, 3, (-1,)), BigBirdAttnFn(4), LinearAttnFn()):
        torch.manual_seed(0)
        model = SequenceClassifier(36, 2, **SMALL, positional="none", attn_fn=fn)
        model(tokens).sum().backward()
        assert all(p.grad is not None for p in model.parameters())
