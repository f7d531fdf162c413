"""attention.gpu.flex on the CPU.

* The mask_mod functions, evaluated densely by flex's ``create_mask``, equal the masks of
  ``attention.masks`` (hypothesis over shapes and windows / layouts).
* Every path that runs here ("sdpa", chosen automatically on the CPU, and "flex_eager", the
  mask_mod through flex_attention's reference implementation) equals the dense reference
  with the same mask. The compiled "flex" path runs on CUDA (bench/gpu_check.py).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.functional import scaled_dot_product_attention
from attention.gpu.flex import (
    block_sparse_mask_mod,
    choose_flex_path,
    flex_block_sparse,
    flex_sliding_window,
    sliding_window_mask_mod,
)
from attention.masks import block_layout_to_mask, sliding_window_mask
from tests.attention.inputs import random_qkv
from tests.reference import naive_attention_float64


def _dense(mask_mod, b, h, lq, lk):
    from torch.nn.attention.flex_attention import create_mask

    return create_mask(mask_mod, b, h, lq, lk, device="cpu")  # (B or 1, H or 1, Lq, Lk)


window = st.one_of(st.none(), st.integers(0, 12))


@settings(max_examples=40, deadline=None)
@given(lq=st.integers(1, 20), lk=st.integers(1, 20), left=window, right=window)
def test_sliding_window_mask_mod_equals_masks_module(lq, lk, left, right):
    got = _dense(sliding_window_mask_mod(left, right), None, None, lq, lk)[0, 0]
    assert torch.equal(got, sliding_window_mask(lq, lk, left=left, right=right))


@settings(max_examples=30, deadline=None)
@given(
    lq=st.integers(1, 20),
    lk=st.integers(1, 20),
    block=st.integers(1, 6),
    heads=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_block_sparse_mask_mod_equals_masks_module(lq, lk, block, heads, seed):
    g = torch.Generator().manual_seed(seed)
    layout = torch.rand(1, heads, -(-lq // block), -(-lk // block), generator=g) < 0.5
    got = _dense(block_sparse_mask_mod(layout, block), 1, heads, lq, lk)
    assert torch.equal(got, block_layout_to_mask(layout, block, lq, lk))


@settings(max_examples=30, deadline=None)
@given(
    lq=st.integers(1, 24),
    lk=st.integers(1, 24),
    left=window,
    right=window,
    seed=st.integers(0, 2**16),
)
def test_sliding_window_auto_path_on_cpu_matches_naive_float64(lq, lk, left, right, seed):
    q, k, v = random_qkv(1, 2, lq, lk, seed=seed)
    out, path = flex_sliding_window(q, k, v, left=left, right=right, return_path=True)
    assert path == "sdpa"
    want = naive_attention_float64(q, k, v, sliding_window_mask(lq, lk, left=left, right=right))
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    lq=st.integers(1, 24),
    lk=st.integers(1, 24),
    block=st.integers(1, 8),
    shape=st.sampled_from(["2d", "heads", "batch_heads"]),
    seed=st.integers(0, 2**16),
)
def test_block_sparse_auto_path_on_cpu_matches_naive_float64(lq, lk, block, shape, seed):
    b, h = 2, 3
    q, k, v = random_qkv(b, h, lq, lk, seed=seed)
    lead = {"2d": (), "heads": (h,), "batch_heads": (b, h)}[shape]
    g = torch.Generator().manual_seed(seed)
    layout = torch.rand(*lead, -(-lq // block), -(-lk // block), generator=g) < 0.5
    out, path = flex_block_sparse(q, k, v, layout, block_size=block, return_path=True)
    assert path == "sdpa"
    want = naive_attention_float64(q, k, v, block_layout_to_mask(layout, block, lq, lk))
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9)  # empty rows: zeros


def test_flex_eager_path_matches_reference():
    """The mask_mods through flex_attention itself (its unfused implementation)."""
    q, k, v = random_qkv(lq=37, lk=37, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        out, path = flex_sliding_window(
            q, k, v, left=5, right=0, scale=0.2, path="flex_eager", return_path=True
        )
        assert path == "flex_eager"
        want = scaled_dot_product_attention(
            q, k, v, sliding_window_mask(37, left=5, right=0), scale=0.2
        )
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)

        layout = torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(3)) < 0.5
        layout[0, 0, 2] = False  # a query block that sees nothing: zeros, not NaN
        out = flex_block_sparse(q, k, v, layout, block_size=8, path="flex_eager")
        want = scaled_dot_product_attention(q, k, v, block_layout_to_mask(layout, 8, 37, 37))
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        assert torch.all(out[0, :, 16:24] == 0)


def test_sdpa_path_gradients_match_reference():
    q, k, v = (t.requires_grad_() for t in random_qkv(1, 2, 20, 20))
    flex_sliding_window(q, k, v, left=3, right=1, path="sdpa").square().sum().backward()
    got = [t.grad for t in (q, k, v)]
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    mask = sliding_window_mask(20, left=3, right=1)
    scaled_dot_product_attention(q2, k2, v2, mask).square().sum().backward()
    for a, b in zip(got, (q2.grad, k2.grad, v2.grad), strict=True):
        torch.testing.assert_close(a, b)


def test_auto_path_is_flex_on_cuda_only():
    assert choose_flex_path("cpu") == "sdpa"
    assert choose_flex_path("cuda") == "flex"
    assert choose_flex_path("cpu", "flex_eager") == "flex_eager"


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda q, k, v: flex_sliding_window(q, k, v, left=-1, right=0), ValueError, "left"),
        (lambda q, k, v: flex_sliding_window(q, k, v, left=1.5, right=0), TypeError, "left"),
        (
            lambda q, k, v: flex_sliding_window(q, k, v, left=1, right=0, path="fast"),
            ValueError,
            "path must be one of",
        ),
        (
            lambda q, k, v: flex_block_sparse(
                q, k, v, torch.ones(4, 4, dtype=torch.bool), block_size=8
            ),
            ValueError,
            "does not fit",
        ),
        (
            lambda q, k, v: flex_block_sparse(q, k, v, torch.ones(5, 5), block_size=8),
            TypeError,
            "layout must be a bool tensor",
        ),
        (
            lambda q, k, v: flex_block_sparse(
                q, k, v, torch.ones(3, 1, 5, 5, dtype=torch.bool), block_size=8
            ),
            ValueError,
            "does not fit",
        ),
        (
            lambda q, k, v: flex_block_sparse(
                q, k, v, torch.ones(5, 5, dtype=torch.bool), block_size=0
            ),
            ValueError,
            "block_size",
        ),
    ],
)
def test_bad_arguments_are_refused(call, error, words):
    with pytest.raises(error, match=words):
        call(*random_qkv(lq=37, lk=37, dtype=torch.float32))
