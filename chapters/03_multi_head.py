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
# # Chapter 3 — Multi-head attention
#
# Chapter 2 ended with one attention head: each token receives one weighted average of the
# values. This chapter asks what a single average cannot do, and answers with the design every
# Transformer uses: cut the model's width into $h$ narrower heads, let each attend on its own,
# and glue the results back together with one more matrix. We build it step by step, checking
# every shape, and confirm that our version, the package's `MultiHeadAttention` and PyTorch's
# `nn.MultiheadAttention` compute the same numbers. Then we test three claims: that $h$ heads
# cost no more than one wide head, that heads trained on a task with two relations divide the
# work between them, and that the head count is a trade-off with an optimum. The chapter ends
# with multi-query and grouped-query attention, which let heads share keys and values, and the
# memory they save.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - explain why one softmax row can fetch one thing cleanly but not two;
# - implement multi-head attention with `view`/`transpose`, stating every tensor's shape, and
#   say why their order matters;
# - show that an attention layer's FLOPs and parameters do not depend on $h$;
# - read a grid of attention heat maps and measure which relation each head serves;
# - reason about the head count as a trade-off between the number of heads and their width;
# - compute the size of a key/value cache and what MQA and GQA save.

# %%
#| default_exp ch03
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention, merge_heads, split_heads
from book.claims import claims_table, record_claim
from book.claims.ch03 import (
    C9B_THRESHOLDS,
    C10_MARGIN,
    assert_c8_same_matmuls,
    assert_c9a_heads_split_without_new_parameters,
    assert_c9b_heads_specialise,
    assert_c10_control_narrow_heads_fit_worse,
    assert_c10_rises_then_falls,
    assert_kv_cache_shrinks,
    c8_overhead,
    c8_verdict,
    c9a_verdict,
    c9b_specialisation_failures,
    c9b_verdict,
    c10_verdict,
    kv_cache_verdict,
)
from book.diagrams.ch03 import split_attend_concat
from book.experiments.parallel import run_keyed
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.experiments.tasks import pair_token_names
from book.plotting import plot_heads, plot_lines, plot_spread, reference_line, set_style
from book.sceptic import stored_sweeps, sweep_summary
from measure.memory import kv_cache_bytes
from measure.timing import min_seconds

set_style()
make_deterministic(0)


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# %% [markdown]
# ## 3.1 One head, one pattern
#
# A head's output for token $i$ is $\sum_j A_{ij} v_j$: *one* distribution over the positions,
# *one* average of what is there. Language asks for more: in *"the cat sat on the mat
# because it was tired"*, *it* wants its antecedent (*cat*), and may also want the verb that
# governs it and its neighbour — each a different attention pattern.
#
# A head can spread its weight, half on each of two positions, but then it returns their
# *average*, which forgets which value came from where. The smallest case: a query must report
# the value of position 1 (its "previous token") and of position 2 (its "partner"). One head
# attending half-and-half returns the same vector whether the two values are (3, 5) or (5, 3);
# two heads, one per position, keep the results in separate slots of the concatenated output.

# %%
digits = torch.eye(8)  # one-hot value vectors for the digits 0..7


def fetch(values: torch.Tensor, attended: list[list[int]]) -> torch.Tensor:
    """Each head attends uniformly to its listed positions (of 3); concatenate the heads."""
    n_heads = len(attended)
    allowed = torch.zeros(n_heads, 3, dtype=torch.bool)  # (H, Lk)
    for head, positions in enumerate(attended):
        allowed[head, positions] = True
    q = torch.zeros(1, n_heads, 1, 3)  # (B=1, H, Lq=1, d_k=3): equal scores everywhere ...
    keys = torch.eye(3).expand(1, n_heads, 3, 3)  # (1, H, Lk=3, 3)
    v = values.expand(1, n_heads, 3, 8)  # (1, H, 3, 8)
    mask = allowed[None, :, None, :]  # (1, H, 1, Lk): ... so the weights are uniform on it
    out = scaled_dot_product_attention(q, keys, v, mask)  # (1, H, 1, 8)
    return merge_heads(out)[0, 0]  # (H * 8,)


order_a = torch.stack([digits[0], digits[3], digits[5]])  # (3, 8): self, previous=3, partner=5
order_b = torch.stack([digits[0], digits[5], digits[3]])  # previous=5, partner=3
one_head = [[1, 2]]  # one head, half on each
two_heads = [[1], [2]]  # head 0 -> previous, head 1 -> partner


def show(features: torch.Tensor) -> str:
    return "{" + ", ".join(f"{i}: {features[i]:.1f}" for i in features.nonzero().flatten()) + "}"


# %% tags=["nbval-check-output"]
for name, heads in (("one head", one_head), ("two heads", two_heads)):
    a, b = fetch(order_a, heads), fetch(order_b, heads)
    print(f"{name:>9}: (3, 5) -> {show(a)}, (5, 3) -> {show(b)}, identical: {torch.equal(a, b)}")

# %%
assert torch.equal(fetch(order_a, one_head), fetch(order_b, one_head))  # the order is lost
assert not torch.equal(fetch(order_a, two_heads), fetch(order_b, two_heads))

# %% [markdown]
# The printout lists each output's non-zero features (feature: value). With one head, both
# orders give features 3 and 5 at one half each: nothing says which digit was the previous
# token. With two heads, head 0 fills the first eight features and head 1 the next eight, so
# "previous = 3" and "previous = 5" stay distinct. One head can learn *one* relation; it is the
# combination it cannot deliver. Section 3.4 trains models on exactly this.

# %% [markdown]
# ## 3.2 Building multi-head attention, one step at a time
#
# The recipe (Vaswani et al., 2017): project the tokens to queries, keys and values of the full
# width $d_\text{model}$, cut each vector into $h$ slices of $d_k = d_\text{model}/h$, run
# scaled dot-product attention independently on each slice, concatenate the $h$ results, and mix
# them with an output matrix $W_O$:
#
# $$\begin{gathered}
# \mathrm{MultiHead}(X) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W_O,\\
# \mathrm{head}_i = \mathrm{Attention}(X W_Q^{(i)}, X W_K^{(i)}, X W_V^{(i)}).
# \end{gathered}$$
# Our running example is chapter 2's sentence with random embeddings, every axis a different
# length so that shape printouts are unambiguous: $B = 1$, $L = 10$ tokens, $d_\text{model} =
# 12$, $h = 4$ heads, $d_k = 3$. We create the package's layer (without biases) and redo its
# computation by hand with its weight matrices. `nn.Linear` stores a weight as (out, in), so
# $W = $ `weight.T` in the book's $xW$ convention. The diagram shows the stages for these sizes.

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat", "because", "it", "was", "tired"]
B, L, D, H = 1, len(tokens), 12, 4
D_HEAD = D // H
_ = split_attend_concat(d_model=D, num_heads=H, seq_len=L)

gen = torch.Generator().manual_seed(3)
vocab = sorted(set(tokens))
embedding = torch.randn(len(vocab), D, generator=gen)  # (V, D)
x = embedding[torch.tensor([vocab.index(t) for t in tokens])].unsqueeze(0)  # (B, L, D)

torch.manual_seed(3)
mha = MultiHeadAttention(D, H, bias=False)
W_Q, W_K, W_V, W_O = (
    p.weight.detach().T for p in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj)
)

# %% [markdown]
# **Step 1 — project at full width.** One matrix product per role, as for a single head of width
# $d_\text{model}$: the columns of $W_Q$ are the four heads' $W_Q^{(i)}$ side by side.

# %%
Q = x @ W_Q  # (B, L, D)
K = x @ W_K  # (B, L, D)
V = x @ W_V  # (B, L, D)

# %% [markdown]
# **Step 2 — split into heads.** Each token's 12 features are cut into 4 contiguous slices of 3:
# `view` to $(B, L, h, d_k)$, then `transpose` the sequence and head axes so that each head
# becomes a separate "batch" of sequences, $(B, h, L, d_k)$, the layout attention expects.

# %%
q = Q.view(B, L, H, D_HEAD).transpose(1, 2)  # (B, H, L, d_k)
k = K.view(B, L, H, D_HEAD).transpose(1, 2)  # (B, H, L, d_k)
v = V.view(B, L, H, D_HEAD).transpose(1, 2)  # (B, H, L, d_k)

