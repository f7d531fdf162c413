"""Tests of attention.vision: ViT patch tokens and Swin's (shifted) window attention.

References are independent of the code under test: explicit loops over pixels/patches,
torch's own ``F.scaled_dot_product_attention`` over the whole image with a mask built pixel by
pixel, and a count of the score elements actually computed.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

import attention.vision as vision
from attention.vision import (
    PatchEmbedding,
    PatchMerging,
    RelativePositionBias,
    SwinBlock,
    VisionTransformer,
    ViTEmbedding,
    WindowAttention,
    cyclic_shift,
    shifted_window_mask,
    window_attention_score_count,
    window_partition,
    window_reverse,
)

# --------------------------------------------------------------------------------------------
# ViT
# --------------------------------------------------------------------------------------------


def test_patch_embedding_equals_flatten_each_patch_then_linear():
    torch.manual_seed(0)
    p, c, d = 4, 3, 10
    embed = PatchEmbedding((8, 12), p, c, d).double()
    images = torch.randn(2, c, 8, 12, dtype=torch.float64)
    weight = embed.proj.weight.reshape(d, c * p * p)  # the conv kernel as a linear layer
    expected = torch.empty(2, 6, d, dtype=torch.float64)
    for b in range(2):
        n = 0
        for r in range(0, 8, p):  # row-major over the patch grid
            for col in range(0, 12, p):
                patch = images[b, :, r : r + p, col : col + p].reshape(-1)  # (C·p·p,)
                expected[b, n] = weight @ patch + embed.proj.bias
                n += 1
    got = embed(images)
    assert got.shape == (2, 6, d)
    assert embed.num_patches == 6 and embed.grid_size == (2, 3)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_patch_embedding_equals_unfold_plus_linear():
    torch.manual_seed(1)
    embed = PatchEmbedding(8, 2, 1, 5)
    images = torch.randn(3, 1, 8, 8)
    cols = F.unfold(images, kernel_size=2, stride=2).transpose(1, 2)  # (B, N, C·p·p)
    expected = F.linear(cols, embed.proj.weight.reshape(5, -1), embed.proj.bias)
    torch.testing.assert_close(embed(images), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: PatchEmbedding(10, 4, 3, 8),
            ValueError,
            r"image_size \(10, 10\).*patch_size \(4\)",
        ),
        (lambda: PatchEmbedding((8, 6), 4, 3, 8), ValueError, r"image_size \(8, 6\)"),
        (lambda: PatchEmbedding(8, 0, 3, 8), ValueError, r"patch_size must be >= 1"),
        (lambda: PatchEmbedding(8, 4, 3.0, 8), TypeError, r"in_channels must be an int"),
        (lambda: PatchEmbedding((8, 8, 8), 4, 3, 8), ValueError, r"image_size must be an int"),
    ],
)
def test_patch_embedding_bad_construction(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    ("images", "error", "match"),
    [
        (torch.randn(3, 8, 8), ValueError, r"images must have 4 dimensions"),
        (torch.randn(1, 1, 8, 8), ValueError, r"images must have 3 channels.*got 1"),
        (torch.randn(1, 3, 8, 12), ValueError, r"images must be 8x8.*got 8x12"),
        (torch.zeros(1, 3, 8, 8, dtype=torch.long), TypeError, r"images must be a floating"),
        ("not an image", TypeError, r"images must be a torch.Tensor"),
    ],
)
def test_patch_embedding_bad_images(images, error, match):
    embed = PatchEmbedding(8, 4, 3, 6)
    with pytest.raises(error, match=match):
        embed(images)


def test_vit_embedding_prepends_cls_and_adds_positions():
    torch.manual_seed(2)
    emb = ViTEmbedding(8, 4, 3, 6)
    images = torch.randn(2, 3, 8, 8)
    out = emb(images)
    assert out.shape == (2, 5, 6) and emb.num_tokens == 5
    expected_cls = (emb.cls_token[0, 0] + emb.pos_embedding[0, 0]).expand(2, 6)
    torch.testing.assert_close(out[:, 0], expected_cls)  # the same [CLS] for every image
    torch.testing.assert_close(out[:, 1:], emb.patches(images) + emb.pos_embedding[:, 1:])


def test_vision_transformer_classifies_from_cls_over_all_patches():
    torch.manual_seed(3)
    model = VisionTransformer(8, 4, 1, 3, d_model=16, num_heads=2, num_layers=2, d_ff=32).eval()
    images = torch.randn(2, 1, 8, 8, requires_grad=True)
    logits = model(images)
    assert logits.shape == (2, 3)
    # Full attention: the [CLS] logits of image 0 depend on every patch of image 0 and on
    # nothing of image 1.
    grad = torch.autograd.grad(logits[0].sum(), images)[0]  # (B, 1, 8, 8)
    per_patch = grad[0, 0].reshape(2, 4, 2, 4).abs().sum(dim=(1, 3))  # (2, 2) patch grid
    assert (per_patch > 0).all()
    assert grad[1].abs().max() == 0


# --------------------------------------------------------------------------------------------
# Swin: partition, shift, mask, relative bias
# --------------------------------------------------------------------------------------------

grids = st.tuples(
    st.integers(1, 2),  # batch
    st.integers(1, 3),  # windows down
    st.integers(1, 3),  # windows across
    st.integers(1, 4),  # window
    st.integers(1, 3),  # channels
)


@settings(max_examples=40, deadline=None)
@given(grids)
def test_window_partition_matches_loops_and_reverse_round_trips(shape):
    b, n_h, n_w, ws, c = shape
    h, w = n_h * ws, n_w * ws
    x = torch.randn(b, h, w, c)
    windows = window_partition(x, window_size=ws)
    assert windows.shape == (b * n_h * n_w, ws * ws, c)
    for bi in range(b):
        for wr in range(n_h):
            for wc in range(n_w):
                idx = (bi * n_h + wr) * n_w + wc  # image-major, then row-major windows
                block = x[bi, wr * ws : (wr + 1) * ws, wc * ws : (wc + 1) * ws]  # (ws, ws, C)
                assert torch.equal(windows[idx], block.reshape(ws * ws, c))
    assert torch.equal(window_reverse(windows, window_size=ws, height=h, width=w), x)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(-7, 7))
def test_cyclic_shift_moves_pixels_up_left_and_back(h, w, shift):
    x = torch.randn(1, h, w, 2)
    rolled = cyclic_shift(x, shift=shift)
    for r in range(h):
        for c in range(w):
            assert torch.equal(rolled[0, r, c], x[0, (r + shift) % h, (c + shift) % w])
    assert torch.equal(cyclic_shift(rolled, shift=-shift), x)


@pytest.mark.parametrize(("h", "w", "ws", "shift"), [(8, 8, 4, 2), (6, 9, 3, 1), (4, 8, 4, 3)])
def test_shifted_mask_blocks_exactly_the_wrapped_pairs(h, w, ws, shift):
    """Two tokens of a shifted window may attend iff they are true neighbours in the image:
    their offset in the original image equals their offset in the rolled grid (no wrap)."""
    mask = shifted_window_mask(h, w, ws, shift)
    n_w = w // ws
    assert mask.shape == ((h // ws) * n_w, ws * ws, ws * ws) and mask.dtype == torch.bool
    for n in range(mask.shape[0]):
        top, left = (n // n_w) * ws, (n % n_w) * ws
        for a in range(ws * ws):
            for b in range(ws * ws):
                ra, ca = top + a // ws, left + a % ws  # rolled-grid coordinates
                rb, cb = top + b // ws, left + b % ws
                oa = ((ra + shift) % h, (ca + shift) % w)  # where the pixel came from
                ob = ((rb + shift) % h, (cb + shift) % w)
                neighbours = oa[0] - ob[0] == ra - rb and oa[1] - ob[1] == ca - cb
                assert bool(mask[n, a, b]) == neighbours, (n, a, b)
    assert mask.diagonal(dim1=1, dim2=2).all()  # no fully masked row
    assert shifted_window_mask(h, w, ws, 0).all()


def test_shifted_mask_cuts_the_last_window_into_four_regions():
    mask = shifted_window_mask(8, 8, 4, 2)
    # Interior windows are whole; the bottom-right one mixes 4 regions of 4 tokens each.
    assert mask[0].all()
    assert int(mask[3].sum()) == 4 * 4 * 4
    assert int(mask[1].sum()) == int(mask[2].sum()) == 2 * 8 * 8


def test_relative_position_bias_matches_table_lookup_by_offset():
    torch.manual_seed(4)
    ws, heads = 3, 2
    rpb = RelativePositionBias(ws, heads)
    assert rpb.table.shape == ((2 * ws - 1) ** 2, heads)
    bias = rpb()
    assert bias.shape == (heads, ws * ws, ws * ws)
    for a in range(ws * ws):
        for b in range(ws * ws):
            dr = a // ws - b // ws  # query row - key row, in -(ws-1)..ws-1
            dc = a % ws - b % ws
            row = (dr + ws - 1) * (2 * ws - 1) + (dc + ws - 1)
            torch.testing.assert_close(bias[:, a, b], rpb.table[row], rtol=0, atol=0)
    # Translation invariance: equal offsets share one learned value.
    assert bias[0, 0, 1] == bias[0, ws, ws + 1]


# --------------------------------------------------------------------------------------------
# Swin: window attention equals masked global attention
# --------------------------------------------------------------------------------------------


def _dense_swin_reference(block: SwinBlock, x: torch.Tensor) -> torch.Tensor:
    """Global attention over all H·W tokens with torch's SDPA, float64, mask built per pixel.

    Token pairs may attend iff they fall in the same (shifted) window of the *unrolled* image:
    windows start at ``-shift`` (the leftover strips at the borders form their own windows),
    so ``floor((r - shift) / ws)`` must agree along both axes. The bias is the relative
    position bias of their offset. As in the original Swin, an axis that one window covers is
    not shifted.
    """
    (h, w), ws, s = block.resolution, block.window_size, block.shift
    sr, sc = (s if h > ws else 0), (s if w > ws else 0)
    heads, c = block.attn.num_heads, block.d_model
    table = block.attn.relative_bias.table.detach()
    n = h * w
    bias = torch.full((heads, n, n), float("-inf"), dtype=torch.float64)
    for p in range(n):
        rp, cp = divmod(p, w)
        for q in range(n):
            rq, cq = divmod(q, w)
            same = (rp - sr) // ws == (rq - sr) // ws and (cp - sc) // ws == (cq - sc) // ws
            if same:
                row = (rp - rq + ws - 1) * (2 * ws - 1) + (cp - cq + ws - 1)
                bias[:, p, q] = table[row]
    wq, wk, wv = block.attn.qkv.weight.detach().split(c)  # (C, C) each
    bq, bk, bv = block.attn.qkv.bias.detach().split(c)

    def heads_of(t):  # (B, L, C) -> (B, heads, L, C/heads)
        return t.view(t.shape[0], n, heads, c // heads).transpose(1, 2)

    q, k, v = (heads_of(F.linear(x, wt, bt)) for wt, bt in ((wq, bq), (wk, bk), (wv, bv)))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, heads, L, C/heads)
    out = out.transpose(1, 2).reshape(x.shape[0], n, c)
    return F.linear(out, block.attn.proj.weight.detach(), block.attn.proj.bias.detach())


@pytest.mark.parametrize(
    ("resolution", "ws", "shift", "heads"),
    [((8, 8), 4, 0, 2), ((8, 8), 4, 2, 2), ((6, 9), 3, 1, 1), ((4, 8), 4, 3, 3), ((4, 4), 2, 1, 2)],
)
def test_window_attention_equals_masked_global_attention(resolution, ws, shift, heads):
    torch.manual_seed(5)
    block = SwinBlock(6, resolution, heads, ws, shift=shift).double()
    x = torch.randn(2, resolution[0] * resolution[1], 6, dtype=torch.float64)
    torch.testing.assert_close(block.attend_windows(x), _dense_swin_reference(block, x))


def _grad_across_border(shift: int) -> torch.Tensor:
    torch.manual_seed(6)
    ws, h, w = 4, 8, 8
    block = SwinBlock(8, (h, w), 2, ws, shift=shift).double()
    x = torch.randn(1, h * w, 8, dtype=torch.float64, requires_grad=True)
    out = block(x)
    target = (ws - 1) * w + (ws - 1)  # bottom-right pixel of window 0
    neighbour = (ws - 1) * w + ws  # the pixel to its right, in window 1
    grad = torch.autograd.grad(out[0, target].sum(), x)[0]  # (1, H·W, C)
    return grad[0, neighbour]


def test_shifted_block_lets_information_cross_window_borders():
    assert _grad_across_border(0).abs().max() == 0  # regular windows: no path at all
    assert _grad_across_border(2).abs().max() > 1e-6  # shifted windows: a direct path


def test_window_attention_rejects_bad_inputs():
    attn = WindowAttention(8, 2, window_size=2)
    with pytest.raises(ValueError, match=r"windows must have shape \(B\*nW, 4, 8\)"):
        attn(torch.randn(3, 5, 8))
    with pytest.raises(TypeError, match=r"mask must be a bool tensor"):
        attn(torch.randn(4, 4, 8), mask=torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match=r"mask must have shape \(nW, 4, 4\)"):
        attn(torch.randn(4, 4, 8), mask=torch.ones(3, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"d_model \(6\) must be divisible by num_heads \(4\)"):
        WindowAttention(6, 4, window_size=2)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SwinBlock(8, (6, 8), 2, 4), r"input_resolution \(6, 8\).*window_size \(4\)"),
        (lambda: SwinBlock(8, 8, 2, 4, shift=4), r"shift must be in \[0, window_size=4\)"),
        (lambda: shifted_window_mask(8, 8, 4, 5), r"shift must be in \[0, window_size=4\)"),
        (
            lambda: window_partition(torch.randn(1, 6, 8, 2), window_size=4),
            r"grid \(6, 8\).*window_size \(4\)",
        ),
        (
            lambda: window_partition(torch.randn(6, 8, 2), window_size=2),
            r"x must have 4 dimensions",
        ),
        (
            lambda: window_reverse(torch.randn(3, 4, 2), window_size=2, height=4, width=4),
            r"windows must have shape",
        ),
        (lambda: PatchMerging((5, 4), 8), r"input_resolution \(5, 4\).*merge factor \(2\)"),
    ],
)
def test_swin_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_swin_block_rejects_tokens_of_the_wrong_grid():
    block = SwinBlock(8, (4, 4), 2, 2, shift=1)
    with pytest.raises(ValueError, match=r"x must have shape \(B, 16, 8\) \[batch, height\*width"):
        block(torch.randn(1, 12, 8))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions"):
        block(torch.randn(1, 4, 4, 8))


# --------------------------------------------------------------------------------------------
# PatchMerging
# --------------------------------------------------------------------------------------------


def test_patch_merging_equals_explicit_gather():
    torch.manual_seed(7)
    h, w, c = 4, 6, 3
    merge = PatchMerging((h, w), c).double()
    x = torch.randn(2, h * w, c, dtype=torch.float64)
    out = merge(x)
    assert out.shape == (2, (h // 2) * (w // 2), 2 * c)
    for b in range(2):
        for i in range(h // 2):
            for j in range(w // 2):
                pixels = [(2 * i, 2 * j), (2 * i + 1, 2 * j), (2 * i, 2 * j + 1)]
                pixels.append((2 * i + 1, 2 * j + 1))
                cat = torch.cat([x[b, r * w + col] for r, col in pixels])  # (4C,)
                ref = merge.reduction(merge.norm(cat))
                torch.testing.assert_close(out[b, i * (w // 2) + j], ref)


# --------------------------------------------------------------------------------------------
# Cost: linear in image area
# --------------------------------------------------------------------------------------------


def _count_scores(monkeypatch, block: SwinBlock, x: torch.Tensor) -> int:
    """Run the block and count the score entries its attention calls actually form."""
    counted = []
    real = vision.scaled_dot_product_attention

    def recording(q, k, v, *args, **kwargs):
        counted.append(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])  # B·H·Lq·Lk
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(vision, "scaled_dot_product_attention", recording)
    with torch.no_grad():
        block(x)
    return sum(counted)


@pytest.mark.parametrize("shift", [0, 2])
def test_attention_cost_grows_linearly_with_image_area(monkeypatch, shift):
    ws, heads, c = 4, 2, 8
    counts, flops = {}, {}
    for h, w in [(8, 8), (16, 16), (16, 32)]:
        block = SwinBlock(c, (h, w), heads, ws, shift=shift)
        x = torch.randn(1, h * w, c)
        counts[h * w] = _count_scores(monkeypatch, block, x)
        assert counts[h * w] == window_attention_score_count(1, h, w, heads, ws)
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            block(x)
        flops[h * w] = counter.get_total_flops()
    # Score elements and total FLOPs scale exactly with the area (global attention: squared).
    for area in (256, 512):
        assert counts[area] / counts[64] == area / 64
        assert math.isclose(flops[area] / flops[64], area / 64)
    assert counts[64] == 64 * heads * ws * ws  # vs 64 * heads * 64 for global attention
