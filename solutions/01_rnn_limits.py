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
# # Exercises, chapter 1 — Why attention: the limits of RNNs
#
# Six exercises on chapter 1 (`chapters/01_rnn_limits.py`): count how many steps separate
# two tokens, write the recurrence that creates those steps, work out what the steps do to a
# gradient (once as a formula, once as a number), build the other kind of attention the
# chapter met, cross-attention, and predict how one of the chapter's verdicts moves when you
# change one knob of its experiment. Each `check(...)` cell tests your function on inputs of its
# own and prints ✓, or ✗ with a hint.
#
# Conventions as in the book: token representations are `(B, L, D)`; attention tensors are
# `[batch, heads, seq, dim]`.

# %%
import math  # noqa: F401  (needed by some answers)

import torch

from book.checks import check
from book.claims.ch01 import c1_sweep_run

# %% [markdown]
# ## Exercise 01.1 — Path length in an RNN and in attention (★)
#
# A left-to-right RNN reads token `source` into its state at step `source`; from then on the
# information can only travel forward one state update at a time. In a self-attention layer,
# position `target` reads every position directly. For `0 <= source < target`, write
# `path_lengths(source, target)` returning a tuple `(rnn_steps, attention_steps)`: how many
# state updates separate the state that has just read token `source` from the state at
# `target`, and how many attention layers separate the two positions in a self-attention
# model. (The chapter's example: token 0 reaches position 99 after 99 updates.)


# %%
def path_lengths(source: int, target: int) -> tuple[int, int]:
    """(RNN state updates, attention steps) between positions source < target."""
    ### BEGIN SOLUTION
    return target - source, 1
    ### END SOLUTION


# %%
check("01.1", path_lengths)

# %% [markdown]
# ## Exercise 01.2 — An RNN unrolled by hand (★)
#
# The simplest ("Elman") RNN updates its state with
# $h_t = \tanh(x_t W_{ih}^\top + h_{t-1} W_{hh}^\top + b)$, starting from $h_{-1} = h_0$
# (zeros if not given). Write `rnn_forward(x, w_ih, w_hh, b, h0=None)` for `x (B, L, D)`,
# `w_ih (H, D)`, `w_hh (H, H)`, `b (H,)` and `h0 (B, H)`, returning every state,
# `(B, L, H)`. Use an explicit loop over time: that loop is the point of the chapter. The
# check compares you with `torch.nn.RNN` given the same weights.


# %%
def rnn_forward(x, w_ih, w_hh, b, h0=None):
    """Elman RNN, tanh: x (B, L, D) -> states (B, L, H)."""
    ### BEGIN SOLUTION
    batch, length, _ = x.shape
    h = x.new_zeros(batch, w_hh.shape[0]) if h0 is None else h0  # (B, H)
    states = []
    for t in range(length):  # step t needs h from step t - 1: no way to parallelise
        h = torch.tanh(x[:, t] @ w_ih.T + h @ w_hh.T + b)  # (B, H)
        states.append(h)
    return torch.stack(states, dim=1)  # (B, L, H)
    ### END SOLUTION


# %%
check("01.2", rnn_forward)

# %% [markdown]
# ## Exercise 01.3 — How a gradient decays through a linear recurrence (★★)
#
# Strip the RNN to its bones: one number of state, no non-linearity,
# $h_t = \lambda h_{t-1} + x_t$. Write `linear_rnn_gradient(lam, distance)` returning
# $\partial h_t / \partial x_{t-d}$ for $d$ = `distance` $\ge 0$. (Unroll a few steps on
# paper. The check differentiates a real unrolled loop with autograd.) What does your formula
# say for $|\lambda| < 1$, $|\lambda| > 1$ and $\lambda = 1$?


# %%
def linear_rnn_gradient(lam: float, distance: int) -> float:
    """d h_t / d x_(t - distance) for h_t = lam * h_(t-1) + x_t."""
    ### BEGIN SOLUTION
    # h_t = x_t + lam x_(t-1) + lam² x_(t-2) + ...: the input d steps back is multiplied by
    # lam once per step in between.
    return lam**distance
    ### END SOLUTION


# %%
check("01.3", linear_rnn_gradient)

# %% [markdown]
# ## Exercise 01.4 — How far a gradient survives (★★)
#
# The chapter measured a per-step factor of about 0.6 for a freshly initialised LSTM and
# about 0.97 for one whose forget gate is held open. If a gradient shrinks by a factor
# $|\lambda|$ per step, after how many steps has it fallen below `threshold`? Write
# `steps_until_below(lam, threshold)` returning the smallest integer $d \ge 0$ with
# $|\lambda|^d <$ `threshold` (for $0 < |\lambda| < 1$ and $0 <$ `threshold` $< 1$). Then
# call it for each factor above: how far does a gradient travel before it is a millionth of
# its size, compared with the sequence length of 500 in the chapter?


