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
# # Chapter 9 — Exercises: frequently asked details
#
# Five exercises on chapter 9 (`chapters/09_faq_details.py`): the weights of sigmoid
# attention with the $-\log n$ bias, attention rollout across layers, Kendall's rank
# correlation (the measure behind "attention is not explanation"), the learning-rate
# factor of a linear warm-up, and a prediction of C29's verdict for a one-layer classifier,
# checked against the run. Each exercise defines a function; the cell after it checks
# your function on inputs it chooses, against the `book` package or an independent
# computation, and names the usual mistake when it recognises one.

# %%
import math

import torch

from book.checks import check

# %% [markdown]
# ## Exercise 9.1 — Sigmoid attention weights (★)
#
# Write `sigmoid_weights(scores)` for scores `(..., Lq, Lk)` (already scaled): the weights of
# sigmoid attention with the bias of Ramapuram et al. (2024), $w = \sigma(s - \log n)$, where
# $n$ is the number of keys. The result has the shape of `scores`; its rows are *not*
# normalised.


# %%
def sigmoid_weights(scores: torch.Tensor) -> torch.Tensor:
    """(..., Lq, Lk) -> (..., Lq, Lk): sigmoid(scores - log Lk)."""
    ### BEGIN SOLUTION
    n_keys = scores.shape[-1]
    return torch.sigmoid(scores - math.log(n_keys))  # (..., Lq, Lk)
    ### END SOLUTION


# %%
check("09.1", sigmoid_weights)

# %% [markdown] tags=["solution_only"]
# *Why this bias.* With scores near zero at initialisation, $\sigma(0 - \log n) = 1/(1 + n)
# \approx 1/n$: each of the $n$ weights starts near $1/n$ and the row sums to $n/(n + 1)$,
# close to a softmax's one at every length (the closer, the longer the row). Without it,
# the row starts summing to $n/2$, and the output's scale grows with the length.

# %% tags=["solution_only", "nbval-check-output"]
for n in (4, 16, 256):
    zero = torch.zeros(1, n)
    print(f"n = {n:>3}: row sum {float(sigmoid_weights(zero).sum()):.3f} with the bias, "
          f"{float(torch.sigmoid(zero).sum()):.1f} without")  # fmt: skip

# %% [markdown]
# ## Exercise 9.2 — Attention rollout (★★)
#
# Write `rollout(weights)` for a list of per-layer attention weights, each `(B, H, L, L)`,
# first layer first. Average each layer over its heads, add the residual connection as
# $\hat A = \tfrac12 A + \tfrac12 I$, and multiply the layers so that a later layer's matrix
# comes on the left: $R = \hat A_L \cdots \hat A_2 \hat A_1$, `(B, L, L)`. Row $i$ of the
# result says how much of each input token reaches output $i$.


# %%
def rollout(weights: list[torch.Tensor]) -> torch.Tensor:
    """List of (B, H, L, L), first layer first -> (B, L, L)."""
    ### BEGIN SOLUTION
    result = None
    for w in weights:
        a = w.mean(dim=1)  # (B, L, L): heads averaged
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)  # the residual path
        result = a if result is None else a @ result  # later layers on the left
    return result
    ### END SOLUTION


# %%
check("09.2", rollout)

# %% [markdown] tags=["solution_only"]
# *Why the order.* Output $i$ of layer 2 is a weighted sum of layer 2's inputs, which are
# layer 1's outputs, each a weighted sum of the tokens: $y^{(2)} = \hat A_2 y^{(1)} = \hat
# A_2 \hat A_1 x$. Multiplying in the other order would send the weights of the first
# layer through the positions of the second. Each $\hat A$ has rows summing to one, so the
# product does too: rollout is a distribution over input tokens for every output.

# %% [markdown]
# ## Exercise 9.3 — Kendall's τ (★)
#
# Write `kendall_tau(a, b)` for two 1-D tensors of the same length $n$ (no ties): over all
# $n(n-1)/2$ pairs $i < j$, count a pair as *concordant* when $a$ and $b$ order it the same
# way and *discordant* otherwise; return (concordant − discordant) / number of pairs, a
# float in $[-1, 1]$.


