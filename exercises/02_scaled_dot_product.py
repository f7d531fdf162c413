# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -attention_book
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-attention_book
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
# # Exercises, chapter 2 — Q, K, V and scaled dot-product attention
#
# Five exercises on chapter 2 (`chapters/02_scaled_dot_product.ipynb`): two pieces of code
# you will meet in every later chapter, two numbers you should be able to work out on paper,
# and the derivative that explains why the $1/\sqrt{d_k}$ matters. Each `check(...)` cell
# tests your function on inputs of its own and prints ✓, or ✗ with a hint.
#
# Conventions as in the book: tensors are `[batch, heads, seq, dim]`; a boolean mask means
# `True` = *may attend* and broadcasts to `(B, H, Lq, Lk)`.

# %% [markdown]
# > **Exercises, chapter 02.** Generated from `solutions/02_scaled_dot_product.py` by `make exercises`.
# >
# > Replace each `raise NotImplementedError(...)` with your answer and run the `check(...)` cell
# > below it: it prints ✓, or ✗ with a hint. To check every exercise at once, run
# > `make check CH=02` in a terminal at the root of the repository (it runs a copy of
# > this notebook; your file is not changed). Worked answers: `solutions/02_scaled_dot_product.ipynb`.

# %%
import math  # noqa: F401  (needed by some answers)

import torch

from attention.checks import check

# %% [markdown]
# ## Exercise 02.1 — Scaled dot-product attention with a mask
#
# Write `attention(q, k, v, mask=None)` for `q (B, H, Lq, d_k)`, `k (B, H, Lk, d_k)`,
# `v (B, H, Lk, d_v)` and an optional boolean `mask` broadcastable to `(B, H, Lq, Lk)`
# (`True` = may attend). Return `softmax(q kᵀ / √d_k) v` of shape `(B, H, Lq, d_v)`, where
# masked-out scores are excluded from the softmax. A query that may attend **no** key at all
# (all of its row is `False`, e.g. in an empty padded sequence) must get an output of zeros,
# not NaN. No loops: matrix products only.


# %%
def attention(q, k, v, mask=None):
    """softmax(q kᵀ / sqrt(d_k)) v with an optional bool mask (True = may attend)."""
    raise NotImplementedError("Exercise 02.1")


# %%
check("02.1", attention)

# %% [markdown]
# ## Exercise 02.2 — The variance of a score
#
# Let `q` and `k` be vectors of width `d_k` whose components are all independent with mean
# 0; the components of `q` have variance `var_q`, those of `k` have variance `var_k`. The
# score is `scale * (q · k)`. Write `score_variance(d_k, var_q, var_k, scale)` returning its
# variance. (Chapter 2 did the case `var_q = var_k = 1`; with PyTorch's default `nn.Linear`
# initialisation on unit-variance inputs, `var_q = var_k = 1/3`.)


# %%
def score_variance(d_k: int, var_q: float, var_k: float, scale: float) -> float:
    """Var(scale · q·k) for independent zero-mean components."""
    raise NotImplementedError("Exercise 02.2")


# %%
check("02.2", score_variance)

# %% [markdown]
# ## Exercise 02.3 — A stable softmax with zeros for fully masked rows
#
# Write `stable_softmax(scores, dim=-1)` that
#
# 1. equals `torch.softmax(scores, dim)` on ordinary inputs;
# 2. stays finite for huge scores (`[1000, 999, 998]` must not overflow): use
#    $\operatorname{softmax}(s) = \operatorname{softmax}(s - \max s)$;
# 3. treats `-inf` as "masked": weight 0;
# 4. returns **zeros** for a row in which every entry is `-inf` (a query that may attend
#    nothing), where the textbook formula gives `0/0 = NaN`.
#
# Do not call `torch.softmax` or `torch.nn.functional.softmax`: build it from `exp`, `sum`
# and `amax`.


# %%
def stable_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim`` that never overflows and gives zeros for all -inf rows."""
    raise NotImplementedError("Exercise 02.3")


# %%
check("02.3", stable_softmax)

# %% [markdown]
# ## Exercise 02.4 — The FLOPs of $QK^\top$
#
# Count the floating-point operations of the score computation `q @ k.transpose(-2, -1)` for
# `q (batch, heads, n_queries, d_k)` and `k (batch, heads, n_keys, d_k)`. Use the usual
# convention: a dot product of length $d$ costs $2d$ FLOPs ($d$ multiplications and $d$
# additions). Write `qk_flops(batch, heads, n_queries, n_keys, d_k) -> int`.
#
# Then use it: how many times more FLOPs does $QK^\top$ cost when a sequence of 512 tokens
# grows to 4,096 (self-attention, so `n_queries = n_keys`)?


# %%
def qk_flops(batch: int, heads: int, n_queries: int, n_keys: int, d_k: int) -> int:
    """FLOPs of QKᵀ: one dot product of length d_k per (batch, head, query, key)."""
    raise NotImplementedError("Exercise 02.4")


# %%
check("02.4", qk_flops)

# %% [markdown]
# ## Exercise 02.5 — The softmax Jacobian
#
# Write `softmax_jacobian(p)` which, for softmax outputs `p (..., n)`, returns the Jacobian
# $J_{ij} = \partial p_i / \partial s_j$ of every row, shape `(..., n, n)`. Use the formula,
# not autograd. Then evaluate its Frobenius norm for a uniform row and for a one-hot row of
# length 64: which one passes gradient back to the scores?


# %%
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """J = diag(p) - p pᵀ for each row of p: (..., n) -> (..., n, n)."""
    raise NotImplementedError("Exercise 02.5")


# %%
check("02.5", softmax_jacobian)
