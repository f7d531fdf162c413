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
# # Chapter 8 — Writing attention by hand
#
# Here the code *is* the argument. We write a single attention head as a PyTorch module, then a
# multi-head one, one line at a time, checking each intermediate tensor against the package and
# against PyTorch's `nn.MultiheadAttention` given the same weights. Then we break it on
# purpose. Multi-head attention has two lines that only rearrange memory — the
# `view`/`transpose` that cuts the model width into heads, and the one that glues them back —
# and several plausible ways to write each give the right *shape* and the wrong *content*. The
# article warns that such a slip runs without an error and quietly ruins the model (C28). We
# take that apart: what each wrong order does to the data and to a model that needs its heads,
# why a single head hides it, and which unit tests see it, the article's three (shape, causal
# mask, non-zero gradients) included.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - write single-head and multi-head self-attention from scratch, with the shape of every
#   tensor, and prove them equal to a reference implementation;
# - map your weights onto `nn.MultiheadAttention`'s (`in_proj_weight`, `in_proj_bias`,
#   `out_proj`, `batch_first`, mask polarity) and back;
# - recognise the common wrong `view`/`transpose` orders and say what each does to the data;
# - explain why a head-layout bug is invisible with one head, and why some wrong orders are
#   harmless while others wreck training;
# - choose unit tests that catch a layout bug, and say why shape, mask and gradient tests
#   miss it.

# %%
#| default_exp ch08
import inspect
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Patch
from torch import nn

import book.claims.ch08 as claims
from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention, SelfAttention, merge_heads, split_heads
from attention.masks import causal_mask, from_torch_attn_mask
from book.claims import claims_table, record_claim
from book.diagrams.ch08 import merge_layouts, split_layouts, weight_layout
from book.experiments.parallel import run_each
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.plotting import plot_bar_spread, set_style
from book.sceptic import sweep_summary

set_style()
make_deterministic(0)

# %% [markdown]
# ## 8.1 One head, from the formula
#
# Chapter 2 wrote attention as five steps: project the tokens to queries, keys and values,
# score every query against every key, scale by $1/\sqrt{d_k}$, softmax each row of scores,
# and average the values with those probabilities. As a module: three `nn.Linear` layers and
# five lines. A mask is applied to the scores before the softmax, with the package's
# convention, `True` = may attend; forbidden scores are filled with $-\infty$ so that they get
# exactly zero weight.
#
# The running example is lopsided on purpose, so that no two axes have the same length and a
# shape printout cannot be ambiguous: $B = 2$ sequences of $L = 6$ tokens, model width
# $D = 12$, later $H = 3$ heads of $d_k = 4$.

# %%
B, L, D, H = 2, 6, 12, 3
DH = D // H  # the head width d_k
x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(0))  # (B, L, D)


class OneHead(nn.Module):
    """Single-head self-attention: x (B, L, D) -> (B, L, d_k), and the weights (B, L, L)."""

    def __init__(self, d_model: int, d_k: int) -> None:
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, L, d_k) each
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, L, L)
        if mask is not None:  # bool, True = may attend
            scores = scores.masked_fill(~mask, float("-inf"))  # (B, L, L)
        weights = scores.softmax(dim=-1)  # (B, L, L): each row sums to 1
        return weights @ v, weights  # (B, L, d_k), (B, L, L)


torch.manual_seed(1)
one_head = OneHead(D, DH)
out_1, weights_1 = one_head(x)  # (B, L, d_k), (B, L, L)
print("out", tuple(out_1.shape), "weights", tuple(weights_1.shape))

# %% [markdown]
# The package's `SelfAttention` is the same module (same weight names, so one loads the
# other's `state_dict`). Both must agree with and without a causal mask, and the causal mask
# must leave the first token looking only at itself: the article's second test in its simplest
# form.

# %%
package_head = SelfAttention(D, DH)
package_head.load_state_dict(one_head.state_dict())
allowed = causal_mask(L)  # (L, L) bool, True = may attend: the lower triangle
with torch.no_grad():
    for mask in (None, allowed):
        mine, mine_w = one_head(x, mask)
        theirs, theirs_w = package_head(x, mask=mask, need_weights=True)
        torch.testing.assert_close(mine, theirs)
        torch.testing.assert_close(mine_w, theirs_w)
    assert torch.equal(mine_w[:, 0, 0], torch.ones(B))  # query 0 sees only key 0
print("OneHead = attention.heads.SelfAttention, without and with a causal mask: ✓")

# %% [markdown]
# ## 8.2 Many heads: the two lines that only move memory
#
# Multi-head attention (chapter 3) runs $H$ such heads side by side, each on its own
# $d_k = D/H$ slice of the projected features, and mixes their outputs with one more matrix
# $W_O$. The arithmetic is not new; two lines that compute nothing and only rearrange memory
# are:
#
# - **split**: `(B, L, D)` → `(B, H, L, d_k)`. First `view(B, L, H, d_k)`: each token's $D$
#   features are cut into $H$ consecutive slices (free: memory is laid out token by token).
#   Then `transpose(1, 2)`: the head axis moves in front of the sequence axis, so each head
#   becomes a batch of its own sequences.
# - **merge**: `(B, H, L, d_k)` → `(B, L, D)`. `transpose(1, 2)` back, then flatten the last
#   two axes. After a transpose the tensor is not contiguous, so the flattening needs
#   `.contiguous().view(...)` (or `reshape`, which copies when it must).
#
# We step through the forward pass with a package layer's weights (with biases, as in
# `nn.MultiheadAttention`), checking every intermediate against the package's own pieces.

# %%
torch.manual_seed(2)
package_mha = MultiHeadAttention(D, H)  # q_proj, k_proj, v_proj, out_proj: nn.Linear(D, D)

with torch.no_grad():
    Q = package_mha.q_proj(x)  # (B, L, D): all heads' queries at once
    K = package_mha.k_proj(x)  # (B, L, D)
    V = package_mha.v_proj(x)  # (B, L, D)

    q = Q.view(B, L, H, DH).transpose(1, 2)  # (B, H, L, d_k)
    k = K.view(B, L, H, DH).transpose(1, 2)  # (B, H, L, d_k)
    v = V.view(B, L, H, DH).transpose(1, 2)  # (B, H, L, d_k)
    assert torch.equal(q, split_heads(Q, num_heads=H))
    assert torch.equal(q[1, 2, 4], Q[1, 4, 8:12])  # head 2 of token 4 = its features 8..11

    scores = q @ k.transpose(-2, -1) / math.sqrt(DH)  # (B, H, L, L): scale by the HEAD width
    weights = scores.softmax(dim=-1)  # (B, H, L, L)
    heads = weights @ v  # (B, H, L, d_k)
    torch.testing.assert_close(heads, scaled_dot_product_attention(q, k, v))

    merged = heads.transpose(1, 2).contiguous().view(B, L, D)  # (B, L, D)
    assert torch.equal(merged, merge_heads(heads))
    assert torch.equal(merged[1, 4, 4:8], heads[1, 1, 4])  # token 4, slots 4..7 = head 1

    out = package_mha.out_proj(merged)  # (B, L, D)
    torch.testing.assert_close(out, package_mha(x))

for name, t in (("Q", Q), ("q (split)", q), ("weights", weights), ("heads", heads),
                ("merged", merged), ("out", out)):  # fmt: skip
    print(f"{name:>10}: {tuple(t.shape)}")

# %% [markdown]
# The same lines as a module, as one writes it for a project — with a mask argument and the
# weights returned on request. Its four projections have the package's names, so it loads any
# package layer's `state_dict`; with `H = 1` it is the article's "single-head" module with an
# output projection.