# %%
def steps_until_below(lam: float, threshold: float) -> int:
    """Smallest d >= 0 with |lam| ** d < threshold."""
    ### BEGIN SOLUTION
    # |lam|^d < threshold  <=>  d > log(threshold) / log(|lam|)  (both logs are negative).
    return math.floor(math.log(threshold) / math.log(abs(lam))) + 1
    ### END SOLUTION


# %%
check("01.4", steps_until_below)

# %% tags=["nbval-check-output", "solution_only"]
for lam in (0.6, 0.97):
    print(f"factor {lam}: below 1e-6 after {steps_until_below(lam, 1e-6)} steps")

# %% [markdown]
# ## Exercise 01.5 — Cross-attention (★★)
#
# In encoder-decoder ("Bahdanau") attention the decoder asks and the encoder answers: the
# queries come from the decoder's states, the keys and values from the encoder's. Write
# `cross_attention(decoder_x, encoder_x, w_q, w_k, w_v)` for `decoder_x (B, Lq, D)`,
# `encoder_x (B, Lk, D)`, `w_q, w_k (D, d_k)` and `w_v (D, d_v)`: one head of scaled
# dot-product attention, $\mathrm{softmax}(Q K^\top / \sqrt{d_k}) V$ with
# $Q$ = `decoder_x @ w_q`, $K$ = `encoder_x @ w_k`, $V$ = `encoder_x @ w_v`, returning
# `(B, Lq, d_v)`. You may use `attention.functional.scaled_dot_product_attention` (mind its
# `[batch, heads, seq, dim]` layout) or write the softmax yourself.


# %%
def cross_attention(decoder_x, encoder_x, w_q, w_k, w_v):
    """One head of cross-attention: (B, Lq, D), (B, Lk, D) -> (B, Lq, d_v)."""
    ### BEGIN SOLUTION
    q = decoder_x @ w_q  # (B, Lq, d_k): the decoder asks
    k = encoder_x @ w_k  # (B, Lk, d_k): the encoder is searched
    v = encoder_x @ w_v  # (B, Lk, d_v): and answers
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, Lq, Lk)
    return torch.softmax(scores, dim=-1) @ v  # (B, Lq, d_v)
    ### END SOLUTION


# %%
check("01.5", cross_attention)

# %% [markdown]
# ## Exercise 01.6 — Predict, then run: the forget-gate bias (★★)
#
# Section 1.2 judged C1 ("information fades with distance; LSTM gating eases this but does
# not cure it") with an LSTM whose forget-gate bias was raised by 3 as the model that eases
# the decay, and found it *reproduced*: that LSTM's far gradient is orders of magnitude below
# its near one, but far less so than the default LSTM's. Now raise the bias to **+5**, the
# value section 1.4 uses as its remedy: at initialisation $f \approx \sigma(5) \approx 0.993$
# instead of $\sigma(3) \approx 0.95$. Before running anything, work out roughly how much
# $0.993^{450}$ and $0.95^{450}$ are (the far band is about 450 steps from the near one), and
# predict the verdict of the same verdict function, `c1_verdict`: "reproduced" (eases, does
# not cure), "partly" (one half fails) or "not reproduced" (no decay to ease, or attention not
# flat). Then run the cell below (a few seconds) and let `check` compare.


# %%
def my_prediction() -> str:
    """C1's verdict with forget-gate bias +5: "reproduced", "partly" or "not reproduced"."""
    ### BEGIN SOLUTION
    return "partly"
    ### END SOLUTION


# %%
outcome = c1_sweep_run(seed=0, seq_len=500, forget_bias=5.0, eased="lstm")  # a few seconds
print(outcome.verdict, outcome.numbers["far/near (RNN, GRU, LSTM, eased, attention)"])

# %%
check("01.6", my_prediction, outcome=outcome)

# %% [markdown] tags=["solution_only"]
# *Partly: "eases" holds, "does not cure" fails.* With the gate at $\sigma(5)$ the cell keeps
# over 99 % of its memory per step, and $0.993^{450} \approx 0.04$ while $0.95^{450} \approx
# 10^{-10}$: the far gradient is now about half of the near one (far/near 0.48, per-step factor
# 0.998), no longer an order of magnitude below it. The plain models still decay and attention
# is still flat, so the claim is not "not reproduced"; but at initialisation this LSTM is not
# limited by distance at all. "Does not cure" describes how a default network starts, not what
# a recurrent network can do.
