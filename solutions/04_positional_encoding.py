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
# # Exercises, chapter 4 — Positional encoding
#
# Six exercises on chapter 4 (`chapters/04_positional_encoding.py`): the two encodings
# you will implement in every Transformer you write (the sinusoidal table and RoPE), the
# matrix behind the claim that a sinusoidal shift is linear, two numbers worth knowing by
# heart, and one experiment (predict C14's verdict for a bigger model, then run it). Each
# `check(...)` cell tests your function on inputs of its own and prints ✓, or ✗ with a hint.
#
# Conventions as in the book: per-head tensors are `[batch, heads, seq, dim]`; a position
# table has one row per position, `(max_len, d_model)`. Build everything from `torch`
# operations; do not call `attention.positional` (that is what your answer is checked
# against).

# %%
import math  # noqa: F401  (needed by some answers)

import torch

from book.checks import check

# %% [markdown]
# ## Exercise 04.1 — The sinusoidal table (★)
#
# Write `sinusoidal_table(max_len, d_model, base=10000.0)` returning the `(max_len, d_model)`
# table of "Attention Is All You Need":
#
# $$PE_{pos,\,2i} = \sin\!\left(pos / base^{2i/d}\right), \qquad
#   PE_{pos,\,2i+1} = \cos\!\left(pos / base^{2i/d}\right),$$
#
# for positions $0 \dots$ `max_len` − 1 and pairs $i = 0 \dots d/2 - 1$ (`d_model` is even).
# Sines on the even channels, cosines on the odd ones, and both channels of a pair share one
# angle. No Python loop over positions or channels.


# %%
def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(...): (max_len, d_model)."""
    ### BEGIN SOLUTION
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,): 0, 2, 4, ...
    angles = pos / base ** (two_i / d_model)  # (L, D/2): one angle per pair
    table = torch.empty(max_len, d_model, dtype=torch.float64)  # (L, D)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()
    ### END SOLUTION


# %%
check("04.1", sinusoidal_table)

# %% [markdown]
# ## Exercise 04.2 — The wavelength of a channel pair (★)
#
# Pair $i$ of the table turns by a fixed angle per position. Write
# `wavelength(i, d_model, base=10000.0)` returning its wavelength: the number of positions
# after which the pair's two channels come back to the same values (a float; it need not be
# a whole number of positions).


# %%
def wavelength(i: int, d_model: int, base: float = 10000.0) -> float:
    """Positions per full turn of channel pair i of the sinusoidal table."""
    ### BEGIN SOLUTION
    # Angular frequency ω_i = base^(-2i/d) radians per position; a turn is 2π radians.
    return 2 * math.pi * base ** (2 * i / d_model)
    ### END SOLUTION


# %%
check("04.2", wavelength)

# %% [markdown] tags=["solution_only"]
# With $d = 512$, as in the original Transformer, the fastest pair repeats every
# $2\pi \approx 6.3$ positions and the slowest about every 60,600: the fast pairs tell
# neighbours apart, the slow ones say roughly where in a very long sequence a token is.

# %% tags=["nbval-check-output", "solution_only"]
print(round(wavelength(0, 512), 2), round(wavelength(255, 512)))

# %% [markdown]
# ## Exercise 04.3 — The shift matrix $M_k$ (★★)
#
# Write `shift_matrix(k, d_model)` returning the `(d_model, d_model)` matrix $M_k$ with
#
# $$PE_{p+k} = M_k\, PE_p \quad \text{for every position } p$$
#
# for the table of exercise 04.1 (base 10000; $PE_p$ is row $p$, used as a column vector).
# Hint: write $\sin((p+k)\omega)$ and $\cos((p+k)\omega)$ with the angle-addition formulas;
# each pair of channels gets its own $2\times 2$ block.


# %%
def shift_matrix(k: int, d_model: int) -> torch.Tensor:
    """M_k (d_model, d_model): PE[p + k] = M_k @ PE[p] for every p."""
    ### BEGIN SOLUTION
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = k / 10000.0 ** (two_i / d_model)  # (D/2,): k·ω_i
    cos, sin = torch.cos(angle), torch.sin(angle)  # (D/2,) each
    m = torch.zeros(d_model, d_model, dtype=torch.float64)  # (D, D)
    s, c = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)  # sin and cos channels
    # sin((p+k)ω) = cos(kω)·sin(pω) + sin(kω)·cos(pω)
    m[s, s], m[s, c] = cos, sin
    # cos((p+k)ω) = -sin(kω)·sin(pω) + cos(kω)·cos(pω)
    m[c, s], m[c, c] = -sin, cos
    return m
    ### END SOLUTION


# %%
check("04.3", shift_matrix)

# %% [markdown]
# ## Exercise 04.4 — RoPE, rotate-half (★★)
#
# Write `rope_rotate_half(x)` for per-head queries or keys `x (B, H, L, Dh)` (`Dh` even). The
# token at position $m$ (positions $0 \dots L-1$) has its channel pairs
# $(x_i, x_{i + D_h/2})$, $i = 0 \dots D_h/2 - 1$, rotated by the angle
# $m\,\theta_i$ with $\theta_i = 10000^{-2i/D_h}$:
#
# $$y_i = x_i\cos m\theta_i - x_{i+D_h/2}\sin m\theta_i, \qquad
#   y_{i+D_h/2} = x_i\sin m\theta_i + x_{i+D_h/2}\cos m\theta_i.$$
#
# This "rotate-half" pairing is the one used by GPT-NeoX and by Hugging Face's port of Llama
# (the RoFormer paper and Meta's reference Llama code pair neighbouring channels instead; the
# two differ only in the order of the channels). Return a tensor of the same shape.


# %%
def rope_rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + Dh/2) of the token at position m by m·10000^(-2i/Dh)."""
    ### BEGIN SOLUTION
    seq, dh = x.shape[-2], x.shape[-1]
    pos = torch.arange(seq, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    theta = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh)  # (Dh/2,)
    angles = pos * theta  # (L, Dh/2)
    cos, sin = torch.cos(angles), torch.sin(angles)  # (L, Dh/2) each
    x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]  # (B, H, L, Dh/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, L, Dh)
    ### END SOLUTION


