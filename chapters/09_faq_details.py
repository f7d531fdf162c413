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
# # Chapter 9 — Frequently asked details
#
# Four questions come up whenever attention is taught, each with a standard answer repeated
# more often than checked. *Why a softmax?* — it is the best normaliser. *Can I read a
# model's reasoning off its attention weights?* — no, attention is not explanation (C29).
# *Why does every modern model put the LayerNorm first?* — Pre-LN trains deep stacks stably
# while Post-LN needs a learning-rate warm-up (C30). *What does attention buy over a
# convolution or a recurrence?* — reach, at a price. Each answer gets a one-minute
# experiment; we say what it shows and what its small scale cannot.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - name what goes wrong when a softmax is replaced by a sigmoid, a ReLU or plain
#   normalisation, and what the $-\log n$ bias of sigmoid attention fixes;
# - measure how faithful an importance score is (rank correlation with leave-one-out), and
#   build a different attention distribution that leaves a prediction unchanged;
# - compute norm-based importances and attention rollout;
# - predict, from where the LayerNorm sits, how gradients spread over layers at
#   initialisation, and when a learning-rate warm-up is needed;
# - compare attention, convolution and recurrence by measured FLOPs and path length, and
#   pick the one whose prior fits a task.

# %%
#| default_exp ch09
import matplotlib.pyplot as plt
import torch

from attention.normalizers import normalized_attention
from book.claims import claims_table, record_claim
from book.claims.ch09 import (
    BREAK_GAP,
    FAR,
    FLAT,
    GAIN,
    GROW,
    MARGIN,
    MAX_AGREEMENT,
    MIN_FRACTION,
    MIN_GAP,
    SHRINK,
    TOL,
    WIN_GAP,
    assert_breaks,
    assert_c29_not_faithful,
    assert_c30_stability,
    assert_gradient_predictions,
    assert_prior_wins,
    assert_softmax_not_beaten,
    assert_stated,
    c29_repairs_verdict,
    c29_verdict,
    c30_verdict,
    priors_verdict,
    q_softmax_verdict,
    run_failed,
)
from book.data import digits
from book.diagrams.ch09 import layernorm_placement, reach_per_layer
from book.experiments.parallel import run_keyed
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.plotting import plot_bar_spread, set_style
from book.progress import progress
from book.sceptic import stored_sweeps, sweep_summary

set_style()
make_deterministic(0)
# Small models: one thread is the fastest here, and it makes every run of the chapter, two
# cores or one, compute the same numbers (a reduction split over threads rounds differently).
torch.set_num_threads(1)

# %% [markdown]
# `make export` copies this page's `#| export` cells into `book.pages.ch09`, which the
# claims module (`book.claims.ch09`), the exercise checks and the tests import. Their
# imports:

# %%
#| export
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import EncoderLayer
from attention.checks import check_choice
from attention.heads import MultiHeadAttention, merge_heads, split_heads
from attention.normalizers import normalize_scores
from book.experiments.training import TrainLog, fit, linear_warmup, train_classifier
from book.pages.ch02 import RetrievalModel, retrieval_batch, retrieval_loss
from measure.flops import matmul_flop_counter

Tensor = torch.Tensor

# %% [markdown]
# ## 9.1 Why softmax?
#
# Attention turns a row of scores $s_1 \dots s_n$ into weights and averages the values with
# them. The softmax, $w_j = e^{s_j} / \sum_i e^{s_i}$, gives weights that are positive, sum
# to one, and sharpen without limit as one score pulls ahead. Four alternatives (all in
# `attention.normalizers`, tested against a float64 loop):
#
# - **sigmoid**, $w_j = \sigma(s_j)$: no competition between keys, and with $n$ keys the
#   weights start out summing to about $n/2$;
# - **sigmoid with a bias** $b = -\log n$ (Ramapuram et al. 2024):
#   $w_j = \sigma(s_j - \log n)$, so at initialisation each weight is about $1/n$ and the
#   row sums to about one, whatever the length;
# - **ReLU-normalised**, $w_j = \mathrm{relu}(s_j) / \sum_i \mathrm{relu}(s_i)$: sums to
#   one, but a row with no positive score gets no gradient;
# - **plain-normalised**, $w_j = s_j / \sum_i s_i$: sums to one, but weights can be negative
#   and explode when the scores sum to nearly zero.
#
# As `(normalizer, score_bias)` pairs of `normalized_attention` (`score_bias=None` means
# $-\log n$ for the sigmoid):

# %%
#| export
# The normalisers compared: name -> (normalizer, score_bias) for attention.normalizers.
VARIANTS: dict[str, tuple[str, float | None]] = {
    "softmax": ("softmax", None),
    "sigmoid": ("sigmoid", 0.0),
    "sigmoid −log n": ("sigmoid", None),
    "relu-normalised": ("relu", None),
    "plain-normalised": ("plain", None),
}

# %% [markdown]
# One row of four scores through each normaliser (the identity as values, so that the
# output *is* the weight row):

# %%
row = torch.tensor([1.5, 0.5, -0.25, -1.0])  # the scores we want
q = torch.tensor([[[[2.0]]]])  # (1, 1, 1, 1): d = 1, so the scale is 1
k = (row / 2.0).view(1, 1, 4, 1)  # (1, 1, 4, 1): q · k_j = row_j
v = torch.eye(4).view(1, 1, 4, 4)  # (1, 1, 4, 4): output = the weights
for name, (normalizer, bias) in VARIANTS.items():
    w = normalized_attention(q, k, v, normalizer=normalizer, score_bias=bias)[0, 0, 0]  # (4,)
    print(f"{name:>18}: {[round(x, 3) for x in w.tolist()]}  sum {float(w.sum()):.3f}")

# %% [markdown]
# Only softmax and ReLU normalisation give a distribution; the plain sigmoid's weights sum
# to more than two, the biased sigmoid's to near one; plain normalisation gives *negative*
# weights and weights above one, as the scores sum to less than their largest.
#
# **The task and the model are chapter 2's** (C7, `book.pages.ch02`): 8 (key, value) pairs
# of symbols with distinct keys and a query equal to one of the keys, whose value the model
# must output (64 possible keys and values, so chance is 1/64). One attention head over pair
# tokens `LayerNorm(key embedding + value embedding)` and the query's normalised key
# embedding, then a linear read-out. We vary the `normalizer`/`score_bias` knob of
# `RetrievalModel`, at width 32 (`d_k` 32, scale $1/\sqrt{32}$), with `nn.Linear`'s default
# $W_Q$, $W_K$ initialisation (`qk_init="torch"`). One example:

# %%
#| export
N_SYMBOLS = 64  # keys and values are drawn from 64 symbols each
D_MODEL = 32  # the model's width, and the queries' and keys' (d_k)


def retrieval_model(variant: str) -> RetrievalModel:
    """Chapter 2's :class:`RetrievalModel` with the normaliser ``variant`` (a key of
    :data:`VARIANTS`), width :data:`D_MODEL`, scaled by ``1/sqrt(d_k)``, ``nn.Linear``'s
    default initialisation."""
    normalizer, bias = VARIANTS[check_choice("variant", variant, list(VARIANTS))]
    return RetrievalModel(N_SYMBOLS, N_SYMBOLS, D_MODEL, D_MODEL, qk_init="torch",
                          normalizer=normalizer, score_bias=bias)  # fmt: skip


# %%
example = retrieval_batch(1, 8, N_SYMBOLS, N_SYMBOLS, generator=torch.Generator().manual_seed(0))
print("keys:", example.keys.tolist(), "| values:", example.values.tolist())
print("query:", example.query.tolist(), "-> target:", example.target.tolist())

# %% [markdown]
# **Training.** Every normaliser starts from the same weights and sees the same batches,
# with chapter 2's cross-entropy: parameters from `seed`, batches from `seed + 1` (Adam,
# learning rate 0.003, clipping at 1, 200 steps of 64 examples), three seeds. The test: 1000
# fresh examples (from `seed + 2`) with 8 pairs, as in training, and with 32 — a model
# relying on its weights' sum will notice.

# %%
#| export
def train_normaliser(
    variant: str, *, seed: int, n_pairs=8, steps=200, lr=3e-3, batch_size=64
) -> tuple[RetrievalModel, TrainLog]:
    """:func:`retrieval_model` with the normaliser ``variant``, trained by :func:`fit` on
    chapter 2's loss (:func:`retrieval_loss`): parameters from ``seed``, batches from
    ``seed + 1``, Adam with gradient clipping at 1."""
    torch.manual_seed(seed)
    model = retrieval_model(variant)
    log = fit(model,
              lambda g: retrieval_batch(batch_size, n_pairs, N_SYMBOLS, N_SYMBOLS, generator=g),
              retrieval_loss, steps=steps, lr=lr, data_seed=seed + 1, clip=1.0,
              threads=1)  # fmt: skip
    return model, log


def retrieval_accuracy(model: RetrievalModel, *, n_pairs: int, seed: int, size: int = 1000):
    """Held-out accuracy on ``size`` fresh examples with ``n_pairs`` pairs (NaN counts wrong)."""
    batch = retrieval_batch(size, n_pairs, N_SYMBOLS, N_SYMBOLS,
                            generator=torch.Generator().manual_seed(seed))  # fmt: skip
    with torch.no_grad():
        logits = model(batch.keys, batch.values, batch.query)  # (size, S)
    return float((logits.argmax(-1) == batch.target).float().mean())


# %% [markdown]
# First the gradients at initialisation, with the scores kept, to see which rows get a
# gradient at all.

# %%
#| export
def init_gradients(variant: str, *, seed: int = 0, n_pairs: int = 8, size: int = 512) -> dict:
    """At initialisation: the gradient norm reaching the query projection, the fraction of
    examples whose scores get no gradient at all, the row sums of the weights and the largest
    absolute weight (the forward pass of :class:`RetrievalModel` with the scores kept)."""
    normalizer, bias = VARIANTS[variant]
    torch.manual_seed(seed)
    model = retrieval_model(variant)
    batch = retrieval_batch(size, n_pairs, N_SYMBOLS, N_SYMBOLS,
                            generator=torch.Generator().manual_seed(seed + 1))  # fmt: skip
    q, k, v = model.project(batch.keys, batch.values, batch.query)  # (B, 1, 1 or n, ·)
    scores = (q @ k.transpose(-2, -1)) * model.scale  # (B, 1, 1, n)
    scores.retain_grad()
    weights = normalize_scores(scores, normalizer=normalizer, score_bias=bias)  # (B, 1, 1, n)
    loss = F.cross_entropy(model.readout((weights @ v)[:, 0, 0]), batch.target)
    loss.backward()
    dead = (scores.grad.abs().amax(-1) == 0).float().mean()
    w = weights.detach()[:, 0, 0]  # (B, n)
    return {
        "grad_norm_q": float(model.w_q.weight.grad.norm()),
        "dead_rows": float(dead),
        "row_sum_mean": float(w.sum(-1).mean()),
        "max_abs_weight": float(w.abs().max()),
    }


