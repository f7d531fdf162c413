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
# # Chapter 5 — Exercises: long-range dependencies and what they cost
#
# Six exercises on chapter 5 (`chapters/05_long_range.py`): the memory of the $n \times n$
# score table, band (sliding-window) attention written with a mask, how many scores a window
# saves, linear attention with $\varphi(x) = \mathrm{elu}(x) + 1$, and the longest sequence
# whose scores fit in a given memory; and one experiment: predict a window model's verdict, then
# run it. Each exercise defines a function; the cell after it
# checks your function against the `attention` package on inputs it chooses, and says what
# looks wrong if it is.

# %%
import math

import torch
import torch.nn.functional as F

from book.checks import check

# %% [markdown]
# ## Exercise 05.1 — Memory of the score table (★)
#
# Dense attention materialises one weight per (query, key) pair, per head, per sequence of
# the batch: a tensor of shape `(B, H, n, n)`. Write `score_table_bytes(seq_len, num_heads,
# batch_size, bytes_per_element)` that returns its size in bytes (4 bytes per element for
# float32, 2 for float16 or bfloat16).


# %%
def score_table_bytes(
    seq_len: int, num_heads: int, batch_size: int = 1, bytes_per_element: int = 4
) -> int:
    """Bytes of one (B, H, n, n) attention weight tensor."""
    ### BEGIN SOLUTION
    return batch_size * num_heads * seq_len * seq_len * bytes_per_element
    ### END SOLUTION


# %%
check("05.1", score_table_bytes)

# %% [markdown] tags=["solution_only"]
# What does that mean at scale? One layer of a 32-head model on a 32k-token document, in
# float16:

# %% tags=["solution_only", "nbval-check-output"]
print(f"{score_table_bytes(32_768, 32, 1, 2) / 2**30:.0f} GiB")

# %% [markdown] tags=["solution_only"]
# *Why it matters.* 64 GiB for the weights of a single layer, more than most accelerators
# hold — and the dense call keeps about three such tensors alive at once (chapter 5, section
# 5.4). Exact attention at this length is only possible without materialising the table
# (FlashAttention, chapter 6).

# %% [markdown]
# ## Exercise 05.2 — Band attention (★★)
#
# Write `band_attention(q, k, v, left, right)` for `q (B, H, L, E)`, `k (B, H, L, E)`,
# `v (B, H, L, Ev)`: query `i` attends only the keys `j` with `i - left <= j <= i + right`
# (both ends inclusive). Build the boolean band mask yourself (`True` = may attend), set the
# scaled scores outside the band to `-inf`, then softmax over the keys and take the weighted
# sum of the values. The check compares with the package's
# `attention.efficient.sliding_window.sliding_window_attention`.


# %%
def band_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, left: int, right: int
) -> torch.Tensor:
    """Query i attends keys i - left .. i + right. Returns (B, H, L, Ev)."""
    ### BEGIN SOLUTION
    i = torch.arange(q.shape[-2])[:, None]  # (Lq, 1) query positions
    j = torch.arange(k.shape[-2])[None, :]  # (1, Lk) key positions
    allowed = (j >= i - left) & (j <= i + right)  # (Lq, Lk), True = may attend
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, Lq, Ev)
    ### END SOLUTION


# %%
check("05.2", band_attention)

# %% [markdown] tags=["solution_only"]
# *The mask is the whole idea.* This version still computes all $n^2$ scores and then throws
# most away, so it saves nothing; the package's kernel cuts the queries into blocks and only
# ever forms the strip of keys each block can see, which is what makes it $O(n \cdot w)$. Both
# give the same numbers, which is how the kernel is tested.

# %% [markdown]
# ## Exercise 05.3 — How many scores does a window save? (★★)
#
# Full attention scores $n^2$ (query, key) pairs. A band with `left` keys before and `right`
# keys after each query scores fewer — but mind the edges: the first queries have fewer keys
# before them, the last fewer after them. Write `window_savings(seq_len, left, right)` that
# returns $n^2$ divided by the exact number of pairs in the band (a float $\ge 1$).


# %%
def window_savings(seq_len: int, left: int, right: int) -> float:
    """n² / (number of (query, key) pairs with i - left <= j <= i + right)."""
    ### BEGIN SOLUTION
    pairs = 0
    for i in range(seq_len):
        first, last = max(0, i - left), min(seq_len - 1, i + right)
        pairs += last - first + 1
    return seq_len * seq_len / pairs
    ### END SOLUTION


# %%
check("05.3", window_savings)

# %% [markdown] tags=["solution_only"]
# Longformer's setting, 4096 tokens with a window of 512 (256 on each side):

# %% tags=["solution_only", "nbval-check-output"]
print(f"{window_savings(4096, 256, 256):.2f}× fewer scores than full attention")

# %% [markdown] tags=["solution_only"]
# *Reading the number.* About $n / w$ for $n \gg w$, a bit more because of the edges. The
# saving grows linearly with the length: at 4096 tokens a ±256 window scores about 8×
# fewer pairs, at 32k tokens about 64× fewer. Global tokens add back $O(g \cdot n)$ pairs.