# %%
class MyMultiHeadAttention(nn.Module):
    """Multi-head self-attention by hand: x (B, L, D) -> (B, L, D)."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None, need_weights=False):
        b, l, d = x.shape
        h, dk = self.num_heads, self.d_k
        q = self.q_proj(x).view(b, l, h, dk).transpose(1, 2)  # (B, H, L, d_k)
        k = self.k_proj(x).view(b, l, h, dk).transpose(1, 2)  # (B, H, L, d_k)
        v = self.v_proj(x).view(b, l, h, dk).transpose(1, 2)  # (B, H, L, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)  # (B, H, L, L)
        if mask is not None:  # bool, True = may attend, broadcastable to (B, H, L, L)
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)  # (B, H, L, L)
        out = (weights @ v).transpose(1, 2).contiguous().view(b, l, d)  # (B, L, D)
        out = self.out_proj(out)  # (B, L, D)
        return (out, weights) if need_weights else out


mine = MyMultiHeadAttention(D, H)
mine.load_state_dict(package_mha.state_dict())
with torch.no_grad():
    for mask in (None, allowed):
        want = package_mha(x, mask=mask)  # (B, L, D)
        torch.testing.assert_close(mine(x, mask), want)
print("MyMultiHeadAttention = attention.heads.MultiHeadAttention, without and with a mask: ✓")

# %% [markdown]
# ## 8.3 The same weights in `nn.MultiheadAttention`
#
# The strongest check of a hand-written layer is PyTorch's own, given *the same weights*: any
# difference is then a bug, not a different initialisation. That needs the weight layout of
# `nn.MultiheadAttention`, which differs from ours in five ways (the diagram below):
#
# 1. **One packed input matrix.** `in_proj_weight` has shape `(3D, D)`: rows `0 … D−1` are
#    $W_Q$, rows `D … 2D−1` are $W_K$, rows `2D … 3D−1` are $W_V$, each in `nn.Linear`'s
#    `(out, in)` orientation, so `x @ in_proj_weight[:D].T` are the queries. Within each
#    block, head $h$ owns rows $h d_k \dots (h+1) d_k - 1$, the slices our split takes.
#    `in_proj_bias` `(3D,)` is packed the same way. (With `kdim`/`vdim` different from
#    `embed_dim`, torch keeps separate `q_proj_weight`, `k_proj_weight`, `v_proj_weight`.)
# 2. **`out_proj`** is an ordinary `Linear(D, D)`; its columns $h d_k \dots$ read head $h$.
# 3. **`batch_first=False` is the default**: inputs are `(L, B, D)` unless you ask for
#    `batch_first=True`.
# 4. **Weights come averaged over heads** by default (`need_weights=True,
#    average_attn_weights=True` gives `(B, L, L)`); `average_attn_weights=False` gives the
#    per-head `(B, H, L, L)`.
# 5. **Masks have the opposite polarity**: in `attn_mask` and `key_padding_mask`, `True`
#    means *blocked*. `is_causal=True` is only a hint and needs the mask as well.

# %%
fig = weight_layout()

# %% [markdown]
# The mapping written out by hand, checked against the package's converter
# (`MultiHeadAttention.to_torch`) and against each point of the list.

# %%
torch_mha = nn.MultiheadAttention(D, H, batch_first=True)
with torch.no_grad():
    torch_mha.in_proj_weight.copy_(
        torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight])  # (3D, D)
    )
    torch_mha.in_proj_bias.copy_(torch.cat([mine.q_proj.bias, mine.k_proj.bias, mine.v_proj.bias]))
    torch_mha.out_proj.weight.copy_(mine.out_proj.weight)
    torch_mha.out_proj.bias.copy_(mine.out_proj.bias)

converted = package_mha.to_torch()  # the package's converter gives the same tensors
for name, tensor in torch_mha.state_dict().items():
    assert torch.equal(tensor, converted.state_dict()[name]), name

with torch.no_grad():
    ours, ours_w = mine(x, need_weights=True)  # (B, L, D), (B, H, L, L)
    theirs, theirs_w = torch_mha(x, x, x)  # (B, L, D), (B, L, L): averaged over heads
    torch.testing.assert_close(ours, theirs)  # 1 and 2: the packed weights
    torch.testing.assert_close(ours_w.mean(dim=1), theirs_w)  # 4: averaged ...
    _, per_head = torch_mha(x, x, x, average_attn_weights=False)  # (B, H, L, L)
    torch.testing.assert_close(ours_w, per_head)  # ... or per head

    x_lbd = x.transpose(0, 1)  # (L, B, D)
    seq_first = nn.MultiheadAttention(D, H)  # 3: batch_first=False, the default
    seq_first.load_state_dict(torch_mha.state_dict())
    torch.testing.assert_close(seq_first(x_lbd, x_lbd, x_lbd)[0].transpose(0, 1), ours)

    blocked = ~allowed  # 5: torch's polarity, True = blocked
    causal_theirs = torch_mha(x, x, x, attn_mask=blocked, is_causal=True)[0]
    torch.testing.assert_close(mine(x, allowed), causal_theirs)
    torch.testing.assert_close(from_torch_attn_mask(blocked), allowed)  # the package converts
print("by hand = nn.MultiheadAttention with the same weights: outputs, weights, layouts ✓")

# %% [markdown]
# **The most common silent bug with torch's module** is point 3: a module built with the
# default `batch_first=False` and fed `(B, L, D)`. It returns the right shape, but reads the
# batch axis as the sequence: each token attends to the same position in the *other sequences
# of the batch*, never to its own neighbours. Neither a shape test nor the permutation test of
# section 8.5 sees it (shuffling positions shuffles what the module takes for separate
# sequences, so the output shuffles along). Two tests do: the comparison with a
# `batch_first=True` module given the same weights, and *batch independence* — change sequence
# 1 only, and sequence 0's output must not move.

# %%
with torch.no_grad():
    wrong = seq_first(x, x, x)[0]  # (B, L, D) read as (L', B', D) with L' = B, B' = L
    other = x.clone()  # (B, L, D)
    other[1] = torch.randn(L, D, generator=torch.Generator().manual_seed(4))  # sequence 1 only
    moved = (seq_first(other, other, other)[0][0] - wrong[0]).abs().max().item()
    kept = (torch_mha(other, other, other)[0][0] - theirs[0]).abs().max().item()
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(2))
    shuffled = seq_first(x[:, perm], x[:, perm], x[:, perm])[0]  # (B, L, D)
    equivariant = torch.allclose(shuffled, wrong[:, perm], atol=1e-5)
print(f"batch_first=False fed (B, L, D): output {tuple(wrong.shape)}, equal to the right "
      f"result: {torch.allclose(wrong, ours)}")  # fmt: skip
print(f"changing sequence 1 moves sequence 0's output by {moved:.2g} "
      f"(batch_first=True: {kept:.2g}); the permutation test passes it: {equivariant}")
assert wrong.shape == x.shape and not torch.allclose(wrong, ours)
assert moved > 1e-3 and kept < 1e-6 and equivariant

# %% [markdown]
# The forgiving details: torch scales by $1/\sqrt{d_k}$ with the head width, as we do; in
# evaluation mode without gradients it may take a fused "fast path" that differs only by
# rounding (hence `assert_close`'s float32 tolerances above). From here on the reference is the
# package's layer; the broken variants use `HandMultiHeadAttention` (section 8.4): the
# class above with the split and merge as a parameter.

# %% [markdown]
# ## 8.4 C28: the wrong orders
#
# **The claim.** Getting the order of `view` and `transpose` wrong raises no error, mixes the
# heads and ruins the model's results.
#
# **The usual wrong versions**, as they turn up in practice. Each gives the right shape; the
# table lists its split and merge as one would write them (`x` is a projection `(B, L, D)`,
# `out` the attention's output) and what it does to the data. Each layout is a pair of
# functions plus those two lines (the book's tests check that the strings do what the
# functions do).

# %%
#| export
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from attention.blocks import FeedForward
from attention.checks import check_choice, check_positive_int
from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention
from attention.positional import RotaryEmbedding
from book.experiments.tasks import (
    RELATIONS,
    pairs_batch,
    pairs_loss,
    pairs_vocab_size,
    relation_accuracy,
)
from book.experiments.training import fit, torch_threads

Tensor = torch.Tensor


def _split_correct(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads).transpose(1, 2)  # (B, H, L, Dh)


def _merge_correct(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.transpose(1, 2).contiguous().view(b, l, d)  # (B, L, D)


def _split_reshape(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, num_heads, l, d // num_heads)  # (B, H, L, Dh): right shape, wrong content


def _merge_reshape(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.reshape(b, l, d)  # (B, L, D): right shape, wrong content


def _merge_no_contiguous(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.transpose(1, 2).view(b, l, d)  # raises once H > 1 and L > 1


def _split_transpose_first(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.transpose(1, 2).reshape(b, num_heads, l, d // num_heads)  # (B, H, L, Dh)


def _split_no_transpose(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads)  # (B, L, H, Dh): "heads" play sequence


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, d // num_heads, num_heads).permute(0, 3, 1, 2)  # (B, H, L, Dh)


@dataclass(frozen=True)
class HeadLayout:
    """One way to split ``(B, L, D)`` into heads and merge them back.

    ``split(x, num_heads)`` maps ``(B, L, D)`` to the 4-D tensor the attention runs on (for
    the right layout ``(B, H, L, Dh)``); ``merge(out, B, L, D)`` maps the attention's output
    back to ``(B, L, D)``. ``split_code`` and ``merge_code`` are the same operations as a
    reader writes them (``B, L, H, Dh, D`` as local names).
    """

    name: str
    split: Callable[[Tensor, int], Tensor]
    merge: Callable[[Tensor, int, int, int], Tensor]
    split_code: str
    merge_code: str
    effect: str  # what it does to the data, in a few words
    keeps_tokens: bool  # every head row holds one whole token's features, at its position
    silent: bool = True  # runs without error for H > 1


CORRECT = "correct"
_RIGHT_MERGE = "out.transpose(1, 2).contiguous().view(B, L, D)"
LAYOUTS: dict[str, HeadLayout] = {
    layout.name: layout
    for layout in (
        HeadLayout(CORRECT, _split_correct, _merge_correct,
                   "x.view(B, L, H, Dh).transpose(1, 2)", _RIGHT_MERGE,
                   "head h gets features h*Dh ... (h+1)*Dh - 1 of every token", keeps_tokens=True),
        HeadLayout("reshape split", _split_reshape, _merge_correct,
                   "x.view(B, H, L, Dh)", _RIGHT_MERGE,
                   "head h gets whole tokens (h*L/H onwards), each cut into H pieces of Dh",
                   keeps_tokens=False),
        HeadLayout("reshape merge", _split_correct, _merge_reshape,
                   "x.view(B, L, H, Dh).transpose(1, 2)", "out.view(B, L, D)",
                   "the heads' outputs are glued token-block by token-block: rows of tokens mix",
                   keeps_tokens=False),
        HeadLayout("reshape both", _split_reshape, _merge_reshape,
                   "x.view(B, H, L, Dh)", "out.view(B, L, D)",
                   "split and merge undo each other, but head h only sees tokens h*L/H ... "
                   "(a block of the sequence), each cut into pieces", keeps_tokens=False),
        HeadLayout("transpose first", _split_transpose_first, _merge_correct,
                   "x.transpose(1, 2).reshape(B, H, L, Dh)", _RIGHT_MERGE,
                   "head h keeps its features, read feature by feature: each 'token' mixes "
                   "positions", keeps_tokens=False),
        HeadLayout("no transpose", _split_no_transpose, _merge_reshape,
                   "x.view(B, L, H, Dh)", "out.reshape(B, L, D)",
                   "attention runs over each token's H slices: tokens never see each other",
                   keeps_tokens=False),
        HeadLayout("interleaved", _split_interleaved, _merge_correct,
                   "x.view(B, L, Dh, H).permute(0, 3, 1, 2)", _RIGHT_MERGE,
                   "head h gets features h, h+H, h+2H, ... of every token: a fixed permutation",
                   keeps_tokens=True),
        HeadLayout("no contiguous", _split_correct, _merge_no_contiguous,
                   "x.view(B, L, H, Dh).transpose(1, 2)", "out.transpose(1, 2).view(B, L, D)",
                   "the merge raises a RuntimeError (view of a transposed tensor)",
                   keeps_tokens=True, silent=False),
    )
}  # fmt: skip
WRONG = tuple(name for name in LAYOUTS if name != CORRECT)
SILENT_WRONG = tuple(name for name in WRONG if LAYOUTS[name].silent)


def get_layout(layout: str | HeadLayout) -> HeadLayout:
    if isinstance(layout, HeadLayout):
        return layout
    return LAYOUTS[check_choice("layout", layout, tuple(LAYOUTS))]


def source_map(layout: str | HeadLayout, seq_len: int, d_model: int, num_heads: int) -> Tensor:
    """Where each entry of the split tensor comes from: ``(*split shape, 2)`` int64 holding
    (token, feature) of the input ``(1, L, D)`` (batch axis dropped)."""
    lay = get_layout(layout)
    token = torch.arange(seq_len).view(1, seq_len, 1).expand(1, seq_len, d_model)  # (1, L, D)
    feature = torch.arange(d_model).view(1, 1, d_model).expand(1, seq_len, d_model)
    both = torch.stack([token, feature], dim=-1).contiguous()  # (1, L, D, 2)
    # Split the (token, feature) pairs as if they were one value: apply the layout to each.
    parts = [lay.split(both[..., i].contiguous(), num_heads)[0] for i in range(2)]
    return torch.stack(parts, dim=-1)  # (H, L, Dh, 2) for the right layout


# %% tags=["nbval-check-output"]
for name, layout in LAYOUTS.items():
    print(f"{name}:\n    split  {layout.split_code}\n    merge  {layout.merge_code}")
    if name != CORRECT:
        print(f"    -> {layout.effect}")

# %% [markdown]
# - **reshape split** views the projection straight as `(B, H, L, d_k)`. Memory is token by
#   token, so the first "head" receives the first $L/H$ tokens *whole*, each cut into $H$
#   pieces that it treats as separate tokens.
# - **reshape merge** splits right but glues the heads back with a plain `view(B, L, D)`:
#   token $t$'s output row is filled with consecutive blocks of the heads' outputs, so rows mix
#   several tokens.
# - **reshape both** makes both mistakes. They undo each other, so a "split then merge gives
#   back the input" test passes, but in between the attention ran on the wrong pieces: head $h$
#   only sees a block of the sequence.
# - **transpose first** swaps the sequence and feature axes before cutting: each head keeps its
#   own features but reads them feature by feature, so one of its "tokens" holds one feature
#   of several positions.
# - **no transpose** forgets the transpose: the attention runs over the $H$ slices of each
#   token, and tokens never see each other.
# - **interleaved** views as `(B, L, d_k, H)`: head $h$ gets every $H$-th feature instead of a
#   contiguous slice — different from `nn.MultiheadAttention`, but only by a fixed permutation
#   of features inside each token.
# - **no contiguous** forgets `.contiguous()` in the merge — and that one is not silent.
#
# The diagrams apply each split (and merge) to a labelled tensor — 4 tokens of 6 features, 2
# heads: colour is the token, number the feature.

# %%
fig = split_layouts()

# %%
fig = merge_layouts()

# %% [markdown]
# **The module with the layout as a parameter.** `HandMultiHeadAttention` is
# `MyMultiHeadAttention` of section 8.2 with the split and merge taken from a layout (and
# optional rotary positions, applied to q and k after the split, on whatever the layout made
# of them, as a buggy model would). With the correct layout it loads a package layer's
# `state_dict` and computes the same thing. `make_attention` gives every layout the same
# weights.

# %%
#| export
class HandMultiHeadAttention(nn.Module):
    """Multi-head self-attention with the head ``layout`` as a parameter: x (B, L, D) ->
    (B, L, D). ``q_proj, k_proj, v_proj, out_proj`` are ``nn.Linear(D, D)`` as in
    :class:`attention.heads.MultiHeadAttention` (their ``state_dict`` are interchangeable)."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        layout: str | HeadLayout = CORRECT,
        bias: bool = True,
        rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.layout = get_layout(layout)
        self.rotary = rotary
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``mask``: bool, True = may attend. Returns ``(B, L, D)`` (and the weights,
        ``(B, H, L, L)`` for the right layout, whatever shape the layout's attention had
        otherwise)."""
        b, l, d = x.shape
        split = self.layout.split
        q = split(self.q_proj(x), self.num_heads)  # (B, H, L, Dh) if the layout is right
        k = split(self.k_proj(x), self.num_heads)  # (B, H, L, Dh)
        v = split(self.v_proj(x), self.num_heads)  # (B, H, L, Dh)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, causal=causal, need_weights=True
        )  # (B, H, L, Dh), (B, H, L, L)
        out = self.out_proj(self.layout.merge(out, b, l, d))  # (B, L, D)
        return (out, weights) if need_weights else out


def make_attention(
    layout: str | HeadLayout, d_model: int = 12, num_heads: int = 2, *, seed: int = 0
) -> HandMultiHeadAttention:
    """A :class:`HandMultiHeadAttention` whose weights depend on ``seed`` only (not on the
    layout): every layout gets the same weights."""
    torch.manual_seed(seed)
    return HandMultiHeadAttention(d_model, num_heads, layout=layout)


_PROJS = ("q_proj", "k_proj", "v_proj", "out_proj")


def package_twin(module: nn.Module) -> MultiHeadAttention:
    """The package's :class:`MultiHeadAttention` with ``module``'s four projections."""
    twin = MultiHeadAttention(module.d_model, module.num_heads, bias=module.q_proj.bias is not None)
    twin.load_state_dict(
        {k: v for k, v in module.state_dict().items() if k.split(".")[0] in _PROJS}
    )
    return twin.train(module.training)


# %%
book_module = HandMultiHeadAttention(D, H, layout=CORRECT)
book_module.load_state_dict(package_mha.state_dict())
with torch.no_grad():
    for mask in (None, allowed):
        torch.testing.assert_close(book_module(x, mask=mask), package_mha(x, mask=mask))
print("HandMultiHeadAttention, correct layout = attention.heads.MultiHeadAttention: ✓")

# %% [markdown]
# **Silent, all but one.** Every broken module runs and returns a `(B, L, D)` tensor on our
# running example — except the one without `.contiguous()`: `view` cannot regroup the
# transposed memory and PyTorch refuses.

# %%
with torch.no_grad():
    for name in SILENT_WRONG:
        shape = tuple(make_attention(name, D, H)(x).shape)
        print(f"{name:>16}: output {shape}, no error")
        assert shape == (B, L, D)

# %%
try:
    make_attention("no contiguous", D, H)(x)
except RuntimeError as error:  # the one loud bug: view cannot regroup the transposed memory
    print(f"RuntimeError: {error}")
    assert "view size is not compatible" in str(error)
else:
    raise AssertionError("the module without .contiguous() ran: expected PyTorch to refuse")

# %% [markdown]
# ### With one head, the bug hides
#
# With $H = 1$ most of the wrong orders become the right one: `view(B, 1, L, D)` of a
# `(B, L, D)` tensor reinterprets nothing, interleaving one head is the identity, and
# `transpose(1, 2)` of a size-1 axis moves no memory (so even the missing `.contiguous()` goes
# through). Only **transpose first** (still swapping positions and features) and **no
# transpose** (still attending over the wrong axis) change the computation. The prediction:
# with one head, *reshape split*, *reshape merge*, *reshape both*, *interleaved* and
# *no contiguous* are exactly equal to the correct module (same weights), and all of them
# differ with three heads.

# %%
INVISIBLE_WITH_ONE_HEAD = ("reshape split", "reshape merge", "reshape both", "interleaved",
                           "no contiguous")  # fmt: skip
equal_1 = claims.one_head_equal(WRONG, num_heads=1, d_model=D)
equal_3 = claims.one_head_equal(WRONG, num_heads=H, d_model=D)
for name in WRONG:
    print(f"{name:>16}: output equal to the correct one with 1 head: {equal_1[name]!s:>5}, "
          f"with {H} heads: {equal_3[name]}")  # fmt: skip

# %%
claims.assert_c28_one_head(equal_1, equal_3, invisible=INVISIBLE_WITH_ONE_HEAD)
n_invisible = sum(equal_1[name] for name in WRONG)
record_claim(
    "C28 one head",
    claim="A head-layout bug is invisible with one head",
    experiment="every wrong layout against the correct one, same weights, torch.equal, "
    f"d_model {D}, 1 and {H} heads",
    verdict=claims.c28_one_head_verdict(equal_1, equal_3),
    measured=f"{n_invisible} of {len(WRONG)} wrong layouts give bit-identical outputs with 1 head "
    f"({', '.join(n for n in WRONG if equal_1[n])}); all {len(WRONG)} differ with {H} heads; "
    "'transpose first' and 'no transpose' differ already with 1 head",
)

# %% [markdown]
# So the bug survives: a model debugged with one head changes behaviour when scaled up, when
# nobody is looking. Whether a single-head check
# catches the remaining two is the subject of section 8.5. Does the split depend on these
# weights, three heads or this width? The sceptic's sweep (`make sceptic CH=08`) re-ran the
# comparison with the weights and inputs of seeds 1–3, with two heads, with eight heads of
# width 8 in a 64-wide module, and with section 8.3's `batch_first=False` bug added to the set:

# %% tags=["nbval-check-output"]
print(sweep_summary("C28 one head", keys=["invisible with 1 head", "differ with 2 heads",
                                          "differ with 3 heads", "differ with 8 heads",
                                          "visible with 1 head"]))  # fmt: skip

# %% [markdown]
# **Partly, in every setting tried**: the same five layouts hide with one head and all differ
# with more, whatever the weights, the width or the number of heads; *transpose first* and *no
# transpose* never hide. The `batch_first=False` bug does not hide either: it mixes sequences,
# not heads, and one head does not undo that.
#
# ### Does it ruin training?
#
# **A task that needs separate heads.** Chapter 3's two-relation task: sequences of 6 letters,
# each once in lower and once in upper case, every token carrying a digit 0–7; at every
# position the model must output the digit of the *previous token* (a positional relation) and
# of its *partner*, the same letter in the other case (a relation found by content). One head
# cannot serve both (chapter 3 measured that); two heads can. The model is chapter 3's too,
# with `HandMultiHeadAttention` in the layout under test: embedding, one pre-LN block (2 heads,
# rotary positions after the split, a feed-forward network), read-out; width 32, 300 steps of
# Adam at learning rate 0.01, batches of 64 — chapter 3's settings, not tuned here. Every
# layout starts from the same weights and sees the same batches; three seeds each.
#
# **What we expect, and the thresholds.** Not every wrong order is equally wrong. The
# *interleaved* layout only permutes the features inside each token, and the weights can absorb
# that: with weights $W$ it computes exactly what the correct module computes with the rows of
# $W_Q, W_K, W_V$ permuted. We check that equality first (up to float rounding). PyTorch initialises
# every weight independently, so the permuted weights are as likely as the original ones and
# an interleaved model trains like a correct one. The other five layouts put pieces of
# different tokens into one head's "token", which no weights can undo. So:
#
# - the correct layout must learn the task: every seed's held-out accuracy (both digits)
#   at least `MIN_CORRECT = 0.9`, or a ruined layout cannot be told from a hard task;
# - "ruins results", for a layout that mixes tokens, means: its mean accuracy at least
#   `RUIN_GAP = 0.2` below the correct mean, and even its best seed below the correct
#   worst seed;
# - the interleaved layout must *not* be ruined: its best seed within `REACH = 0.05` of the
#   correct mean.
#
# (The thresholds are constants of the chapter's claims module, `claims`.) The relabelling,
# as code: feature `perm[j]` of a projection is what the interleaved split puts where the
# correct split puts feature `j`.

# %%
#| export
def _interleaved_permutation(d_model: int, num_heads: int) -> Tensor:
    """``(D,)``: feature ``perm[j]`` of a projection is what the interleaved split puts where
    the correct split puts feature ``j`` (head h, slot e <- feature e·H + h)."""
    return source_map("interleaved", 1, d_model, num_heads)[:, 0, :, 1].reshape(d_model)


def _permute_qkv(state: dict[str, Tensor], prefix: str, perm: Tensor) -> dict[str, Tensor]:
    """``state`` with the output features (rows) of ``prefix`` + ``q_proj/k_proj/v_proj``
    permuted by ``perm``; everything else untouched."""
    state = dict(state)
    for name in ("q_proj", "k_proj", "v_proj"):
        for part in ("weight", "bias"):
            key = f"{prefix}{name}.{part}"
            if key in state:
                state[key] = state[key][perm]
    return state


def interleaved_as_correct(module: HandMultiHeadAttention) -> HandMultiHeadAttention:
    """A correct-layout module computing exactly what the ``"interleaved"`` ``module`` does:
    its Q, K, V projections' output features permuted (head h, slot e <- feature e·H + h)."""
    if module.layout.name != "interleaved":
        raise ValueError(f"module must have the 'interleaved' layout, got {module.layout.name!r}")
    d, h = module.d_model, module.num_heads
    twin = HandMultiHeadAttention(
        d, h, layout=CORRECT, bias=module.q_proj.bias is not None, rotary=module.rotary
    )
    twin.load_state_dict(_permute_qkv(module.state_dict(), "", _interleaved_permutation(d, h)))
    return twin


