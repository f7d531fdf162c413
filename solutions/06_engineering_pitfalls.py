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
# # Chapter 6 — Exercises: engineering pitfalls
#
# Six exercises on chapter 6 (`chapters/06_engineering_pitfalls.py`): three pieces of
# code that are easy to get subtly wrong — a causal mask, a masked softmax, a key-padding
# mask — two numbers worth knowing by heart: where float16 overflows in `QKᵀ`, and how big
# a KV cache is — and one experiment: predict a claim's verdict when one knob changes, then
# run it. Each check runs your answer on inputs it chooses and compares it with the
# package; when your answer matches a typical mistake (the wrong polarity, `-1e9` in float16,
# a padding mask on the queries, …) the message names it.

# %%
import math

import torch

from book.checks import check
from book.claims.ch06 import c22_sweep_run

# %% [markdown]
# ## Exercise 06.1 — A causal mask in the package's polarity (★)
#
# Write `causal(n)`: the `(n, n)` bool mask of a decoder, in the package's polarity
# (`True` = may attend): query `i` may attend key `j` exactly when `j <= i`.


# %%
def causal(n: int) -> torch.Tensor:
    ### BEGIN SOLUTION
    return torch.ones(n, n, dtype=torch.bool).tril()  # (n, n): row i allows keys 0 .. i
    ### END SOLUTION


# %%
check("06.1", causal)

# %% [markdown] tags=["solution_only"]
# *The usual slips.* `torch.triu(torch.ones(n, n), diagonal=1).bool()` is the mask
# `nn.MultiheadAttention` wants (`True` = blocked) — the opposite polarity; `tril(-1)` drops
# the diagonal and leaves row 0 with no key at all.

# %% [markdown]
# ## Exercise 06.2 — A masked softmax that survives float16 and empty rows (★★)
#
# Write `masked_softmax(scores, allowed)`: softmax over the last axis of `scores` (float32 or
# float16) where the keys with `allowed == False` get weight 0, and a row with **no** allowed
# key gives all zeros (not NaN, not uniform weights). The result has the dtype of `scores`.


# %%
def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    ### BEGIN SOLUTION
    s = scores.float().masked_fill(~allowed, float("-inf"))  # float32: no overflow
    row_max = s.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(s - row_max)  # masked keys: exp(-inf) = 0
    denom = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(denom == 0, torch.ones_like(denom), denom)  # empty row: 0 / 1
    return weights.to(scores.dtype)
    ### END SOLUTION


# %%
check("06.2", masked_softmax)

# %% [markdown] tags=["solution_only"]
# *Why not `-1e9`?* `scores.half().masked_fill(~allowed, -1e9)` raises: the value does not
# fit in float16. Written as an additive float mask it turns into `-inf` silently, and the
# empty row is NaN again. And in float32 `-1e9` gives an empty row *uniform* weights.

# %% [markdown]
# ## Exercise 06.3 — A key-padding mask from lengths (★)
#
# Write `key_padding(lengths, max_len)`: for a batch whose sequence `b` has `lengths[b]` real
# tokens followed by padding, the bool mask (`True` = real token, may be attended to) that
# broadcasts against scores of shape `(B, H, Lq, Lk)` and removes the padded **keys**.


# %%
def key_padding(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    ### BEGIN SOLUTION
    keep = torch.arange(max_len)[None, :] < lengths[:, None]  # (B, L): True = real token
    return keep[:, None, None, :]  # (B, 1, 1, L): one value per key, for every head and query
    ### END SOLUTION


# %%
check("06.3", key_padding)

# %% [markdown] tags=["solution_only"]
# `attention.masks.padding_mask(lengths, max_len)` is the package's version. Shaped
# `(B, 1, L, 1)` the same values would mask padded *queries* — rows nobody reads — and leave
# the real tokens attending to the pads.

# %% [markdown]
# ## Exercise 06.4 — Where float16 `QKᵀ` overflows (★)
#
# A query and a key are aligned, every one of their `d_k` elements equal to `s`, and the
# product `q @ k.T` is computed in float16 *before* the `1/√d_k` scale. Write
# `overflow_scale(d_k)`: the value of `s` at which the product reaches float16's largest
# value, 65504.


# %%
def overflow_scale(d_k: int) -> float:
    ### BEGIN SOLUTION
    return math.sqrt(65504 / d_k)  # q·k = d_k · s² = 65504
    ### END SOLUTION


# %%
check("06.4", overflow_scale)

# %% [markdown]
# ## Exercise 06.5 — The size of a KV cache (★)
#
# Write `kv_cache_bytes(num_layers, batch_size, num_heads, num_kv_heads, head_dim, seq_len,
# bytes_per_element)`: the bytes a decoder's key/value cache holds for `seq_len` positions.
# The model has `num_heads` query heads and `num_kv_heads` key/value heads (MHA: equal; GQA:
# fewer; MQA: one).


# %%
def kv_cache_bytes(num_layers, batch_size, num_heads, num_kv_heads, head_dim, seq_len,
                   bytes_per_element):  # fmt: skip
    ### BEGIN SOLUTION
    return 2 * num_layers * batch_size * num_kv_heads * head_dim * seq_len * bytes_per_element
    ### END SOLUTION


# %%
check("06.5", kv_cache_bytes)

# %% [markdown] tags=["solution_only"]
# For a 24-layer model with 16 query heads of width 64 and 4 key/value heads, a batch of 8
# sequences of 2048 tokens in float16 needs `kv_cache_bytes(24, 8, 16, 4, 64, 2048, 2)` bytes
# — a quarter of what the same model with full multi-head attention would hold.

# %% tags=["solution_only"]
print(kv_cache_bytes(24, 8, 16, 4, 64, 2048, 2) / 2**20, "MiB")

# %% [markdown]
# ## Exercise 06.6 — Predict, then run: the classifier trained without its mask (★★)
#
# Section 6.3 trained its padding classifier *with* the key-padding mask, then ran it with
# and without the mask: without it, accuracy fell as the padding grew (C22: "padding
# dilutes"). Change one knob: train the classifier *without* its mask from the start (the
# bug present all along), then run it with and without the mask at 0 to 32 pads, seed 0,
# the chapter's 60 steps. C22's other two parts — the real tokens' outputs do not move with
# the mask, the combined padding + causal mask gives torch's output — are measured as in the
# chapter. Before running: what is C22's verdict? Write it in `my_prediction`.


# %%
def my_prediction() -> str:
    """C22's verdict for a classifier trained without its padding mask: "reproduced",
    "partly" or "not reproduced"."""
    ### BEGIN SOLUTION
    return "partly"
    ### END SOLUTION


# %%
outcome = c22_sweep_run(seeds=[0], steps=60, train_masked=False)  # about 1 s
print(outcome)

# %%
check("06.6", my_prediction, outcome=outcome)
