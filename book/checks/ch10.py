"""Checks of chapter 10's exercises (building and costing the capstone encoder).

Every answer is compared with an independent computation: patches against the package's
:class:`attention.vision.PatchEmbedding` (a convolution with one-hot kernels picks each pixel
of a patch), FLOPs against torch's FLOP counter on :class:`attention.blocks.EncoderLayer`
(through :func:`book.pages.ch10.encoder_flops_formula`, which the chapter checks against
the counter), pooling against the package's ``SequenceClassifier`` rule, and the neighbourhood
mask against coordinates computed with ``torch.meshgrid``. When an answer is wrong, the check
recomputes the usual mistakes and names the one that matches. Exercise 10.5 is an experiment
exercise: the learner predicts §10 relative's verdict with RoPE base 16, runs it, and the check
compares the prediction with the run (after checking that the run used that base).
"""

from __future__ import annotations

import torch

from attention.vision import PatchEmbedding
from book.pages.ch10 import encoder_flops_formula

from . import CheckFailed, expect_close, expect_equal, expect_shape, randn, register
from .helpers import check_formula, check_prediction, expect_tensor, matches

# --- 10.1 patches in reading order -------------------------------------------------------------


def _reference_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, H, W) -> (B, N, p·p)`` through ``PatchEmbedding`` with one-hot kernels: output
    channel ``i·p + j`` copies pixel ``(i, j)`` of each patch."""
    b, h, w = images.shape
    embed = PatchEmbedding((h, w), patch, 1, patch * patch)
    with torch.no_grad():
        embed.proj.weight.zero_()
        embed.proj.bias.zero_()
        for i in range(patch):
            for j in range(patch):
                embed.proj.weight[i * patch + j, 0, i, j] = 1.0
        return embed(images.unsqueeze(1))  # (B, N, p·p)


def _patch_variant(images, patch, *, grid_by_columns=False, pixels_by_columns=False):
    b, h, w = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch)  # (B, gh, p, gw, p)
    x = x.permute(0, 3, 1, 4, 2) if grid_by_columns else x.permute(0, 1, 3, 2, 4)
    if pixels_by_columns:
        x = x.transpose(-1, -2)
    return x.reshape(b, -1, patch * patch)


@register("10.1", title="Cut images into patch tokens")
def _patchify(candidate):
    for b, h, w, patch, seed in ((2, 8, 8, 2, 0), (1, 6, 9, 3, 1), (3, 4, 8, 2, 2)):
        images = randn(b, h, w, seed=seed)
        call = f"patchify(images {tuple(images.shape)}, patch={patch})"
        got = expect_tensor(call, candidate(images, patch), floating=True)
        n = (h // patch) * (w // patch)
        expect_shape(call, got, (b, n, patch * patch),
                     "(B, number of patches, pixels per patch)")  # fmt: skip
        expected = _reference_patches(images, patch)
        if matches(got, expected):
            continue
        if matches(got, images.reshape(b, n, patch * patch)):
            raise CheckFailed(
                f"{call}: a plain reshape takes {patch * patch} consecutive pixels of one row, "
                f"not a {patch} × {patch} square; split rows and columns into (grid, patch) "
                f"first, then bring the two patch axes together"
            )
        if matches(got, _patch_variant(images, patch, grid_by_columns=True)):
            raise CheckFailed(
                f"{call}: the patches are read column by column; read them left to right, "
                f"then top to bottom (row by row), as PatchEmbedding does"
            )
        if matches(got, _patch_variant(images, patch, pixels_by_columns=True)):
            raise CheckFailed(
                f"{call}: inside a patch the pixels are read column by column; read them row "
                f"by row (pixel (i, j) goes to position i·{patch} + j)"
            )
        expect_close(call, got, expected, hint="patch (r, c) holds pixels rows r·p.., cols c·p..")


# --- 10.2 the FLOPs of an encoder layer --------------------------------------------------------


def _expected(n, d, d_ff):
    f = encoder_flops_formula(int(n), d_model=int(d), d_ff=int(d_ff), num_layers=1)
    return f.total, f.quadratic


@register("10.2", title="FLOPs of one encoder layer, and its n² part")
def _layer_flops(candidate):
    cases = [
        {"n": 16, "d_model": 32, "d_ff": 64},
        {"n": 512, "d_model": 768, "d_ff": 3072},
        {"n": 7, "d_model": 5, "d_ff": 3},
        {"n": 4096, "d_model": 64, "d_ff": 256},
    ]
    for case in cases:
        call = f"layer_flops({', '.join(f'{k}={v}' for k, v in case.items())})"
        got = candidate(*case.values())
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"{call} should return a pair (total, quadratic), got {got!r}")
    check_formula(
        lambda n, d, f: candidate(n, d, f)[1],
        "layer_flops(...)[1] (the n² part)",
        cases,
        lambda n, d, f: _expected(n, d, f)[1],
        [
            (
                lambda n, d, f: 2 * n * n * d,
                "half the answer: either one of the two n × n "
                "products is missing (the scores Q Kᵀ and the weighted sum weights · V) or a "
                "multiply-add was counted as one FLOP instead of two",
            ),
            (
                lambda n, d, f: n * n * d,
                "a quarter of the answer: two n × n products (Q Kᵀ "
                "and weights · V), each n·n·d multiply-adds of two FLOPs",
            ),
        ],  # fmt: skip
        "Q Kᵀ and weights · V: each n·n·d multiply-adds, two FLOPs per multiply-add",
    )
    check_formula(
        lambda n, d, f: candidate(n, d, f)[0],
        "layer_flops(...)[0] (the total)",
        cases,
        lambda n, d, f: _expected(n, d, f)[0],
        [
            (
                lambda n, d, f: _expected(n, d, f)[0] / 2,
                "two FLOPs per multiply-add (a multiply and an add), not one",
            ),
            (
                lambda n, d, f: 6 * n * d * d + 4 * n * d * f + 4 * n * n * d,
                "four projections of d × d: Q, K, V and the output projection W_O",
            ),
            (
                lambda n, d, f: 8 * n * d * d + 4 * n * n * d,
                "add the feed-forward: two products n × d × d_ff (up and down), 4·n·d·d_ff FLOPs",
            ),
            (
                lambda n, d, f: 8 * n * d * d + 4 * n * d * f,
                "the total includes the two n × n products, 4·n²·d",
            ),
            (
                lambda n, d, f: 8 * n * d * d + 2 * n * d * f + 4 * n * n * d,
                "the feed-forward has two products (d → d_ff and d_ff → d)",
            ),
        ],  # fmt: skip
        "8·n·d² (projections) + 4·n·d·d_ff (feed-forward) + 4·n²·d (the n × n products)",
    )


# --- 10.3 mean pooling over real tokens ---------------------------------------------------------


def _reference_pool(x, keep):
    weights = keep.to(x.dtype).unsqueeze(-1)  # (B, L, 1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)


@register("10.3", title="Mean over the real tokens of a padded batch")
def _pool(candidate):
    x = randn(3, 5, 4, seed=3)  # (B, L, D)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    call = "masked_mean(x (3, 5, 4), keep (3, 5))"
    got = expect_tensor(call, candidate(x, keep), floating=True)
    expect_shape(call, got, (3, 4), "(B, D): one vector per sequence")
    expected = _reference_pool(x, keep)
    if matches(got, expected):
        pass
    elif matches(got, x.mean(dim=1)):
        raise CheckFailed(f"{call} averages the padding too: only positions with keep = True count")
    elif matches(got, (x * keep.unsqueeze(-1)).sum(dim=1) / x.shape[1]):
        raise CheckFailed(
            f"{call}: divide by the number of real tokens of each sequence, not by the padded "
            f"length L = {x.shape[1]}"
        )
    elif matches(got, (x * keep.unsqueeze(-1)).sum(dim=1)):
        raise CheckFailed(f"{call} is a sum: divide by the number of real tokens")
    elif matches(got[1:], _reference_pool(x, ~keep)[1:]):
        raise CheckFailed(f"{call}: keep is True for the real tokens; you averaged the padding")
    else:
        expect_close(call, got, expected, hint="Σ_t keep_t x_t / Σ_t keep_t")
    # Padding must not leak: changing a padded position changes nothing.
    noisy = x.clone()
    noisy[~keep] = 1e3
    expect_close("masked_mean with huge values at padded positions", candidate(noisy, keep),
                 expected, hint="the padding must not enter the mean at all")  # fmt: skip


# --- 10.4 the 2-D neighbourhood mask -------------------------------------------------------------


def _reference_neighbours(rows, cols, radius):
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    r, c = r.flatten(), c.flatten()  # (N,) each, reading order
    return ((r[:, None] - r[None, :]).abs() <= radius) & ((c[:, None] - c[None, :]).abs() <= radius)


@register("10.4", title="Neighbours on the grid, not in reading order")
def _neighbours(candidate):
    for rows, cols, radius in ((4, 4, 1), (3, 5, 1), (5, 3, 2), (4, 6, 0)):
        n = rows * cols
        call = f"grid_neighbours(rows={rows}, cols={cols}, radius={radius})"
        got = candidate(rows, cols, radius)
        expect_shape(call, got, (n, n), "(N, N) with N = rows · cols")
        if got.dtype != torch.bool:
            raise CheckFailed(f"{call} should be a bool mask (True = may attend), got {got.dtype}")
        expected = _reference_neighbours(rows, cols, radius)
        if torch.equal(got, expected):
            continue
        i = torch.arange(n)
        if torch.equal(got, (i[:, None] - i[None, :]).abs() <= radius):
            raise CheckFailed(
                f"{call} is a window in reading order: index i is the patch at row i // cols, "
                f"column i % cols; compare rows and columns, not indices"
            )
        if torch.equal(got, (i[:, None] - i[None, :]).abs() <= radius * cols + radius):
            raise CheckFailed(
                f"{call} is a band in reading order, which wraps around the ends of the rows: "
                f"compare rows and columns separately"
            )
        r2, c2 = i % rows, i // rows
        swapped = ((r2[:, None] - r2[None, :]).abs() <= radius) & (
            (c2[:, None] - c2[None, :]).abs() <= radius
        )
        if rows != cols and torch.equal(got, swapped):
            raise CheckFailed(
                f"{call}: rows and columns are swapped; in reading order index i sits at row "
                f"i // cols and column i % cols"
            )
        r, c = i // cols, i % cols
        manhattan = (r[:, None] - r[None, :]).abs() + (c[:, None] - c[None, :]).abs() <= radius
        if radius > 0 and torch.equal(got, manhattan):
            raise CheckFailed(
                f"{call} uses |Δrow| + |Δcol| <= radius (a diamond): both offsets must be "
                f"within the radius (a square, diagonal neighbours included)"
            )
        strict = ((r[:, None] - r[None, :]).abs() < radius) & (
            (c[:, None] - c[None, :]).abs() < radius
        )
        if torch.equal(got, strict):
            raise CheckFailed(f"{call}: the radius is inclusive (|Δrow| <= radius), not strict")
        expect_equal(call, got, expected, hint="|Δrow| <= radius and |Δcol| <= radius")


# --- 10.5 predict, then run: RoPE's base ------------------------------------------------------

ROPE_BASE = 16.0  # the exercise's setting: a base tuned to the 16 tokens


@register("10.5", title="Predict, then run: §10 relative with RoPE base 16")
def _predict_rope_base(predict, *, outcome):
    from book.sceptic import Outcome

    numbers = outcome.numbers if isinstance(outcome, Outcome) else {}
    if isinstance(outcome, Outcome) and numbers.get("rope_base") != ROPE_BASE:
        raise CheckFailed(
            f"the run used RoPE base {numbers.get('rope_base')}, not {ROPE_BASE:g}: pass the "
            f"Outcome of relative_sweep_run(seeds=[0], steps=200, rope_base={ROPE_BASE:g}), so "
            f"that the knob is really changed"
        )
    gaps = {k: numbers.get(f"{k} gap") for k in ("RoPE", "ALiBi")}
    check_prediction(
        predict,
        outcome,
        setting=f"RoPE base {ROPE_BASE:g}",
        why={
            "reproduced": f"both relative schemes stay at least 0.05 below the better absolute "
            f"one (gaps: RoPE {gaps.get('RoPE')}, ALiBi {gaps.get('ALiBi')}). With base 16 every "
            f"channel pair of RoPE turns across the 16 tokens and RoPE climbs to about the "
            f"sinusoidal table's accuracy, but the better absolute scheme here is the learned "
            f"table, which stays ahead; ALiBi does not depend on RoPE's base",
            "partly": f"one relative scheme is within 0.05 of the better absolute one (gaps: "
            f"RoPE {gaps.get('RoPE')}, ALiBi {gaps.get('ALiBi')}): with base 16 every channel "
            f"pair of RoPE turns across the 16 tokens, so RoPE can tell them apart; ALiBi's "
            f"symmetric penalty is not changed by RoPE's base",
            "not reproduced": f"neither relative scheme is 0.05 below the better absolute one "
            f"(gaps: RoPE {gaps.get('RoPE')}, ALiBi {gaps.get('ALiBi')})",
        },
    )