# %%
interleaved = make_attention("interleaved", D, H, seed=5)
with torch.no_grad():
    difference = (interleaved(x) - interleaved_as_correct(interleaved)(x)).abs().max().item()
print(f"interleaved(W) vs correct(W, Q/K/V rows permuted): largest difference {difference:.1e}")
assert difference < 1e-6  # the same function: only float rounding may differ

# %% [markdown]
# **The model and its training step.** Chapter 3's model with `HandMultiHeadAttention` in its
# block, and Adam through the book's `fit` loop on the loss of both read-outs (`pairs_loss`, a
# cross-entropy per relation). Parameters from `seed`, batches from `seed + 1`, the held-out
# batch from `seed + 2`.

# %%
#| export
class LayoutPairModel(nn.Module):
    """Embedding → one pre-LN block (:class:`HandMultiHeadAttention` with ``layout`` and RoPE,
    then a feed-forward network) → the two digit read-outs of chapter 3's pairs task:
    tokens ``(B, L)`` -> logits ``(B, L, 2, n_values)``."""

    def __init__(
        self, layout: str | HeadLayout, *, n_keys: int, n_values: int, d_model: int,
        num_heads: int,
    ) -> None:
        super().__init__()
        self.n_values = check_positive_int("n_values", n_values)
        self.embed = nn.Embedding(pairs_vocab_size(n_keys, n_values), d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = HandMultiHeadAttention(
            d_model, num_heads, layout=layout, rotary=RotaryEmbedding(d_model // num_heads)
        )
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, 2 * d_model)
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(RELATIONS) * n_values)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, L, D)
        x = x + self.attn(self.norm1(x))  # (B, L, D)
        x = x + self.ff(self.norm2(x))  # (B, L, D)
        logits = self.readout(self.norm(x))  # (B, L, 2 * n_values)
        return logits.unflatten(-1, (len(RELATIONS), self.n_values))  # (B, L, 2, n_values)