# %% [markdown]
# **Thresholds, set before the run** (`book.claims.ch09`). "Softmax is the best overall"
# would be refuted by a normaliser whose mean accuracy beats softmax's by more than
# `MARGIN = 0.02` at either length; it is fully confirmed only if every other normaliser is
# more than `MARGIN` below, at both lengths (`q_softmax_verdict`). A normaliser "breaks"
# when its mean accuracy is at least `BREAK_GAP = 0.3` below softmax's. From the definitions
# we expect plain normalisation to break.

# %%
SHORT, LONG = 8, 32
RETRIEVAL = {"n_pairs": SHORT, "steps": 200, "lr": 3e-3, "batch_size": 64}
print("setup of every run:", RETRIEVAL, "| tested at:", (SHORT, LONG), "| symbols:", N_SYMBOLS,
      "| chance:", f"1/{N_SYMBOLS}", "| seeds:", SEEDS)  # fmt: skip
print(f"thresholds: MARGIN {MARGIN}, BREAK_GAP {BREAK_GAP}")

grad_rows = {name: init_gradients(name) for name in VARIANTS}
print("at initialisation (512 examples of 8 pairs):")
print(f"{'normaliser':>18} {'|grad W_q|':>11} {'rows w/o grad':>14} {'row sum':>8} {'max |w|':>8}")
for name, g in grad_rows.items():
    print(f"{name:>18} {g['grad_norm_q']:>11.3g} {g['dead_rows']:>14.3f} "
          f"{g['row_sum_mean']:>8.2f} {g['max_abs_weight']:>8.3g}")  # fmt: skip

# %% [markdown]
# The gradients at initialisation already tell most of the story. Softmax rows sum to one
# and none is cut off from the gradient. The plain sigmoid's rows sum to about half the
# number of keys, so the output starts as a blur of all values, several times too large; the
# $-\log n$ bias brings the sum near one and the gradient to softmax's size. ReLU
# normalisation cuts a share of the examples off ("rows w/o grad"): a row with no positive
# score outputs zero, and one with a single positive score puts weight $s/s = 1$ on it
# whatever $s$ — no gradient for the scores either way (in exact arithmetic; float32
# round-off moves the printed share). Plain normalisation gives weights far outside $[0, 1]$
# and a gradient orders of magnitude larger than softmax's.

# %%
def train_and_score(setting: tuple[str, int]) -> tuple[float, float, bool]:
    """Held-out accuracy at SHORT and at LONG pairs, and whether the loss left the reals."""
    name, seed = setting
    model, log = train_normaliser(name, seed=seed, **RETRIEVAL)
    return (retrieval_accuracy(model, n_pairs=SHORT, seed=seed + 2),
            retrieval_accuracy(model, n_pairs=LONG, seed=seed + 2),
            not all(math.isfinite(x) for x in log.losses))  # fmt: skip


# the (normaliser, seed) runs side by side, one per core: the numbers of a plain loop
scores = run_keyed(train_and_score, [(n, s) for n in VARIANTS for s in SEEDS],
                   desc="normaliser x seed")  # fmt: skip
acc = {n: [scores[n, s][0] for s in SEEDS] for n in VARIANTS}  # at SHORT pairs, per seed
acc_long = {n: [scores[n, s][1] for s in SEEDS] for n in VARIANTS}  # at LONG pairs
n_diverged = {n: sum(scores[n, s][2] for s in SEEDS) for n in VARIANTS}  # non-finite losses

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
for ax, values, n in ((axes[0], acc, SHORT), (axes[1], acc_long, LONG)):
    plot_bar_spread(values, title=f"Retrieval with {n} pairs (trained on {SHORT})",
                    ylabel="held-out accuracy (3 seeds: mean, min–max, dots)", ax=ax,
                    reference=(1 / 64, "chance 1/64"))  # fmt: skip
    ax.tick_params(axis="x", labelrotation=25)
axes[0].get_legend().remove()
axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # clear of the bars
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
print(f"held-out accuracy over {len(SEEDS)} seeds, mean (min-max); runs with a non-finite loss")
for name in VARIANTS:
    s, sl = spread(acc[name]), spread(acc_long[name])
    print(f"{name:>18}: {SHORT} pairs {s.mean:.3f} ({s.min:.3f}-{s.max:.3f})   "
          f"{LONG} pairs {sl.mean:.3f} ({sl.min:.3f}-{sl.max:.3f})   "
          f"non-finite: {n_diverged[name]}")  # fmt: skip

# %% tags=["nbval-check-output"]
assert_softmax_not_beaten(acc, margin=MARGIN)
assert_softmax_not_beaten(acc_long, margin=MARGIN)
assert_breaks(acc, ["plain-normalised"], gap=BREAK_GAP)
softmax_claim = q_softmax_verdict({SHORT: acc, LONG: acc_long}, margin=MARGIN)
print("verdict:", softmax_claim)
record_claim(
    "Q-softmax",
    claim="Softmax is the best normaliser for attention overall",
    experiment=f"one-head retrieval of 1 value among {SHORT} pairs (64 symbols), 200 steps, "
    f"3 seeds; tested at {SHORT} and {LONG} pairs",
    verdict=softmax_claim,
    measured="; ".join(
        f"{n} {spread(acc[n]).mean:.2f}/{spread(acc_long[n]).mean:.2f}" for n in VARIANTS
    )
    + f" (accuracy at {SHORT}/{LONG} pairs)",
)
# The verdict below is written for this outcome; if a change makes the computed verdict
# differ, this stops the notebook until the prose is rewritten.
assert_stated("Q-softmax", softmax_claim, stated="reproduced")
print("Q-softmax under the sceptic's sweep (stored; mean accuracy at 8 and 32 pairs):")
keys = [f"{n} @{k}" for k in (SHORT, LONG) for n in ("softmax", "sigmoid", "sigmoid −log n")]
print(sweep_summary("Q-softmax", keys=keys))


def swept(claim_id: str) -> dict[str, str]:
    """The stored sweep's verdict per setting (``"baseline"``, then each perturbation)."""
    record = stored_sweeps()[claim_id]
    return {r["name"]: r["verdict"] for r in (record["baseline"], *record["perturbations"])}


# The verdict's paragraph names the budget it holds at: the stored sweep must say the same.
assert_stated("Q-softmax, 600 steps", swept("Q-softmax")["600 steps"], stated="partly")

# %% [markdown]
# **Verdict on "softmax is the best overall": reproduced at 200 steps, partly at 600**
# (`q_softmax_verdict`). At 200 steps every alternative trails softmax by more than `MARGIN`
# at both lengths in every seed, also with other seeds and a learning rate of 0.01. With
# three times the budget the plain sigmoid catches up to within `MARGIN` at the training
# length and no longer falls apart at 32 pairs, and the biased sigmoid comes close: "best"
# says how fast each normaliser learns this task, not where it ends.
#
# What breaks is what the definitions predict. Plain normalisation never learns: rows whose
# scores sum to nearly zero dominate the gradient. The plain sigmoid's weights do not
# compete, so four times as many distractors add four times as much noise, and at 200 steps
# it falls apart at 32 pairs. The $-\log n$ bias repairs most of that, as Ramapuram et al.
# argue; their claim of *parity* with softmax in large models (with their normalisation of
# the whole block) is beyond what a one-head model can test. ReLU normalisation learns,
# minus the rows it leaves without a gradient, and loses more than the biased sigmoid at 32
# pairs. Softmax is the safe default; "overall" is what one task, one layer and a short
# budget cannot show.

# %% [markdown]
# ## 9.2 C29: attention is not explanation
#
# It is tempting to read attention weights as the reason for a model's output. Jain &
# Wallace (2019) tested that reading: if attention explains a prediction, (i) it should rank
# the inputs as other importance measures do (the output's gradient, or the change when an
# input is left out), and (ii) a very different attention distribution should change the
# prediction. On recurrent text classifiers they found weak rank agreement and, for most
# inputs, a far adversarial distribution that left the prediction unchanged. Two later
# proposals try to repair the reading: weighting each token's attention by the size of what
# it contributes, $\lVert \alpha_j f(x_j) \rVert$ with $f(x_j) = W_O W_V x_j$ (Kobayashi et
# al. 2020), and *attention rollout* (Abnar & Zuidema 2020), which follows attention through
# all layers, residual included: per layer $\hat A = \tfrac12 A + \tfrac12 I$ (heads
# averaged), multiplied from the first layer up.
#
# **The classifier.** Real data that ships offline: scikit-learn's 8 × 8 handwritten digits
# (`book.data.digits`, 1,347 training and 450 test images). Each image row is a token (8
# pixels, linearly embedded, with a learned position) after a `[CLS]` token; two pre-LN
# encoder layers (`attention.blocks.EncoderLayer`, width 32, two heads) follow, and the
# class is read from `[CLS]`. The adversary must *set* the last layer's `[CLS]` weights, so
# that layer is written out (`last_layer`, tested equal to the package's), and `cls_logits`
# recomputes only the `[CLS]` position.

# %%
#| export
ROWS = 8  # an 8 × 8 digit is 8 row tokens of 8 pixels