assert q.shape == (B, H, L, D_HEAD)
assert torch.equal(q[0, 2, 7], Q[0, 7, 6:9])  # head 2 of "it" = features 6..8 of its query
assert torch.equal(q, split_heads(Q, num_heads=H))  # the package's helper does the same

# %% [markdown]
# The order matters. Reshaping $(B, L, D)$ straight to $(B, h, L, d_k)$ raises no error, but it
# cuts the *flat* memory into $h$ consecutive blocks of $L d_k$ numbers: the first "head" holds
# all features of the first tokens (tokens 0, 1 and half of 2), not a slice of every token.
# Token 0 of head 1 is a piece of token 2 (head 1's block starts at number $L d_k$ = 30: token
# 2, feature 6):

# %%
wrong_q = Q.reshape(B, H, L, D_HEAD)  # (B, H, L, d_k): right shape, wrong content
assert torch.equal(wrong_q[0, 1, 0], Q[0, 2, 6:9])  # "head 1, token 0" is token 2's features
assert not torch.equal(wrong_q, q)

# %% [markdown]
# Chapter 8 trains a model with this bug and watches it learn badly without complaint.
#
# **Step 3 — attend, every head on its own.** Each head is an ordinary single-head attention of
# width $d_k = 3$, with its own scores $QK^\top/\sqrt{d_k}$ and softmax. One by one or all at
# once (the head axis acts as a batch axis), they give the same numbers.

# %%
per_head = [
    scaled_dot_product_attention(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1])
    for i in range(H)
]  # H tensors (B, 1, L, d_k): four independent single-head attentions
heads_out, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
# heads_out (B, H, L, d_k), weights (B, H, L, L)
assert torch.allclose(torch.cat(per_head, dim=1), heads_out)
assert torch.allclose(weights.sum(-1), torch.ones(B, H, L))  # each head: its own distribution

# %% [markdown]
# The scale is $1/\sqrt{d_k}$ with the *head's* width, 3, not $d_\text{model}$: chapter 2's
# variance argument is about the length of the vectors being multiplied.
#
# **Step 4 — concatenate.** Transpose back to $(B, L, h, d_k)$ and flatten the last two axes, so
# that token $i$'s row holds head 0's output, then head 1's, and so on (`reshape`, not `view`:
# after the transpose the tensor is not contiguous).

# %%
concat = heads_out.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
assert torch.equal(concat, merge_heads(heads_out))
assert torch.equal(concat[0, 7, 3:6], heads_out[0, 1, 7])  # "it": slots 3..5 = head 1

# %% [markdown]
# **Step 5 — mix with $W_O$.** Concatenation only places the heads side by side; $W_O$ combines
# them. Split by rows, it makes the output a *sum* over heads of each head's result times its
# own block of $W_O$: every output feature can draw on every head.

# %%
out = concat @ W_O  # (B, L, D)
head_sum = sum(
    heads_out[:, i] @ W_O[i * D_HEAD : (i + 1) * D_HEAD] for i in range(H)
)  # Σ_i head_i W_O^(i): (B, L, D)
assert torch.allclose(out, head_sum, atol=1e-6)

# %% tags=["nbval-check-output"]
steps = [
    ("x", x), ("Q = x W_Q", Q), ("q (split)", q), ("weights", weights),
    ("heads_out", heads_out), ("concat", concat), ("out = concat W_O", out),
]  # fmt: skip
for name, t in steps:
    print(f"{name:>17}: {tuple(t.shape)}")

# %% [markdown]
# Our five steps must reproduce the package's layer, and it must reproduce PyTorch's.
# `MultiHeadAttention.to_torch()` copies the weights into an `nn.MultiheadAttention` (which
# packs $W_Q, W_K, W_V$ into one `in_proj_weight`) and `from_torch` goes back; we check both
# directions, and the attention weights (torch averages them over heads by default).

# %%
with torch.no_grad():
    out_package = mha(x)  # (B, L, D)
    torch_mha = mha.to_torch()  # nn.MultiheadAttention(batch_first=True), same weights
    out_torch, weights_torch = torch_mha(x, x, x)  # (B, L, D), (B, L, L) head-averaged
    torch.manual_seed(4)
    fresh = nn.MultiheadAttention(D, H, batch_first=True)  # torch's init, with biases
    imported = MultiHeadAttention.from_torch(fresh)
    out_fresh_torch, out_fresh_ours = fresh(x, x, x)[0], imported(x)

torch.testing.assert_close(out_package, out)
torch.testing.assert_close(out_torch, out)
torch.testing.assert_close(weights_torch, weights.mean(dim=1))
torch.testing.assert_close(out_fresh_ours, out_fresh_torch)
print("by hand = attention.heads.MultiHeadAttention = torch.nn.MultiheadAttention: ✓")

# %% [markdown]
# No step needs a loop over heads: steps 1, 3 and 5 are each one batched matrix product, and
# steps 2 and 4 only reinterpret memory. What, then, do the heads cost?

# %% [markdown]
# ## 3.3 C8: are $h$ heads as cheap as one?
#
# **The claim.** Splitting into heads adds no computation: $h$ heads of width $d_\text{model}/h$
# cost about as much as one head of width $d_\text{model}$.
#
# **The count.** Count a multiply–add as 2 FLOPs and take self-attention over $L$ tokens:
#
# | part | one head, width $D$ | $h$ heads, width $D/h$ |
# | --- | --- | --- |
# | $Q, K, V$ projections | $3 \cdot 2LD^2$ | $3 \cdot 2LD^2$ (the same matrices) |
# | scores $QK^\top$ | $2L^2D$ | $h \cdot 2L^2(D/h) = 2L^2D$ |
# | weighted sum $AV$ | $2L^2D$ | $h \cdot 2L^2(D/h) = 2L^2D$ |
# | output $W_O$ | $2LD^2$ | $2LD^2$ |
# | scale + softmax | $\approx 6L^2$ | $\approx 6hL^2$ |
#
# Every matrix product costs *exactly* the same; only the elementwise softmax work grows, with
# $h$ score matrices instead of one. The extra $6(h-1)L^2$ FLOPs compare with $4L^2D$ for the
# two attention products alone, a ratio of $1.5(h-1)/D$ — about 2 % for BERT-base, less once the
# projections count too. The claim stops where the ratio grows: with $D = 64$, $h = 16$ it is
# about a third, and the layer's total grows by more than a quarter. `mha_flops` writes the
# table down (with grouped key/value heads, section 3.6, as an option); we check its matrix
# products against PyTorch's FLOP counter on a real forward pass, then compare 1 and 12 heads at
# BERT-base's shape.

# %%
#| export
# What the definitions this page exports (to book.pages.ch03, for its claims module and tests)
# need; each is defined below where the chapter first uses it.
from dataclasses import dataclass

import torch
from torch import nn

from attention.blocks import EncoderLayer
from attention.checks import check_choice, check_positive_int, check_rank, check_tensor
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from book.experiments.tasks import (
    RELATIONS,
    pairs_batch,
    pairs_loss,
    pairs_vocab_size,
    relation_accuracy,
)
from book.experiments.training import fit, torch_threads