@dataclass(frozen=True)
class LayoutRun:
    """What :func:`train_layout` measured on the held-out batch."""

    layout: str
    seed: int
    losses: list[float]
    accuracy: tuple[float, float]  # (previous, partner)

    @property
    def mean_accuracy(self) -> float:
        return sum(self.accuracy) / len(self.accuracy)


def train_layout(
    layout: str, *, seed: int = 0, num_heads: int = 2, d_model: int = 32, n_pairs: int = 6,
    n_values: int = 8, steps: int = 300, batch_size: int = 64, lr: float = 1e-2,
    eval_size: int = 512, progress: bool = False,
    initial_state: Mapping[str, Tensor] | None = None,
) -> LayoutRun:
    """Train :class:`LayoutPairModel` with ``layout`` on chapter 3's two-relation task (one
    thread). ``initial_state`` (a ``state_dict``) replaces the weights drawn from ``seed``."""
    name = get_layout(layout).name
    torch.manual_seed(seed)
    model = LayoutPairModel(
        name, n_keys=n_pairs, n_values=n_values, d_model=d_model, num_heads=num_heads
    )
    if initial_state is not None:
        model.load_state_dict(initial_state)
    log = fit(
        model,
        lambda g: pairs_batch(batch_size, n_pairs, n_values, generator=g),
        lambda m, batch: pairs_loss(m(batch.tokens), batch.targets),
        steps=steps, lr=lr, data_seed=seed + 1, threads=1, progress=progress,
        desc=f"{name}, seed {seed}",
    )  # fmt: skip
    held_out = pairs_batch(
        eval_size, n_pairs, n_values, generator=torch.Generator().manual_seed(seed + 2)
    )
    with torch.no_grad(), torch_threads(1):
        accuracy = relation_accuracy(model(held_out.tokens), held_out.targets)
    return LayoutRun(name, seed, log.losses, accuracy)