# %%
def kendall_tau(a: torch.Tensor, b: torch.Tensor) -> float:
    """Kendall's rank correlation of two 1-D tensors without ties."""
    ### BEGIN SOLUTION
    n = len(a)
    sa = torch.sign(a[:, None] - a[None, :])  # (n, n): +1 where a_i > a_j
    sb = torch.sign(b[:, None] - b[None, :])  # (n, n)
    agree = (sa * sb).triu(diagonal=1).sum()  # each pair i < j once: +1 or -1
    return float(agree / (n * (n - 1) / 2))
    ### END SOLUTION


# %%
check("09.3", kendall_tau)

# %% [markdown] tags=["solution_only"]
# *Reading a τ.* τ = 0.5 means that three quarters of the pairs are ordered alike
# ((1 + τ)/2 of them); τ = 0 that the two orders are unrelated. Chapter 9 compares the
# order of 8 rows, so each image gives 28 pairs.

# %% [markdown]
# ## Exercise 9.4 — Linear warm-up (★★)
#
# Write `warmup_factor(step, warmup_steps)`: the factor by which a linear warm-up multiplies
# the learning rate at step `step` (counted from 0). It rises linearly, reaches 1 at step
# `warmup_steps - 1` and stays at 1; the very first step must already move the weights.
# (This is `book.experiments.training.linear_warmup`, which `fit(..., schedule=...)` takes.)


# %%
def warmup_factor(step: int, warmup_steps: int) -> float:
    """Learning-rate factor of a linear warm-up over warmup_steps steps."""
    ### BEGIN SOLUTION
    return min(1.0, (step + 1) / warmup_steps)
    ### END SOLUTION


# %%
check("09.4", warmup_factor)

# %% [markdown] tags=["solution_only"]
# *Why warm-up helps Post-LN.* Adam's first steps are about the learning rate in size for
# every parameter, whatever the gradient; in a Post-LN stack the output layers start with the
# largest gradients and the whole stack is sensitive to them. Starting at a small fraction
# of the rate lets Adam's second-moment estimates settle before the steps get large — the
# chapter measured that 40 such steps rescue a 12-layer Post-LN stack at rate 0.01.

# %% [markdown]
# ## Exercise 9.5 — Predict, then run: a one-layer classifier (★★)
#
# Chapter 9 finds C29 ("attention is not explanation") **reproduced** for its two-layer digit
# classifier at 150 steps: attention ranks the rows unlike leave-one-out (part i), and on the
# images where uniform or permuted `[CLS]` weights do not already pass, a searched adversary
# finds far-away weights that keep the output (part ii). Change one knob: a classifier with
# **one** encoder layer, so that the last layer's `[CLS]` weights are the model's only mixing
# of the rows. Before running, predict C29's verdict for seed 0: "reproduced", "partly" or
# "not reproduced". Then run the claim's experiment (`c29_sweep_run`, the runner of the
# chapter's sceptic sweep: a few seconds) and let the check compare.


# %%
from book.claims.ch09 import c29_sweep_run


def my_prediction() -> str:
    """C29's verdict with a one-layer classifier: "reproduced", "partly" or "not reproduced"."""
    ### BEGIN SOLUTION
    return "partly"
    ### END SOLUTION


# %%
outcome = c29_sweep_run(seeds=[0], steps=150, num_layers=1)  # ≤ ~10 s
print(outcome)

# %%
check("09.5", my_prediction, outcome=outcome)

# %% [markdown] tags=["solution_only"]
# *Why partly.* Part (i) survives: the weights still rank the rows unlike leave-one-out. Part
# (ii) does not: with one layer the `[CLS]` weights decide which rows reach the classifier,
# so weights far from the model's own move the output beyond the tolerance, and the search
# finds an adversary for only a small share of the images (`beyond`). The adversary test
# says more about how much the output depends on the weights than about the weights'
# faithfulness — Wiegreffe & Pinter's point, seen from the other side.