# %%
#| export
# Elementwise work per attention score: the scale, the row max, subtract, exp, the row sum
# and the division. A nominal count (kernels differ), kept separate from the matrix products.
SOFTMAX_FLOPS_PER_SCORE = 6


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one multi-head self-attention forward pass (a multiply-add counts as 2)."""

    q_proj: int
    kv_proj: int  # K and V projections together
    scores: int  # Q Kᵀ, all heads
    weighted_sum: int  # A V, all heads
    out_proj: int
    softmax: int  # elementwise: SOFTMAX_FLOPS_PER_SCORE per score

    @property
    def matmul(self) -> int:
        """The matrix products: what ``torch.utils.flop_counter.FlopCounterMode`` counts."""
        return self.q_proj + self.kv_proj + self.scores + self.weighted_sum + self.out_proj

    @property
    def total(self) -> int:
        return self.matmul + self.softmax


def mha_flops(
    seq_len: int,
    d_model: int,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    batch_size: int = 1,
) -> FlopCount:
    """Analytic FLOPs of ``MultiHeadAttention(d_model, num_heads, num_kv_heads=...)`` on
    ``(batch_size, seq_len, d_model)`` tokens (self-attention, no mask): the table above.

    Head width ``d_head = d_model // num_heads``; W_K and W_V have width ``H_kv · d_head``.
    Biases (``L · width`` adds) are not counted.
    """
    seq_len = check_positive_int("seq_len", seq_len)
    d_model = check_positive_int("d_model", d_model)
    num_heads = check_positive_int("num_heads", num_heads)
    batch_size = check_positive_int("batch_size", batch_size)
    kv = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    if num_heads % kv:
        raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({kv})")
    d_head = d_model // num_heads
    tokens = batch_size * seq_len  # B·L rows through every projection
    scores_per_head = batch_size * seq_len * seq_len  # B·L² scores per head
    return FlopCount(
        q_proj=2 * tokens * d_model * d_model,  # (B·L, D) @ (D, D)
        kv_proj=2 * 2 * tokens * d_model * kv * d_head,  # two (B·L, D) @ (D, H_kv·d_head)
        scores=2 * num_heads * scores_per_head * d_head,  # H × (L, d_head) @ (d_head, L)
        weighted_sum=2 * num_heads * scores_per_head * d_head,  # H × (L, L) @ (L, d_head)
        out_proj=2 * tokens * d_model * d_model,  # (B·L, D) @ (D, D)
        softmax=SOFTMAX_FLOPS_PER_SCORE * num_heads * scores_per_head,
    )


# %%
seq_len = 512
bert_flops = {h: mha_flops(seq_len, 768, h) for h in (1, 12)}

x_bert = torch.randn(1, seq_len, 768, generator=torch.Generator().manual_seed(0))  # (B, L, D)
counted = {}
for h in (1, 12):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        MultiHeadAttention(768, h)(x_bert)
    counted[h] = counter.get_total_flops()

# %% tags=["nbval-check-output"]
print(f"{'GFLOP at L=512, d_model=768':>30} {'h=1':>8} {'h=12':>8}")
PARTS = ("q_proj", "kv_proj", "scores", "weighted_sum", "out_proj", "matmul", "softmax", "total")
for part in PARTS:
    a, b = (getattr(bert_flops[h], part) / 1e9 for h in (1, 12))
    print(f"{part:>30} {a:>8.4f} {b:>8.4f}")
print(f"{'torch FlopCounterMode (matmul)':>30} {counted[1] / 1e9:>8.4f} {counted[12] / 1e9:>8.4f}")

# %%
flops_1, flops_12 = bert_flops[1], bert_flops[12]
for h in (1, 12):
    assert counted[h] == bert_flops[h].matmul  # our count = torch's count of the matmuls
assert flops_12.total - flops_1.total == 11 * SOFTMAX_FLOPS_PER_SCORE * seq_len**2
assert_c8_same_matmuls(flops_1, flops_12)  # identical matrix products
overhead_12 = c8_overhead(flops_1, flops_12)  # the softmax terms, as a share of the layer
# Where "about the same" stops: a narrow model with many heads (d_model 64, 16 heads).
flops_narrow = (mha_flops(seq_len, 64, 1), mha_flops(seq_len, 64, 16))
overhead_narrow = c8_overhead(*flops_narrow)
print(f"softmax overhead: {overhead_12:.2%} at d_model 768, h 12; {overhead_narrow:.1%} at "
      f"d_model 64, h 16 ({c8_verdict(*flops_narrow)} there)")  # fmt: skip

# %% [markdown]
# **The stopwatch.** FLOPs are not time. We time the package's layer ($d_\text{model} = 512$,
# $L = 256$) for $h$ from 1 to 32, with the reference attention, which materialises the $h$ score
# matrices, and with PyTorch's fused `F.scaled_dot_product_attention` plugged in through
# `attn_fn`. Timings depend on the machine, so they are shown, not asserted (one
# thread, fastest of five runs).


# %%
def torch_sdpa(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


head_counts = (1, 2, 4, 8, 16, 32)
x_time = torch.randn(1, 256, 512, generator=torch.Generator().manual_seed(1))  # (B, L, D)
timings = {"reference attention": [], "torch fused SDPA": []}
with torch.no_grad(), torch_threads(1):  # one thread: steadier numbers on a shared machine
    for h in head_counts:
        for label, attn_fn in (("reference attention", None), ("torch fused SDPA", torch_sdpa)):
            torch.manual_seed(0)
            layer = MultiHeadAttention(512, h, attn_fn=attn_fn)
            timings[label].append(1e3 * min_seconds(lambda m=layer: m(x_time), repeats=5))

fig, ax = plt.subplots(figsize=(6.5, 4))
plot_lines(
    list(head_counts),
    timings,
    title="C8: forward time of one attention layer (d_model 512, L 256)",
    xlabel="number of heads h (head width 512 / h)",
    ylabel="time per forward pass (ms)",
    logx=True,
    ax=ax,
)
ax.set_xticks(head_counts, [str(h) for h in head_counts])
ax.set_ylim(bottom=0)
fig.tight_layout()

# %%
for label, ms in timings.items():
    print(f"{label}:")
    print(
        "    time (ms):    "
        + "  ".join(f"h={h} {t:6.1f}" for h, t in zip(head_counts, ms, strict=True))
    )
    print(
        "    vs h=1:       "
        + "  ".join(f"h={h} {t / ms[0]:6.2f}" for h, t in zip(head_counts, ms, strict=True))
    )
t_ratio = {label: ms[head_counts.index(8)] / ms[0] for label, ms in timings.items()}
record_claim(
    "C8",
    claim="h heads of width d_model/h cost about the same compute as one head of width d_model",
    experiment="analytic FLOP count checked against torch's FlopCounterMode (BERT-base shape, "
    "L 512); forward time at d_model 512, L 256, h 1..32 (not asserted)",
    verdict=c8_verdict(flops_1, flops_12),
    measured=f"matrix products identical ({flops_1.matmul / 1e9:.2f} GFLOP for h 1 and 12); "
    f"softmax adds {overhead_12:.2%} at h 12 (but {overhead_narrow:.1%} at d_model 64, h 16); "
    "time h=8 / h=1: "
    + ", ".join(f"{r:.2f}× ({label})" for label, r in t_ratio.items())
    + " (this machine)",
)

# %% [markdown]
# The count has three knobs: width, head count and sequence length. The sceptic's sweep (`python
# -m book.sceptic --claim C8`) re-judges C8 with the same verdict function at other shapes; the
# cell prints the stored results.

# %% tags=["nbval-check-output"]
print(sweep_summary("C8"))

# %% [markdown]
# **Verdict on C8: reproduced at BERT-base's shape and at the original Transformer's; partly for
# narrow models with many heads and for long sequences.** Every matrix product costs exactly the
# same whatever $h$ is, at every shape. The heads add softmax work, $6(h-1)L^2$ FLOPs against
# the projections' $8LD^2$ and the score products' $4L^2D$, a share that rises with $L$ towards
# $1.5(h-1)/D$: a fraction of a percent at BERT-base's width and 512 tokens, past the 1 % that
# "about the same" allows with a narrow model and many heads, or with thousands of tokens (the
# sweep above). Time depends on the kernel, not the FLOP count: with many heads the reference
# implementation runs $h$ thin matrix products and writes $h$ score matrices to memory (at $h =
# 32$, $L = 256$: 8 MiB of floats instead of 256 KiB for one head), both costlier per FLOP than
# one wide product, while a fused kernel avoids the round trip. So wall time may grow with $h$
# though the FLOPs do not, by an amount that depends on kernel and machine (the printout above
# gives this run's ratios to $h = 1$).

# %% [markdown]
# ## 3.4 C9: what do the heads learn?
#
# ### BERT-base, counted
#
# **The claim**, first part: BERT-base has $d_\text{model} = 768$ and 12 heads of $d_k = 64$.
# Its attention layer has four $768 \times 768$ matrices and four bias vectors. Per head, that
# is a $768 \times 64$ slice of each of $W_Q, W_K, W_V$ and a $64 \times 768$ block of $W_O$: $4
# \cdot 768 \cdot 64 = 196{,}608$ weights; twelve heads give exactly the $4 \cdot 768^2$ weights
# of one full-width head. The head count changes how the parameters are *used*, not how many
# there are. The hand count, as a function:


# %%
#| export
def attention_parameter_count(d_model: int) -> int:
    """Weights and biases of one multi-head attention layer of width ``d_model``, by hand:
    four ``d_model × d_model`` matrices (W_Q, W_K, W_V, W_O) and four bias vectors; the head
    count does not appear."""
    d_model = check_positive_int("d_model", d_model)
    return 4 * (d_model * d_model + d_model)


# %% [markdown]
# We build the layers on PyTorch's `meta` device (shapes without memory) and count.

# %%
with torch.device("meta"):
    bert_attention = MultiHeadAttention(768, 12)
    one_wide_head = MultiHeadAttention(768, 1)
    torch_bert_attention = nn.MultiheadAttention(768, 12)
    bert_layer = EncoderLayer(768, 12, 3072, activation="gelu")  # + FFN and two LayerNorms

embeddings = (30522 + 512 + 2) * 768 + 2 * 768  # word + position + segment tables, LayerNorm
pooler = 768 * 768 + 768
bert_base_total = embeddings + 12 * n_params(bert_layer) + pooler

# %% tags=["nbval-check-output"]
print(f"d_k = 768 / 12 = {768 // 12}")
print(f"attention layer, 12 heads:        {n_params(bert_attention):>11,}")
print(f"attention layer, 1 head of 768:   {n_params(one_wide_head):>11,}")
print(f"nn.MultiheadAttention(768, 12):   {n_params(torch_bert_attention):>11,}")
print(f"one head's share (no biases):     {4 * 768 * 64:>11,}")
print(f"encoder layer (attention + FFN):  {n_params(bert_layer):>11,}")
print(f"BERT-base (12 layers + embeddings + pooler): {bert_base_total:,}")

# %%
# torch.nn.MultiheadAttention is an implementation written independently of the package.
counts_c9a = {"12 heads": n_params(bert_attention), "1 head": n_params(one_wide_head)}
assert_c9a_heads_split_without_new_parameters(
    768, counts_c9a, independent=n_params(torch_bert_attention)
)
assert n_params(bert_attention) == attention_parameter_count(768) == 2_362_368
assert 12 * 4 * 768 * 64 == 4 * 768**2
assert n_params(bert_layer) == 7_087_872
assert bert_base_total == 109_482_240  # the "110M" of the BERT paper
record_claim(
    "C9a",
    claim="BERT-base: d_model 768 split into 12 heads of d_k 64",
    experiment="a configuration fact, counted: the package's layers at BERT-base's shape with "
    "12 heads and 1 head, checked against torch.nn.MultiheadAttention's independent count",
    verdict=c9a_verdict(768, counts_c9a, independent=n_params(torch_bert_attention)),
    measured=f"attention layer {n_params(bert_attention):,} parameters for 12 heads and for 1 "
    f"head; encoder layer {n_params(bert_layer):,}; whole model {bert_base_total:,}",
)

# %% [markdown]
# The same count at the other BERT sizes (`c9a_sweep_run`, judged by the same `c9a_verdict`):

# %% tags=["nbval-check-output"]
print(sweep_summary("C9a", keys=["shape", "parameters"]))

# %% [markdown]
# **Verdict on C9a: reproduced, at every BERT size tried** (128 to 1,024 wide): the head count
# never changes the parameter count.

# %% [markdown]
# ### Heads that divide the work
#
# **The claim**, second part: different heads learn different patterns — in BERT, some attend to
# the next or previous token, some follow syntactic relations, some link a pronoun to its
# antecedent (Clark et al., 2019). Training BERT is out of reach on two CPU cores, so we test
# the mechanism on a task whose solution *needs* two relations at every position.
#
# **The task.** A sequence holds 6 letters, each once in lower and once in upper case, in random
# order; every token also carries a random digit (0–7). The *partner* of `c5` is the token with
# the same letter in the other case. At every position the model outputs the digit of the
# **previous token** (a positional relation, like BERT's neighbour heads) and that of its
# **partner** (found by content, like coreference). Guessing gives 1/8 per digit.

# %% tags=["nbval-check-output"]
example = pairs_batch(1, 6, 8, generator=torch.Generator().manual_seed(11))
names = pair_token_names(example.tokens[0], 6, 8)
print("tokens:         ", " ".join(f"{n:>3}" for n in names))
print(
    "previous digit: ",
    " ".join(f"{int(t):>3}" if t >= 0 else "  -" for t in example.targets[0, :, 0]),
)
print("partner digit:  ", " ".join(f"{int(t):>3}" for t in example.targets[0, :, 1]))
print("partner at:     ", " ".join(f"{int(p):>3}" for p in example.partner[0]))

# %% [markdown]
# **The model.** One pre-LN `EncoderLayer` from the package (multi-head attention, a small
# feed-forward network, residual connections), $d_\text{model} = 32$, rotary position embeddings
# (chapter 4) so that "the previous position" is easy to express, and a linear read-out of the
# two digits. No causal mask: a partner may come later.

# %%
#| export
POSITIONAL = ("rope", "sinusoidal", "learned")


class PairModel(nn.Module):
    """Embedding → positions → one pre-LN :class:`EncoderLayer` → two digit read-outs.

    Positions: ``"rope"`` (the default) rotates queries and keys inside every head;
    ``"sinusoidal"`` and ``"learned"`` add a position vector to the embeddings instead.
    ``forward(tokens (B, L), need_weights=False)`` returns logits ``(B, L, 2, n_values)``
    (relation 0: the previous token's digit, relation 1: the partner's), and with
    ``need_weights`` the per-head attention weights ``(B, H, L, L)``. Bidirectional: no mask,
    every position may attend to every other.
    """

    def __init__(
        self,
        n_keys: int,
        n_values: int,
        seq_len: int,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        positional: str = "rope",
    ) -> None:
        super().__init__()
        self.n_values = check_positive_int("n_values", n_values)
        check_choice("positional", positional, POSITIONAL)
        self.embed = nn.Embedding(pairs_vocab_size(n_keys, n_values), d_model)
        rotary = None
        if positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d_model, max_len=seq_len)
        elif positional == "learned":
            self.pos = LearnedPositionalEmbedding(d_model, max_len=seq_len)
        else:
            self.pos = None
            rotary = RotaryEmbedding(d_model // num_heads)  # one rotation per head width
        self.layer = EncoderLayer(
            d_model, num_heads, d_ff or 2 * d_model, pre_ln=True, rotary=rotary
        )
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(RELATIONS) * n_values)

    def forward(self, tokens: torch.Tensor, need_weights: bool = False):
        x = self.embed(tokens)  # (B, L, D)
        if self.pos is not None:
            x = self.pos(x)  # (B, L, D)
        if need_weights:
            x, weights = self.layer(x, need_weights=True)  # (B, L, D), (B, H, L, L)
        else:
            x, weights = self.layer(x), None
        logits = self.readout(self.norm(x))  # (B, L, 2 * n_values)
        logits = logits.unflatten(-1, (len(RELATIONS), self.n_values))  # (B, L, 2, n_values)
        return (logits, weights) if need_weights else logits


# %% [markdown]
# **What a head attends to.** For every query we read the weight on its previous position and on
# its partner, averaged over the queries. Queries whose previous token *is* their partner (and
# position 0, which has none) are left out, so that one head cannot score on both relations at
# once.


# %%
#| export
def head_relation_mass(weights: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
    """How much each head attends to each relation: ``(H, 2)``.

    ``weights (B, H, L, L)`` (rows: queries), ``partner (B, L)`` the position of each token's
    partner. Column 0 is the mean weight a query puts on the previous position ``t - 1``,
    column 1 the mean weight on its partner, over the queries with ``t >= 1`` whose previous
    token is not their partner.
    """
    check_tensor("weights", weights)
    check_rank("weights", weights, 4, "[batch, heads, q_len, k_len]")
    check_tensor("partner", partner)
    b, h, lq, lk = weights.shape
    if partner.shape != (b, lq):
        raise ValueError(f"partner must have shape (B, Lq) = {(b, lq)}, got {tuple(partner.shape)}")
    t = torch.arange(lq)  # (L,) query positions
    prev = (t - 1).clamp_min(0).expand(b, lq)  # (B, L)
    on_prev = weights.gather(-1, prev[:, None, :, None].expand(b, h, lq, 1))[..., 0]  # (B, H, L)
    on_partner = weights.gather(-1, partner[:, None, :, None].expand(b, h, lq, 1))[..., 0]
    valid = (t >= 1) & (partner != t - 1)  # (B, L)
    n = valid.sum()
    mass_prev = (on_prev * valid[:, None]).sum((0, 2)) / n  # (H,)
    mass_partner = (on_partner * valid[:, None]).sum((0, 2)) / n  # (H,)
    return torch.stack([mass_prev, mass_partner], dim=-1)  # (H, 2)


# %% [markdown]
# **The training step.** Chapter 1 wrote out the book's loop, `fit`; here it gets this task's
# loss, both digits' cross-entropy (`pairs_loss`). Parameters come from
# `torch.manual_seed(seed)`, training batches from a generator seeded with `seed + 1`, the
# held-out batch from `seed + 2`, so runs that differ only in the head count see the same
# examples in the same order. `train_pairs` then scores both relations and measures the head
# masses on 512 held-out sequences. We train with 2 heads and, for contrast, 1 and 4, all else
# equal: 300 batches of 64 sequences, Adam with learning rate $10^{-2}$.


# %%
#| export
@dataclass(frozen=True)
class PairsRun:
    """What :func:`train_pairs` measured (on a held-out batch after training)."""

    num_heads: int
    d_model: int
    seed: int
    losses: list[float]  # training loss at every step
    accuracy: tuple[float, float]  # (previous, partner)
    head_mass: torch.Tensor  # (H, 2): mean weight on (previous, partner) per head
    model: PairModel

    @property
    def mean_accuracy(self) -> float:
        return sum(self.accuracy) / len(self.accuracy)


def train_pairs(
    *,
    num_heads: int,
    d_model: int = 32,
    n_pairs: int = 6,
    n_values: int = 8,
    n_keys: int | None = None,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    eval_size: int = 512,
    progress: bool = False,
    positional: str = "rope",
) -> PairsRun:
    """Train :class:`PairModel` with Adam by ``fit`` on fresh batches of the pairs task, then
    score it on ``eval_size`` held-out sequences. One thread: tiny matrices, where threads
    would only add synchronisation."""
    torch.manual_seed(seed)
    model = PairModel(
        n_keys or n_pairs, n_values, 2 * n_pairs, d_model, num_heads, positional=positional
    )

    def make_batch(generator):
        return pairs_batch(batch_size, n_pairs, n_values, n_keys=n_keys, generator=generator)

    def loss_of(model, batch):
        logits = model(batch.tokens)  # (B, L, 2, n_values)
        return pairs_loss(logits, batch.targets)  # targets (B, L, 2): mean over both digits

    log = fit(
        model, make_batch, loss_of, steps=steps, lr=lr, data_seed=seed + 1, threads=1,
        progress=progress, desc=f"h={num_heads}, seed {seed}",
    )  # fmt: skip
    held_out_data = torch.Generator().manual_seed(seed + 2)
    held_out = pairs_batch(eval_size, n_pairs, n_values, n_keys=n_keys, generator=held_out_data)
    with torch.no_grad(), torch_threads(1):
        logits, weights = model(held_out.tokens, need_weights=True)  # (B, L, 2, V), (B, H, L, L)
    return PairsRun(
        num_heads=num_heads,
        d_model=d_model,
        seed=seed,
        losses=log.losses,
        accuracy=relation_accuracy(logits, held_out.targets),
        head_mass=head_relation_mass(weights, held_out.partner),
        model=model,
    )


# %%
def train_heads(setting: tuple[int, int]) -> PairsRun:
    num_heads, seed = setting
    return train_pairs(num_heads=num_heads, seed=seed)


# (num_heads, seed) -> PairsRun; sections 3.4 and 3.5 add more. Every run seeds what it draws,
# so the runs go side by side, one per core: what a loop over the settings gives, bit for bit.
runs = run_keyed(train_heads, [(h, 0) for h in (1, 2, 4)], desc="heads")
print(runs[2, 0].model)  # the model trained here (2 heads): every module and its sizes
print(f"parameters: {sum(p.numel() for p in runs[2, 0].model.parameters()):,}")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
plot_lines(
    list(range(1, 301)),
    {f"{h} head{'s' if h > 1 else ''}": runs[h, 0].losses for h in (1, 2, 4)},
    title="C9: training loss on the two-relation task (d_model 32)",
    xlabel="training step",
    ylabel="cross-entropy per digit (nats)",
    ax=ax,
    markers=False,
)
reference_line(ax, math.log(8), "chance: ln 8")
reference_line(ax, math.log(8) / 2, "one relation solved: ½ ln 8", color="0.6")
ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.8))  # between the two lines
fig.tight_layout()

# %%
print(
    f"{'':>9} {'acc. previous':>14} {'acc. partner':>13}   per head: weight on (previous, partner)"
)
for h in (1, 2, 4):
    run = runs[h, 0]
    masses = "  ".join(f"({p:.2f}, {q:.2f})" for p, q in run.head_mass.tolist())
    print(f"{h} head(s) {run.accuracy[0]:>14.3f} {run.accuracy[1]:>13.3f}   {masses}")

# %% [markdown]
# The one-head model gets stuck near $\tfrac12 \ln 8 \approx 1.04$ nats, the loss of solving one
# relation and guessing the other (a little above it when the solved one is the previous token,
# which position 0 lacks); the two- and four-head models go to zero (here the two-head one first
# pauses at that level: it learned one relation, then the other). The head grid shows *how*: for
# one held-out sequence, each panel is one head's weights (rows: queries, columns: keys), with
# the true previous position marked × and the partner ○.

# %%
model_2 = runs[2, 0].model
with torch.no_grad():
    _, example_weights = model_2(example.tokens, need_weights=True)  # (1, H, L, L)
mass_2 = runs[2, 0].head_mass  # (H, 2)
fig = plot_heads(
    example_weights[0],
    x_labels=names,
    y_labels=names,
    title="C9: the two heads of the trained model (× previous token, ○ partner)",
    ncols=2,
    head_titles=[
        f"head {i}: previous {p:.2f}, partner {q:.2f}" for i, (p, q) in enumerate(mass_2.tolist())
    ],
)
fig.set_size_inches(10, 5)
rows = torch.arange(len(names))  # query positions
for ax in fig.axes[:2]:
    ax.scatter(rows[1:] - 1, rows[1:], marker="x", color="white", s=18, lw=1)  # previous
    ax.scatter(example.partner[0], rows, marker="o", facecolors="none", edgecolors="red", s=40)

# %% [markdown]
# One seed could be luck, so the three models are also trained with seeds 1 and 2 (section 3.5
# reuses them). The checks, set from the claim before the runs (`c9b_specialisation_failures`),
# must hold on every seed: with two heads both relations are solved (accuracy > 0.97) by one
# head each (> 0.8 of its weight on its relation, < 0.05 on the other); one head solves one
# relation (> 0.95) and misses the other (< 0.4); four heads solve both, one of them on the
# previous token (> 0.8), one leading the partner search (> 0.6).

# %% tags=["nbval-check-output"] tolerance="trained"
print("thresholds:", ", ".join(f"{name} {v}" for name, v in C9B_THRESHOLDS.items()))
runs |= run_keyed(train_heads, [(h, s) for h in (1, 2, 4) for s in SEEDS if (h, s) not in runs],
                  desc="heads x seeds")  # fmt: skip
for seed in SEEDS:
    masses = {h: " ".join(f"({p:.2f}, {q:.2f})" for p, q in runs[h, seed].head_mass.tolist())
              for h in (1, 2, 4)}  # fmt: skip
    print(f"seed {seed}: 1 head {masses[1]} | 2 heads {masses[2]} | 4 heads {masses[4]}")
for seed in SEEDS:
    assert_c9b_heads_specialise(runs[1, seed], runs[2, seed], runs[4, seed])
failures_c9b = [c9b_specialisation_failures(runs[1, s], runs[2, s], runs[4, s]) for s in SEEDS]
run_1, run_2, run_4 = runs[1, 0], runs[2, 0], runs[4, 0]  # the runs quoted below: seed 0
prev_head = int(run_2.head_mass[:, 0].argmax())
partner_head = 1 - prev_head
focused_4 = int((run_4.head_mass.max(dim=1).values > 0.5).sum())
record_claim(
    "C9b",
    claim="Different heads learn different patterns",
    experiment="1-layer Transformer (d_model 32, RoPE) trained on a task needing the previous "
    "token's and a content-matched partner's digit; per-head attention mass, 512 held-out "
    "sequences; 1, 2 and 4 heads, seeds 0–2 (the numbers quoted: seed 0)",
    # Part (A), heads dividing a task's relations, is measured on every seed; part (B), BERT's
    # heads doing so on language, is not measured here (the chapter cannot train BERT).
    verdict=c9b_verdict(failures_c9b, in_pretrained_model=False),
    measured=f"2 heads: head {prev_head} puts {run_2.head_mass[prev_head, 0]:.2f} on the previous "
    f"token, head {partner_head} {run_2.head_mass[partner_head, 1]:.2f} on the partner; "
    f"accuracy {run_2.accuracy[0]:.3f}/{run_2.accuracy[1]:.3f}. 1 head: "
    f"{run_1.accuracy[0]:.3f}/{run_1.accuracy[1]:.3f}. 4 heads: {focused_4} of 4 put > 0.5 of "
    "their weight on one relation",
)

# %% [markdown]
# Specialisation could be an artefact of stopping early. The sweep (`python -m book.sceptic
# --claim C9b`) retrains the one-, two- and four-head models on three other seeds and for three
# times as many steps, with the same checks; the cell prints the stored results.

# %% tags=["nbval-check-output"]
print(sweep_summary("C9b"))
for setting in stored_sweeps()["C9b"]["perturbations"]:  # what failed, where something did
    for run in setting["numbers"]["per seed"]:
        for failure in run["failures"]:
            print(f"{setting['name']}, seed {run['seed']}: {failure}")

# %% [markdown]
# **Verdict on C9: the arithmetic holds exactly (a configuration fact rather than a finding: we
# counted it, and torch's independently written `nn.MultiheadAttention` gives the same count);
# specialisation is reproduced in a controlled model, on each of three seeds and on three more,
# hence "partly"; with three times the training it holds on two seeds of three.** With two
# heads, one head attends to the previous token, the other to the partner, and both digits are
# almost always right. One head solves one relation and guesses the other (which one depends on
# the seed: the previous token on two seeds, the partner on the third) — section 3.1's averaging
# problem, found by gradient descent. The verdict stays at "partly" (`c9b_verdict`) because our
# task was *designed* to need two relations: it shows that heads split work when a task rewards
# it, not which relations BERT's heads pick. Nor is specialisation one head per relation: with
# four heads, on seed 0 one took the previous token and the others shared the partner search, on
# seed 1 two heads took each relation — redundancy that Michel et al. (2019) and Voita et al.
# (2019) found in translation models, where many heads can be pruned at little cost.
#
# The longer budget weakens one part: on one seed the *one*-head model gets most previous digits
# and nearly all partner digits right, its weight spread over both relations. "One head, one
# pattern" holds within a short budget, not as a hard limit. What survives every run is the
# division of labour: two or four heads solve both relations, with different heads serving them.

# %% [markdown]
# ## 3.5 C10: how many heads?
#
# **The claim.** At fixed width the head count is a trade-off: more heads give more "views", but
# each is narrower. The article reports an ablation at $d_\text{model} = 512$ in which
# validation quality rose from $h = 4$ to $h = 8$ and fell at $h = 16$ ($d_k = 32$), whose heads
# underfit; common practice keeps $d_k$ at 64 or 128.
#
# **Our experiment.** Scaled down: the two-relation task, $d_\text{model} = 32$ fixed, $h \in
# \{1, 2, 4, 8, 16\}$ (head width 32 down to 2), three seeds each (`SEEDS`), 300 steps for every
# run. We report accuracy on fresh held-out sequences ("validation") and the final training
# loss.
#
# **The test, fixed before the run.** "Rises, then falls" means: the head count with the best
# mean accuracy is neither the smallest nor the largest tried, and beats *both* ends by at least
# `C10_MARGIN` = 0.1 in mean accuracy (ten points, a gap no reader would call noise);
# `assert_c10_rises_then_falls` checks it. The claim's *location* — the best head 64 to 128
# wide, as at the article's $h = 8$, $d_\text{model} = 512$ — is a separate part of the verdict
# (`c10_verdict` in `book.claims.ch03`).

# %%
HEADS = (1, 2, 4, 8, 16)  # C10_MARGIN = 0.1, C10_PRACTICE_HEAD_WIDTH = (64, 128): book.claims.ch03
runs |= run_keyed(train_heads, [(h, s) for h in HEADS for s in SEEDS if (h, s) not in runs],
                  desc="heads x seeds")  # fmt: skip


def final_loss(run, window=50):
    return sum(run.losses[-window:]) / window


ablation = {
    h: {
        "previous": sum(runs[h, s].accuracy[0] for s in SEEDS) / len(SEEDS),
        "partner": sum(runs[h, s].accuracy[1] for s in SEEDS) / len(SEEDS),
        "both": sum(runs[h, s].mean_accuracy for s in SEEDS) / len(SEEDS),
        "both per seed": [runs[h, s].mean_accuracy for s in SEEDS],
        "final loss": sum(final_loss(runs[h, s]) for s in SEEDS) / len(SEEDS),
    }
    for h in HEADS
}

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
plot_spread(
    list(HEADS),
    {
        "previous": [[runs[h, s].accuracy[0] for s in SEEDS] for h in HEADS],
        "partner": [[runs[h, s].accuracy[1] for s in SEEDS] for h in HEADS],
        "both": [ablation[h]["both per seed"] for h in HEADS],
    },
    title=f"C10: held-out accuracy vs head count (d_model 32, {len(SEEDS)} seeds)",
    xlabel="number of heads h (head width 32 / h)",
    ylabel="accuracy (mean, min–max bars)",
    logx=True,
    ax=axes[0],
)
reference_line(axes[0], 1 / 8, "chance, one digit (1/8)")
axes[0].set_ylim(0, 1.05)
axes[0].legend(loc="center", bbox_to_anchor=(0.6, 0.45), fontsize=8)  # the empty middle
plot_spread(
    list(HEADS),
    {"final training loss": [[final_loss(runs[h, s]) for s in SEEDS] for h in HEADS]},
    title="C10: fit after 300 steps",
    xlabel="number of heads h (head width 32 / h)",
    ylabel="cross-entropy, last 50 steps (nats)",
    logx=True,
    ax=axes[1],
)
for ax in axes:
    ax.set_xticks(HEADS, [str(h) for h in HEADS])
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
print(
    f"{'h':>3} {'d_k':>4} {'previous':>9} {'partner':>8} {'both':>6} {'final loss':>11}",
    "  per seed (both)",
)
for h in HEADS:
    a = ablation[h]
    per_seed = ", ".join(f"{runs[h, s].mean_accuracy:.3f}" for s in SEEDS)
    print(
        f"{h:>3} {32 // h:>4} {a['previous']:>9.3f} {a['partner']:>8.3f} {a['both']:>6.3f} "
        f"{a['final loss']:>11.3f}   {per_seed}"
    )

# %%
best_h = assert_c10_rises_then_falls(
    {h: ablation[h]["both per seed"] for h in HEADS}, margin=C10_MARGIN
)
print(f"best head count h = {best_h}: mean accuracy {ablation[best_h]['both']:.3f}")

# %% [markdown]
# The curve rises and falls, but the rise is built into the task (one head cannot win, section
# 3.1), so only the fall tests the claim. Two and four heads, of width 16 and 8, solve the task
# on every seed. Eight heads of width 4 fit visibly slower (the final-loss column) and the seeds
# disagree (0.993, 0.887 and 0.991): a slower fit within 300 steps, not a ceiling (with three
# times the steps every seed gets there). Sixteen heads of width 2 solve the previous-token
# relation but few partner digits. Narrow heads have a known limit: Bhojanapalli et al. (2020)
# show that a head of width $d_k < L$ cannot represent arbitrary attention patterns (a "low-rank
# bottleneck"), and propose decoupling $d_k$ from $d_\text{model}/h$. Whether that limit is what
# fails here is another question.
#
# One confound first: under rotary embeddings a head of width 2 has a single rotation frequency,
# which makes a position-independent content match especially hard. As a control we rerun $h =
# 2$ and $h = 16$ with sinusoidal positions added to the input instead, same seed, for 600 steps
# (the previous-token relation is slower to learn that way).

# %%
control = run_keyed(
    lambda h: train_pairs(num_heads=h, seed=0, steps=600, positional="sinusoidal"), (2, 16),
    desc="sinusoidal control",
)
for h, run in control.items():
    print(
        f"sinusoidal positions, h={h:>2} (d_k {32 // h:>2}): accuracy previous "
        f"{run.accuracy[0]:.3f}, partner {run.accuracy[1]:.3f}, both {run.mean_accuracy:.3f}; "
        f"final loss {final_loss(run):.3f}"
    )

# %%
# One seed per head count: a control of direction only (narrow heads fit worse), no size.
control_c10 = {h: (final_loss(run), run.mean_accuracy) for h, run in control.items()}
assert_c10_control_narrow_heads_fit_worse(control_c10)
record_claim(
    "C10",
    claim="At fixed d_model, quality first rises then falls with the head count (h 8 best at "
    "d_model 512; h 16, d_k 32, underfits)",
    experiment="two-relation task, d_model 32, h in {1, 2, 4, 8, 16}, 3 seeds, 300 steps each; "
    "held-out accuracy (mean, min-max) and final training loss; interior optimum must beat both "
    "ends by 0.1; control without RoPE (1 seed); sceptic's sweep: seeds 3–5, 900 steps (control "
    "1800)",
    verdict=c10_verdict(
        {h: ablation[h]["both per seed"] for h in HEADS}, d_model=32, control=control_c10
    ),
    measured="held-out accuracy (both digits, mean over seeds) "
    + ", ".join(f"h={h}: {spread(ablation[h]['both per seed']).format('.3f')}" for h in HEADS)
    + f"; final loss h=4 {ablation[4]['final loss']:.3f}, h=8 {ablation[8]['final loss']:.3f}, "
    f"h=16 {ablation[16]['final loss']:.3f}; without RoPE (600 steps) accuracy h=2 "
    f"{control[2].mean_accuracy:.3f}, h=16 {control[16].mean_accuracy:.3f}",
)

# %% [markdown]
# Without rotary embeddings the sixteen narrow heads still fit worse than the two wide ones, so
# the penalty is not only RoPE's. But the relation that suffers flips: the width-2 heads now
# find the partner almost always and miss the previous token. So a width-2 head *can* match
# content; it is too narrow to learn both relations within the budget, and the positional scheme
# decides which one is lost. With one seed per head count, and a loss gap after a fixed budget
# measuring speed as much as capacity, the safe reading is that narrow heads are slower to fit
# here, not necessarily unable to.
#
# The sceptic's sweep settles the budget question: it reruns the ablation, control included, on
# three other seeds and with three times the steps, judging each with `c10_verdict` (`python -m
# book.sceptic --claim C10`); the cell prints the stored results, then each setting's control as
# (final loss, accuracy).

# %% tags=["nbval-check-output"]
print(sweep_summary("C10", keys=["steps", "best h", "mean accuracy"]))
for setting in (stored_sweeps()["C10"]["baseline"], *stored_sweeps()["C10"]["perturbations"]):
    control_run = setting["numbers"]["control without RoPE (final loss, accuracy)"]
    print(f"{setting['name']}: without RoPE {control_run}")

# %% [markdown]
# **Verdict on C10: partly reproduced, on every seed and budget the sweep tried — but what
# survives is narrower than the claim.** The shape holds everywhere: an interior optimum that
# beats both ends by the margin. Its rise is built into the task, and with the longer budget its
# fall rests on one setting alone: the dip at eight heads is gone, while sixteen heads of width
# 2 *with RoPE* still miss most partner digits (without RoPE they solve the task as well as two
# wide ones). So "narrow heads fit worse" is, at our scale, slower training plus one failure
# more steps did not remove: width-2 heads under RoPE, each with a single rotation frequency.
# Nor does the location transfer: the best $h$ here is 2–4 (head width 8–16) because the task
# has two relations and the model is 32 wide; the article's "$h = 8$ at $d_\text{model} = 512$"
# cannot be tested on two CPU cores, and the best count depends on the task as much as on the
# width. Practice settled on heads of 64 or 128 dimensions, as the table below shows for a few
# well-known models.

# %% tags=["nbval-check-output"]
known_models = [  # name, d_model, query heads, key/value heads
    ("Transformer base (2017)", 512, 8, 8),
    ("BERT-base (2018)", 768, 12, 12),
    ("GPT-2 small (2019)", 768, 12, 12),
    ("GPT-3 175B (2020)", 12288, 96, 96),
    ("LLaMA-2 7B (2023)", 4096, 32, 32),
    ("LLaMA-2 70B (2023)", 8192, 64, 8),
    ("Mistral 7B (2023)", 4096, 32, 8),
]
print(f"{'model':>24} {'d_model':>8} {'h':>4} {'d_k':>5} {'kv heads':>9}")
for name, d, h, kv in known_models:
    print(f"{name:>24} {d:>8} {h:>4} {d // h:>5} {kv:>9}")

# %% [markdown]
# ## 3.6 Sharing keys and values: MQA and GQA
#
# A decoder *generates* one token at a time, each attending to all earlier ones, whose keys and
# values are kept rather than recomputed: the **KV cache**, two tensors of shape $(B, h, L,
# d_k)$ per layer. At long contexts this cache, not the weights, dominates memory, and reading
# it dominates decoding time.
#
# **Multi-query attention** (MQA, Shazeer 2019) gives $h$ query heads *one* shared key head and
# value head. **Grouped-query attention** (GQA, Ainslie et al. 2023) sits in between: $h_{kv}$
# key/value heads, each shared by a group of $h/h_{kv}$ query heads. In the package this is
# `num_kv_heads`: $h_{kv} = h$ is ordinary multi-head attention, $h_{kv} = 1$ is MQA. $W_K$ and
# $W_V$ shrink to $d_\text{model} \times h_{kv} d_k$, and the cache by the factor $h/h_{kv}$.
#
# GQA is multi-head attention whose key and value heads are *tied* within each group. We check
# that literally: copy a GQA layer's weights into an ordinary multi-head layer, repeating each
# key/value head's projection for every query head of its group, and compare outputs.


# %%
def as_mha(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """An ordinary multi-head layer computing exactly what ``gqa`` computes."""
    h, kv, dh = gqa.num_heads, gqa.num_kv_heads, gqa.head_dim
    mha_equiv = MultiHeadAttention(gqa.d_model, h)
    state = gqa.state_dict()
    for name in ("k_proj", "v_proj"):
        w = state[f"{name}.weight"].view(kv, dh, -1)  # (H_kv, d_k, D): one block per kv head
        state[f"{name}.weight"] = w.repeat_interleave(h // kv, dim=0).reshape(h * dh, -1)
        b = state[f"{name}.bias"].view(kv, dh)  # (H_kv, d_k)
        state[f"{name}.bias"] = b.repeat_interleave(h // kv, dim=0).reshape(h * dh)
    mha_equiv.load_state_dict(state)
    return mha_equiv


gqa_rows = []
with torch.no_grad():
    for kv in (4, 2, 1):  # MHA, GQA with 2 groups, MQA
        torch.manual_seed(5)
        gqa = MultiHeadAttention(D, H, num_kv_heads=kv)
        equiv = as_mha(gqa)
        torch.testing.assert_close(gqa(x), equiv(x))  # GQA = MHA with tied K/V heads
        torch.testing.assert_close(gqa(x), equiv.to_torch()(x, x, x)[0])  # ... = torch's MHA
        gqa_rows.append((kv, n_params(gqa.k_proj) + n_params(gqa.v_proj), n_params(gqa)))
    torch.manual_seed(6)
    plain = MultiHeadAttention(D, H)
    same = MultiHeadAttention(D, H, num_kv_heads=H)
    same.load_state_dict(plain.state_dict())  # identical parameter shapes ...
    torch.testing.assert_close(same(x), plain(x))  # ... and identical outputs

# %% tags=["nbval-check-output"]
print(f"running example, d_model {D}, {H} query heads of width {D_HEAD}")
for kv, kv_params, total in gqa_rows:
    kind = {4: "MHA", 2: "GQA-2", 1: "MQA"}[kv]
    print(f"{kind:>6}: {kv} key/value head(s), W_K + W_V {kv_params:>3} parameters, layer {total}")

# %% [markdown]
# The attention core also agrees with PyTorch's fused kernel, which has supported grouped
# key/value heads directly since version 2.5 (`enable_gqa=True`):

# %%
g = torch.Generator().manual_seed(7)
q_g = torch.randn(2, 8, 10, 16, generator=g)  # (B, H, L, d_k): 8 query heads
k_g, v_g = (torch.randn(2, 2, 10, 16, generator=g) for _ in range(2))  # (B, H_kv=2, L, d_k)
torch.testing.assert_close(
    scaled_dot_product_attention(q_g, k_g, v_g, enable_gqa=True),
    F.scaled_dot_product_attention(q_g, k_g, v_g, enable_gqa=True),
)

# %% [markdown]
# **How much memory?** A cache holds $2 \cdot \text{layers} \cdot h_{kv} \cdot d_k \cdot L
# \cdot B$ numbers. For a 7B-class model — 32 layers, 32 query heads of width 128, a context
# of 4,096 tokens, fp16 (2 bytes) — per sequence:

# %%
config = dict(num_layers=32, head_dim=128, seq_len=4096, bytes_per_element=2)
cache = {
    name: kv_cache_bytes(num_kv_heads=kv, **config)
    for name, kv in (("MHA", 32), ("GQA-8", 8), ("MQA", 1))
}
weights_fp16 = 6.74e9 * 2  # a 7B model's weights in fp16, bytes (LLaMA-2 7B: 6.74 B parameters)

# %% tags=["nbval-check-output"]
GiB = 1024**3
print(f"{'':>6} {'kv heads':>9} {'cache / sequence':>17} {'batch of 16':>12}")
for (name, nbytes), kv in zip(cache.items(), (32, 8, 1), strict=True):
    print(f"{name:>6} {kv:>9} {nbytes / GiB:>13.3f} GiB {16 * nbytes / GiB:>8.1f} GiB")
print(f"weights of a 7B model in fp16: {weights_fp16 / GiB:.1f} GiB")

# %%
kv_heads = {"MHA": 32, "GQA-8": 8, "MQA": 1}
assert_kv_cache_shrinks(cache, kv_heads, num_heads=32)  # by h / h_kv, exactly
assert cache["MHA"] == 2 * 32 * 32 * 128 * 4096 * 2 == 2 * GiB
assert cache["GQA-8"] == 512 * 1024**2 and cache["MQA"] == 64 * 1024**2
assert 16 * cache["MHA"] > 2 * weights_fp16  # a batch of 16: the MHA cache outweighs the model
# The formula counts what a cache really holds: K and V of a small fp16 GQA stack.
with torch.no_grad():
    stack = [MultiHeadAttention(64, 8, num_kv_heads=2).half() for _ in range(3)]
    x_small = torch.randn(2, 5, 64).half()  # (B, L, D)
    held = sum(m.k_proj(x_small).nbytes + m.v_proj(x_small).nbytes for m in stack)
assert held == kv_cache_bytes(3, 2, 8, 5, batch_size=2, bytes_per_element=2)
record_claim(
    "MQA/GQA",
    claim="Sharing keys and values across heads (MQA, GQA) cuts the inference-time KV cache",
    experiment="GQA checked equal to MHA with tied K/V heads (and to torch's MHA and SDPA); "
    "cache size for 32 layers, 32 heads of 128, 4,096 tokens, fp16",
    verdict=kv_cache_verdict(cache, kv_heads, num_heads=32),
    measured=f"per sequence: MHA {cache['MHA'] / GiB:.2f} GiB, GQA-8 {cache['GQA-8'] / GiB:.2f} "
    f"GiB, MQA {cache['MQA'] / GiB:.3f} GiB",
)

# %% [markdown]
# The sweep (`kv_cache_sweep_run`, the same `kv_cache_verdict`) measures the keys and values
# each layer computes, on the `meta` device, at other model shapes:

# %% tags=["nbval-check-output"]
print(sweep_summary("MQA/GQA", keys=["shape", "cache per sequence", "equals the formula"]))

# %% [markdown]
# **Verdict on MQA/GQA: reproduced, at every shape tried**, from a 6-layer model to a 70B
# one and to 32,768 tokens: each cache is MHA's divided by $h / h_{kv}$, exactly.
#
# A batch of 16 such sequences with full multi-head attention needs 32 GiB of cache — more than
# twice the model's own weights. GQA-8, the choice of LLaMA-2 70B and Mistral 7B, cuts that by
# 4×; MQA by 32×. The price is expressiveness: query heads in a group share what they read.
# Ainslie et al. (2023) report that GQA keeps quality close to multi-head attention while MQA
# loses a little more; we measured memory, not quality.

# %% [markdown]
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - One head returns one weighted average, which loses which value came from where; several
#   heads keep different things in separate slots.
# - Multi-head attention = project at full width, `view` to $(B, L, h, d_k)$, `transpose` to
#   $(B, h, L, d_k)$, attend per head with scale $1/\sqrt{d_k}$, transpose back, concatenate,
#   mix with $W_O$. A wrong order of `view` and `transpose` raises no error.
# - $h$ heads cost the same matrix-product FLOPs and parameters as one full-width head; only
#   the softmax work grows, by well under 1 % at BERT-base's shape. Wall time depends on the
#   kernel.
# - On a task that needs two relations, two heads split them; one head learns one and guesses
#   the other; extra heads become partly redundant.
# - The head count is a trade-off: too few heads cannot separate relations, too narrow heads
#   fit more slowly. At our scale the optimum was $h$ = 2–4 at $d_\text{model} = 32$; practice
#   uses heads of 64–128 dimensions.
# - MQA and GQA share key/value heads across query heads; the KV cache shrinks by $h/h_{kv}$
#   (2 GiB → 512 MiB → 64 MiB per 4k-token sequence for a 7B-class model).
#
# ## Exercises
#
# Your workbook `my-exercises/03_multi_head.py` (`make lab` copies it there) has six: split and
# merge heads (the checks recognise the usual `view`/`transpose` mistakes); the parameter count
# of an attention layer with MHA, GQA or MQA; copying GQA's key/value heads to their query
# heads; a multi-head forward pass from its four weight matrices; and a prediction of C8's
# verdict at a longer sequence, which you then run. Check your answers in the notebook, or all
# at once with `make check CH=03`.
#
# ## Further reading
#
# - Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser, Polosukhin (2017), *Attention Is
#   All You Need* — multi-head attention, and a head-count ablation (their Table 3, row A).
# - Devlin, Chang, Lee, Toutanova (2019), *BERT: Pre-training of Deep Bidirectional
#   Transformers for Language Understanding* — the BERT-base configuration.
# - Clark, Khandelwal, Levy, Manning (2019), *What Does BERT Look At? An Analysis of BERT's
#   Attention* — positional, syntactic and coreference heads in BERT.
# - Voita, Talbot, Moiseev, Sennrich, Titov (2019), *Analyzing Multi-Head Self-Attention:
#   Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned*.
# - Michel, Levy, Neubig (2019), *Are Sixteen Heads Really Better than One?* — most heads can be
#   removed at test time with little loss.
# - Bhojanapalli, Yun, Rawat, Reddi, Kumar (2020), *Low-Rank Bottleneck in Multi-head Attention
#   Models* — why narrow heads underfit.
# - Shazeer (2019), *Fast Transformer Decoding: One Write-Head is All You Need* — multi-query
#   attention.
# - Ainslie, Lee-Thorp, de Jong, Zemlyanskiy, Lebrón, Sanghai (2023), *GQA: Training
#   Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*.