class DigitsAttention(nn.Module):
    """Digits as 8 row tokens + a ``[CLS]`` token; pre-LN encoder layers; class from ``[CLS]``.

    ``forward(images (B, 8, 8)) -> logits (B, 10)`` (no mask: every token may attend to every
    token); :meth:`run` also returns every layer's input and its per-head weights, and can
    replace the ``[CLS]`` row of the last layer's weights (``cls_weights (B, H, L)``, L = 9).
    """

    def __init__(self, *, d_model: int = 32, num_heads: int = 2, num_layers: int = 2):
        super().__init__()
        self.embed = nn.Linear(ROWS, d_model)
        self.pos = nn.Parameter(torch.randn(ROWS + 1, d_model) * 0.1)
        self.cls = nn.Parameter(torch.randn(d_model) * 0.1)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, 2 * d_model, pre_ln=True) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 10)

    def tokens(self, images: Tensor) -> Tensor:
        b = images.shape[0]
        rows = self.embed(images)  # (B, 8, D)
        cls = self.cls.expand(b, 1, -1)  # (B, 1, D)
        return torch.cat([cls, rows], dim=1) + self.pos  # (B, 9, D)

    @staticmethod
    def last_layer(layer: EncoderLayer, x: Tensor, cls_weights: Tensor | None):
        """A pre-LN layer written out, so that the ``[CLS]`` row of its weights can be set."""
        attn: MultiHeadAttention = layer.self_attn
        h = layer.norm1(x)  # (B, L, D)
        q = split_heads(attn.q_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        k = split_heads(attn.k_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        v = split_heads(attn.v_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)  # (B, H, L, L)
        if cls_weights is not None:
            weights = torch.cat([cls_weights[:, :, None], weights[:, :, 1:]], dim=2)
        x = x + attn.out_proj(merge_heads(weights @ v))  # (B, L, D)
        x = x + layer.ff(layer.norm2(x))  # (B, L, D)
        return x, weights, v

    def run(self, images: Tensor, *, cls_weights: Tensor | None = None) -> dict:
        x = self.tokens(images)  # (B, 9, D)
        inputs, all_weights = [], []
        for layer in self.layers[:-1]:
            inputs.append(x)
            x, w = layer(x, need_weights=True)  # (B, 9, D), (B, H, 9, 9)
            all_weights.append(w)
        inputs.append(x)
        x, w, v = self.last_layer(self.layers[-1], x, cls_weights)
        all_weights.append(w)
        logits = self.head(self.norm(x[:, 0]))  # (B, 10)
        return {"logits": logits, "weights": all_weights, "inputs": inputs, "values": v}

    def from_last_input(self, x: Tensor, cls_weights: Tensor | None = None) -> Tensor:
        """Logits from the last layer's input ``x (B, 9, D)``, with its ``[CLS]`` weights set."""
        out, _, _ = self.last_layer(self.layers[-1], x, cls_weights)
        return self.head(self.norm(out[:, 0]))  # (B, 10)

    def cls_logits(self, x: Tensor, values: Tensor, cls_weights: Tensor) -> Tensor:
        """The logits given the last layer's input ``x (B, 9, D)``, its values ``(B, H, 9, Dh)``
        and ``[CLS]`` weights ``(B, H, 9)``: only the ``[CLS]`` position is computed (the
        prediction depends on nothing else), as :meth:`from_last_input` would."""
        layer = self.layers[-1]
        a = merge_heads(cls_weights[:, :, None] @ values)  # (B, 1, D)
        y = x[:, :1] + layer.self_attn.out_proj(a)  # (B, 1, D)
        y = y + layer.ff(layer.norm2(y))  # (B, 1, D)
        return self.head(self.norm(y[:, 0]))  # (B, 10)

    def forward(self, images: Tensor) -> Tensor:
        return self.run(images)["logits"]


# %% [markdown]
# **Training** is the book's classifier loop, `train_classifier` (Adam, clipping at 1;
# parameters from `seed`, batches from `seed + 1`), three seeds, 150 steps of 32 images
# drawn with replacement from the fixed training images by `sampler`, scored on the fixed
# test split.

# %%
#| export
def sampler(inputs: Tensor, labels: Tensor) -> Callable[[int, torch.Generator], tuple]:
    """A ``make_batch(batch_size, generator)`` for :func:`train_classifier` that draws
    ``batch_size`` examples, with replacement, from the fixed set ``inputs (N, ...)``,
    ``labels (N,)``."""
    if len(inputs) != len(labels):
        raise ValueError(
            f"inputs and labels must be of one length, got {len(inputs)} and {len(labels)}"
        )

    def make_batch(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(len(labels), (batch_size,), generator=generator)  # (B,)
        return inputs[idx], labels[idx]

    return make_batch


# %%
N_IMAGES, N_ADVERSARIAL = 200, 64
DIGITS = {"steps": 150, "batch_size": 32, "lr": 3e-3}
data = digits()
images = data.test_images[:N_IMAGES]
digit_runs = [
    train_classifier(DigitsAttention, sampler(data.train_images, data.train_labels), seed=s,
                     test=(data.test_images, data.test_labels), threads=1, **DIGITS)  # fmt: skip
    for s in progress(SEEDS, desc="classifier seeds")
]

# %% [markdown]
# **Five importance scores** of the 8 rows, for the predicted class: the last layer's
# attention from `[CLS]` (heads averaged); gradient × input ($|\sum_\text{pixels} x \cdot
# \partial \text{logit} / \partial x|$ per row); leave-one-out (the drop of the predicted
# class's probability when the row is blanked to background); the norm-based score; and
# rollout.

# %%
#| export
IMPORTANCES = ("attention", "gradient × input", "leave-one-out", "norm ‖α·f(x)‖", "rollout")


def rollout(weights: Sequence[Tensor]) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): per layer the head-averaged weights plus the
    residual, ``0.5·A + 0.5·I`` (rows renormalised), multiplied from the first layer up.
    ``weights``: per layer ``(B, H, L, L)``; returns ``(B, L, L)``."""
    out = None
    for w in weights:
        a = w.mean(1)  # (B, L, L)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)  # (B, L, L)
        a = a / a.sum(-1, keepdim=True)  # (B, L, L)
        out = a if out is None else a @ out  # (B, L, L)
    return out


def importances(model: DigitsAttention, images: Tensor) -> dict[str, Tensor]:
    """Five importance scores of the 8 rows of ``images (B, 8, 8)`` for the predicted class:
    ``name -> (B, 8)``.

    - attention: the last layer's ``[CLS]`` row, averaged over heads;
    - gradient × input: ``|Σ_pixels x · ∂logit/∂x|`` of each row;
    - leave-one-out: the drop of the predicted class's probability when the row is blanked
      (set to 0, the background);
    - norm ``‖α·f(x)‖`` (Kobayashi et al.): the length of what row ``j`` adds to the
      ``[CLS]`` output of the last attention, ``‖Σ_h α_h W_O^h v_h,j‖``;
    - rollout: the ``[CLS]`` row of :func:`rollout` over all layers.
    """
    model.eval()
    x = images.clone().requires_grad_(True)  # (B, 8, 8)
    out = model.run(x)
    pred = out["logits"].argmax(-1)  # (B,)
    chosen = out["logits"].gather(1, pred[:, None]).sum()
    (grad,) = torch.autograd.grad(chosen, x)  # (B, 8, 8)
    with torch.no_grad():
        probs = out["logits"].softmax(-1).gather(1, pred[:, None])[:, 0]  # (B,)
        loo = []
        for r in range(ROWS):
            blank = images.clone()  # (B, 8, 8)
            blank[:, r] = 0.0
            p = model(blank).softmax(-1).gather(1, pred[:, None])[:, 0]  # (B,)
            loo.append(probs - p)
        last = out["weights"][-1][:, :, 0, 1:]  # (B, H, 8)
        attn = model.layers[-1].self_attn
        v = out["values"][:, :, 1:]  # (B, H, 8, Dh)
        dh = v.shape[-1]
        w_o = attn.out_proj.weight.view(attn.d_model, attn.num_heads, dh)  # (D, H, Dh)
        contrib = torch.einsum("bhj,bhjd,ehd->bje", last, v, w_o)  # (B, 8, D)
        return {
            "attention": last.mean(1),
            "gradient × input": (grad * images).sum(-1).abs(),
            "leave-one-out": torch.stack(loo, dim=1),
            "norm ‖α·f(x)‖": contrib.norm(dim=-1),
            "rollout": rollout([w.detach() for w in out["weights"]])[:, 0, 1:],
        }


# %% [markdown]
# Leave-one-out is the reference — it measures what removing a row does. We compare the
# others with it by Kendall's $\tau$ over each test image's 8 rows (1 = the same order, 0 =
# unrelated; exercise 09.3 writes it) and Spearman's $\rho$, averaged over 200 test images.

# %%
#| export
def _ranks(x: Tensor) -> Tensor:
    """Ranks (0 = smallest) along the last dim, ties broken by position (continuous data)."""
    return x.argsort(-1).argsort(-1).to(torch.float64)


def spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman rank correlation per row of ``(N, n)`` tensors -> ``(N,)``."""
    ra, rb = _ranks(a), _ranks(b)  # (N, n) each
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return (ra * rb).sum(-1) / (ra.norm(dim=-1) * rb.norm(dim=-1))


def kendall(a: Tensor, b: Tensor) -> Tensor:
    """Kendall's τ (τ-a: no ties expected) per row of ``(N, n)`` tensors -> ``(N,)``."""
    da = torch.sign(a[:, :, None] - a[:, None, :])  # (N, n, n)
    db = torch.sign(b[:, :, None] - b[:, None, :])  # (N, n, n)
    n = a.shape[-1]
    return (da * db).sum((-2, -1)).to(torch.float64) / (n * (n - 1))


def mean_rank_correlation(a: Tensor, b: Tensor, *, kind: str = "kendall") -> float:
    """The mean over rows of :func:`kendall` (or :func:`spearman`) of ``(N, n)`` tensors."""
    check_choice("kind", kind, ("kendall", "spearman"))
    fn = kendall if kind == "kendall" else spearman
    return float(fn(a.double(), b.double()).mean())


# %% [markdown]
# **The adversary.** For test (ii) we search, per image, for last-layer `[CLS]` weights as
# far as possible from the model's own (Jensen–Shannon divergence in bits, averaged over
# heads; 0 = the same, 1 = no overlap) while the output moves by at most `tol` in total
# variation: gradient ascent on the weights' logits from the model's own plus noise,
# penalised once the output moves by more than half of `tol`; the best candidate within
# `tol` is kept.

# %%
#| export
def jensen_shannon(p: Tensor, q: Tensor) -> Tensor:
    """JSD in bits (0 … 1) between distributions along the last dim."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return (a * (torch.log2(a.clamp_min(1e-12)) - torch.log2(b.clamp_min(1e-12)))).sum(-1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


@dataclass(frozen=True)
class Adversary:
    jsd: Tensor  # (B,) JSD (bits) between the found and the model's own [CLS] weights, head-mean
    output_change: Tensor  # (B,) total variation distance between the two output distributions
    same_prediction: Tensor  # (B,) bool
    weights: Tensor  # (B, H, L) the found [CLS] weights


def adversarial_attention(
    model: DigitsAttention, images: Tensor, *, steps: int = 200, lr: float = 0.1, tol=0.01
) -> Adversary:
    """Search, per image of ``images (B, 8, 8)``, for ``[CLS]`` weights of the last layer as
    different as possible from the model's own (JSD, averaged over heads) while the output
    distribution moves by at most ``tol`` in total variation (Jain & Wallace 2019).

    Gradient ascent with Adam on ``JSD − 100·relu(TVD − tol/2)`` over the weights' logits,
    started from the model's own weights plus noise; the best feasible candidate seen per
    image is kept.
    """
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        with torch.no_grad():
            base = model.run(images)
        x_last = base["inputs"][-1]  # (B, 9, D): the earlier layers do not change
        values = base["values"]  # (B, H, 9, Dh)
        p0 = base["logits"].softmax(-1)  # (B, 10)
        w0 = base["weights"][-1][:, :, 0]  # (B, H, L)
        logits = w0.clamp_min(1e-6).log().clone().requires_grad_(True)  # (B, H, L)
        noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits += noise  # start away from the model's own weights
        opt = torch.optim.Adam([logits], lr=lr)
        best_w = w0.clone()  # (B, H, L)
        best_jsd = torch.zeros(len(images))  # (B,)
        best_tvd = torch.zeros(len(images))  # (B,)
        for _ in range(steps):
            w = logits.softmax(-1)  # (B, H, L)
            p = model.cls_logits(x_last, values, w).softmax(-1)  # (B, 10)
            tvd = 0.5 * (p - p0).abs().sum(-1)  # (B,)
            jsd = jensen_shannon(w, w0).mean(1)  # (B,)
            with torch.no_grad():
                ok = (tvd <= tol) & (jsd > best_jsd)
                best_w[ok], best_jsd[ok], best_tvd[ok] = w[ok], jsd[ok], tvd[ok]
            loss = -(jsd - 100.0 * torch.relu(tvd - tol / 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            p = model.from_last_input(x_last, best_w)  # (B, 10)
            same = p.argmax(-1) == p0.argmax(-1)  # (B,)
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
    return Adversary(best_jsd, best_tvd, same, best_w)


def trivial_adversaries(
    model: DigitsAttention, images: Tensor, *, seed: int = 0
) -> dict[str, Adversary]:
    """Wiegreffe & Pinter's controls for :func:`adversarial_attention`: ``[CLS]`` weights of
    the last layer that no search chose, put through the same measurements — ``"uniform"``
    (``1/L`` on every token) and ``"permuted"`` (the model's own weights of each head, shuffled
    over the tokens by one random permutation per image, from ``seed``). ``images (B, 8, 8)``."""
    model.eval()
    with torch.no_grad():
        base = model.run(images)
        x_last, values = base["inputs"][-1], base["values"]  # (B, 9, D), (B, H, 9, Dh)
        p0 = base["logits"].softmax(-1)  # (B, 10)
        w0 = base["weights"][-1][:, :, 0]  # (B, H, L)
        g = torch.Generator().manual_seed(seed)
        perms = torch.stack([torch.randperm(w0.shape[-1], generator=g) for _ in images])  # (B, L)
        candidates = {
            "uniform": torch.full_like(w0, 1.0 / w0.shape[-1]),  # (B, H, L)
            "permuted": w0.gather(-1, perms[:, None].expand_as(w0)),  # (B, H, L)
        }
        out = {}
        for name, w in candidates.items():
            p = model.cls_logits(x_last, values, w).softmax(-1)  # (B, 10)
            tvd = 0.5 * (p - p0).abs().sum(-1)  # (B,)
            same = p.argmax(-1) == p0.argmax(-1)  # (B,)
            out[name] = Adversary(jensen_shannon(w, w0).mean(1), tvd, same, w)
    return out


def meets_criterion(adversary: Adversary, *, far: float, tol: float) -> Tensor:
    """Per image ``(B,)`` bool: the ``[CLS]`` weights are at least ``far`` bits (JSD) from the
    model's own while the output moves by at most ``tol`` (total variation) and the predicted
    class stays — the criterion of C29's test (ii)."""
    return (adversary.jsd >= far) & adversary.same_prediction & (adversary.output_change <= tol)


# %% [markdown]
# **Thresholds, set before the run** (`book.claims.ch09`). Attention "agrees" with
# leave-one-out if the mean $\tau$ reaches `MAX_AGREEMENT = 0.5` (three quarters of the row
# pairs in the same order). An adversarial distribution "exists" for an image when `[CLS]`
# weights at least `FAR = 0.3` bits away move the output by at most `TOL = 0.01` (total
# variation) and keep the predicted class. Wiegreffe & Pinter's objection: if weights no
# search chose — uniform, or the model's own shuffled (`trivial_adversaries`) — pass too,
# the output hardly depends on the weights and an adversary says nothing about attention. So
# C29 holds if, in every seed, agreement stays below `MAX_AGREEMENT`, the controls meet the
# criterion for fewer than `MIN_FRACTION = 0.5` of the images, and the searched adversary
# meets it for at least `MIN_FRACTION` of the images no control passes; one of the two gives
# "partly" (`c29_verdict`). The article adds that value norms and mixing across layers are
# what matter; a repair (norm-based score or rollout) counts as more faithful if its mean
# $\tau$ with leave-one-out is at least `GAIN = 0.1` above raw attention's
# (`c29_repairs_verdict`: both repairs, reproduced; one, partly).

# %% tags=["nbval-check-output"] tolerance="trained"
print(f"thresholds: MAX_AGREEMENT {MAX_AGREEMENT}, FAR {FAR}, TOL {TOL}, "
      f"MIN_FRACTION {MIN_FRACTION}, GAIN {GAIN}")  # fmt: skip
print(f"digits: {len(data.train_labels)} training, {len(data.test_labels)} test images of "
      f"{tuple(data.train_images.shape[1:])} | setup: {DIGITS}")  # fmt: skip
model0 = digit_runs[0].model
print("layers:", len(model0.layers), "| width:", model0.layers[0].self_attn.d_model,
      "| heads:", model0.layers[0].self_attn.num_heads)  # fmt: skip
scores = [importances(run.model, images) for run in digit_runs]
adversaries = [adversarial_attention(run.model, images[:N_ADVERSARIAL], tol=TOL)
               for run in progress(digit_runs, desc="adversarial search")]  # fmt: skip
controls = [trivial_adversaries(run.model, images[:N_ADVERSARIAL], seed=s)
            for s, run in zip(SEEDS, digit_runs, strict=True)]  # fmt: skip
print("test accuracy:", spread([r.accuracy for r in digit_runs]).format(".3f"))

# %%
tau = {m: [mean_rank_correlation(s[m], s["leave-one-out"]) for s in scores]
       for m in IMPORTANCES if m != "leave-one-out"}  # fmt: skip
rho = {m: [mean_rank_correlation(s[m], s["leave-one-out"], kind="spearman") for s in scores]
       for m in tau}  # fmt: skip
tau_att = {m: [mean_rank_correlation(s[m], s["attention"]) for s in scores]
           for m in IMPORTANCES if m != "attention"}  # fmt: skip
meets = [meets_criterion(a, far=FAR, tol=TOL) for a in adversaries]  # (N_ADVERSARIAL,) each
control_meets = [{name: meets_criterion(a, far=FAR, tol=TOL) for name, a in c.items()}
                 for c in controls]  # fmt: skip
found = [float(m.float().mean()) for m in meets]  # the adversary's share of all images
control_share = {name: [float(c[name].float().mean()) for c in control_meets]
                 for name in ("uniform", "permuted")}  # fmt: skip
either = [c["uniform"] | c["permuted"] for c in control_meets]  # a control meets it
control_any = [float(e.float().mean()) for e in either]
beyond = [float(m[~e].float().mean()) for m, e in zip(meets, either, strict=True)]

# %% tags=["nbval-check-output"] tolerance="trained"
print(f"rank agreement with leave-one-out over {N_IMAGES} test images, {len(SEEDS)} seeds")
print(f"{'score':>18} {'Kendall tau':>22} {'Spearman rho':>22}")
for m in tau:
    t, r = spread(tau[m]), spread(rho[m])
    print(f"{m:>18} {t.mean:>8.3f} ({t.min:.3f}-{t.max:.3f}) "
          f"{r.mean:>8.3f} ({r.min:.3f}-{r.max:.3f})")  # fmt: skip
print("Kendall tau with the attention weights:",
      ", ".join(f"{m} {spread(v).mean:.3f}" for m, v in tau_att.items()))  # fmt: skip
jsd = spread([float(a.jsd.mean()) for a in adversaries])
print(f"adversarial [CLS] weights: JSD {jsd.format('.3f')} bits; images with JSD >= {FAR} and "
      f"output change <= {TOL}: {spread(found).format('.3f')}")  # fmt: skip
print("controls meeting the same criterion:", ", ".join(
    f"{name} {spread(v).format('.3f')}" for name, v in control_share.items()),
    f"| either {spread(control_any).format('.3f')}")  # fmt: skip
print(f"the adversary on the images no control passes: {spread(beyond).format('.3f')}")

# %%
example = 0
run0, adv0 = digit_runs[0], adversaries[0]
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [1, 2.2, 2.2]})
im = axes[0].imshow(images[example], cmap="gray_r", vmin=0, vmax=1)
fig.colorbar(im, ax=axes[0], fraction=0.046, label="pixel value")
axes[0].set_title(f"test image (digit {int(data.test_labels[example])})")
axes[0].set_xlabel("pixel column")
axes[0].set_ylabel("row = token")
rows = torch.arange(1, 9)
for k, m in enumerate(IMPORTANCES):
    v = scores[0][m][example].detach()
    axes[1].plot(rows, v / v.abs().max(), marker="o", label=m, color=f"C{k}")