def interleaved_twin_state(
    seed: int, *, num_heads: int = 2, d_model: int = 32, n_pairs: int = 6, n_values: int = 8
) -> dict[str, Tensor]:
    """The initial ``state_dict`` of a *correct*-layout :class:`LayoutPairModel` computing
    exactly what the interleaved model of :func:`train_layout` (same ``seed``) starts from."""
    torch.manual_seed(seed)
    model = LayoutPairModel(
        "interleaved", n_keys=n_pairs, n_values=n_values, d_model=d_model, num_heads=num_heads
    )
    return _permute_qkv(model.state_dict(), "attn.", _interleaved_permutation(d_model, num_heads))


# %% tags=["nbval-check-output"]
setup = {
    name: p.default
    for name, p in inspect.signature(train_layout).parameters.items()
    if name not in ("layout", "seed", "progress", "initial_state")
}
print("setup of every run:", setup, "| seeds:", SEEDS)
TRAINED = (CORRECT, *SILENT_WRONG)
# the runs side by side, one per core: what the loop `[train_layout(n, seed=s) for n, s in
# settings]` gives, bit for bit (every run seeds what it draws)
runs = run_each(lambda setting: train_layout(setting[0], seed=setting[1]),
                [(n, s) for n in TRAINED for s in SEEDS], desc="layouts x seeds")  # fmt: skip
