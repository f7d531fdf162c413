# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (attention-book)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 10 — Exercises: building and costing an encoder
#
# Five exercises on chapter 10 (`chapters/10_application.py`): cut images into patch tokens
# in reading order, count the FLOPs of one encoder layer and the share that grows with $n^2$,
# average a padded batch over its real tokens only, build the 2-D neighbourhood mask that
# a window in reading order only approximates, and predict a claim's verdict under a changed
# knob before running it. Each exercise defines a function; the cell
# after it checks your function on inputs it chooses, against the `attention` package or an
# independent computation, and says what looks wrong if it is.

# %%
import torch

from book.checks import check

# %% [markdown]
# ## Exercise 10.1 — Patch tokens (★★)
#
# A vision Transformer reads an image as a sequence of patches. Write `patchify(images,
# patch)` for grey images `(B, H, W)` (both sides divisible by `patch`) that returns
# `(B, N, patch·patch)`: patch `(r, c)` of the grid is token `r · (W / patch) + c` (left to
# right, then top to bottom), and inside a patch pixel `(i, j)` is feature `i · patch + j`.
# This is the order of `attention.vision.PatchEmbedding`, whose convolution then applies one
# linear layer to each token. Use `reshape` and `permute` only.


# %%
def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, H, W) -> (B, (H/patch)·(W/patch), patch·patch), patches in reading order."""
    ### BEGIN SOLUTION
    b, h, w = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch)  # (B, gh, p, gw, p)
    x = x.permute(0, 1, 3, 2, 4)  # (B, gh, gw, p, p): the two patch axes together
    return x.reshape(b, (h // patch) * (w // patch), patch * patch)  # (B, N, p·p)
    ### END SOLUTION


# %%
check("10.1", patchify)

# %% [markdown] tags=["solution_only"]
# *Why the permute.* `reshape` never moves data, it only regroups it in memory order, and an
# image's memory order is row by row. Splitting each side into (grid, patch) is free; bringing
# the two patch axes next to each other is the one real move. Skip it and each "patch" is a
# strip of `patch · patch` pixels from a single row — a model trained on it still runs, and
# still learns something, which is what makes the mistake hard to see.

# %% [markdown]
# ## Exercise 10.2 — What an encoder layer computes (★★)
#
# Count the forward FLOPs of one encoder layer on `n` tokens of width `d_model`, with a
# feed-forward of width `d_ff`, counting matrix products only and two FLOPs per
# multiply-add: the four projections (Q, K, V, output), the two feed-forward products, and
# the two $n \times n$ products of attention ($QK^\top$ and the weights times $V$; splitting
# into heads does not change their total). Return `(total, quadratic)`, where `quadratic` is
# the part that grows with $n^2$.


# %%
def layer_flops(n: int, d_model: int, d_ff: int) -> tuple[int, int]:
    """(total forward FLOPs of one encoder layer, the part from the n × n products)."""
    ### BEGIN SOLUTION
    projections = 4 * (2 * n * d_model * d_model)  # Q, K, V, out: (n, d) @ (d, d)
    feed_forward = 2 * (2 * n * d_model * d_ff)  # (n, d) @ (d, d_ff) and back
    quadratic = 2 * (2 * n * n * d_model)  # Q Kᵀ: (n, d) @ (d, n); weights · V: (n, n) @ (n, d)
    return projections + feed_forward + quadratic, quadratic
    ### END SOLUTION


# %%
check("10.2", layer_flops)

# %% [markdown] tags=["solution_only"]
# The share of the $n^2$ part at a few lengths, for the chapter's model and for BERT-base:

# %% tags=["solution_only", "nbval-check-output"]
for d_model, d_ff in ((32, 64), (768, 3072)):
    shares = []
    for n in (16, 512, 4608, 32_768):
        total, quadratic = layer_flops(n, d_model, d_ff)
        shares.append(f"n={n}: {quadratic / total:.0%}")
    print(f"d_model {d_model}, d_ff {d_ff}: " + ", ".join(shares))

# %% [markdown] tags=["solution_only"]
# *Reading the numbers.* The quadratic part is $n / (2d + d_{ff} + n)$ of the work: exactly
# half at $n = 2d + d_{ff}$ — 128 tokens for the chapter's tiny model, 4,608 for BERT-base.
# A BERT-sized model on 512-token inputs spends about a tenth of its compute on the
# $n \times n$ products; the "quadratic cost of attention" becomes the main cost only for
# documents of many thousands of tokens.

# %% [markdown]
# ## Exercise 10.3 — Pooling a padded batch (★)
#
# Sequences of different lengths are padded to one length `L`; `keep (B, L)` is `True` at the
# real tokens. Write `masked_mean(x, keep)` for token vectors `x (B, L, D)` that returns the
# mean over each sequence's real tokens, `(B, D)` — what a classifier's mean pooling must do
# (`attention.blocks.SequenceClassifier` pools this way).


# %%
def masked_mean(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, L, D) over the positions where keep (B, L) is True: (B, D)."""
    ### BEGIN SOLUTION
    weights = keep.to(x.dtype).unsqueeze(-1)  # (B, L, 1): 1 at real tokens, 0 at padding
    return (x * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)
    ### END SOLUTION