axes[1].set_title("five importance scores of the rows (seed 0)")
axes[1].set_xlabel("row (token)")
axes[1].set_ylabel("score / its largest |score|")
axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
with torch.no_grad():
    own = run0.model.run(images[:1])["weights"][-1][0, :, 0].mean(0)  # (9,)
axes[2].bar(torch.arange(9) - 0.2, own, width=0.4, label="the model's own")
axes[2].bar(torch.arange(9) + 0.2, adv0.weights[example].mean(0), width=0.4,
            label=f"adversarial (JSD {float(adv0.jsd[example]):.2f} bits)")  # fmt: skip
axes[2].set_xticks(range(9), ["CLS", *[str(i) for i in range(1, 9)]])
axes[2].set_title("last layer's [CLS] weights, same prediction")
axes[2].set_xlabel("token")
axes[2].set_ylabel("attention weight (heads averaged)")
axes[2].legend(fontsize=8)
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
assert_c29_not_faithful(max(tau["attention"]), min(beyond), max(control_any),
                        max_agreement=MAX_AGREEMENT, min_fraction=MIN_FRACTION)  # fmt: skip
c29 = c29_verdict(tau["attention"], beyond, control_any, max_agreement=MAX_AGREEMENT,
                  min_fraction=MIN_FRACTION)  # fmt: skip
record_claim(
    "C29",
    claim="Attention weights are not a faithful explanation of a prediction",
    experiment=f"2-layer pre-LN classifier of the 8x8 digits (rows as tokens), 3 seeds; "
    f"Kendall tau with leave-one-out over {N_IMAGES} test images; adversarial [CLS] weights "
    f"on {N_ADVERSARIAL} images, against uniform and permuted weights; 150 steps",
    verdict=c29,
    measured=f"tau(attention, leave-one-out) {spread(tau['attention']).format('.2f')}; "
    f"adversary (JSD >= {FAR} bits, output change <= {TOL}) for "
    f"{spread(found).format('.2f')} of the images, uniform or permuted weights for "
    f"{spread(control_any).format('.2f')}, the adversary on the rest "
    f"{spread(beyond).format('.2f')}",
)
repairs = {m: tau[m] for m in ("norm ‖α·f(x)‖", "rollout")}
c29_repairs = c29_repairs_verdict(tau["attention"], repairs, gain=GAIN)
record_claim(
    "C29 repairs",
    claim="Value norms and mixing across layers matter: norm-based scores and attention "
    "rollout explain a prediction more faithfully than the raw weights",
    experiment="the same classifiers and images; Kendall tau with leave-one-out, compared "
    f"with raw attention's (a repair must gain at least {GAIN})",
    verdict=c29_repairs,
    measured="; ".join(f"{m} {spread(v).format('.2f')}" for m, v in repairs.items())
    + f"; gradient x input {spread(tau['gradient × input']).format('.2f')}",
)
print("verdicts: C29", c29, "| C29 repairs", c29_repairs)
print("C29 under the sceptic's sweep (stored; chapters/sceptic/09_faq_details.json):")
print(sweep_summary("C29", keys=["tau max", "controls max", "beyond min", "accuracy mean"]))
print("gain over raw attention:", {m: round(spread(v).mean - spread(tau["attention"]).mean, 3)
                                   for m, v in repairs.items()})  # fmt: skip
