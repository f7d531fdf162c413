"""Regression tests for the wrong results of issue 13, and the isolation property behind them.

- ``flash_attention``'s lazy rescale was decided by ``max`` over every head at once: one NaN
  row made it False everywhere, and the clean heads overflowed in ``exp2``.
- ``SwinBlock`` kept its shift (and the region mask) along an axis that a single window
  covers; the original Swin and timm turn it off there.
- float64 paths: ``alibi_bias`` computed its slopes in float32, ``SinusoidalPositionalEncoding``
  added a float32 table to float64 inputs.

The property: a NaN or an inf in one batch element (or one head) never changes the output of
another, for every attention variant of the package.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.dispatch import attend, torch_sdpa
from attention.efficient import (
    block_sparse_attention,
    chunked_attention,
    flash_attention,
    linear_attention,
    probsparse_attention,
    sliding_window_attention,
)
from attention.functional import scaled_dot_product_attention
from attention.gpu.flex import flex_block_sparse, flex_sliding_window
from attention.heads import MultiHeadAttention
from attention.positional import (
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_encoding,
)
from attention.vision import SwinBlock, WindowAttention, shifted_window_mask, swin_window_shift

# --------------------------------------------------------------------------------------------
# 1. flash: one decision for every head
# --------------------------------------------------------------------------------------------


def _issue_inputs():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1, 64, 16) for _ in range(3))
    k[1, 0] = torch.linspace(0, 30, 64)[:, None]  # row maxima grow tile after tile
    q[1, 0] = 3.0
    return q, k, v


def test_flash_nan_in_one_batch_element_leaves_the_other_finite():
    q, k, v = _issue_inputs()
    clean = flash_attention(q, k, v, block_k=16)
    q[0, 0, 0, 0] = float("nan")
    out = flash_attention(q, k, v, block_k=16)
    assert torch.isfinite(out[1]).all()
    torch.testing.assert_close(out[1], clean[1], rtol=1e-6, atol=1e-6)
    ref = scaled_dot_product_attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(out[1].double(), ref[1], rtol=1e-5, atol=1e-5)


def test_flash_nan_in_one_head_leaves_the_other_finite():
    q, k, v = (t.transpose(0, 1).contiguous() for t in _issue_inputs())  # (1, 2, 64, 16)
    q[0, 0, 0, 0] = float("nan")
    out = flash_attention(q, k, v, block_k=16)
    assert torch.isfinite(out[0, 1]).all()


# --------------------------------------------------------------------------------------------
# 2. Swin: no shift along an axis one window covers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resolution, expected", [((4, 4), (0, 0)), ((8, 4), (2, 0)), ((4, 8), (0, 2)), ((8, 8), (2, 2))]
)
def test_swin_shift_is_off_along_an_axis_one_window_covers(resolution, expected):
    assert swin_window_shift(resolution, 4, 2) == expected
    block = SwinBlock(8, resolution, 2, 4, shift=2)
    assert block.shift_size == expected
    if expected == (0, 0):
        assert block.region_mask is None


def test_swin_block_on_a_single_window_attends_all_16_tokens():
    torch.manual_seed(0)
    shifted = SwinBlock(8, 4, 2, 4, shift=2).eval()
    torch.manual_seed(0)
    regular = SwinBlock(8, 4, 2, 4, shift=0).eval()
    x = torch.randn(2, 16, 8)
    torch.testing.assert_close(shifted(x), regular(x), rtol=0, atol=0)
    # Every token's output depends on every token (one window, no region bands).
    x = x.clone().requires_grad_(True)
    shifted.attend_windows(x)[0, 0].sum().backward()
    assert (x.grad[0].abs().sum(-1) > 0).all()


def test_swin_block_8x4_shifts_rows_only_and_matches_a_hand_built_mask():
    torch.manual_seed(0)
    block = SwinBlock(8, (8, 4), 2, 4, shift=2).eval()
    mask = shifted_window_mask(8, 4, 4, (2, 0))
    assert torch.equal(block.region_mask, mask)
    # Row bands only: the 2 windows are cut into (2 + 2) and (4) rows of 4 tokens.
    assert mask[0].all() and mask[1].sum() == 2 * (8 * 8)
    x = torch.randn(1, 32, 8)
    grid = x.view(1, 8, 4, 8)
    rolled = torch.roll(grid, shifts=(-2, 0), dims=(1, 2)).reshape(2, 16, 8)
    windows = block.attn(rolled, mask=mask).view(1, 8, 4, 8)
    expected = torch.roll(windows, shifts=(2, 0), dims=(1, 2)).reshape(1, 32, 8)
    torch.testing.assert_close(block.attend_windows(x), expected, rtol=0, atol=0)


def test_swin_int_shift_mask_is_unchanged_on_grids_larger_than_a_window():
    # The per-axis construction gives exactly the old mask when both axes are shifted.
    assert torch.equal(shifted_window_mask(8, 8, 4, 2), shifted_window_mask(8, 8, 4, (2, 2)))
    m = shifted_window_mask(8, 8, 4, 2)
    assert m.shape == (4, 16, 16) and m[0].all() and not m[3].all()


# --------------------------------------------------------------------------------------------
# 3. float64 paths
# --------------------------------------------------------------------------------------------


def test_alibi_float64_slopes_are_exact():
    h, n = 16, 1024
    bias = alibi_bias(h, n, dtype=torch.float64)
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float64)
    dist = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs().double()
    assert torch.equal(bias, -slopes[:, None, None] * dist)
    assert alibi_slopes(h, dtype=torch.float64).dtype == torch.float64
    # float32 stays what it was: float32 slopes times integer distances.
    b32 = alibi_bias(h, 64)
    assert b32.dtype == torch.float32
    assert torch.equal(b32, -alibi_slopes(h)[:, None, None] * dist[:64, :64].float())


def test_sinusoidal_module_float64_input_gets_float64_positions():
    pe = SinusoidalPositionalEncoding(16, max_len=4096)
    x = torch.zeros(1, 8, 16, dtype=torch.float64)
    exact = sinusoidal_encoding(4096, 16, dtype=torch.float64)
    assert torch.equal(pe(x, offset=4000)[0], exact[4000:4008])
    assert torch.equal(pe.double()(x, offset=4000)[0], exact[4000:4008])
    # float32 inputs keep the float32 buffer, bitwise as before.
    x32 = torch.zeros(1, 8, 16)
    assert torch.equal(pe.float()(x32)[0], sinusoidal_encoding(4096, 16)[:8])


def test_float64_attention_paths_are_exact_to_float64_rounding():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    ref = torch.softmax(scores, dim=-1) @ v
    for out in (
        scaled_dot_product_attention(q, k, v),
        flash_attention(q, k, v, block_q=8, block_k=8),
        chunked_attention(q, k, v, query_chunk=8, key_chunk=8),
        attend(q, k, v, backend="reference"),
        block_sparse_attention(q, k, v, torch.ones(5, 5, dtype=torch.bool), block_size=8),
        sliding_window_attention(q, k, v, left=36, right=36),
        probsparse_attention(q, k, v, factor=10),  # u >= L: every query selected, dense
    ):
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, ref, rtol=1e-13, atol=1e-13)


def test_float64_rope_angles_and_rotation_are_float64():
    from attention.positional import apply_rope, rope_angles

    pos = torch.arange(0, 70000, 997)
    angles = rope_angles(pos, head_dim=8, dtype=torch.float64)
    inv = torch.tensor([10000.0 ** (-i / 8) for i in (0, 2, 4, 6)], dtype=torch.float64)
    assert torch.equal(angles, pos.double()[:, None] * inv)
    x = torch.randn(1, 1, pos.numel(), 8, dtype=torch.float64)
    y = apply_rope(x, positions=pos)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-14, atol=1e-14)


# --------------------------------------------------------------------------------------------
# The isolation property: a non-finite value in one element never reaches another
# --------------------------------------------------------------------------------------------

L, E = 12, 4


def _layout(h):
    n = -(-L // 4)
    return torch.ones(n, n, dtype=torch.bool).tril()


VARIANTS = {
    "reference": lambda q, k, v: scaled_dot_product_attention(q, k, v),
    "reference causal": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=True),
    "torch_sdpa": lambda q, k, v: torch_sdpa(q, k, v),
    "attend auto": lambda q, k, v: attend(q, k, v),
    "attend flash": lambda q, k, v: attend(q, k, v, backend="flash", causal=True),
    "flash": lambda q, k, v: flash_attention(q, k, v, block_q=4, block_k=3),
    "flash causal": lambda q, k, v: flash_attention(q, k, v, causal=True, block_q=5, block_k=2),
    "chunked": lambda q, k, v: chunked_attention(q, k, v, query_chunk=4, key_chunk=3),
    "sliding window": lambda q, k, v: sliding_window_attention(q, k, v, left=2, right=1),
    "sliding window + global": lambda q, k, v: sliding_window_attention(
        q, k, v, left=2, right=0, global_tokens=torch.tensor([0, 5])
    ),
    "block sparse": lambda q, k, v: block_sparse_attention(
        q, k, v, _layout(q.shape[1]), block_size=4
    ),
    "linear": lambda q, k, v: linear_attention(q, k, v),
    "linear causal": lambda q, k, v: linear_attention(q, k, v, causal=True, chunk_size=5),
    "probsparse": lambda q, k, v: probsparse_attention(q, k, v, factor=1),
    "probsparse causal": lambda q, k, v: probsparse_attention(q, k, v, factor=1, causal=True),
    # attention.gpu.flex on the CPU: its dense SDPA path (the flex kernel needs CUDA)
    "flex sliding window": lambda q, k, v: flex_sliding_window(q, k, v, left=2, right=1),
    "flex block sparse": lambda q, k, v: flex_block_sparse(q, k, v, _layout(2), block_size=4),
}
# Exact equality everywhere except flash, whose lazy rescale is decided once per tile for
# every row (a row whose max moved a little is rescaled when another row's moved a lot):
# exact in exact arithmetic, so the other elements' outputs may move by rounding.
ROUNDING_ONLY = {"flash", "flash causal", "attend flash"}


@settings(max_examples=60, deadline=None)
@given(
    variant=st.sampled_from(sorted(VARIANTS)),
    where=st.sampled_from(["query", "key", "value"]),
    axis=st.sampled_from(["batch", "head"]),
    bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    pos=st.integers(0, L - 1),
    chan=st.integers(0, E - 1),
    seed=st.integers(0, 3),
)
def test_a_non_finite_value_in_one_element_never_changes_another(
    variant, where, axis, bad, pos, chan, seed
):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, L, E, generator=g) * 3 for _ in range(3))
    fn = VARIANTS[variant]
    clean = fn(q, k, v)
    poisoned = dict(query=q.clone(), key=k.clone(), value=v.clone())
    poisoned[where][0, 0, pos, chan] = bad  # batch 0, head 0
    out = fn(poisoned["query"], poisoned["key"], poisoned["value"])
    other = (slice(1, None), slice(None)) if axis == "batch" else (slice(None), slice(1, None))
    got, want = out[other], clean[other]
    assert torch.isfinite(want).all()
    if variant in ROUNDING_ONLY:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(got, want), f"{variant}: a non-finite {where} leaked into another {axis}"


@pytest.mark.parametrize("module", ["mha", "window"])
def test_modules_keep_batch_elements_apart(module):
    torch.manual_seed(0)
    if module == "mha":
        m, x = MultiHeadAttention(8, 2).eval(), torch.randn(2, 6, 8)
    else:
        m, x = WindowAttention(8, 2, window_size=2).eval(), torch.randn(2, 4, 8)
    clean = m(x)
    x[0, 0, 0] = float("nan")
    out = m(x)
    assert torch.equal(out[1], clean[1])


# --------------------------------------------------------------------------------------------
# Documented behaviour: ViT's LayerNorm eps, padded query rows
# --------------------------------------------------------------------------------------------


def test_vit_norm_eps_is_an_argument_and_the_default_is_unchanged():
    from attention.vision import VisionTransformer

    def build(**kw):
        torch.manual_seed(0)
        return VisionTransformer(8, 4, 3, 2, d_model=8, num_heads=2, num_layers=1, d_ff=16, **kw)

    norms = [m for m in build().modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(m.eps == 1e-5 for m in norms)
    norms = [m for m in build(norm_eps=1e-6).modules() if isinstance(m, torch.nn.LayerNorm)]
    assert all(m.eps == 1e-6 for m in norms)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(build()(x), build(norm_eps=1e-5)(x))


def test_padded_query_rows_keep_ordinary_outputs():
    from attention.masks import padding_mask

    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    keep = padding_mask(torch.tensor([5, 3]))  # (B, 1, 1, L): sequence 1 has 2 padded tokens
    out = mha(x, mask=keep)
    assert torch.isfinite(out).all() and out[1, 3:].abs().sum() > 0  # not zeroed
    # a padded query sees the real keys only, like any other query of its sequence
    ref = mha(x[1:, :], context=x[1:, :3])
    torch.testing.assert_close(out[1:], ref)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("where", ["query", "key", "value"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_keeps_other_batch_elements_and_heads_clean(variant, where, bad):
    """The property, on every variant deterministically (the hypothesis test varies where)."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, L, E, generator=g) * 3 for _ in range(3))
    fn = VARIANTS[variant]
    clean = fn(q, k, v)
    poisoned = dict(query=q.clone(), key=k.clone(), value=v.clone())
    poisoned[where][0, 0, L // 2, 1] = bad
    out = fn(poisoned["query"], poisoned["key"], poisoned["value"])
    for other in ((1, 0), (1, 1), (0, 1)):  # every (batch, head) but the poisoned one
        if variant in ROUNDING_ONLY:
            torch.testing.assert_close(out[other], clean[other], rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(out[other], clean[other]), (variant, where, other)