both = claims.accuracy_spreads(runs)  # layout -> Spread of the mean accuracy over the two digits
relation = {
    rel: {n: [r.accuracy[i] for r in runs if r.layout == n] for n in TRAINED}
    for i, rel in enumerate(("previous", "partner"))
}

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
for ax, rel in zip(axes, ("previous", "partner"), strict=True):
    plot_bar_spread(
        relation[rel],
        title=f"C28: {rel}-token digit, held-out accuracy",
        ylabel="accuracy (3 seeds: mean, min–max, dots)",
        ax=ax,
        reference=(1 / 8, "chance 1/8"),
    )
    ax.tick_params(axis="x", labelrotation=30)
axes[0].get_legend().remove()  # one legend, in the empty band of the right panel
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
def mean_range(s):
    return f"{s.mean:.3f} ({s.min:.3f}-{s.max:.3f})"


print(f"held-out accuracy over {len(SEEDS)} seeds: mean (min-max)")
print(f"{'layout':>16} {'previous':>20} {'partner':>20} {'both':>20}")
for name in TRAINED:
    prev, partner = (mean_range(spread(relation[rel][name])) for rel in ("previous", "partner"))
    print(f"{name:>16} {prev:>20} {partner:>20} {mean_range(both[name]):>20}")

# %% [markdown]
# One interleaved seed stands out. Is the layout to blame? That seed's interleaved model starts
# from weights that, relabelled, are a correct model's — so we train the *correct* layout from
# exactly those weights, on the same batches. If the layout were to blame, the correct model
# would learn the task; if the starting point is, it fails the same way.

# %%
unlucky = min(SEEDS, key=lambda s: next(r for r in runs if r.layout == "interleaved"
                                          and r.seed == s).mean_accuracy)  # fmt: skip
run_interleaved = next(r for r in runs if r.layout == "interleaved" and r.seed == unlucky)
run_twin = train_layout(CORRECT, seed=unlucky, initial_state=interleaved_twin_state(unlucky))
print(f"seed {unlucky}: interleaved layout   accuracy previous {run_interleaved.accuracy[0]:.3f}, "
      f"partner {run_interleaved.accuracy[1]:.3f}")  # fmt: skip
print(f"seed {unlucky}: correct, same weights accuracy previous {run_twin.accuracy[0]:.3f}, "
      f"partner {run_twin.accuracy[1]:.3f}")  # fmt: skip
gap_10 = max(abs(a - b) for a, b in zip(run_interleaved.losses[:10], run_twin.losses[:10],
                                         strict=True))  # fmt: skip
print(f"largest loss difference over the first 10 steps: {gap_10:.1e}")
assert gap_10 < 1e-4  # the same computation, up to rounding
assert all(abs(a - b) < 0.05 for a, b in zip(run_interleaved.accuracy, run_twin.accuracy,
                                             strict=True))  # fmt: skip

# %%
accuracy = {name: both[name].values for name in TRAINED}
claims.assert_c28_ruins(accuracy, keeps_tokens={n: LAYOUTS[n].keeps_tokens for n in TRAINED})
record_claim(
    "C28",
    claim="A wrong view/transpose order runs without error, mixes the heads and ruins results",
    experiment="6 silent wrong layouts and 1 loud one; 1-layer, 2-head model (d_model 32, RoPE) "
    "on chapter 3's two-relation task, 300 steps, 3 seeds, held-out accuracy",
    verdict=claims.c28_verdict(accuracy, raises=[n for n in WRONG if not LAYOUTS[n].silent]),
    measured=f"correct {both[CORRECT].format('.3f')}; "
    + "; ".join(f"{n} {mean_range(both[n])}" for n in SILENT_WRONG)
    + "; 'no contiguous' raises RuntimeError",
)

# %% [markdown]
# **Verdict on C28: partly reproduced.** Five of the six silent wrong orders ruin the model,
# as the article says, in the way their diagrams predict. *No transpose* is the worst: tokens
# never meet, and both digits stay near chance. *Reshape split* and *reshape merge* garble both
# relations. *Reshape both* and *transpose first* keep much of the previous-token relation — a
# block of neighbouring positions survives — but lose the partner, which can sit anywhere. Two
# layouts do not fit. Forgetting `.contiguous()` is not silent: PyTorch raises at the
# first forward pass with two heads. And the *interleaved* heads are "wrong" only against a
# reference: the model is the correct one with its weights relabelled, and trains like it. Its
# one bad seed is the 300-step budget's, not the layout's: the correct layout from the same
# (relabelled) weights stalls the same way, on chapter 3's plateau (one relation learnt, the
# other to come), and a longer budget lets it leave (below; exercise 08.5 runs that seed with
# twice the steps). So "mixes the heads" is true of all six silent layouts, "ruins results"
# only of the five that mix *tokens* — and the interleaved one still breaks on standard
# pretrained weights.
#
# **Under a sceptic's changes.** The verdict rests on three seeds, one budget and two heads.
# Each was changed once, the experiment re-run and judged by the same verdict function (`make
# sceptic CH=08`): three other seeds, a budget more than three times longer, and four heads.
# The stored results (mean accuracy over both digits, min–max over the seeds):

# %% tags=["nbval-check-output"]
print(sweep_summary("C28"))

# %% [markdown]
# The verdict that survives: **partly**, at both budgets, on seeds 0–2 and 3–5, with two heads
# and with four. The five layouts that mix tokens stay ruined under every change, and
# *interleaved* is never ruined; with the longer budget every interleaved seed learns both
# relations, so its stalled starts (seeds 3–5 show one too) are a budget effect.

# %% [markdown]
# ## 8.5 Which tests catch a wrong order?
#
# The article recommends three tests for a hand-written attention module:
#
# 1. **shape**: a `(B, L, D)` input gives a `(B, L, D)` output;
# 2. **causal mask**: with a causal mask, the first position puts all its weight on itself;
# 3. **gradients**: after a backward pass, every weight has a non-zero gradient;
#
# and, as an option, a numerical comparison with `nn.MultiheadAttention`. We add that one and
# three tests that need no reference, each built on a property correct attention has and a
# layout bug can break:
#
# 4. **vs nn.MultiheadAttention**: the same output as torch's module with the same weights
#    (section 8.3);
# 5. **head independence**: change the query and value weights of head $h$ only; with
#    `out_proj` set to the identity, only output features $h d_k \dots$ may change;
# 6. **permutation**: without masks or positions, shuffling the tokens shuffles the outputs
#    the same way (chapter 4);
# 7. **no future leak**: with a causal mask, the output at position $t$ does not change
#    when the tokens after $t$ do — the article's mask test looks at one row of the
#    *weights*, this one at what reaches the output.
#
# Every test runs on every layout, with the same weights, at $H = 3$ and at $H = 1$.