assert_stated("C29", c29, stated="reproduced")
assert_stated("C29, 450 steps", swept("C29")["450 steps"], stated="reproduced")
assert_stated("C29, 1 layer", swept("C29")["1 layer"], stated="partly")
assert_stated("C29 repairs", c29_repairs, stated="not reproduced")

# %% tags=["nbval-check-output"]
print("C29 repairs under the sceptic's sweep (stored; gain in mean Kendall tau over raw "
      "attention's):")  # fmt: skip
print(sweep_summary("C29 repairs", keys=["tau attention", "gain norm ‖α·f(x)‖", "gain rollout"]))
assert_stated("C29 repairs, 450 steps", swept("C29 repairs")["450 steps"], stated="not reproduced")
assert_stated("C29 repairs, 4 layers", swept("C29 repairs")["4 layers"], stated="partly")

# %% [markdown]
# **What each score says, measured.** Raw attention ranks the rows almost unrelated to
# leave-one-out (every seed under `MAX_AGREEMENT`), and on the images where the controls
# fail — all but a few — the searched adversary succeeds for more than half, in every seed.
# So C29 is **reproduced at 150 steps, with Wiegreffe & Pinter's control**: the last layer's
# weights are often one of many distributions the model would accept equally, and reading
# "importance" off them is not supported. It holds with other seeds and a 3× budget (where
# the controls pass far more often, but for fewer than half). With a **one-layer**
# classifier it drops to **partly**: far weights that keep the output are found for only a
# small share of images — plausibly (not tested) because one layer's `[CLS]` weights are the
# model's only mixing of the rows. The adversary half of C29 is a property of the model, not
# of attention — Wiegreffe & Pinter's point.
#
# The norm-based score mostly reorders attention by the size of each row's value vector, so
# its ranks follow the weights more than leave-one-out; rollout mixes in the first layer and
# the residual path. Neither gains `GAIN` over raw attention: the second half of C29 is
# **not reproduced at two layers on seeds 0–2**, nor with a 3× budget. Gradient × input
# disagrees with leave-one-out too: with 8 rows each carrying a piece of the digit, the
# decision is spread over interacting rows, and each one-number-per-row score is a different
# projection of it. Only rollout ever gains `GAIN` — on seeds 3–5 at two layers (a matter of
# seeds) and with **four layers** on both sets of seeds (partly) — as the article predicts:
# the more layers mix the rows, the more it pays to follow the mixing. The repairs were
# proposed for BERT-sized models; four layers is this scale's limit.

# %% [markdown]
# ## 9.3 C30: Pre-LN and Post-LN
#
# The 2017 Transformer normalises *after* each residual addition (Post-LN,
# `x = LayerNorm(x + sublayer(x))`); most models since normalise the sublayer's *input*
# (Pre-LN, `x = x + sublayer(LayerNorm(x))`), leaving the residual stream untouched, with one
# final LayerNorm. The blue paths in the diagram are the identity connections:

# %%
fig = layernorm_placement()

# %% [markdown]
# The stack: token embedding plus learned positions, `num_layers` encoder layers
# (`EncoderLayer(..., pre_ln=...)`, 2 heads, a feed-forward network twice as wide), the
# final LayerNorm for Pre-LN, and a read-out per token. Its task: at every position, output
# the previous token.

# %%
#| export
class TokenStack(nn.Module):
    """Embedding + learned positions + ``num_layers`` encoder layers + read-out, per token.

    ``pre_ln``: Pre-LN layers and a final LayerNorm; else Post-LN layers (the 2017 layout).
    ``forward(tokens (B, L)) -> logits (B, L, vocab)``; no mask (every token may attend to
    every token: the previous token is always visible).
    """

    def __init__(
        self, num_layers: int, *, pre_ln: bool, d_model: int = 16, vocab: int = 16, length=12
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(length, d_model) * 0.1)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, 2, 2 * d_model, pre_ln=pre_ln) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()
        self.out = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # (B, L, D)
        for layer in self.layers:
            x = layer(x)  # (B, L, D)
        return self.out(self.norm(x))  # (B, L, V)


def shift_batch(batch_size: int, generator: torch.Generator, *, vocab: int = 16, length=12):
    """Tokens ``(B, L)`` and targets ``(B, L)``: at every position the previous token (the
    first position: itself)."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)  # (B, L)
    target = torch.cat([tokens[:, :1], tokens[:, :-1]], dim=1)  # (B, L)
    return tokens, target


def token_loss(model: nn.Module, batch) -> Tensor:
    """Cross-entropy over every position of ``batch = (tokens (B, L), target (B, L))``."""
    tokens, target = batch
    logits = model(tokens)  # (B, L, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def layer_gradient_norms(
    num_layers: int, *, pre_ln: bool, d_model: int = 16, seed: int = 0, batch_size=64, length=8
) -> list[float]:
    """At initialisation: ‖∂loss/∂W‖ of each layer's last feed-forward matrix (the quantity
    of Xiong et al. 2020's analysis), layer 1 first, on one batch of :func:`shift_batch`."""
    torch.manual_seed(seed)
    model = TokenStack(num_layers, pre_ln=pre_ln, d_model=d_model)
    batch = shift_batch(batch_size, torch.Generator().manual_seed(seed), length=length)
    token_loss(model, batch).backward()
    return [float(layer.ff.linear2.weight.grad.norm()) for layer in model.layers]


# %% [markdown]
# Xiong et al. (2020) analysed the two at initialisation: for Post-LN, the gradient of the
# last layer's parameters does not depend on the depth $L$ and grows with the width $d$; for
# Pre-LN it shrinks like $1/\sqrt{L}$. Their explanation of Post-LN's need for warm-up:
# large gradients near the output, with Adam's large early steps, push the stack off course
# unless the learning rate starts small. We measure the gradient of every layer's second
# feed-forward matrix (the one they analyse) at initialisation, on one batch of the task
# below, over three seeds, for 6, 12 and 24 layers of width 16, and the last layer's at
# widths 16, 32 and 64 (6 layers).
#
# **Thresholds, from the predictions** (`assert_gradient_predictions`). Post-LN's last-layer
# gradient "does not depend on depth" if it changes by at most `FLAT = 1.5` times between 6
# and 24 layers; Pre-LN's "shrinks" if the 24-layer value is at most `SHRINK = 0.85` of the
# 6-layer one (the prediction is $\sqrt{6/24} = 0.5$); Post-LN's "grows with width" if width
# 64 gives at least `GROW = 1.2` times width 16's.

# %%
DEPTHS, WIDTHS = (6, 12, 24), (16, 32, 64)


def mean_norms(depth, pre_ln, width=16):
    per_seed = [layer_gradient_norms(depth, pre_ln=pre_ln, d_model=width, seed=s) for s in SEEDS]
    return [sum(v) / len(v) for v in zip(*per_seed, strict=True)]


profiles = {(pre, L): mean_norms(L, pre) for pre in (False, True) for L in DEPTHS}
by_width = {(pre, w): mean_norms(6, pre, w)[-1] for pre in (False, True) for w in WIDTHS}

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
for ax, pre in zip(axes, (False, True), strict=True):
    for k, L in enumerate(DEPTHS):
        ax.plot(range(1, L + 1), profiles[(pre, L)], marker="o", ms=3, color=f"C{k}",
                label=f"{L} layers")  # fmt: skip
    ax.set_title(f"{'Pre-LN' if pre else 'Post-LN'}: gradient per layer at initialisation")
    ax.set_xlabel("layer (1 = next to the input)")
    ax.set_ylabel("‖∂loss/∂W_ff2‖ (mean of 3 seeds)")
    ax.legend()
fig.tight_layout()

# %% tags=["nbval-check-output"]
print(f"thresholds: FLAT {FLAT}, SHRINK {SHRINK}, GROW {GROW}")
for pre in (False, True):
    name = "Pre-LN" if pre else "Post-LN"
    last = ", ".join(f"{L} layers {profiles[(pre, L)][-1]:.3f}" for L in DEPTHS)
    ends = ", ".join(f"{L}: {profiles[(pre, L)][-1] / profiles[(pre, L)][0]:.2f}" for L in DEPTHS)
    width = ", ".join(f"width {w} {by_width[(pre, w)]:.3f}" for w in WIDTHS)
    print(f"{name}: last layer {last} | last/first layer {ends} | {width}")

# %%
assert_gradient_predictions(
    {L: profiles[(False, L)][-1] for L in DEPTHS},
    {L: profiles[(True, L)][-1] for L in DEPTHS},
    {w: by_width[(False, w)] for w in WIDTHS},
    flat=FLAT,
    shrink=SHRINK,
    grow=GROW,
)
pre_shrink = profiles[(True, 24)][-1] / profiles[(True, 6)][-1]
post_ratio = profiles[(False, 24)][-1] / profiles[(False, 6)][-1]
print(f"24 vs 6 layers, last-layer gradient: Post-LN x{post_ratio:.2f}, Pre-LN x{pre_shrink:.2f} "
      f"(predicted x{math.sqrt(6 / 24):.2f})")  # fmt: skip

# %% [markdown]
# All three predictions hold in direction: Post-LN's last-layer gradient stays put as the
# stack deepens, Pre-LN's shrinks (less than $1/\sqrt{L}$ predicts), and both grow with
# width. In the deeper stacks Post-LN's gradient also grows towards the output ("last/first"
# above one at 12 and 24 layers) while Pre-LN's falls gently — the paper's best-known
# figure. Their analysis is for large widths; that width 16 follows it is a measurement, not
# a consequence.
#
# **Training**, the part of C30 that matters in practice: stacks of 12 layers of width 16,
# Adam without gradient clipping (a divergence must be allowed to happen), 150 steps of 16
# sequences of 8 tokens (16 symbols), at learning rates 0.001 and 0.01, three seeds each:
# Post-LN without warm-up and with a linear warm-up over the first 40 steps
# (`fit(..., schedule=linear_warmup(40))`), Pre-LN without. To fit the time budget, all runs
# of one (layout, warm-up) pair train as one batched model, `StackedRuns` (tested equal to
# training each alone): each run's parameters are *stored divided by* its rate factor and
# multiplied back in the forward pass, so one Adam at rate `lr`, whose step ignores the
# gradient's scale, acts as Adam at `lr · factor` on each run (up to ε).