# %%
check("10.3", masked_mean)

# %% [markdown] tags=["solution_only"]
# *Why it matters.* With a plain `x.mean(dim=1)`, a short sequence's representation is pulled
# towards whatever the padding vectors are, more the shorter it is: the prediction then
# depends on how long the *other* sequences of the batch were. The same care is needed in the
# attention itself (a padding mask on the keys; chapter 6, C22).

# %% [markdown]
# ## Exercise 10.4 — Neighbours on the grid (★★★)
#
# Chapter 10 gave each patch a window of ±4 tokens in reading order, which on a 4 × 4 grid
# reaches the patch above and the patch below — but also the far end of the row above, and not
# the diagonal neighbours. Write `grid_neighbours(rows, cols, radius)` that returns the mask
# a 2-D window would use: `(N, N)` bool with `N = rows · cols`, `True` where patches `i` and
# `j` (in reading order) are at most `radius` rows *and* at most `radius` columns apart.


# %%
def grid_neighbours(rows: int, cols: int, radius: int) -> torch.Tensor:
    """(N, N) bool: True where two patches are within radius rows and radius columns."""
    ### BEGIN SOLUTION
    index = torch.arange(rows * cols)  # (N,) reading order
    r, c = index // cols, index % cols  # (N,) row and column of each patch
    near_rows = (r[:, None] - r[None, :]).abs() <= radius  # (N, N)
    near_cols = (c[:, None] - c[None, :]).abs() <= radius  # (N, N)
    return near_rows & near_cols
    ### END SOLUTION


# %%
check("10.4", grid_neighbours)

# %% [markdown] tags=["solution_only"]
# How much of a reading-order window of ±`cols` is really 2-D neighbourhood, on the chapter's
# grid:

# %% tags=["solution_only", "nbval-check-output"]
from attention.masks import sliding_window_mask

grid_mask = grid_neighbours(4, 4, 1)  # (16, 16)
band = sliding_window_mask(16, left=4, right=4)  # (16, 16)
print(f"2-D neighbour pairs: {int(grid_mask.sum())}, band pairs: {int(band.sum())}, "
      f"in both: {int((grid_mask & band).sum())}")  # fmt: skip

# %% [markdown] tags=["solution_only"]
# *Reading the numbers.* The band holds every vertical and horizontal neighbour but misses
# some diagonal ones, and spends the rest of its pairs on patches that are far apart in the
# image. A mask like `grid_neighbours` passed to attention (as Swin does with its windows,
# chapter 7) gives a true 2-D locality prior; on the digits the band was already enough.

# %% [markdown]
# ## Exercise 10.5 — Predict, then run: RoPE's base (★★)
#
# Section 10.3 judged §10 relative (*relative position schemes lose to absolute ones on a
# fixed-size 2-D input*: RoPE and ALiBi each at least 0.05 below the better absolute scheme)
# with RoPE at its usual base, 10000. With head width 8 the four channel pairs of RoPE turn by
# $1, 10^{-1}, 10^{-2}, 10^{-3}$ radians per token, so across 16 tokens two pairs hardly turn
# at all. The knob: **RoPE's base, 16**, so that every pair turns by at least one radian
# across the image. One seed (0), the chapter's 200 steps; sinusoidal, learned, RoPE and
# ALiBi are trained (about 6 s on an idle core).
#
# Before you run it, predict §10 relative's verdict: does a base tuned to the length save
# RoPE (then only ALiBi loses: "partly"), or do relative offsets lose anyway ("reproduced")?

# %%
from book.claims.ch10 import relative_sweep_run


def my_prediction() -> str:
    """§10 relative's verdict with RoPE base 16: "reproduced", "partly" or "not reproduced"."""
    ### BEGIN SOLUTION
    return "reproduced"
    ### END SOLUTION


# %%
outcome = relative_sweep_run(seeds=[0], steps=200, rope_base=16.0)  # about 6 s
print(outcome)

# %%
check("10.5", my_prediction, outcome=outcome)

# %% [markdown] tags=["solution_only"]
# *Reading the run.* The base does matter: with 16 every channel pair turns across the image,
# and RoPE climbs to about the accuracy of the sinusoidal table (the chapter's sweep shows the
# same over seeds 0–2). But the better absolute scheme on this task is the learned table, and
# it stays well ahead, so RoPE still loses by more than the 0.05 the rule asks; ALiBi does not
# depend on RoPE's base at all. What the run takes away is the explanation "relative offsets
# cannot place a stroke": tuned, a relative scheme does as well as a fixed absolute one.