# %% [markdown]
# ## Exercise 05.4 — Linear attention (★★)
#
# Replace the softmax kernel $\exp(q \cdot k / \sqrt{E})$ by $\varphi(q) \cdot \varphi(k)$
# with $\varphi(x) = \mathrm{elu}(x) + 1$ (positive features). Then
#
# $$\text{out}_i = \frac{\sum_j \big(\varphi(q_i)\cdot\varphi(k_j)\big)\, v_j}{\sum_j
# \varphi(q_i)\cdot\varphi(k_j)} = \frac{\varphi(q_i)^\top S}{\varphi(q_i)\cdot z + \varepsilon},
# \qquad S = \sum_j \varphi(k_j)\, v_j^\top,\; z = \sum_j \varphi(k_j).$$
#
# Write `linear_attention_noncausal(q, k, v, eps=1e-6)` for `q (B, H, Lq, E)`,
# `k (B, H, Lk, E)`, `v (B, H, Lk, Ev)` using the right-hand form: compute `S` and `z` once,
# never an `Lq × Lk` matrix. The check compares with the package's
# `attention.efficient.linear.linear_attention(q, k, v, causal=False)`.


# %%
def linear_attention_noncausal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """Non-causal linear attention with φ(x) = elu(x) + 1. Returns (B, H, Lq, Ev)."""
    ### BEGIN SOLUTION
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1  # (B, H, L, E): positive features
    state = phi_k.transpose(-2, -1) @ v  # (B, H, E, Ev) = Σ_j φ(k_j) v_jᵀ
    z = phi_k.sum(dim=-2)  # (B, H, E) = Σ_j φ(k_j)
    denominator = phi_q @ z.unsqueeze(-1) + eps  # (B, H, Lq, 1)
    return (phi_q @ state) / denominator  # (B, H, Lq, Ev)
    ### END SOLUTION


# %%
check("05.4", linear_attention_noncausal)

# %% [markdown] tags=["solution_only"]
# *Where the saving comes from.* Matrix products associate: $(\varphi(Q)\varphi(K)^\top)V =
# \varphi(Q)(\varphi(K)^\top V)$. The left side builds an $L_q \times L_k$ matrix; the right
# side an $E \times E_v$ one, whatever the length. The softmax has no such factorisation,
# because $\exp(q\cdot k)$ is not a product of a function of $q$ and a function of $k$ with a
# finite number of features.

# %% [markdown]
# ## Exercise 05.5 — The longest sequence that fits (★)
#
# Write `longest_sequence(memory_bytes, num_heads, bytes_per_element)`: the largest $n$ for
# which one sequence's weight tensor `(num_heads, n, n)` fits in `memory_bytes` (ignore
# everything else in memory). Use integer arithmetic; `math.isqrt` is the integer square
# root.


# %%
def longest_sequence(memory_bytes: int, num_heads: int, bytes_per_element: int = 2) -> int:
    """Largest n with num_heads · n² · bytes_per_element <= memory_bytes."""
    ### BEGIN SOLUTION
    return math.isqrt(memory_bytes // (num_heads * bytes_per_element))
    ### END SOLUTION


# %%
check("05.5", longest_sequence)

# %% [markdown] tags=["solution_only"]
# An 80 GiB accelerator, 32 heads, float16 — with nothing else in memory:

# %% tags=["solution_only", "nbval-check-output"]
print(f"n = {longest_sequence(80 * 2**30, 32, 2):,} tokens")

# %% [markdown] tags=["solution_only"]
# *Reading the number.* About 36k tokens for the weights of one layer alone, before the
# activations, the other layers, the parameters and the three-tensors-at-once peak of a real
# call. Doubling the memory buys only $\sqrt{2} \approx 1.4\times$ the length: the square
# root is what makes dense attention's memory, not its compute, the first wall.

# %% [markdown]
# ## Exercise 05.6 — Predict, then run: the LSTM's forget-gate bias (★★)
#
# C16 contrasts two gradients in section 5.2: attention's stays flat with the distance, while
# the recurrent networks' vanishes (the LSTM's far/near ratio must fall below
# `C16_LSTM_VANISHED` at torch's default initialisation). Many LSTM recipes start the forget
# gate's bias at +1, so that the gate starts half open. Change that one knob: build the LSTM
# with **forget-gate bias +1**, seed 0, and measure again. Before running, predict the verdict
# `c16_verdict` will give: "reproduced" (attention flat, both recurrent gradients vanish),
# "partly" (attention flat, but a recurrent gradient survives) or "not reproduced" (attention
# not flat).


# %%
def my_prediction() -> str:
    """C16's verdict with the LSTM's forget-gate bias at +1, seed 0."""
    ### BEGIN SOLUTION
    return "partly"
    ### END SOLUTION


# %%
from book.claims.ch05 import c16_sweep_run  # noqa: E402

outcome = c16_sweep_run(seeds=[0], forget_bias=1.0)  # float64 gradients, a few seconds
print(outcome)

# %%
check("05.6", my_prediction, outcome=outcome)

# %% [markdown] tags=["solution_only"]
# *Reading the run.* A bias of +1 is enough to keep the LSTM's far/near ratio above the
# threshold: the contrast C16 draws depends on the initialisation, which is why the chapter
# states its verdict "at torch's default initialisation".