# %%
#| export
class StackedRuns(nn.Module):
    """Several :class:`TokenStack` runs trained at once, each with its own seed and learning
    rate factor, by one :func:`fit` call (see the text above). The runs share nothing: their
    losses are summed, and a parameter only gets its own run's gradient.

    ``forward(tokens (R, B, L)) -> logits (R, B, L, vocab)``, R = ``len(seeds)`` runs.
    """

    def __init__(
        self,
        seeds: Sequence[int],
        lr_factors: Sequence[float],
        num_layers: int,
        *,
        pre_ln: bool,
        d_model: int = 16,
        vocab: int = 16,
        length: int = 12,
        init: str = "torch",
    ):
        super().__init__()
        check_choice("init", init, ("torch", "xavier"))
        if len(seeds) != len(lr_factors) or not seeds:
            raise ValueError(
                f"seeds and lr_factors must be non-empty and of one length, got {len(seeds)} "
                f"and {len(lr_factors)}"
            )
        self.pre_ln, self.num_layers = bool(pre_ln), num_layers
        self.models = []
        for seed in seeds:
            torch.manual_seed(seed)
            self.models.append(TokenStack(num_layers, pre_ln=pre_ln, d_model=d_model,
                                          vocab=vocab, length=length))  # fmt: skip
            if init == "xavier":  # Xavier-uniform weight matrices (the 2017 recipe), same seed
                for m in self.models[-1].modules():
                    if isinstance(m, nn.Linear):
                        nn.init.xavier_uniform_(m.weight)
        self.num_heads = self.models[0].layers[0].self_attn.num_heads
        self.register_buffer("factors", torch.tensor([float(f) for f in lr_factors]))
        self.stored = nn.ParameterDict()
        for name, tensor in self._gather().items():
            scale = self.factors.view(-1, *[1] * (tensor.dim() - 1))
            self.stored[name] = nn.Parameter(tensor / scale)

    def _gather(self) -> dict[str, Tensor]:
        """The runs' weights, stacked: ``name -> (R, ...)``, linear weights as ``(in, out)``."""

        def stack(get):
            return torch.stack([get(m).detach() for m in self.models])

        out = {
            "embed": stack(lambda m: m.embed.weight),
            "pos": stack(lambda m: m.pos),
            "out_w": stack(lambda m: m.out.weight.T),
            "out_b": stack(lambda m: m.out.bias),
        }
        if self.pre_ln:
            out["norm_w"] = stack(lambda m: m.norm.weight)
            out["norm_b"] = stack(lambda m: m.norm.bias)
        for i in range(self.num_layers):

            def layer(m, i=i):
                return m.layers[i]

            attn = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
            for short, proj in attn.items():
                out[f"l{i}_{short}_w"] = stack(
                    lambda m, p=proj: getattr(layer(m).self_attn, p).weight.T
                )
                out[f"l{i}_{short}_b"] = stack(
                    lambda m, p=proj: getattr(layer(m).self_attn, p).bias
                )
            for short, lin in (("ff1", "linear1"), ("ff2", "linear2")):
                out[f"l{i}_{short}_w"] = stack(
                    lambda m, lin=lin: getattr(layer(m).ff, lin).weight.T
                )
                out[f"l{i}_{short}_b"] = stack(lambda m, lin=lin: getattr(layer(m).ff, lin).bias)
            for norm in ("norm1", "norm2"):
                out[f"l{i}_{norm}_w"] = stack(lambda m, n=norm: getattr(layer(m), n).weight)
                out[f"l{i}_{norm}_b"] = stack(lambda m, n=norm: getattr(layer(m), n).bias)
        return out

    def forward(self, tokens: Tensor) -> Tensor:
        w = {n: p * self.factors.view(-1, *[1] * (p.dim() - 1)) for n, p in self.stored.items()}
        r, b, l = tokens.shape
        h = self.num_heads

        def linear(x, name):  # (R, N, in) -> (R, N, out)
            return torch.baddbmm(w[f"{name}_b"][:, None], x, w[f"{name}_w"])

        def norm(x, name):  # LayerNorm over the last dim, per-run affine
            y = F.layer_norm(x, x.shape[-1:])
            return y * w[f"{name}_w"][:, None] + w[f"{name}_b"][:, None]

        def attend(x, i):  # (R, B·L, D) -> (R, B·L, D)
            d = x.shape[-1]
            q, k, v = (
                linear(x, f"l{i}_{s}").view(r * b, l, h, d // h).transpose(1, 2)
                for s in ("q", "k", "v")
            )  # (R·B, H, L, Dh) each
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)  # (R·B, H, L, L)
            out = scores.softmax(-1) @ v  # (R·B, H, L, Dh)
            return linear(out.transpose(1, 2).reshape(r, b * l, d), f"l{i}_o")

        def ff(x, i):
            return linear(torch.relu(linear(x, f"l{i}_ff1")), f"l{i}_ff2")

        emb = w["embed"][torch.arange(r)[:, None, None], tokens]  # (R, B, L, D)
        x = (emb + w["pos"][:, None, :l]).reshape(r, b * l, -1)  # (R, B·L, D)
        for i in range(self.num_layers):
            if self.pre_ln:
                x = x + attend(norm(x, f"l{i}_norm1"), i)  # (R, B·L, D)
                x = x + ff(norm(x, f"l{i}_norm2"), i)  # (R, B·L, D)
            else:
                x = norm(x + attend(x, i), f"l{i}_norm1")  # (R, B·L, D)
                x = norm(x + ff(x, i), f"l{i}_norm2")  # (R, B·L, D)
        if self.pre_ln:
            x = norm(x, "norm")  # the final LayerNorm
        return linear(x, "out").view(r, b, l, -1)  # (R, B, L, V)


# %% [markdown]
# One `fit` call minimises the sum of the runs' mean cross-entropies (a non-finite run
# counts 0 and cannot stop the others); run `(lr, seed)` takes parameters from `seed` and
# batches from `seed + 1`, whatever the other runs.

# %%
#| export
def train_depth(
    num_layers: int,
    *,
    pre_ln: bool,
    lrs: Sequence[float],
    warmup: int,
    seeds: Sequence[int],
    steps: int = 150,
    d_model: int = 16,
    batch_size: int = 32,
    vocab: int = 16,
    length: int = 12,
    init: str = "torch",
) -> dict[tuple[float, int], list[float]]:
    """Train one :class:`TokenStack` per (learning rate, seed) on :func:`shift_batch` with Adam
    (no clipping) and ``warmup`` steps of :func:`linear_warmup` (0: none), all at once
    (:class:`StackedRuns`; ``init="xavier"``: Xavier-uniform weight matrices). Returns
    ``(lr, seed) -> the run's loss at every step``."""
    runs = [(lr, seed) for lr in lrs for seed in seeds]
    top = max(lrs)
    model = StackedRuns([s for _, s in runs], [lr / top for lr, _ in runs], num_layers,
                        pre_ln=pre_ln, d_model=d_model, vocab=vocab, length=length,
                        init=init)  # fmt: skip
    generators = [torch.Generator().manual_seed(seed + 1) for _, seed in runs]
    per_run: list[list[float]] = [[] for _ in runs]

    def make_batch(_):
        pairs = [shift_batch(batch_size, g, vocab=vocab, length=length) for g in generators]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])

    def loss_of(m, batch):
        tokens, target = batch  # (R, B, L) each
        logits = m(tokens)  # (R, B, L, V)
        losses = F.cross_entropy(logits.permute(0, 3, 1, 2), target, reduction="none")
        losses = losses.mean((1, 2))  # (R,)
        for r, value in enumerate(losses.tolist()):
            per_run[r].append(value)
        return losses.nan_to_num(nan=0.0, posinf=0.0).sum()

    fit(model, make_batch, loss_of, steps=steps, lr=top, data_seed=0, threads=1,
        schedule=linear_warmup(warmup) if warmup else None)  # fmt: skip
    return dict(zip(runs, per_run, strict=True))


def final_loss(losses: Sequence[float], *, last: int = 20) -> float:
    """Mean loss of the ``last`` steps (``inf`` if the run ever went non-finite)."""
    if not all(math.isfinite(x) for x in losses):
        return math.inf
    tail = losses[-last:]
    return sum(tail) / len(tail)


# %% [markdown]
# **Thresholds, set before the run** (`book.claims.ch09`). A run *fails* (`run_failed`) if
# its final loss, over the last 20 steps, is not at least 5 % below $\ln 16$, the loss of a
# uniform guess (or goes non-finite). "Pre-LN is more stable" means at least `MIN_GAP = 2`
# fewer failures than Post-LN, out of the 6 runs without warm-up; "Post-LN needs warm-up"
# means warm-up removes at least `MIN_GAP` of Post-LN's failures (`c30_verdict`: both,
# reproduced; one, partly). No run solves the task at this budget (every final loss is far
# from zero): a failure is a loss that never left the uniform guess; the sweep's 3× budget,
# which solves the task, tests whether that matters.

# %%
WARMUP, LRS, DEPTH = 40, (1e-3, 1e-2), 12
START = math.log(16)
DEPTH_SETUP = {"steps": 150, "batch_size": 16, "length": 8, "d_model": 16, "vocab": 16}
print(f"setup: {DEPTH} layers, {DEPTH_SETUP}, learning rates {LRS}, warm-up {WARMUP} steps, "
      f"seeds {SEEDS}; failure: final loss >= {0.95 * START:.3f} (5 % under ln 16 = "
      f"{START:.3f}), over the last 20 steps")  # fmt: skip


def train_layout(layout: tuple[bool, int]) -> dict:
    pre_ln, warmup = layout
    return train_depth(DEPTH, pre_ln=pre_ln, lrs=LRS, warmup=warmup, seeds=SEEDS, **DEPTH_SETUP)


# (Pre-LN?, warm-up steps), side by side
depth_runs = run_keyed(train_layout, [(False, 0), (False, WARMUP), (True, 0)], desc="layout")
failures = {
    ("Pre-LN" if pre else "Post-LN", warm): sum(
        run_failed(final_loss(losses), start_loss=START) for losses in runs.values()
    )
    for (pre, warm), runs in depth_runs.items()
}

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
for ax, lr in zip(axes, LRS, strict=True):
    for k, ((pre, warm), runs) in enumerate(depth_runs.items()):
        for j, seed in enumerate(SEEDS):
            label = f"{'Pre' if pre else 'Post'}-LN, warm-up {warm}" if j == 0 else None
            ax.plot(runs[(lr, seed)], color=f"C{k}", alpha=0.7, lw=1, label=label)
    ax.axhline(START, color="0.3", ls="--", lw=1, label="ln 16 (uniform guess)", zorder=5)
    ax.set_title(f"{DEPTH} layers, learning rate {lr:g} (3 seeds each)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats)")