# %%
check("04.4", rope_rotate_half)

# %% [markdown] tags=["solution_only"]
# The property that makes RoPE relative: rotate the same query and key to positions
# $(m, n)$ and $(m + 5, n + 5)$; the scores agree.

# %% tags=["nbval-check-output", "solution_only"]
q, k = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))  # (Dh,) each
q_at = rope_rotate_half(q.expand(1, 1, 12, 16).contiguous())[0, 0]  # (12, Dh): positions 0..11
k_at = rope_rotate_half(k.expand(1, 1, 12, 16).contiguous())[0, 0]  # (12, Dh)
print(torch.isclose(q_at[2] @ k_at[7], q_at[4] @ k_at[9], atol=1e-5).item())

# %% [markdown]
# ## Exercise 04.5 — The position parameters of BERT-base (★)
#
# BERT-base has $d_\text{model} = 768$, 12 layers, and a learned position table for
# sequences of up to 512 tokens, added once to the input embeddings. Write
# `bert_position_parameters()` returning the number of trainable parameters in that table
# (an `int`).


# %%
def bert_position_parameters() -> int:
    """Trainable parameters of BERT-base's learned position embeddings."""
    ### BEGIN SOLUTION
    max_len, d_model = 512, 768
    return max_len * d_model  # one d_model-vector per position; 0 for sinusoidal or RoPE
    ### END SOLUTION


# %%
check("04.5", bert_position_parameters)


# %% [markdown]
# ## Exercise 04.6 — Predict, then run: a bigger model (★★)
#
# Section 4.6 trained one small model (1 layer, $d_\text{model} = 32$). With 2 layers and
# $d_\text{model} = 64$, RoPE keeps far more of its accuracy past the training length (the
# chapter's sweep of C15). Does the sinusoidal model's collapse soften with size too? Predict
# C14's verdict for the bigger model on seed 0, by the chapter's test (`c14_verdict`:
# "reproduced" when the model reaches 0.9 at 32 tokens and its accuracy falls by at least
# 0.3 at every length of 64 tokens and more; "partly" when it falls that far at some of
# them only), then run it. The run trains one model for 400 steps: about ten seconds.


# %%
def my_prediction() -> str:
    """C14's verdict with 2 layers and d_model 64: "reproduced", "partly" or "not reproduced"."""
    ### BEGIN SOLUTION
    return "reproduced"
    ### END SOLUTION


# %%
from book.claims.ch04 import c14_sweep_run  # noqa: E402

outcome = c14_sweep_run(seeds=[0], steps=400, num_layers=2, d_model=64)  # ≈ 10 s on one core

# %%
check("04.6", my_prediction, outcome=outcome)

# %% [markdown] tags=["solution_only"]
# Size rescues RoPE, whose scores see only distances, more than the sinusoidal model, which
# has learned partly in absolute positions: past 32 tokens those positions are new to it, at
# this size as at the chapter's.