# %% [markdown]
# All seven take a module with this chapter's interface and return `True` when it passes. The
# first four need nothing you would not write anyway:

# %%
#| export
TEST_SHAPE = (2, 5)  # (B, L) of the inputs the tests use


def _test_input(module: nn.Module, seed: int = 0) -> torch.Tensor:
    """The same input on every call: (B, L, D) with (B, L) = TEST_SHAPE, D = module.d_model."""
    b, l = TEST_SHAPE
    return torch.randn(b, l, module.d_model, generator=torch.Generator().manual_seed(seed))


def shape_test(module: nn.Module) -> bool:
    """The article's first test: ``(B, L, D)`` in, ``(B, L, D)`` out."""
    x = _test_input(module)  # (B, L, D)
    with torch.no_grad():
        return tuple(module(x).shape) == tuple(x.shape)


def causal_weights_test(module: nn.Module) -> bool:
    """The article's second test: with a causal mask, position 0 puts all its weight on
    position 0."""
    x = _test_input(module)  # (B, L, D)
    with torch.no_grad():
        _, weights = module(x, causal=True, need_weights=True)  # (B, H, L, L)
    row = weights[..., 0, :]  # (B, H, L): query 0's weights
    return bool(torch.all(row[..., 0] == 1) and torch.all(row[..., 1:] == 0))


def gradient_test(module: nn.Module) -> bool:
    """The article's third test: after a backward pass every weight has a non-zero gradient."""
    m = copy.deepcopy(module)
    m.zero_grad(set_to_none=True)
    m(_test_input(m)).pow(2).sum().backward()
    return all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in m.parameters())


def torch_comparison_test(module: nn.Module, atol: float = 1e-5) -> bool:
    """The same output as ``nn.MultiheadAttention`` given the same weights (in the package's
    ``q_proj, k_proj, v_proj, out_proj`` layout; see :func:`package_twin`)."""
    x = _test_input(module)  # (B, L, D)
    reference = package_twin(module).to_torch().eval()
    with torch.no_grad():
        want, _ = reference(x, x, x, need_weights=False)  # (B, L, D)
        return bool(torch.allclose(module(x), want, atol=atol))


# %% [markdown]
# The last three are worth copying into your own project. Each takes a module with this
# chapter's interface (`module(x, causal=...)` on `x` of shape `(B, L, D)`, `module.d_model`,
# `module.num_heads`, and for head independence the four projections) and reads a fixed input,
# so a verdict never depends on the random numbers of the day. (The `#| export` cells are
# copied by `make export` into `book.pages.ch08`, which the table below, the exercise checks
# and the tests import: this page is their one definition.)

# %% [markdown]
# **Head independence.** In correct multi-head attention, head $h$ reads only its own slice
# of the projected queries, keys and values (features $h d_k$ to $(h + 1) d_k - 1$), and the
# merge puts its output back in that slice. Change the query and value weights of head $h$
# alone, make `out_proj` the identity, and only that slice of the output may move — and it
# must move, or the change reached nothing. A split that hands head $h$ other heads' features,
# or a merge that writes elsewhere, fails. A layout that keeps every head's features but
# scrambles their positions (*transpose first*) maps the slice to the slice, and passes.

# %%
#| export
def head_independence_test(module: nn.Module) -> bool:
    """Each head is a separate computation: change the query and value weights of head h
    (rows ``h*Dh ... (h+1)*Dh - 1`` of ``q_proj`` and ``v_proj``) and, with ``out_proj`` set
    to the identity, only output features ``h*Dh ...`` may change — and they must."""
    m = copy.deepcopy(module).eval()
    h_count, d = m.num_heads, m.d_model
    dh = d // h_count
    with torch.no_grad():
        m.out_proj.weight.copy_(torch.eye(d))
        if m.out_proj.bias is not None:
            m.out_proj.bias.zero_()
        x = _test_input(m)
        base = m(x)  # (B, L, D): the heads side by side
        g = torch.Generator().manual_seed(1)
        for h in range(h_count):
            rows = slice(h * dh, (h + 1) * dh)
            changed = copy.deepcopy(m)
            for proj in (changed.q_proj, changed.v_proj):
                proj.weight[rows] += torch.randn(proj.weight[rows].shape, generator=g)
            moved = (changed(x) - base).abs().amax(dim=(0, 1)) > 1e-6  # (D,) per feature
            inside = torch.zeros(d, dtype=torch.bool)
            inside[rows] = True
            if moved[~inside].any() or not moved[inside].any():
                return False
    return True


# %% [markdown]
# **Permutation.** Without a mask or positional encoding, each output is an average of the
# values with weights computed from token contents alone (chapter 4), so shuffling the tokens
# shuffles the outputs the same way. A layout that puts pieces of several tokens into one row
# of a head makes a token's output depend on its neighbours by position, and fails. A layout
# that keeps every token in its own row (*no transpose*, *interleaved*) stays equivariant
# however wrong it is, and passes.

# %%
#| export
def permutation_test(module: nn.Module, atol: float = 1e-5) -> bool:
    """Without positions or masks, self-attention is permutation-equivariant (chapter 4):
    shuffling the tokens shuffles the outputs the same way."""
    x = _test_input(module)
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        return bool(torch.allclose(module(x[:, perm]), module(x)[:, perm], atol=atol))


# %% [markdown]
# **No future leak.** With `causal=True`, the output at position $t$ may depend on tokens
# $0$ to $t$ only: replace every token after $t$, and the outputs at $0$ to $t$ must stay, for
# every $t$. The article's mask test reads one row of the weights, which a layout bug leaves
# perfect: the mask is applied to the score matrix, whatever the split made of it. This test
# reads the output, so it sees a later token that a wrong split moved into an earlier row. A
# layout that keeps the order of positions passes.

# %%
#| export
def future_test(module: nn.Module, atol: float = 1e-5) -> bool:
    """With ``causal=True``, the output at position t does not change when the tokens after
    t change (checked for every t)."""
    x = _test_input(module)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        base = module(x, causal=True)  # (B, L, D)
        for t in range(x.shape[1] - 1):
            other = x.clone()
            other[:, t + 1 :] = torch.randn(other[:, t + 1 :].shape, generator=g)
            if not torch.allclose(
                module(other, causal=True)[:, : t + 1], base[:, : t + 1], atol=atol
            ):
                return False
    return True


# %%
table = claims.outcome_table(d_model=D, num_heads=H)
table_1 = claims.outcome_table(d_model=D, num_heads=1)


def show_table(tbl, title):
    print(title)
    print(f"{'':>16}" + "".join(f"{t:>14}" for t in ("shape", "causal mask", "gradients",
                                                      "vs torch", "heads indep.", "permutation",
                                                      "no leak")))  # fmt: skip
    for name, row in tbl.items():
        print(f"{name:>16}" + "".join(f"{row[t]:>14}" for t in claims.TESTS))


# %% tags=["nbval-check-output"]
show_table(table, f"{H} heads ('fails'/'raises' = the test caught the module):")
print()
show_table(table_1, "1 head:")