axes[1].legend(fontsize=8, loc="lower left")
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
print(f"failed runs out of {len(LRS) * len(SEEDS)}:", failures)
final = {(pre, warm, lr): spread([final_loss(runs[(lr, s)]) for s in SEEDS])
         for (pre, warm), runs in depth_runs.items() for lr in LRS}  # fmt: skip
for (pre, warm, lr), s in final.items():
    print(f"{'Pre' if pre else 'Post'}-LN, warm-up {warm:>2}, lr {lr:g}: final loss "
          f"{s.format('.3f')}")  # fmt: skip

# %% tags=["nbval-check-output"] tolerance="trained"
assert_c30_stability(failures, total=len(LRS) * len(SEEDS), min_gap=MIN_GAP)
c30 = c30_verdict(failures, min_gap=MIN_GAP)
best = {layout: min(s.mean for (pre, _, _), s in final.items() if pre == (layout == "Pre-LN"))
        for layout in ("Post-LN", "Pre-LN")}  # fmt: skip
print("verdict:", c30, "| best mean final loss:", {k: round(v, 3) for k, v in best.items()})
record_claim(
    "C30",
    claim="Pre-LN trains deep stacks more stably than Post-LN, which needs a warm-up",
    experiment=f"{DEPTH}-layer stacks of width 16, previous-token task, Adam at lr {LRS}, "
    f"warm-up 0 or {WARMUP} steps, 150 steps, 3 seeds; gradients at initialisation at "
    f"depths {DEPTHS}",
    verdict=c30,
    measured="failed runs of 6: " + ", ".join(f"{k[0]} warm-up {k[1]}: {v}" for k, v in
                                                failures.items())  # fmt: skip
    + f"; best final loss Post-LN {best['Post-LN']:.3f}, Pre-LN {best['Pre-LN']:.3f}; "
    f"last-layer gradient 24 vs 6 layers: Post-LN x{post_ratio:.2f}, Pre-LN x{pre_shrink:.2f}",
)
assert_stated("C30", c30, stated="reproduced")
print("C30 under the sceptic's sweep (stored; failed runs of 6 per layout and warm-up):")
print(sweep_summary("C30", keys=["Post-LN warm-up 0", "Post-LN warm-up 40", "Pre-LN warm-up 0",
                                 "Post-LN warm-up 40 best final loss",
                                 "Pre-LN warm-up 0 best final loss"]))  # fmt: skip
assert_stated("C30, depth 6", swept("C30")["depth 6"], stated="not reproduced")
assert_stated("C30, depth 24", swept("C30")["depth 24"], stated="partly")
assert_stated("C30, 450 steps", swept("C30")["450 steps"], stated="reproduced")
assert_stated("C30, Xavier init", swept("C30")["Xavier init"], stated="partly")
assert_stated("C30, lr 0.003 and 0.03", swept("C30")["lr 0.003, 0.03"], stated="partly")

# %% [markdown]
# **Verdict on C30: reproduced at 12 layers, learning rates 0.001 and 0.01, 150 steps**
# (torch's default initialisation). Without warm-up, Post-LN fails at the larger rate in
# every seed — its loss stays at the uniform guess — while Pre-LN trains at both rates, and
# so does Post-LN with 40 steps of warm-up. The sweep splits the claim. **"Pre-LN is more
# stable"** survives wherever anything fails: Pre-LN fails no run in any setting, 6 to 24
# layers. **"Warm-up rescues Post-LN"** holds only here (also with other seeds and a 3×
# budget): at 24 layers, at learning rates 0.003 and 0.03, and with Xavier-uniform
# initialisation Post-LN fails as often with warm-up as without (partly); at 6 layers
# nothing fails, so there is nothing to rescue (not reproduced). Longer warm-ups were not
# tried. With a 3× budget (450 steps) the task is solved, yet Post-LN without warm-up still
# fails in two of six runs: those failures are the stack's, not the budget's.
#
# **When does Post-LN do better?** Takase et al. (2023) and others report that Post-LN, when
# it trains, often ends up better than Pre-LN in shallow models after long training:
# Pre-LN's untouched residual stream lets later layers contribute less and less (the
# shrinking gradient above). Here Pre-LN's best loss is ahead; the advantage would need
# their regime (6-layer translation models trained to convergence). Pre-LN is the safe
# choice for deep stacks and untuned learning rates; Post-LN with warm-up is a legitimate
# one that this scale cannot rank.

# %% [markdown]
# ## 9.4 Attention, convolution, recurrence
#
# Three ways for a layer to mix positions: a convolution of width $k$ combines each position
# with its $k - 1$ neighbours, a recurrence carries a state from one position to the next,
# attention combines every position with every other. What the last output sees after one
# layer of each:

# %%
fig = reach_per_layer()

# %% [markdown]
# The three layers, each `(B, L, D) -> (B, L, D)`: attention with its four projections; a
# width-3 convolution; an Elman recurrence $h_t = \tanh(W x_t + U h_{t-1})$, written as the
# loop it is.

# %%
#| export
class ElmanRNN(nn.Module):
    """``h_t = tanh(W x_t + U h_{t-1})``, written as a loop: ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.w = nn.Linear(d_model, d_model)
        self.u = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.zeros_like(x[:, 0])  # (B, D)
        wx = self.w(x)  # (B, L, D)
        out = []
        for t in range(x.shape[1]):
            h = torch.tanh(wx[:, t] + self.u(h))  # (B, D)
            out.append(h)
        return torch.stack(out, dim=1)  # (B, L, D)


class ConvLayer(nn.Module):
    """A 1-D convolution over positions, ``kernel`` wide: ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, L, D)


class AttentionLayer(nn.Module):
    """Multi-head self-attention (with its projections, no mask): ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, num_heads: int = 2):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, num_heads)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x)  # (B, L, D)


MIXERS: dict[str, Callable[[int], nn.Module]] = {
    "attention": AttentionLayer,
    "convolution (k=3)": ConvLayer,
    "recurrence (Elman)": ElmanRNN,
}


# %% [markdown]
# FLOPs come from torch's FLOP counter (`measure.flops`) on one layer of each kind at width
# 32, at 64 and 128 tokens. Reach is the number of earlier positions whose input gets a
# non-zero gradient from the last output after one layer; from it follow the layers needed
# to connect the two ends of a 64-token sequence, and the longest chain of steps between
# them.

# %%
#| export
def counted_flops(layer: nn.Module, x: Tensor) -> int:
    """Forward FLOPs of ``layer(x)`` as torch's FLOP counter sees them."""
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        layer(x)
    return int(counter.get_total_flops())


def layer_reach(layer: nn.Module, length: int, d_model: int) -> int:
    """How many earlier positions one layer lets the last output see: the positions ``j <
    length − 1`` whose input gets a nonzero gradient from output ``length − 1``."""
    torch.manual_seed(0)
    x = torch.randn(1, length, d_model, requires_grad=True)  # (1, L, D)
    (grad,) = torch.autograd.grad(layer(x)[0, -1].sum(), x)  # (1, L, D)
    return int((grad[0, :-1].abs().sum(-1) > 0).sum())


def layer_costs(*, length: int = 64, d_model: int = 32) -> dict[str, dict]:
    """Per kind of layer: FLOPs counted by torch at ``length`` and ``2·length``; the longest
    chain of steps that must run one after the other; the reach of one layer
    (:func:`layer_reach`) and so the layers needed to connect the two ends of a
    ``length``-token sequence; the longest path between them, in steps."""
    out = {}
    for name, cls in MIXERS.items():
        torch.manual_seed(0)
        layer = cls(d_model)
        flops = [counted_flops(layer, torch.randn(1, n, d_model)) for n in (length, 2 * length)]
        reach = layer_reach(layer, length, d_model)
        recurrent = name.startswith("recurrence")
        layers = math.ceil((length - 1) / reach)
        out[name] = {
            "flops": flops[0],
            "flops_2x": flops[1],
            "sequential_steps": length if recurrent else 1,
            "reach": reach,
            "layers_to_connect": layers,
            "path_steps": length - 1 if recurrent else layers,
        }
    return out


# %% tags=["nbval-check-output"]
costs = layer_costs(length=64, d_model=32)
print(f"{'layer':>20} {'FLOPs n=64':>11} {'n=128 / n=64':>13} {'steps in sequence':>18} "
      f"{'reach':>6} {'layers to connect':>18} {'path (steps)':>13}")
for name, c in costs.items():
    print(f"{name:>20} {c['flops']:>11,} {c['flops_2x'] / c['flops']:>13.2f} "
          f"{c['sequential_steps']:>18} {c['reach']:>6} {c['layers_to_connect']:>18} "
          f"{c['path_steps']:>13}")  # fmt: skip

# %% [markdown]
# Attention costs the most at 64 tokens and is the only one whose cost more than doubles
# when the length doubles (the $n^2$ term; at this width the projections are still a large
# share). In return, only attention connects the two ends in one step: a convolution of
# width 3 needs 63 layers, the recurrence one layer but 63 sequential steps — which is also
# why it cannot be parallelised over the sequence (chapter 1).
#
# **Two experiments with the priors.** A small classifier — embedding plus learned
# positions, two pre-LN residual blocks of one mixer (attention or a width-3 convolution)
# each followed by a feed-forward network, a read-out, two classes — trained on two tasks,
# three seeds:
#
# - **motif**, where locality helps: does the pair (0, 1) occur at adjacent positions in a
#   sequence of 16 tokens (6 symbols)? Only 64 training examples, 200 steps, mean read-out.
#   A convolution has the prior built in; attention must *learn* adjacency from the
#   positional embeddings;
# - **ends**, where reach is needed: is the first token of a 32-token sequence equal to the
#   last? Fresh data at every step, 300 steps, read-out at the last position, which two
#   convolution layers let see only the last few positions (printed below); the first token
#   is 31 away. (Not a max over positions: $\max(a, b) - \min(a, b) = |a - b|$ would compare
#   the two ends whatever the mixer.)

# %%
#| export
def motif_batch(batch_size: int, generator: torch.Generator, *, length: int = 16, vocab=6):
    """Does the pair ``(0, 1)`` occur at two adjacent positions? Half the sequences have it
    planted once; tokens 0 and 1 appear elsewhere too, but never adjacent in that order.
    Returns ``tokens (B, L)``, ``labels (B,)``."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)  # (B, L)
    # break every accidental (0, 1): a 1 right after a 0 becomes a 2
    for _ in range(2):
        follows = (tokens[:, :-1] == 0) & (tokens[:, 1:] == 1)  # (B, L - 1)
        tokens[:, 1:][follows] = 2
    labels = torch.randint(2, (batch_size,), generator=generator)  # (B,)
    where = torch.randint(length - 1, (batch_size,), generator=generator)  # (B,)
    rows = torch.nonzero(labels).squeeze(1)
    tokens[rows, where[rows]] = 0
    tokens[rows, where[rows] + 1] = 1
    return tokens, labels


def ends_batch(batch_size: int, generator: torch.Generator, *, length: int = 32, vocab=4):
    """Is the first token equal to the last? Half yes, half no. ``tokens (B, L)``,
    ``labels (B,)``."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)  # (B, L)
    labels = torch.randint(2, (batch_size,), generator=generator)  # (B,)
    shift = torch.randint(1, vocab, (batch_size,), generator=generator)  # (B,)
    tokens[:, -1] = torch.where(labels == 1, tokens[:, 0], (tokens[:, 0] + shift) % vocab)
    return tokens, labels


