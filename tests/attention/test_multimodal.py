"""Tests of attention.multimodal: cross-attention from text to image patches, CLIP's loss.

References: the loss written as explicit Python loops in float64 (``math.exp``/``math.log``),
the cross-attention block recomputed by hand from its weights, and truncating the padded
patches away for the key padding mask.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.masks import padding_mask_from_keep
from attention.multimodal import (
    CLIP_INIT_LOGIT_SCALE,
    CLIPHead,
    CrossAttentionBlock,
    ProjectionHead,
    clip_contrastive_loss,
    clip_logits,
)

# --------------------------------------------------------------------------------------------
# CLIP loss
# --------------------------------------------------------------------------------------------


def _loop_clip_loss(image_emb: torch.Tensor, text_emb: torch.Tensor, scale: float) -> float:
    """The symmetric InfoNCE loss, one Python float at a time."""
    img = image_emb.double().tolist()
    txt = text_emb.double().tolist()
    n = len(img)

    def unit(v):
        norm = math.sqrt(sum(a * a for a in v))
        return [a / norm for a in v]

    img, txt = [unit(v) for v in img], [unit(v) for v in txt]
    s = [
        [scale * sum(a * b for a, b in zip(img[i], txt[j], strict=True)) for j in range(n)]
        for i in range(n)
    ]
    image_to_text = 0.0
    text_to_image = 0.0
    for i in range(n):
        image_to_text += -s[i][i] + math.log(sum(math.exp(s[i][j]) for j in range(n)))
        text_to_image += -s[i][i] + math.log(sum(math.exp(s[j][i]) for j in range(n)))
    return (image_to_text / n + text_to_image / n) / 2


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.floats(0.5, 100.0),
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**16),
)
def test_clip_loss_equals_double_loop(batch, dim, scale, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(batch, dim, generator=gen, dtype=dtype) + 0.1  # avoid a zero vector
    text = torch.randn(batch, dim, generator=gen, dtype=dtype) + 0.1
    got = clip_contrastive_loss(image, text, scale)
    assert got.shape == () and got.dtype == dtype
    tol = 1e-10 if dtype == torch.float64 else 2e-4 * max(1.0, scale / 10)
    assert math.isclose(float(got), _loop_clip_loss(image, text, scale), rel_tol=tol, abs_tol=tol)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.floats(0.5, 50.0), st.integers(0, 2**16))
def test_clip_loss_is_symmetric_in_the_modalities(batch, dim, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    text = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(
        clip_contrastive_loss(image, text, scale), clip_contrastive_loss(text, image, scale)
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 5), st.integers(2, 6), st.floats(1.0, 100.0), st.integers(0, 2**16))
def test_clip_loss_is_minimal_when_pairs_are_aligned(batch, dim, scale, seed):
    """With text_i ∝ image_i, any re-pairing of the batch can only raise the loss."""
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    text = image * torch.rand(batch, 1, generator=gen, dtype=torch.float64).add(0.5)
    aligned = clip_contrastive_loss(image, text, scale)
    for perm in itertools.permutations(range(batch)):
        shuffled = clip_contrastive_loss(image, text[list(perm)], scale)
        assert aligned <= shuffled + 1e-12


def test_clip_loss_of_orthonormal_aligned_pairs_vanishes_at_high_scale():
    eye = torch.eye(4, dtype=torch.float64)
    assert clip_contrastive_loss(eye, 3 * eye, 100.0) < 1e-40
    # Uninformative embeddings (all equal): every pairing is as likely, loss = log(B).
    same = torch.ones(4, 3, dtype=torch.float64)
    assert math.isclose(float(clip_contrastive_loss(same, same, 10.0)), math.log(4))


def test_clip_loss_gradients_reach_embeddings_and_logit_scale():
    gen = torch.Generator().manual_seed(0)
    image = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    text = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    scale = torch.tensor(14.3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(clip_contrastive_loss, (image, text, scale))
    clip_contrastive_loss(image, text, scale).backward()
    assert scale.grad is not None and scale.grad.abs() > 0


def test_clip_logits_compare_every_image_with_every_text():
    gen = torch.Generator().manual_seed(1)
    image = torch.randn(3, 4, generator=gen)
    text = torch.randn(5, 4, generator=gen)
    logits = clip_logits(image, text, 2.0)
    assert logits.shape == (3, 5)
    for i in range(3):
        for j in range(5):
            cos = F.cosine_similarity(image[i], text[j], dim=0)
            torch.testing.assert_close(logits[i, j], 2.0 * cos)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.randn(3, 4), torch.randn(2, 4), 1.0), ValueError, r"same batch size.*\(3, 4\)"),
        ((torch.randn(3, 4), torch.randn(3, 5), 1.0), ValueError, r"same embed_dim"),
        ((torch.randn(3, 4, 1), torch.randn(3, 4), 1.0), ValueError, r"image_emb must have 2"),
        ((torch.randn(3, 4), torch.ones(3, 4, dtype=torch.long), 1.0), TypeError, r"text_emb"),
        ((torch.randn(3, 4), torch.randn(3, 4), 0.0), ValueError, r"logit_scale must be > 0"),
        ((torch.randn(3, 4), torch.randn(3, 4), True), TypeError, r"logit_scale must be a"),
        ((torch.randn(3, 4), torch.randn(3, 4), torch.ones(2)), ValueError, r"logit_scale.*\(2,\)"),
        (
            (torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64), 1.0),
            TypeError,
            r"share a dtype",
        ),
    ],
)
def test_clip_loss_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        clip_contrastive_loss(*args)


# --------------------------------------------------------------------------------------------
# CLIPHead and ProjectionHead
# --------------------------------------------------------------------------------------------


def test_clip_head_temperature_init_and_clamp():
    torch.manual_seed(2)
    head = CLIPHead(6, 5, 4)
    assert math.isclose(head.logit_scale().item(), 1 / 0.07, rel_tol=1e-6)
    assert math.isclose(head.log_logit_scale.item(), CLIP_INIT_LOGIT_SCALE, rel_tol=1e-7)
    image, text = torch.randn(3, 6), torch.randn(3, 5)
    head(image, text).backward()
    assert head.log_logit_scale.grad.abs() > 0  # the temperature is learned
    with torch.no_grad():
        head.log_logit_scale.fill_(10.0)  # exp(10) ≈ 22026: clamped to 100
    head.zero_grad()
    assert math.isclose(head.logit_scale().item(), 100.0, rel_tol=1e-6)
    head(image, text).backward()
    assert head.log_logit_scale.grad == 0  # no push beyond the bound


def test_clip_head_equals_loss_of_its_projections():
    torch.manual_seed(3)
    head = CLIPHead(6, 5, 4, hidden_dim=8).double()
    image = torch.randn(3, 6, dtype=torch.float64)
    text = torch.randn(3, 5, dtype=torch.float64)
    img_emb = head.image_projection(image)
    txt_emb = head.text_projection(text)
    scale = head.logit_scale().item()
    assert math.isclose(scale, math.exp(CLIP_INIT_LOGIT_SCALE), rel_tol=1e-6)
    assert math.isclose(head(image, text).item(), _loop_clip_loss(img_emb, txt_emb, scale))
    sims = head.similarity(image, text[:2])  # zero-shot: 3 images vs 2 class prompts
    assert sims.shape == (3, 2)
    expected = scale * head.encode_image(image) @ head.encode_text(text[:2]).T
    torch.testing.assert_close(sims, expected)
    torch.testing.assert_close(head.encode_image(image).norm(dim=-1), torch.ones(3).double())


def test_projection_head_is_linear_without_bias_by_default():
    proj = ProjectionHead(4, 3)
    x = torch.randn(2, 4)
    torch.testing.assert_close(proj(x), x @ proj.net.weight.T)
    with pytest.raises(ValueError, match=r"features must have last dim in_dim=4"):
        proj(torch.randn(2, 5))


# --------------------------------------------------------------------------------------------
# Cross-attention
# --------------------------------------------------------------------------------------------


def _manual_cross_block(block: CrossAttentionBlock, x, context, keep=None):
    """The block recomputed from its weights: explicit heads, float64 softmax, no package code."""
    d, h = block.d_model, block.attn.num_heads
    dh = d // h
    q_in = F.layer_norm(x, (d,), block.norm1.weight, block.norm1.bias)
    memory = F.layer_norm(
        context, (block.context_dim,), block.norm_context.weight, block.norm_context.bias
    )
    if block.context_dim != d:
        memory = F.linear(memory, block.context_proj.weight, block.context_proj.bias)
    attn = block.attn
    q = F.linear(q_in, attn.q_proj.weight, attn.q_proj.bias)  # (B, Lq, D)
    k = F.linear(memory, attn.k_proj.weight, attn.k_proj.bias)  # (B, Lk, D)
    v = F.linear(memory, attn.v_proj.weight, attn.v_proj.bias)
    heads_out = []
    for head in range(h):
        cols = slice(head * dh, (head + 1) * dh)  # head h owns a contiguous slice of D
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(dh)  # (B, Lq, Lk)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        heads_out.append(torch.softmax(scores, dim=-1) @ v[..., cols])  # (B, Lq, dh)
    mixed = F.linear(torch.cat(heads_out, dim=-1), attn.out_proj.weight, attn.out_proj.bias)
    y = x + mixed
    ff = block.ff
    hidden = F.gelu(
        F.linear(
            F.layer_norm(y, (d,), block.norm2.weight, block.norm2.bias),
            ff.linear1.weight,
            ff.linear1.bias,
        )
    )
    return y + F.linear(hidden, ff.linear2.weight, ff.linear2.bias)


@pytest.mark.parametrize("context_dim", [None, 10])
def test_cross_attention_block_equals_manual_computation(context_dim):
    torch.manual_seed(4)
    block = CrossAttentionBlock(8, 2, 16, context_dim=context_dim).double().eval()
    text = torch.randn(2, 3, 8, dtype=torch.float64)  # queries: 3 text tokens
    image = torch.randn(2, 5, context_dim or 8, dtype=torch.float64)  # keys/values: 5 patches
    out, weights = block(text, image, need_weights=True)
    assert out.shape == (2, 3, 8) and weights.shape == (2, 2, 3, 5)
    torch.testing.assert_close(out, _manual_cross_block(block, text, image))


def test_cross_attention_respects_key_padding_over_image_patches():
    torch.manual_seed(5)
    block = CrossAttentionBlock(8, 2).double().eval()
    text = torch.randn(2, 3, 8, dtype=torch.float64)
    image = torch.randn(2, 6, 8, dtype=torch.float64)
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # image 1 has 4 real patches
    mask = padding_mask_from_keep(keep)  # (B, 1, 1, Lk)
    out, weights = block(text, image, mask=mask, need_weights=True)
    torch.testing.assert_close(out, _manual_cross_block(block, text, image, keep))
    assert weights[1, :, :, 4:].abs().max() == 0  # no weight on a padded patch
    # Same as if image 1 simply had 4 patches, whatever the padding holds.
    alone = block(text[1:], image[1:, :4])
    torch.testing.assert_close(out[1:], alone)
    garbage = image.clone()
    garbage[1, 4:] = 1e3
    torch.testing.assert_close(block(text, garbage, mask=mask), out)


def test_cross_attention_output_is_per_query_and_reads_the_context():
    torch.manual_seed(6)
    block = CrossAttentionBlock(8, 2).double()
    text = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    image = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)
    out = block(text, image)
    g_text, g_image = torch.autograd.grad(out[0, 0].sum(), (text, image))
    assert g_image[0].abs().sum(dim=-1).min() > 0  # every patch informs text token 0
    assert g_text[0, 1:].abs().max() == 0  # text tokens do not see each other here


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.randn(2, 3, 8), torch.randn(2, 5, 6)), ValueError, r"context_dim=8.*\(2, 5, 6\)"),
        ((torch.randn(2, 3, 8), torch.randn(5, 8)), ValueError, r"context must have 3 dim"),
        ((torch.randn(2, 3, 8), torch.randn(3, 5, 8)), ValueError, r"context must have the batch"),
        ((torch.randn(2, 3, 7), torch.randn(2, 5, 8)), ValueError, r"x must have last dim"),
        (
            (torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.ones(2, 1, 1, 4, dtype=torch.bool)),
            ValueError,
            r"mask of shape \(2, 1, 1, 4\) does not broadcast to \(2, 2, 3, 5\)",
        ),
    ],
)
def test_cross_attention_bad_inputs(args, error, match):
    block = CrossAttentionBlock(8, 2)
    x, context, *mask = args
    with pytest.raises(error, match=match):
        block(x, context, mask=mask[0] if mask else None)