# %%
outcome_code = {claims.PASSED: 0, claims.FAILED: 1, claims.RAISED: 2}
grid_values = [[outcome_code[table[n][t]] for t in claims.TESTS] for n in LAYOUTS]
fig, ax = plt.subplots(figsize=(9, 4.2))
colours = plt.matplotlib.colors.ListedColormap(["#e8e8e8", "#d7301f", "#fc8d59"])
ax.imshow(grid_values, cmap=colours, vmin=0, vmax=2, aspect="auto")
ax.set_xticks(range(len(claims.TESTS)), list(claims.TESTS), rotation=25, ha="right")
ax.set_yticks(range(len(LAYOUTS)), list(LAYOUTS))
ax.grid(False)
ax.axvline(len(claims.ARTICLE_TESTS) - 0.5, color="black", lw=1.5)
ax.set_title(f"Which test catches which layout ({H} heads; left of the line: the article's)")
ax.set_xlabel("unit test")
ax.set_ylabel("head layout of the module")
ax.legend(
    handles=[Patch(color=c, label=lbl) for c, lbl in
             zip(colours.colors, ("passes", "fails (bug caught)", "raises (bug caught)"),
                 strict=True)],  # fmt: skip
    loc="upper left",
    bbox_to_anchor=(1.01, 1),
)
fig.tight_layout()

# %% [markdown]
# **What the table says.** The article's three tests pass every silent wrong layout: a layout
# bug changes no shape, leaves the mask on the score matrix (whatever it now means) and cuts no
# gradient path. Only the module without `.contiguous()` fails them, by raising. With one
# head, the gradient test catches *no transpose* (attending over a single slice makes the
# softmax constant, so queries and keys get no gradient) — the recipe's only catch.
#
# The comparison with `nn.MultiheadAttention` catches every wrong layout, the harmless
# interleaved one included: it checks *which* numbers meet. Each reference-free test misses
# some: head independence misses *transpose first*, permutation the layouts that keep every
# token in place (*no transpose*, *interleaved*), the future-leak test those that preserve the
# order of positions. The assertions: the article's three tests miss every silent layout; the
# comparison with torch catches all seven wrong ones; the three reference-free tests catch all
# seven together.

# %%
claims.assert_tests_miss(table, claims.ARTICLE_TESTS, SILENT_WRONG)
claims.assert_test_catches(table, "vs nn.MultiheadAttention", WRONG)
REFERENCE_FREE = ("head independence", "permutation", "no future leak")
claims.assert_tests_catch_together(table, REFERENCE_FREE, WRONG)
caught = {t: sum(table[n][t] != claims.PASSED for n in SILENT_WRONG) for t in claims.TESTS}
print("silent wrong layouts caught, out of", len(SILENT_WRONG), ":", caught)
record_claim(
    "C28 tests",
    claim="Shape, causal-mask and gradient tests (plus an optional comparison with "
    "nn.MultiheadAttention) verify a hand-written attention module",
    experiment=f"7 tests x 8 head layouts, same weights, d_model {D}, {H} heads and 1 head",
    verdict=claims.c28_tests_verdict(table, WRONG),
    measured=f"of {len(SILENT_WRONG)} silent wrong layouts: "
    + ", ".join(f"{t} catches {c}" for t, c in caught.items())
    + "; with 1 head, the gradient test catches 'no transpose'",
)

# %% [markdown]
# **Under a sceptic's changes.** The same table with the weights of seeds 1–3, with two heads,
# with eight heads in a 64-wide module, and with section 8.3's `batch_first=False` bug added
# to the set (counts over every wrong layout, the loud *no contiguous* among them):

# %% tags=["nbval-check-output"]
print(sweep_summary("C28 tests", keys=["bugs", "shape catches", "vs nn.MultiheadAttention catches",
                                       "reference-free tests miss"]))  # fmt: skip

# %% [markdown]
# **Verdict on the article's test recipe: partly reproduced**, in every setting tried. The
# three tests it calls essential catch a forgotten mask, a detached weight, a wrong output
# width — but *none* of the layout bugs C28 warns about. The one that does is mentioned in
# passing: the comparison with `nn.MultiheadAttention` *given the same weights* (the article
# says "keep the initialisation consistent"; the reliable way is to copy the weights, as in
# section 8.3). Without a reference — a new attention variant — the three property tests do
# the job together for the head layouts, but not for the `batch_first=False` bug: it keeps
# heads apart, positions in order and is equivariant, so only the comparison (or the batch
# independence test of section 8.3) catches it. One more trap: the round-trip test often
# written for the two helpers, `merge(split(x)) == x`, is blind to *symmetric* mistakes (and
# to the missing `.contiguous()`, since the split's output is itself a transposed view the
# wrong merge can `view` back; only the attention's freshly computed output trips it):

# %%
probe = torch.randn(B, L, D, generator=torch.Generator().manual_seed(9))  # (B, L, D)
for name, layout in LAYOUTS.items():
    try:
        back = layout.merge(layout.split(probe, H), B, L, D)
        verdict = "passes" if torch.equal(back, probe) else "fails"
    except RuntimeError:
        verdict = "raises"
    print(f"{name:>16}: merge(split(x)) == x {verdict}")

# %% [markdown]
# *Reshape both* and *no transpose* pass it: their merge is the exact inverse of their
# split, and what went wrong happens in between, in the attention.

# %% [markdown]
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - Multi-head attention is single-head attention run on $H$ slices at once; the only new
#   code is two memory rearrangements. Split: `view(B, L, H, d_k)` then `transpose(1, 2)`.
#   Merge: `transpose(1, 2)`, then `.contiguous().view(B, L, D)` (or `reshape`).
# - `nn.MultiheadAttention` packs $[W_Q; W_K; W_V]$ by rows into `in_proj_weight (3D, D)` in
#   `nn.Linear`'s `(out, in)` layout, uses `(L, B, D)` unless `batch_first=True`, averages the
#   returned weights over heads, and reads `True` in a mask as *blocked*.
# - Of the common wrong orders, one raises (the missing `.contiguous()`) and six run. Five
#   mix tokens and ruin a model that needs its heads; the sixth (interleaved heads) only
#   relabels features and trains fine, but cannot load standard weights.
# - With one head most wrong orders are bit-identical to the right one, so a bug written
#   while debugging with $H = 1$ appears only at scale.
# - Shape, causal-mask and gradient tests do not see layout bugs. Compare with
#   `nn.MultiheadAttention` given the same weights; without a reference, test head
#   independence, permutation equivariance and the absence of future leaks.
#
# ## Exercises
#
# Your workbook `my-exercises/08_attention_by_hand.py` (`make lab` copies it there) has five:
# unpack `nn.MultiheadAttention`'s weights into the four matrices; write the multi-head forward
# pass (the check names each wrong order of this chapter); write the comparison test with
# `nn.MultiheadAttention`; write the future-leak test; and predict what a longer budget does to
# the interleaved layout's unlucky seed, then run it. Check your answers in the notebook, or
# all at once with `make check CH=08`.
#
# ## Further reading
#
# - Vaswani et al. (2017), *Attention Is All You Need* — multi-head attention.
# - Rush (2018), *The Annotated Transformer* — the paper as runnable code; its
#   `MultiHeadedAttention` splits with `view(nbatches, -1, h, d_k).transpose(1, 2)`.
# - Karpathy, *nanoGPT* (`model.py`, `CausalSelfAttention`) — the same two lines, with shape
#   comments, in a model that trains GPT-2.
# - Raschka (2024), *Build a Large Language Model (From Scratch)*, chapter 3 — attention coded
#   step by step, from one head to a multi-head module.
# - The PyTorch documentation of `torch.nn.MultiheadAttention` — the arguments of section 8.3
#   (`batch_first`, `need_weights`, `average_attn_weights`, `attn_mask`, `is_causal`).