# %% [markdown]
# The classifier and its training: `train_classifier` (parameters from `seed`, batches from
# `seed + 1`, Adam at 0.003, clipping at 1, batches of 32) on `n_train` fixed examples drawn
# with `sampler` (or fresh ones every step), scored on 1000 fresh examples (from `seed + 2`).

# %%
#| export
class MixerClassifier(nn.Module):
    """Embedding (+ learned positions) → ``num_layers`` residual blocks of one mixer (pre-LN,
    with a feed-forward network) → read-out → 2 classes. ``forward(tokens (B, L)) -> logits
    (B, 2)``.

    ``readout``: ``"mean"`` over positions (a question about the whole sequence: "does the
    motif occur anywhere?") or ``"last"`` position (a question asked at one position, as a
    sequence model answers it). Not ``max``: a max over positions compares far-apart tokens
    by itself (``max(a, b) − min(a, b) = |a − b|``), which would hide the mixer's reach.
    """

    def __init__(
        self, mixer: str, *, vocab: int, length: int, d_model=32, num_layers=2, readout="mean"
    ):
        super().__init__()
        check_choice("mixer", mixer, ("attention", "convolution"))
        self.readout = check_choice("readout", readout, ("mean", "last"))
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(length, d_model) * 0.1)
        make = AttentionLayer if mixer == "attention" else ConvLayer
        self.mix = nn.ModuleList(make(d_model) for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2 * num_layers))
        self.ffs = nn.ModuleList(
            nn.Sequential(
                nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model)
            )
            for _ in range(num_layers)
        )
        self.out = nn.Linear(d_model, 2)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos  # (B, L, D)
        for i, (mix, ff) in enumerate(zip(self.mix, self.ffs, strict=True)):
            x = x + mix(self.norms[2 * i](x))  # (B, L, D)
            x = x + ff(self.norms[2 * i + 1](x))  # (B, L, D)
        pooled = x.mean(dim=1) if self.readout == "mean" else x[:, -1]  # (B, D)
        return self.out(pooled)  # (B, 2)


# task -> (batch maker, vocabulary, length, read-out)
TASKS = {"motif": (motif_batch, 6, 16, "mean"), "ends": (ends_batch, 4, 32, "last")}


def mixer_accuracy(task: str, mixer: str, *, seed: int, n_train: int | None, steps: int):
    """Held-out accuracy of :class:`MixerClassifier` with ``mixer`` trained on ``task`` by
    :func:`train_classifier`; ``n_train``: a fixed training set of that many examples (drawn
    from ``seed + 1000``), ``None``: fresh examples at every step."""
    make, vocab, length, readout = TASKS[check_choice("task", task, list(TASKS))]
    if n_train is not None:
        make = sampler(*make(n_train, torch.Generator().manual_seed(seed + 1000)))
    test = TASKS[task][0](1000, torch.Generator().manual_seed(seed + 2))
    run = train_classifier(
        lambda: MixerClassifier(mixer, vocab=vocab, length=length, readout=readout),
        make,
        steps=steps,
        seed=seed,
        test=test,
        threads=1,
    )
    return run.accuracy


# %% [markdown]
# **Thresholds, set before the run** (`assert_prior_wins`, `priors_verdict`). The prior
# "wins" if the winner's mean held-out accuracy is at least `WIN_GAP = 0.1` above the
# loser's and its worst seed beats the loser's best. The claim has two parts (locality on
# the motif, reach on the ends); both win, reproduced; one, partly.

# %% tags=["nbval-check-output"]
TASK_SETUP = {"motif": {"n_train": 64, "steps": 200}, "ends": {"n_train": None, "steps": 300}}
print(f"threshold: WIN_GAP {WIN_GAP}")
for task, (_, vocab, length, readout) in TASKS.items():
    print(f"{task}: {length} tokens, {vocab} symbols, read-out {readout!r}, {TASK_SETUP[task]}")
seen = 1 + 2 * costs["convolution (k=3)"]["reach"]
print(f"ends: two width-3 convolution layers let the last position see the last {seen} "
      f"positions; the first token is {TASKS['ends'][2] - 1} positions away")


def run_mixer(setting: tuple[str, str, int]) -> float:
    task, mixer, seed = setting
    return mixer_accuracy(task, mixer, seed=seed, **TASK_SETUP[task])


mixer_settings = [(t, m, s) for t in ("motif", "ends") for m in ("convolution", "attention")
                  for s in SEEDS]  # fmt: skip
mixer_acc = run_keyed(run_mixer, mixer_settings, desc="task x mixer x seed")
mixer_runs = {(t, m): [mixer_acc[t, m, s] for s in SEEDS] for t, m, _ in mixer_settings}

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
TITLES = {"motif": "motif, 64 training examples", "ends": "first = last? (32 tokens)"}
for ax, (task, title) in zip(axes, TITLES.items(), strict=True):
    plot_bar_spread({m: mixer_runs[(task, m)] for m in ("convolution", "attention")},
                    title=title, ylabel="held-out accuracy (3 seeds)", ax=ax,
                    reference=(0.5, "chance 1/2"))  # fmt: skip
axes[0].get_legend().remove()
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained"
for (task, mixer), values in mixer_runs.items():
    print(f"{task:>6}, {mixer:>11}: {spread(values).format('.3f')}")

# %% tags=["nbval-check-output"] tolerance="trained"
assert_prior_wins(mixer_runs[("motif", "convolution")], mixer_runs[("motif", "attention")],
                  gap=WIN_GAP, what="locality on the motif task")  # fmt: skip
assert_prior_wins(mixer_runs[("ends", "attention")], mixer_runs[("ends", "convolution")],
                  gap=WIN_GAP, what="reach on the ends task")  # fmt: skip
priors = priors_verdict(mixer_runs, gap=WIN_GAP)
print("verdict:", priors)
record_claim(
    "§9 priors",
    claim="Convolution's locality prior wins with little data on local patterns; attention's "
    "reach wins on long-range dependencies",
    experiment="2-block classifiers (width-3 convolution or attention), 200 steps, 3 seeds; "
    "motif in 16 tokens from 64 examples; first = last in 32 tokens",
    verdict=priors,
    measured="; ".join(f"{t} {m} {spread(v).mean:.2f}" for (t, m), v in mixer_runs.items()),
)
assert_stated("§9 priors", priors, stated="reproduced")

# %% [markdown]
# **Does attention catch up with more data?** The claim says "with little data", so data
# size is its knob: the sceptic's sweep (`make sceptic CH=09`) grows the motif training set
# up to fresh examples at every step, and adds a 3× budget and other seeds (the ends task
# has fresh data already):

# %% tags=["nbval-check-output"]
print(sweep_summary("§9 priors", keys=["motif convolution", "motif attention",
                                       "motif attention range", "ends attention"]))  # fmt: skip
for setting in ("256 examples", "1024 examples", "fresh data", "fresh data, 600 steps"):
    assert_stated(f"§9 priors, {setting}", swept("§9 priors")[setting], stated="reproduced")

# %% [markdown]
# **Verdict: reproduced at every data size tried**, from 64 examples to fresh data for 600
# steps — "with little data" is not its condition. With 64 examples attention trails the
# convolution; with more data the convolution is perfect and attention gains only a few
# points: at this scale it never learns adjacency from learned positions. Where its curve
# would cross the convolution's (vision Transformers learn locality from millions of images)
# lies beyond what was tried. On the ends task two convolution layers stay at chance while
# attention solves it; as two width-3 layers *cannot* see the first token, that part
# illustrates reach rather than testing it. Neither mixer is "better": a prior is a bet on
# the data, and a deep or dilated convolution reaches far too (WaveNet, TCNs — chapter 7).

# %% [markdown]
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - Softmax's three properties together — positive, summing to one, competition between
#   keys — are what the alternatives lose one at a time: plain normalisation explodes, the
#   plain sigmoid does not adapt to the length (the $-\log n$ bias fixes most of that), ReLU
#   normalisation leaves some rows without gradient. With a 3× budget the plain sigmoid
#   catches up: "best" at 200 steps is "fastest to learn".
# - Attention weights rank inputs unlike leave-one-out, and — where uniform or shuffled
#   weights would not already do — a very different distribution can give the same output
#   (not with one layer). Norm-based scores do not make them more faithful, rollout does
#   only with more layers; measure importance by intervention (leave-one-out, ablations)
#   when it matters.
# - Pre-LN keeps an identity path from input to output and trains at learning rates where
#   Post-LN fails; warm-up rescues Post-LN only in some settings (here 12 layers at the
#   default initialisation; not at 24 layers, with Xavier initialisation or at larger
#   rates). Xiong et al.'s gradient predictions hold in direction at small width.
# - Attention buys a one-step path between any two positions for a cost that grows with
#   $n^2$; convolution buys a locality prior, which here wins a local task at every data
#   size tried; recurrence is cheap per step but sequential.
#
# ## Exercises
#
# Your workbook `my-exercises/09_faq_details.py` (`make lab` copies it there) has five: sigmoid
# attention weights with the $-\log n$ bias, attention rollout, Kendall's $\tau$, the
# learning-rate factor of a linear warm-up, and an experiment — predict C29's verdict for a
# one-layer classifier, then run it. Check your answers in the notebook or with
# `make check CH=09`.
#
# ## Further reading
#
# - Ramapuram, Danieli, Dhekane, Weers, Busbridge, Ablin, Likhomanenko, Digani, Gu,
#   Shidani, Webb (2024), *Theory, Analysis, and Best Practices for Sigmoid Self-Attention*.
# - Jain, Wallace (2019), *Attention is not Explanation*; Wiegreffe, Pinter (2019),
#   *Attention is not not Explanation* — the reply, on when adversarial weights mean little.
# - Kobayashi, Kuribayashi, Yokoi, Inui (2020), *Attention is Not Only a Weight: Analyzing
#   Transformers with Vector Norms*.
# - Abnar, Zuidema (2020), *Quantifying Attention Flow in Transformers*.
# - Xiong, Yang, He, Zheng, Zheng, Xing, Zhang, Lan, Wang, Liu (2020), *On Layer
#   Normalization in the Transformer Architecture*.
# - Takase, Kiyono, Kobayashi, Suzuki (2023), *On Layer Normalizations and Residual
#   Connections in Transformers* (B2T connection).
# - Liu, Liu, Gao, Chen, Han (2020), *Understanding the Difficulty of Training Transformers*.
