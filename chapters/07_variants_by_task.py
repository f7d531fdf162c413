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
# # Chapter 7 — Attention variants by task: images, time series, two modalities
#
# Everything so far fed attention a sentence. Nothing in the mechanism asks for one: it takes
# a set of vectors and lets each read from the others. This chapter feeds it three other
# things and asks what has to change. **Images**: a Vision Transformer (ViT) cuts a picture
# into patches and treats each patch as a word, which makes the cost explode with the
# resolution; the Swin Transformer attends only inside small windows and shifts them from
# layer to layer so that information still travels. **Time series**: a forecaster can treat
# every time step as a token, but strongly periodic, trending data is where simpler models
# are known to do well, so we put attention against a seasonal copy, a linear model, an LSTM
# and a convolutional network on equal terms. **Two modalities**: words attend to image
# patches through cross-attention, and CLIP aligns images with their captions by contrast.
#
# The data is real where a reader would expect it: the 1,797 handwritten digits that
# scikit-learn ships (8 × 8 pixels, 16 grey levels), and the Mauna Loa CO₂ record
# that statsmodels ships (weekly measurements since 1958). Both load from files inside the
# installed packages; nothing here touches the network. The price is scale: these images are
# tiny and the series is short, and every model below trains in a second or two on one CPU
# core. Where that limits what an experiment can show, the text says so.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - turn an image into patch tokens by hand and count what attention over them costs as the
#   resolution grows;
# - explain why window attention is linear in the image area, and measure how far information
#   travels with and without Swin's shifted windows;
# - set up a fair forecasting comparison (chronological split, one budget, several seeds) and
#   read it against the known result that linear models are hard to beat;
# - read cross-attention weights as "which patch did this word look at", and train a
#   contrastive image–text model, knowing what its loss and its temperature do.

# %%
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from attention.blocks import EncoderLayer
from attention.efficient.probsparse import n_selected, probsparse_attention
from attention.functional import scaled_dot_product_attention
from attention.multimodal import clip_contrastive_loss
from attention.timeseries import (
    DLinear,
    LastValueNormalization,
    LSTMForecaster,
    ProbSparseAttention,
    TCNForecaster,
    TransformerForecaster,
    seasonal_naive,
)
from attention.vision import PatchEmbedding, PatchMerging, SwinBlock, VisionTransformer
from book.claims import claims_table, record_claim
from book.data import co2_monthly, digits
from book.diagrams.ch07 import clip_contrastive, patches_to_tokens, shifted_windows
from book.experiments import ch07
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.experiments.training import fit, moving_average
from book.plotting import plot_bar_spread, plot_lines, plot_spread, reference_line, set_style
from book.progress import progress
from measure.cost import fit_power, measure_cost

set_style()
make_deterministic(0)
torch.set_num_threads(1)  # tiny models: one thread is the fastest, and the steadiest

# %% [markdown]
# ## 7.1 Images as sequences: the Vision Transformer
#
# A Transformer needs a sequence of vectors. ViT (Dosovitskiy et al., 2021) gets one from an
# image by cutting it into non-overlapping $p \times p$ squares, flattening each square's
# pixels into a vector of $C p^2$ numbers, and mapping every such vector with one shared
# linear layer to the model width. The squares are read row by row, a learned position
# embedding is added to each (the model must learn the 2-D layout from data: nothing else
# tells it that patch 5 sits under patch 1), and a learned `[CLS]` token is put in front to
# collect a summary for the classifier.

# %%
fig = patches_to_tokens()

# %% [markdown]
# Our images are the digits: 1,347 for training and 450 for testing, split per class
# (`book.data.digits`), each 8 × 8 pixels with 16 grey levels, scaled to $[0, 1]$. With
# $p = 2$ a digit becomes 16 patch tokens of 4 pixels each. Cutting is a reshape and a
# permutation: split each axis into (patch index, pixel inside the patch), bring the two
# patch indices to the front, and flatten the rest. We write it out and check it against the
# package's `PatchEmbedding`, which does the cut and the linear map in one strided
# convolution (a convolution whose kernel is the patch size and whose stride is the patch
# size sees each patch exactly once, with the linear layer as its kernel).

# %% tags=["nbval-check-output"]
data = digits()
n_digits = len(data.train_labels) + len(data.test_labels)
print(f"{n_digits} digits: train {tuple(data.train_images.shape)}, "
      f"test {tuple(data.test_images.shape)}")  # fmt: skip

torch.manual_seed(0)
embed = PatchEmbedding(8, 2, 1, 32)
images = data.train_images[:4].unsqueeze(1)  # (4, 1, 8, 8)
by_hand = ch07.patchify(images, 2)  # (4, 16, 4): 16 patches of 1·2·2 pixels
weight = embed.proj.weight.reshape(32, -1)  # (32, 4): the conv kernel is the linear layer
torch.testing.assert_close(by_hand @ weight.T + embed.proj.bias, embed(images))
print(f"{tuple(images.shape)} → patches {tuple(by_hand.shape)} → "
      f"tokens {tuple(embed(images).shape)}")  # fmt: skip

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [1, 1.3]})
shown = axes[0].imshow(images[0, 0], cmap="gray_r", vmin=0, vmax=1)
for k in range(0, 9, 2):
    axes[0].axhline(k - 0.5, color="tab:orange", lw=1)
    axes[0].axvline(k - 0.5, color="tab:orange", lw=1)
for n in range(16):
    r, c = divmod(n, 4)
    axes[0].text(2 * c + 0.5, 2 * r + 0.5, str(n), ha="center", va="center", color="tab:blue",
                 fontsize=9, fontweight="bold")  # fmt: skip
axes[0].set_title(f"a real digit (label {int(data.train_labels[0])}) cut into 2 × 2 patches")
axes[0].set_xlabel("pixel column")
axes[0].set_ylabel("pixel row")
axes[0].grid(False)
tokens_img = axes[1].imshow(by_hand[0].T, cmap="gray_r", vmin=0, vmax=1, aspect="auto")
axes[1].set_title("the 16 patch vectors, one column per token")
axes[1].set_xlabel("token (patch number, row-major)")
axes[1].set_ylabel("pixel inside the patch")
axes[1].set_xticks(range(16))
axes[1].set_yticks(range(4), ["(0,0)", "(0,1)", "(1,0)", "(1,1)"])
axes[1].grid(False)
fig.colorbar(tokens_img, ax=axes[1], label="pixel intensity (0–1)")
fig.tight_layout()

# %% [markdown]
# ### What patches cost as the resolution grows
#
# An image of side $S$ cut into patches of side $p$ gives $N = (S/p)^2$ tokens: doubling the
# side quadruples the tokens, and since attention scores every pair, it multiplies the score
# table by sixteen. We count exactly what one forward pass of a small ViT (width 32, 4 heads,
# 2 layers, patches of 2 pixels) does at sides 8, 16, 32 and 64 (the last is 1,024 patches,
# a modest 64 × 64 thumbnail): the FLOPs of every matrix product and convolution (torch's
# FLOP counter), the peak bytes held at once (counted tensor by tensor), and the time (shown
# only: it is this machine's).
#
# The prediction is exact. Everything a token does on its own — embedding, projections,
# feed-forward — costs the same per token, so it adds a term linear in $N' = N + 1$ (with
# `[CLS]`). The two products of attention, $QK^\top$ and the weighted sum of the values, each
# take $N'^2 \cdot d$ multiply-adds per layer over all heads together: $4 N'^2 d$ FLOPs per
# layer. So the count must be a quadratic in $N'$ **whose $N'^2$ coefficient is exactly
# $4 \cdot \text{layers} \cdot d = 256$**, and the asserting function checks both: that four
# counts lie on one quadratic (three points fix it, the fourth can miss), and that its leading
# coefficient is 256.

# %%
VIT_SIDES = (8, 16, 32, 64)
VIT_WIDTH, VIT_LAYERS = 32, 2
vit_costs = [ch07.vit_cost(s, 2, d_model=VIT_WIDTH, num_layers=VIT_LAYERS) for s in VIT_SIDES]
vit_fit = ch07.quadratic_fit([c.tokens for c in vit_costs], [c.flops for c in vit_costs])

# %% tags=["nbval-check-output"] tolerance="round-off"
print(f"{'side':>5} {'tokens':>7} {'MFLOP':>9} {'peak MiB':>9} {'FLOPs in attention':>19}")
for s, c in zip(VIT_SIDES, vit_costs, strict=True):
    share = 4 * VIT_LAYERS * VIT_WIDTH * c.tokens**2 / c.flops
    print(f"{s:>5} {c.tokens:>7} {c.flops / 1e6:>9.2f} {c.peak_bytes / 2**20:>9.2f} {share:>19.0%}")
print(f"FLOPs = {vit_fit.c0:.0f} + {vit_fit.c1:.0f}·N' + {vit_fit.c2:.2f}·N'²  "
      f"(largest residual {vit_fit.max_residual:.1e} FLOPs)")  # fmt: skip

# %%
for s, c in zip(VIT_SIDES, vit_costs, strict=True):
    print(f"side {s:>3}: {c.seconds * 1e3:7.2f} ms per forward pass (this machine)")

# %%
ch07.assert_vit_cost_quadratic(
    [c.tokens for c in vit_costs], [c.flops for c in vit_costs],
    d_model=VIT_WIDTH, num_layers=VIT_LAYERS,
)  # fmt: skip
last_two = vit_costs[-2:]
vit_mem_exponent = fit_power([c.tokens for c in last_two], [c.peak_bytes for c in last_two])
share = [4 * VIT_LAYERS * VIT_WIDTH * c.tokens**2 / c.flops for c in vit_costs]
record_claim(
    "ViT cost",
    claim="ViT turns an image into patch tokens; its cost explodes with the resolution "
    "(quadratic in the number of patches)",
    experiment="one forward pass of a ViT (width 32, 2 layers, 2×2 patches) on images of side "
    "8…64: exact FLOP count, peak bytes",
    verdict="reproduced",
    measured=f"FLOPs = {vit_fit.c0:.0f} + {vit_fit.c1:.0f}·N' + {vit_fit.c2:.0f}·N'² exactly "
    f"(N'² coefficient = 4·layers·d); attention's share {share[0]:.0%} at side 8, "
    f"{share[-1]:.0%} at side 64; peak memory ∝ N^{vit_mem_exponent:.2f} between sides 32 and 64",
)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
tokens_vit = [c.tokens for c in vit_costs]
plot_lines(
    tokens_vit,
    {
        "measured FLOPs": [c.flops for c in vit_costs],
        "attention products 4·L·d·N'²": [4 * VIT_LAYERS * VIT_WIDTH * n**2 for n in tokens_vit],
        "per-token part c₁·N'": [vit_fit.c1 * n for n in tokens_vit],
    },
    title="ViT forward FLOPs against the number of tokens",
    xlabel="tokens N' = (side / 2)² + 1",
    ylabel="FLOPs (log scale)",
    logx=True,
    logy=True,
    ax=axes[0],
)
plot_lines(
    tokens_vit,
    {"peak bytes of one forward pass": [c.peak_bytes / 2**20 for c in vit_costs]},
    title="ViT peak memory against the number of tokens",
    xlabel="tokens N' = (side / 2)² + 1",
    ylabel="peak memory (MiB, log scale)",
    logx=True,
    logy=True,
    ax=axes[1],
)
for ax in axes:
    ticks = [f"{n}\n(side {s})" for n, s in zip(tokens_vit, VIT_SIDES, strict=True)]
    ax.set_xticks(tokens_vit, ticks)
    ax.minorticks_off()
fig.tight_layout()

# %% [markdown]
# The per-token part wins on the smallest image, where there are only 17 tokens; by side 64
# the two attention products are 89 % of the bill, and every further doubling of the side
# multiplies them by sixteen. At the sizes of real photographs, with the original ViT's
# patches of 16 pixels:

# %% tags=["nbval-check-output"]
for side in (224, 1024):
    n_patches = (side // 16) ** 2
    print(f"{side} × {side} pixels: {n_patches} patches, {(n_patches + 1) ** 2:,} scores per "
          f"head and layer")  # fmt: skip

# %% [markdown]
# 196 patches are affordable; 4,096 are not, and detection and segmentation want smaller
# patches still. That is the problem Swin addresses in section 7.2.
#
# ### Does a ViT learn digits as well as a convolutional network?
#
# The ViT paper's main empirical finding was about data, not cost: trained on ImageNet alone,
# ViTs fell behind convolutional ResNets of similar size, and overtook them only after
# pre-training on one to two orders of magnitude more images (ImageNet-21k, JFT-300M). The
# explanation offered is inductive bias:
# a convolution *assumes* that nearby pixels belong together and that a pattern means the same
# thing anywhere in the image, while a ViT must learn both from examples (only the cut into
# patches is built in; even the layout of the patches comes from learned position
# embeddings). Assumptions that hold are free data.
#
# We cannot pre-train on hundreds of millions of images, but we can ask the same question at the
# other end of the scale: does the convolutional network win when data is scarce, and does the gap
# close as data grows? Two models of similar size: the library's `VisionTransformer` (2×2 patches,
# width 32, 4 heads, 2 layers) and a small LeNet-style CNN (two 3×3 convolutions with pooling, a
# two-layer classifier). The budget is the same for both: 200 steps of Adam (learning rate
# $3 \cdot 10^{-3}$) on batches of 32, three seeds, trained on 150 digits and on all 1,347, and
# tested on the same 450 held-out digits.
#
# **Threshold, from the claim.** "ViTs need more data" predicts two things: with 150
# training images the CNN's mean accuracy is higher than the ViT's by at least
# `DATA_GAP` = 3 points, and with all the training images the ViT's deficit is smaller than
# with 150.

# %%
DATA_GAP = 0.03
SIZES = (150, 1347)
VIT_STEPS = 200


def build_vit() -> VisionTransformer:
    return VisionTransformer(
        8, 2, 1, 10, d_model=VIT_WIDTH, num_heads=4, num_layers=VIT_LAYERS, d_ff=2 * VIT_WIDTH
    )


digit_runs = {}
for n_train in SIZES:
    for name, build in (("ViT", build_vit), ("CNN", ch07.SmallCNN)):
        for seed in progress(SEEDS, desc=f"{name} on {n_train} digits"):
            digit_runs[name, n_train, seed] = ch07.train_digit_classifier(
                build, data.train_images, data.train_labels, data.test_images,
                data.test_labels, n_train=n_train, steps=VIT_STEPS, seed=seed,
            )  # fmt: skip
acc_digits = {
    (name, n): spread([digit_runs[name, n, s].accuracy for s in SEEDS])
    for name in ("ViT", "CNN")
    for n in SIZES
}

# %% tags=["nbval-check-output"] tolerance="trained"
print(f"parameters: ViT {digit_runs['ViT', SIZES[0], 0].n_params}, "
      f"CNN {digit_runs['CNN', SIZES[0], 0].n_params}")  # fmt: skip
for (name, n), s in acc_digits.items():
    print(f"{name} on {n:>4} training digits: test accuracy {s}")
gaps = {n: acc_digits["CNN", n].mean - acc_digits["ViT", n].mean for n in SIZES}
print("CNN minus ViT (mean accuracy):", ", ".join(f"{gaps[n]:+.3f} with {n}" for n in SIZES))
for name in ("ViT", "CNN"):  # is training still making progress when the budget runs out?
    curves = [moving_average(digit_runs[name, SIZES[1], s].losses, 20) for s in SEEDS]
    mid, end = (sum(c[k] for c in curves) / len(SEEDS) for k in (VIT_STEPS // 2 - 1, -1))
    print(f"{name}, all digits: training loss (20-step mean) {mid:.3f} at step "
          f"{VIT_STEPS // 2}, {end:.3f} at step {VIT_STEPS}")  # fmt: skip

# %%
ax = plot_spread(
    SIZES,
    {
        name: [[digit_runs[name, n, s].accuracy for s in SEEDS] for n in SIZES]
        for name in ("ViT", "CNN")
    },
    title="ViT against a small CNN on the digits, equal budget",
    xlabel="training digits (log scale)",
    ylabel="test accuracy (450 digits)",
    logx=True,
)
ax.set_xticks(SIZES, [str(n) for n in SIZES])
ax.minorticks_off()

# %%
ch07.assert_vit_needs_more_data(
    vit_small=acc_digits["ViT", SIZES[0]].values, cnn_small=acc_digits["CNN", SIZES[0]].values,
    vit_full=acc_digits["ViT", SIZES[1]].values, cnn_full=acc_digits["CNN", SIZES[1]].values,
    margin=DATA_GAP,
)  # fmt: skip
record_claim(
    "ViT data",
    claim="ViTs need more data than convolutional networks (weaker inductive bias)",
    experiment=f"ViT ({digit_runs['ViT', SIZES[0], 0].n_params} params) vs small CNN "
    f"({digit_runs['CNN', SIZES[0], 0].n_params}) on 150 and 1 347 real digits, "
    f"{VIT_STEPS} steps each, 3 seeds",
    verdict="reproduced",
    measured=f"150 digits: CNN {acc_digits['CNN', 150].format('.3f')}, ViT "
    f"{acc_digits['ViT', 150].format('.3f')}; 1 347: CNN {acc_digits['CNN', 1347].format('.3f')}, "
    f"ViT {acc_digits['ViT', 1347].format('.3f')}",
)

# %% [markdown]
# **Verdict: reproduced, in the direction the data argument predicts.** With 150 training
# digits the CNN leads by about 20 points of accuracy (0.92 against 0.72), with all 1,347 by
# about 12 (0.95 against 0.83): the gap shrinks as the data grows, and the CNN is also the
# steadier of the two across seeds. What this scale cannot show is the other half of the known
# result, the crossover: the ViT paper needed millions to hundreds of millions of images before
# its models overtook convolutional ones, and our whole training set is about the size of a
# single ImageNet class. Two caveats a sceptic would raise. The budget is short: after 200 steps the
# ViT's training loss is still almost four times the CNN's (0.588 against 0.158) and falling
# faster, so at this scale "needs more data" is partly "needs more optimisation" — the
# convolution's built-in assumptions also make it quicker to train. And neither model is
# tuned. Both caveats point the same way as the published result.
#
# ## 7.2 Windows instead of the whole image: Swin (C25)
#
# **Claim C25.** *Swin attends inside windows, with windows shifted from one layer to the
# next: the cost becomes linear in the image size while information still crosses windows,
# and its hierarchical feature maps suit detection and segmentation.*
#
# The Swin Transformer (Liu et al., 2021) keeps the patch tokens but lets each one attend
# only to the tokens of its own $w \times w$ window. One window costs $w^4$ scores whatever
# the image, and the number of windows grows with the area, so the cost is linear in the
# number of tokens. A fixed partition would cut the image into islands that never exchange
# anything, so every second block moves the window grid by $w/2$ tokens along both axes.
# The package does the move with a cyclic roll (`cyclic_shift`), so that the shifted grid is
# again a regular one and the same batched code applies; the pieces that wrap around the
# edge are kept apart by a mask (`shifted_window_mask`), and the roll is undone afterwards.

# %%
fig = shifted_windows()

# %% [markdown]
# ### Cost against image size
#
# One Swin block (the package's `SwinBlock`: width 32, 2 heads, 4 × 4 windows, shifted by 2)
# against one pre-LN Transformer encoder layer with global attention (`EncoderLayer`, same
# width, heads and feed-forward size), on token maps of side 8, 16 and 32 (64 to 1,024
# tokens), counted exactly as in section 7.1.
#
# **Threshold, from the claim.** "Linear in the image size" is exact for window attention:
# the FLOPs and the peak bytes per token must be the same at every size (ratio 4.00 per
# doubling of the side, to the last FLOP). Global attention must grow faster than the area:
# more than 4× per doubling.

# %%
SWIN_SIDES = (8, 16, 32)
SWIN_WIDTH, SWIN_WINDOW = 32, 4
window_costs, global_costs = [], []
for side in SWIN_SIDES:
    block = SwinBlock(SWIN_WIDTH, side, 2, SWIN_WINDOW, shift=SWIN_WINDOW // 2)
    dense_layer = EncoderLayer(SWIN_WIDTH, 2, 4 * SWIN_WIDTH, pre_ln=True)
    window_costs.append(ch07.layer_cost(block, side, SWIN_WIDTH))
    global_costs.append(ch07.layer_cost(dense_layer, side, SWIN_WIDTH))

# %% tags=["nbval-check-output"]
print(f"{'side':>4} {'tokens':>6} {'window MFLOP':>12} {'global MFLOP':>12} "
      f"{'window KiB':>10} {'global KiB':>10}")  # fmt: skip
for side, w, g in zip(SWIN_SIDES, window_costs, global_costs, strict=True):
    print(f"{side:>4} {w.tokens:>6} {w.flops / 1e6:>12.2f} {g.flops / 1e6:>12.2f} "
          f"{w.peak_bytes / 2**10:>10.0f} {g.peak_bytes / 2**10:>10.0f}")  # fmt: skip
window_growth = ch07.growth([c.flops for c in window_costs])
global_growth = ch07.growth([c.flops for c in global_costs])
print("FLOPs × per doubling of the side: window", window_growth, "global", global_growth)

# %%
for side, w, g in zip(SWIN_SIDES, window_costs, global_costs, strict=True):
    print(f"side {side:>2}: window {w.seconds * 1e3:6.2f} ms, global {g.seconds * 1e3:6.2f} ms "
          "(this machine)")  # fmt: skip

# %%
ch07.assert_c25_window_cost_linear(
    tokens=[c.tokens for c in window_costs],
    window=[(c.flops, c.peak_bytes) for c in window_costs],
    dense=[(c.flops, c.peak_bytes) for c in global_costs],
)
record_claim(
    "C25 cost",
    claim="Window attention makes the cost linear in the image size",
    experiment="one SwinBlock (4×4 windows, shift 2) vs one global EncoderLayer, width 32, "
    "2 heads, token maps of side 8, 16, 32: exact FLOPs and peak bytes",
    verdict="reproduced",
    measured=f"window: FLOPs and peak bytes ×{window_growth[0]:.2f} per doubling of the side "
    f"(= the area, exactly); global: FLOPs ×{global_growth[0]:.1f}, ×{global_growth[1]:.1f}",
)

# %% [markdown]
# ### How far information travels, with and without the shift
#
# An output token of a stack of window blocks can only depend on the input tokens that some
# chain of windows connects to it. That set is measurable exactly: back-propagate from one
# output token to the whole input and see where the gradient is non-zero. Attention outside a
# window, or across the mask, gets weight *exactly* zero, so "no influence" shows up as an
# exact zero, not as a small number (`ch07.receptive_field`, in float64, with two random
# probes so that no influence is missed by accident). We stack 1, 2 and 4 freshly initialised
# `SwinBlock`s on a 16 × 16 token map with 4 × 4 windows, once alternating regular and shifted
# windows as Swin does, once with regular windows only, and read the field of the token at
# row 5, column 6.
#
# **Threshold, from the claim.** Without the shift the field must stay the token's own
# window at every depth (16 tokens); with it, it must leave the window after two blocks and
# keep growing with depth.

# %%
RF_GRID, RF_TOKEN, RF_DEPTHS = 16, (5, 6), (1, 2, 4)
torch.manual_seed(0)
fields = {
    (shifted, depth): ch07.receptive_field(
        ch07.swin_stack(depth, shifted=shifted, grid=RF_GRID, window_size=SWIN_WINDOW),
        RF_GRID, 16, RF_TOKEN,
    )  # fmt: skip
    for shifted in (False, True)
    for depth in RF_DEPTHS
}
own_window = ch07.window_of(RF_TOKEN, RF_GRID, SWIN_WINDOW)

# %% tags=["nbval-check-output"]
for (shifted, depth), field in fields.items():
    outside = int((field & ~own_window).sum())
    print(f"{'shifted' if shifted else 'regular'} windows, {depth} block(s): field of "
          f"{int(field.sum()):>3} tokens, {outside:>3} outside the token's own window")  # fmt: skip

# %%
fig, axes = plt.subplots(2, 3, figsize=(10, 6.6), layout="constrained")
for row, shifted in enumerate((False, True)):
    for col, depth in enumerate(RF_DEPTHS):
        ax = axes[row, col]
        shown = ax.imshow(fields[shifted, depth].float(), cmap="Blues", vmin=0, vmax=1.4)
        ax.plot(RF_TOKEN[1], RF_TOKEN[0], "o", color="tab:red", ms=5)
        for k in range(0, RF_GRID + 1, SWIN_WINDOW):
            ax.axhline(k - 0.5, color="0.5", lw=0.6)
            ax.axvline(k - 0.5, color="0.5", lw=0.6)
        ax.grid(False)
        ax.set_title(f"{'shifted' if shifted else 'regular'} windows, {depth} block(s)")
        ax.set_xlabel("token column")
        ax.set_ylabel("token row")
fig.suptitle("C25: receptive field of one output token (16 × 16 tokens, 4 × 4 windows)")
bar = fig.colorbar(shown, ax=axes, ticks=[0, 1], label="1 = this input can change the red output")

# %%
ch07.assert_c25_shift_crosses_windows(fields, own_window)
record_claim(
    "C25 shift",
    claim="Shifted windows let information cross window borders",
    experiment="receptive field (exact non-zero pattern of the gradient) of one output token "
    "after 1, 2, 4 SwinBlocks on 16×16 tokens, 4×4 windows, with and without the shift",
    verdict="reproduced",
    measured="field sizes " + ", ".join(
        f"{'shifted' if s else 'regular'}/{d}: {int(f.sum())}" for (s, d), f in fields.items()
    ),
)

# %% [markdown]
# The picture is exact, not statistical. With regular windows the red token's field is its own
# 4 × 4 window, 16 tokens, whether one block or four are stacked: no amount of depth lets
# information in from outside, because every block partitions the map the same way. With the
# shift, one block is still one window (the first block is a regular one), but two blocks
# reach 64 tokens, 48 of them outside the window: the shifted window around the token overlaps
# four regular windows, and each brings in everything it saw in the block before. Four blocks
# reach 192 tokens. The field grows by up to a window's width per pair of blocks (regular,
# then shifted), so covering a large image takes depth — or the patch merging below, which
# halves every distance at each stage. **Verdict on "information crosses windows":
# reproduced**, and without the shift it provably never does.
#
# ### Patch merging: a pyramid of feature maps
#
# Between stages Swin merges every 2 × 2 group of neighbouring tokens into one
# (`PatchMerging`: concatenate the four vectors, normalise, project $4C \to 2C$): the map's
# side halves and its width doubles, as in a convolutional backbone. Below, a 16 × 16 map of
# width 16 goes through three stages. At the last stage the map is 4 × 4, the size of one
# window. The original Swin turns the shift off along any axis that one window covers
# (there is nothing across a border to reach), and so does the library's `SwinBlock`
# (`vision.swin_window_shift`); our last stage asks for regular windows only, which comes to
# the same.

# %%
torch.manual_seed(0)
x_stage = torch.randn(2, 16 * 16, 16)  # (B, H·W, C)
pyramid = [(16, 16)]
side, width = 16, 16
for stage in range(3):
    shift = SWIN_WINDOW // 2 if side > SWIN_WINDOW else 0  # none where one window fills the map
    for s in (0, shift):  # a regular block, then a shifted one
        block = SwinBlock(width, side, 1, SWIN_WINDOW, shift=s)
        x_stage = block(x_stage)  # (B, side², width)
    if stage < 2:
        x_stage = PatchMerging(side, width)(x_stage)  # (B, (side/2)², 2·width)
        side, width = side // 2, width * 2
        pyramid.append((side, width))
print(" → ".join(f"{s}×{s}×{c}" for s, c in pyramid), "| last tensor", tuple(x_stage.shape))

# %%
ch07.assert_c25_pyramid(pyramid)

# %% [markdown]
# Every stage halves the side and doubles the width: a 16 × 16 × 16 map becomes 8 × 8 × 32,
# then 4 × 4 × 64, the shapes a convolutional backbone (ResNet) hands to a detection or
# segmentation head, at a cost that stays linear in the area at every stage. The claim goes
# further — that these maps *suit* detection and segmentation — and that is beyond what
# this chapter can test: it would take a detection data set and a head (FPN, UPerNet) trained
# on top. We record the pyramid as shown and the suitability as untested.

# %%
record_claim(
    "C25 pyramid",
    claim="Swin's patch merging gives hierarchical feature maps that suit detection and "
    "segmentation",
    experiment="three stages of SwinBlocks with PatchMerging on a 16×16×16 token map",
    verdict="partly",
    measured=" → ".join(f"{s}×{s}×{c}" for s, c in pyramid)
    + " (side halves, width doubles); suitability for detection not tested",
)

# %% [markdown]
# ### A task that only the shift can solve
#
# The receptive field says what *can* flow; a trained model shows whether it matters. The
# task is made for the purpose, a small dense prediction: every cell of an 8 × 8 map holds one
# of four colours, and every cell must output the colour of its right neighbour. Windows are
# 4 × 4, so for the cells in column 3 the right neighbour lies in the next window; for the
# cells in the other columns it lies in their own. Two Swin blocks (width 16, one head) with
# the colour embedding as input, a linear read-out per cell, 150 steps of Adam (learning rate
# $10^{-2}$, batches of 32), three seeds; once with the second block shifted, once with both
# regular.
#
# **Threshold, from the claim.** At the window border, without the shift the model cannot see
# the neighbour, so its accuracy there must stay within 0.10 of chance (one colour in four,
# 0.25); with the shift it must reach `SOLVED` = 0.90 at every seed. Inside the windows both
# must reach 0.90.

# %% tags=["nbval-check-output"] tolerance="trained"
SOLVED, N_COLOURS, COPY_STEPS = 0.90, 4, 150
copy_runs = {
    (shifted, seed): ch07.train_neighbour_copy(shifted=shifted, seed=seed, steps=COPY_STEPS)
    for shifted in (False, True)
    for seed in progress(SEEDS, desc="neighbour copy")
}
copy_border = {s: spread([copy_runs[s, seed].border for seed in SEEDS]) for s in (False, True)}
copy_inside = {s: spread([copy_runs[s, seed].interior for seed in SEEDS]) for s in (False, True)}
for shifted in (False, True):
    name = "shifted" if shifted else "regular"
    print(f"{name:>8} windows: accuracy at the border {copy_border[shifted]}, "
          f"inside {copy_inside[shifted]}")  # fmt: skip

# %%
ax = plot_bar_spread(
    {
        "regular, border": copy_border[False].values,
        "shifted, border": copy_border[True].values,
        "regular, inside": copy_inside[False].values,
        "shifted, inside": copy_inside[True].values,
    },
    title="C25: copy the right neighbour's colour (8 × 8 cells, 4 × 4 windows)",
    ylabel="accuracy on held-out maps",
    reference=(1 / N_COLOURS, "chance (1 of 4 colours)"),
)
ax.set_ybound(0, 1.45)
legend = ax.legend(loc="upper left", ncol=2)

# %%
ch07.assert_c25_shift_decides(
    border_shifted=copy_border[True].values, border_regular=copy_border[False].values,
    inside_shifted=copy_inside[True].values, inside_regular=copy_inside[False].values,
    chance=1 / N_COLOURS, solved=SOLVED,
)  # fmt: skip
record_claim(
    "C25 task",
    claim="Without the shift, windows cannot pass information across their borders",
    experiment=f"2 SwinBlocks, copy the right neighbour's colour on 8×8 maps, {COPY_STEPS} "
    "steps, 3 seeds, with and without the shifted second block",
    verdict="reproduced",
    measured=f"border accuracy {copy_border[False].format('.2f')} regular vs "
    f"{copy_border[True].format('.2f')} shifted (chance 0.25); inside "
    f"{copy_inside[False].min:.2f}+ and {copy_inside[True].min:.2f}+",
)

# %% [markdown]
# At the window border the regular windows score 0.26, chance for four colours, at every seed:
# the neighbour's colour is simply not in the tokens they can see. With the second block
# shifted the same border reaches 0.95–0.97. Inside the windows both variants are perfect
# (1.00), so the models learned the task; only the border, where the information has to cross,
# separates them. **Verdict on C25: reproduced** in its three measurable parts — cost linear in
# the area (exactly), information crossing windows only with the shift (exactly, and decisively
# in a trained model), and a feature pyramid from patch merging — with the use of that
# pyramid for detection left untested.
#
# ## 7.3 Time series: is attention the right tool for periodic, trending data? (C26)
#
# **Claim C26.** *On strongly periodic or trending series, a tuned LSTM or TCN can be as good
# as plain attention, or steadier; time-aware encodings or Informer-style sparse attention are
# the additions that help a Transformer.*
#
# There is a sharper version of this claim in the literature. Zeng, Chen, Zhang and Xu (2022)
# asked "Are Transformers effective for time series forecasting?" and answered with a
# one-layer linear model, DLinear, that beat the Transformer forecasters of the day
# (Informer, Autoformer, FEDformer) on most of the long-term forecasting benchmarks they were
# published with. Their argument: attention is permutation-invariant, and whatever order
# information the position encodings put back is weak compared with what a forecaster needs,
# the exact lag structure of the series. We test both versions on two series.
#
# - **Real**: the Mauna Loa CO₂ record (`book.data.co2_monthly`): statsmodels ships it as
#   weekly measurements from March 1958 to December 2001; we average them per month (526
#   months) so that the yearly cycle has an exact period of 12. It is the textbook example of
#   a trend with a seasonal cycle on top.
# - **Synthetic**: 960 months of a linear trend, a yearly sine and its second harmonic, and
#   Gaussian noise of standard deviation 0.2 (`ch07.synthetic_series`), where we know the best
#   possible error: the noise.
#
# Each forecaster sees the last 36 months and predicts the next 12. The split is in time, as
# it must be for forecasting: the first seven tenths of each series trains (the `0.7` of the
# split below), the next tenth validates, the last fifth tests, and the values are
# standardised with the mean and standard deviation of the training part only. Errors are
# mean squared errors in those standardised units.

# %% tags=["nbval-check-output"]
co2 = co2_monthly()
LOOKBACK, HORIZON, PERIOD = 36, 12, 12
synthetic_values, synthetic_phase = ch07.synthetic_series(960, period=PERIOD, noise=0.2)
series = {
    "CO₂ (Mauna Loa)": (co2.values, co2.month),
    "synthetic": (synthetic_values, synthetic_phase),
}
splits = {
    name: ch07.forecast_split(values, phase, lookback=LOOKBACK, horizon=HORIZON)
    for name, (values, phase) in series.items()
}
noise_floor = 0.2**2 / splits["synthetic"].std ** 2  # the MSE of a perfect forecast
print(f"CO₂: {len(co2.values)} months from {co2.start}, {float(co2.values.min()):.1f} to "
      f"{float(co2.values.max()):.1f} {co2.unit}")  # fmt: skip
for name, split in splits.items():
    print(f"{name}: {len(split.train)} training, {len(split.val)} validation, "
          f"{len(split.test)} test windows; training mean {split.mean:.2f}, "
          f"std {split.std:.2f}")  # fmt: skip
print(f"synthetic: the noise alone gives an MSE of {noise_floor:.4f} (standardised units)")

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
years = 1958 + (2 + torch.arange(len(co2.values))) / 12
axes[0].plot(years, co2.values, lw=1)
axes[0].set_title("Mauna Loa CO₂, monthly means (statsmodels' bundled record)")
axes[0].set_xlabel("year")
axes[0].set_ylabel("CO₂ (ppm)")
axes[1].plot(synthetic_values, lw=0.8, color="tab:green")
axes[1].set_title("synthetic: trend + yearly cycle + noise (σ = 0.2)")
axes[1].set_xlabel("month")
axes[1].set_ylabel("value")
for ax, xs in ((axes[0], years), (axes[1], torch.arange(len(synthetic_values)))):
    n = len(xs)
    val_start, test_start = float(xs[int(0.7 * n)]), float(xs[int(0.8 * n)])
    ax.axvspan(val_start, test_start, color="tab:orange", alpha=0.15, label="validation")
    ax.axvspan(test_start, float(xs[-1]), color="tab:red", alpha=0.12, label="test")
    ax.legend(loc="upper left")
fig.tight_layout()

# %% [markdown]
# ### The contenders, on equal terms
#
# - **seasonal naive**: repeat the last 12 months (`seasonal_naive`); no parameters.
# - **DLinear**: a moving-average trend (13 months) and the remainder, each mapped to the
#   horizon by one linear layer (`DLinear`, 888 parameters).
# - **LSTM**: one layer of 32 units read at the last month (`LSTMForecaster`), learning rate
#   tuned.
# - **TCN**: causal dilated convolutions, 16 channels, dilations 1 to 16, so the last step
#   sees all 36 months (`TCNForecaster`).
# - **Transformer**: every month a token (value embedding + sinusoidal position), one pre-LN
#   encoder layer of width 32 with 2 heads, a linear head on all tokens
#   (`TransformerForecaster`), learning rate tuned.
# - **+ time**: the same with a learned embedding of the calendar month added to every token,
#   Informer's "time-stamp" encoding.
# - **Informer-style**: + time, with ProbSparse self-attention (`ProbSparseAttention`,
#   the package's `probsparse_attention`): only the $u = c \lceil \ln L \rceil$ queries whose
#   scores stand out most attend; the rest receive the mean of the values. Informer used
#   $c = 5$ with 96-step inputs, 25 active queries of 96; with our 36 steps, $c = 2$ keeps a
#   similar share active (8 of 36).
#
# Every trained model works relative to the last observed value (`LastValueNormalization`,
# the trick of DLinear's sibling NLinear): a trending series keeps leaving the range seen in
# training, and subtracting the last value removes its level. Every one gets 200 steps of
# Adam on batches of 16 windows, gradients clipped at 1, three seeds. "Tuned" means the
# learning rate was chosen from $\{10^{-3}, 3 \cdot 10^{-3}, 10^{-2}\}$ by the validation error
# of seed 0, for the LSTM and, to be fair, for the plain Transformer; the others use
# $3 \cdot 10^{-3}$.
#
# **Thresholds, from the claim**, for every series: "as good as" = a mean test MSE at most
# `AS_GOOD` = 10 % above the plain Transformer's; "steadier" = a smaller range (max − min)
# over the seeds; the claim holds on a series if the LSTM or the TCN is as good or steadier.
# An addition "helps" if it lowers the mean MSE of the plain Transformer. For Zeng et al.'s
# anchor, DLinear "beats" a Transformer variant if its mean MSE is lower.

# %% tags=["nbval-check-output"] tolerance="trained-ratio"
AS_GOOD = 0.10
FORECAST_STEPS, FORECAST_BATCH, LR_GRID, DEFAULT_LR = 200, 16, (1e-3, 3e-3, 1e-2), 3e-3
INFORMER_FACTOR = 2
print(f"active queries: Informer's c = 5 at L = 96: {n_selected(96, 5)} of 96; "
      f"ours, c = {INFORMER_FACTOR} at L = {LOOKBACK}: {n_selected(LOOKBACK, INFORMER_FACTOR)} "
      f"of {LOOKBACK}")  # fmt: skip
forecasters = {
    "DLinear": lambda: DLinear(LOOKBACK, HORIZON, kernel_size=13),
    "LSTM": lambda: LSTMForecaster(LOOKBACK, HORIZON, 32),
    "TCN": lambda: TCNForecaster(LOOKBACK, HORIZON, 16),
    "Transformer": lambda: TransformerForecaster(
        LOOKBACK, HORIZON, d_model=32, num_heads=2, num_layers=1, d_ff=64
    ),
    "+ time": lambda: TransformerForecaster(
        LOOKBACK, HORIZON, d_model=32, num_heads=2, num_layers=1, d_ff=64, period=PERIOD
    ),
    "Informer-style": lambda: TransformerForecaster(
        LOOKBACK, HORIZON, d_model=32, num_heads=2, num_layers=1, d_ff=64, period=PERIOD,
        attn_fn=ProbSparseAttention(factor=INFORMER_FACTOR),
    ),  # fmt: skip
}
TUNED = ("LSTM", "Transformer")


def normalised(name: str):
    return lambda: LastValueNormalization(forecasters[name]())


def train(series_name: str, name: str, lr: float, seed: int) -> ch07.ForecastRun:
    return ch07.train_forecaster(
        normalised(name), splits[series_name], steps=FORECAST_STEPS, lr=lr, seed=seed,
        batch_size=FORECAST_BATCH,
    )  # fmt: skip


chosen_lr, tuning, tuning_runs = {}, {}, {}
for series_name in splits:
    for name in TUNED:
        for lr in LR_GRID:
            tuning_runs[series_name, name, lr] = train(series_name, name, lr, seed=0)
            tuning[series_name, name, lr] = tuning_runs[series_name, name, lr].val_mse
        chosen_lr[series_name, name] = min(LR_GRID, key=lambda lr: tuning[series_name, name, lr])
for (series_name, name), lr in chosen_lr.items():
    vals = ", ".join(f"{g:g}: {tuning[series_name, name, g]:.4f}" for g in LR_GRID)
    print(f"{series_name:>16} {name:>11}: validation MSE by learning rate {vals} → {lr:g}")

# %%
forecast_runs = {}
for series_name in splits:
    for name in progress(forecasters, desc=f"forecasters on {series_name}"):
        lr = chosen_lr.get((series_name, name), DEFAULT_LR)
        for seed in SEEDS:
            if (series_name, name, lr) in tuning_runs and seed == 0:  # the same run: reuse it
                forecast_runs[series_name, name, seed] = tuning_runs[series_name, name, lr]
            else:
                forecast_runs[series_name, name, seed] = train(series_name, name, lr, seed)
mse = {
    (series_name, name): spread([forecast_runs[series_name, name, s].test_mse for s in SEEDS])
    for series_name in splits
    for name in forecasters
}
naive_mse = {
    series_name: ch07.forecast_mse(
        lambda history, phase: seasonal_naive(history, horizon=HORIZON, period=PERIOD), split.test
    )
    for series_name, split in splits.items()
}

# %% tags=["nbval-check-output"] tolerance="trained-ratio"
for series_name in splits:
    print(f"{series_name}: test MSE (standardised), mean (min, max) over 3 seeds")
    print(f"  {'seasonal naive':>15}: {naive_mse[series_name]:.4f}")
    for name in forecasters:
        s = mse[series_name, name]
        params = forecast_runs[series_name, name, 0].n_params
        print(f"  {name:>15}: {s.format('.4f')}   spread {s.max - s.min:.4f}   {params} params")

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
for ax, series_name in zip(axes, splits, strict=True):
    plot_bar_spread(
        {name: mse[series_name, name].values for name in forecasters},
        title=f"C26: {series_name}, 12-month forecasts",
        ylabel="test MSE (standardised units)",
        reference=(naive_mse[series_name], "seasonal naive"),
        ax=ax,
    )
    ax.tick_params(axis="x", labelrotation=25)
    top = max(max(mse[series_name, n].values) for n in forecasters)
    ax.set_ybound(0, 1.6 * max(top, naive_mse[series_name]))
reference_line(axes[1], noise_floor, "noise floor (perfect forecast)", color="tab:green")
for ax in axes:
    ax.legend(loc="upper left", ncol=2, fontsize=8)
fig.tight_layout()

# %%
mse_table = {series: {name: mse[series, name].values for name in forecasters} for series in splits}
holds = {series: ch07.c26_claim_holds(mse_table[series], tol=AS_GOOD) for series in splits}
print("C26 holds (LSTM or TCN as good as, or steadier than, the Transformer):", holds)

# %% [markdown]
# Series by series:
#
# - **Synthetic: the claim holds.** The TCN (0.0131) and the LSTM (0.0137) both beat the plain
#   Transformer (0.0153), and both are steadier (seed ranges 0.0012 and 0.0017 against 0.0036).
#   Best of all is DLinear, 0.0121, not far above the noise floor of 0.0091.
# - **CO₂: the claim fails.** Here the plain Transformer is the best trained model, 0.0039,
#   and also the steadiest (range 0.0005). The tuned LSTM comes second, 0.0045, but that is
#   more than `AS_GOOD` above, and its range is 0.0014; the TCN is last, 0.0064.
# - **The additions hurt on both series.** The calendar embedding raises the Transformer's
#   error (0.0059 on CO₂, 0.0172 on the synthetic series) and ProbSparse on top raises it
#   again (0.0065 and 0.0205).
# - **DLinear** beats every Transformer variant on the synthetic series; on CO₂ it trails the
#   plain Transformer (0.0050) but beats the time-aware and Informer-style ones.
# - Every trained model is far below the seasonal copy on CO₂ (0.0293): the copy is a year
#   behind the trend, which is exactly what a last-value normalised model corrects.
#
# A sceptic's warning, which we checked the hard way: the ranking of the trained models on
# CO₂ is not robust. A draft of this notebook with batches of 32 windows and 4 heads (all else
# equal) had the LSTM level with the Transformer there; halving the batch and the heads turned
# a tie into a clear Transformer lead. With 95 test windows from a single decade and three
# seeds, differences of this size are within what such a change moves. The asserting cell
# below pins the verdict this run supports, series by series, so that a re-run that changes it
# fails loudly instead of silently contradicting the text.

# %%
ch07.assert_c26_recurrent_vs_attention(
    mse_table, tol=AS_GOOD, holds={"CO₂ (Mauna Loa)": False, "synthetic": True}
)
ch07.assert_c26_additions_do_not_help(mse_table)
ch07.assert_c26_linear_anchor(
    mse_table, naive_mse, beats_all={"CO₂ (Mauna Loa)": False, "synthetic": True}
)


def mse_text(series_name: str, *names: str) -> str:
    return "; ".join(f"{n} {mse[series_name, n].format('.4f')}" for n in names)


record_claim(
    "C26",
    claim="On strongly periodic/trending series a tuned LSTM or TCN can be as good as plain "
    "attention, or steadier",
    experiment=f"36 → 12-month forecasts of Mauna Loa CO₂ and a synthetic series, "
    f"{FORECAST_STEPS} steps each, 3 seeds, last-value normalisation, lr tuned on validation "
    "for LSTM and Transformer",
    verdict="partly",
    measured=f"synthetic (holds): {mse_text('synthetic', 'LSTM', 'TCN', 'Transformer')}; CO₂ "
    f"(fails): {mse_text('CO₂ (Mauna Loa)', 'LSTM', 'TCN', 'Transformer')} (test MSE, "
    "standardised)",
)
record_claim(
    "C26 additions",
    claim="Time-aware encodings or Informer-style ProbSparse attention improve a Transformer "
    "forecaster",
    experiment="the same Transformer + a learned calendar-month embedding, and + ProbSparse "
    f"(factor {INFORMER_FACTOR}), same budget",
    verdict="not reproduced",
    measured=f"CO₂: {mse_text('CO₂ (Mauna Loa)', 'Transformer', '+ time', 'Informer-style')}; "
    f"synthetic: {mse_text('synthetic', 'Transformer', '+ time', 'Informer-style')}",
)
record_claim(
    "C26 linear",
    claim="Zeng et al. 2022: a linear model (DLinear) beats Transformer forecasters",
    experiment="DLinear (888 parameters) against the three Transformer variants (≈22 k), same "
    "budget",
    verdict="partly",
    measured=f"synthetic: {mse_text('synthetic', 'DLinear', 'Transformer', 'Informer-style')}; "
    f"CO₂: {mse_text('CO₂ (Mauna Loa)', 'DLinear', 'Transformer', 'Informer-style')}",
)

# %% [markdown]
# **Verdict on C26: partly reproduced.** On the synthetic series — periodic, trending, noisy —
# the recurrent and convolutional forecasters are as good as attention and steadier, as
# claimed. On the real, smooth CO₂ record the plain Transformer wins. Neither outcome is a
# landslide, and the comparison between the trained models is fragile at this scale.
#
# **Verdict on the additions: not reproduced.** Both made the Transformer worse, on both
# series. Neither is mysterious. A 36-month window holds three full years, so the calendar
# month of each value is already written in the values' own cycle; the embedding adds twelve
# vectors to fit and nothing the model did not have. ProbSparse gives all but 8 of the 36
# queries the plain mean of the values, which throws away the step-by-step detail a forecaster
# lives on; it was designed to make inputs of hundreds or thousands of steps affordable, not to
# improve accuracy on short ones (the next cell shows what it saves at length).
#
# **Verdict on the anchor, Zeng et al.: partly reproduced.** Against the kind of model they
# tested, a Transformer with time-stamp encodings and sparse attention, DLinear wins on both
# series, with 888 parameters against 22,892, and on the synthetic series it beats every model
# here. But a plain Transformer given the same last-value normalisation beats DLinear on CO₂ —
# which is where the field went next: later Transformer forecasters (PatchTST among them)
# recovered their lead over linear models largely through such normalisation and by grouping
# time steps into patches, the same move ViT made for images.
#
# ### What ProbSparse is for: long inputs
#
# Informer's sparse attention was designed for inputs of hundreds or thousands of steps,
# where dense attention's $L^2$ scores dominate. At 36 steps it saves almost nothing and, as
# measured above, costs accuracy. Its cost does show at length: the FLOPs of one call (batch 1,
# 2 heads, head width 32, no autograd), dense against ProbSparse with Informer's $c = 5$.

# %%
PS_LENGTHS = (256, 512, 1024, 2048)


def probsparse5(q, k, v):
    return probsparse_attention(q, k, v, factor=5)


def dense_attention(q, k, v):
    return scaled_dot_product_attention(q, k, v)


ps_costs = {
    name: [measure_cost(fn, n, timed=False) for n in PS_LENGTHS]
    for name, fn in (("dense", dense_attention), ("ProbSparse, c = 5", probsparse5))
}
ps_exponent = {name: fit_power(PS_LENGTHS, [c.flops for c in cs]) for name, cs in ps_costs.items()}
for name, cs in ps_costs.items():
    print(f"{name:>18}: MFLOP " + ", ".join(f"{c.flops / 1e6:.1f}" for c in cs)
          + f"  (∝ L^{ps_exponent[name]:.2f})")  # fmt: skip
ps_saving = ps_costs["dense"][-1].flops / ps_costs["ProbSparse, c = 5"][-1].flops
print(f"at L = 2048 ProbSparse does {ps_saving:.0f}× fewer FLOPs")

# %%
assert ps_exponent["dense"] > 1.99 and ps_exponent["ProbSparse, c = 5"] < 1.3

# %% [markdown]
# ## 7.4 Two modalities: words that look at patches, and CLIP (C27)
#
# **Claim C27.** *Multimodal models connect text tokens and image patches by cross-attention;
# CLIP aligns paired image and text embeddings by contrastive learning, after projecting both
# to a shared width.*
#
# ### Cross-attention: which patch does each word read?
#
# In cross-attention the queries come from one sequence and the keys and values from
# another. Here the queries are words and the keys and values are image patches, so each
# word's attention row is a distribution over the image: where that word looked. The task
# makes the right answer known. An image is four real test digits tiled 2 × 2 (16 × 16
# pixels, cut into 16 patches of 4 × 4), and the "text" is four words, *top-left*,
# *top-right*, *bottom-left* and *bottom-right*, each of which must name the digit in its
# quadrant (`ch07.QuadrantReader`: patch embedding with learned positions, four learned word
# vectors, one `CrossAttentionBlock` with 2 heads, a linear read-out per word). Nothing tells
# a word where its quadrant is; it must find out from the loss. 300 steps of Adam on batches
# of 32 training composites, three seeds, tested on 500 composites of test digits.
#
# **Threshold, from the claim.** If words find "their" patches, each word's attention mass on
# its quadrant (4 of the 16 patches: 0.25 if attention were uniform) must be at least
# `MIN_MASS` = 0.5, twice uniform, for every word and every seed, and the digits must be read
# with accuracy of at least 0.8 (chance 0.1).

# %% tags=["nbval-check-output"] tolerance="trained"
MIN_MASS, MIN_READ_ACC, READER_STEPS = 0.5, 0.8, 300
quadrants = ch07.quadrant_patch_mask()  # (4, 16) bool: the patches of each quadrant


def train_reader(seed: int):
    torch.manual_seed(seed)
    reader = ch07.QuadrantReader()
    log = fit(
        reader,
        lambda g: ch07.quadrant_batch(32, data.train_images, data.train_labels, g),
        lambda m, b: nn.functional.cross_entropy(m(b[0]).reshape(-1, 10), b[1].reshape(-1)),
        steps=READER_STEPS, lr=3e-3, data_seed=seed + 1, threads=1,
    )  # fmt: skip
    test_x, test_y = ch07.quadrant_batch(
        500, data.test_images, data.test_labels, torch.Generator().manual_seed(seed + 2)
    )
    with torch.no_grad():
        logits, weights = reader(test_x, need_weights=True)  # (500, 4, 10), (500, H, 4, 16)
    per_word = weights.mean(1)  # (500, 4, 16): heads averaged
    mass = (per_word * quadrants).sum(-1).mean(0)  # (4,): weight on the word's own quadrant
    accuracy = float((logits.argmax(-1) == test_y).float().mean())
    return {"model": reader, "mass": mass, "accuracy": accuracy, "test": (test_x, test_y),
            "weights": per_word, "seconds": log.seconds}  # fmt: skip


readers = {seed: train_reader(seed) for seed in progress(SEEDS, desc="quadrant reader")}
read_accuracy = spread([r["accuracy"] for r in readers.values()])
read_mass = {
    w: spread([float(r["mass"][i]) for r in readers.values()])
    for i, w in enumerate(ch07.QUADRANTS)
}
print(f"digit read correctly: {read_accuracy.format('.3f')}")
for word, s in read_mass.items():
    print(f"{word:>13}: attention mass on its own quadrant {s.format('.3f')} (uniform: 0.25)")

# %%
reader0 = readers[0]
image_id = 0
fig, axes = plt.subplots(1, 5, figsize=(13, 3.0), layout="constrained")
test_x, test_y = reader0["test"]
axes[0].imshow(test_x[image_id, 0], cmap="gray_r")
axes[0].set_title(f"test image: {' '.join(str(int(d)) for d in test_y[image_id])}")
for i, word in enumerate(ch07.QUADRANTS):
    heat = reader0["weights"][image_id, i].view(4, 4)  # (4, 4) patch grid
    up = heat.repeat_interleave(4, 0).repeat_interleave(4, 1)  # (16, 16) pixels
    axes[i + 1].imshow(test_x[image_id, 0], cmap="gray_r")
    top = float(reader0["weights"][image_id].max())
    shown = axes[i + 1].imshow(up, cmap="magma", alpha=0.6, vmin=0, vmax=top)
    axes[i + 1].set_title(f"'{word}' attends to")
for ax in axes:
    ax.set_xlabel("pixel column")
    ax.grid(False)
axes[0].set_ylabel("pixel row")
fig.suptitle("C27: cross-attention from four words to the 16 patches of one test image (seed 0)")
bar = fig.colorbar(shown, ax=axes, label="attention weight per patch (mean of 2 heads)")

# %%
ch07.assert_c27_words_find_their_patches(
    mass=[r["mass"].tolist() for r in readers.values()],
    accuracy=[r["accuracy"] for r in readers.values()],
    min_mass=MIN_MASS, min_accuracy=MIN_READ_ACC,
)  # fmt: skip
record_claim(
    "C27 cross",
    claim="Cross-attention connects text tokens to image patches",
    experiment=f"4 word queries → 16 patches of 2×2 tiled real digits, one CrossAttentionBlock "
    f"(2 heads), {READER_STEPS} steps, 3 seeds",
    verdict="reproduced",
    measured=f"mass on the word's quadrant ≥ {min(s.min for s in read_mass.values()):.2f} "
    f"(uniform 0.25) for every word and seed; digits read {read_accuracy.format('.3f')}",
)

# %% [markdown]
# Every word found its quadrant, and found it sharply: about 0.97 of each word's attention
# lands on the 4 patches of its quadrant at every seed, against 0.25 for attention spread
# evenly, and the digits are read correctly 0.93 of the time (chance: 0.1). The heat maps show
# the same thing on one image: each word lights up its own corner. Nothing in the model
# knows what "top-left" means; the position embeddings of the patches and the word vectors
# were learned together, from the loss alone. This is the mechanism by which captioning and
# visual question-answering models let a word "look" at a region, and, as in chapter 5, a
# heat map of it shows where a query read, not why the model answered as it did (chapter 9).
# **Verdict on the cross-attention part of C27: reproduced.**
#
# ### A tiny CLIP
#
# CLIP (Radford et al., 2021) never lets the two modalities attend to each other. An image
# encoder and a text encoder each produce one vector; two linear projections bring both to a
# shared width; both are normalised to unit length; and for a batch of $B$ matching pairs the
# $B \times B$ matrix of cosine similarities, divided by a temperature $\tau$, is trained so
# that each image picks out its own caption among the $B$ (a softmax over the row) and each
# caption its own image (a softmax over the column). The loss is the mean of the two
# cross-entropies (`clip_contrastive_loss`).

# %%
fig = clip_contrastive()

# %% [markdown]
# A property to check before training: when every logit is equal — embeddings that carry no
# information — each row's softmax is uniform, $1/B$ on the right answer, so each direction's
# cross-entropy is $\ln B$ and so is their mean. It is the loss an untrained model should
# start near, and the "chance" level of the loss curve.

# %%
B_CHECK = 32
same = torch.randn(1, 16).expand(B_CHECK, -1)  # (B, 16): every embedding the same vector
other = torch.randn(1, 16).expand(B_CHECK, -1)  # (B, 16): every caption the same too
uniform_loss = float(clip_contrastive_loss(same, other, 1 / 0.07))
print(f"B = {B_CHECK}: loss with all logits equal {uniform_loss:.6f}, "
      f"ln B = {math.log(B_CHECK):.6f}")  # fmt: skip
ch07.assert_clip_uniform_loss(uniform_loss, B_CHECK)

# %% [markdown]
# Our pairs are built from the digits: a picture is two real training digits side by side
# (8 × 16 pixels), its caption the two digits' names left to right, two tokens such as
# "3 7" — so "7 3" is a different caption, and the text encoder must use word order. Each
# training batch holds 32 *different* captions (drawn without replacement from the 100
# possible ones), so that every image has exactly one right answer in its batch. The image
# encoder is a one-layer ViT on 4 × 4 patches, the text encoder a one-layer Transformer over
# the two tokens, both of width 32, projected to a shared width of 32 by the package's
# `CLIPHead`, whose temperature is learned (in log space, starting at CLIP's $\tau = 0.07$).
# 250 steps of Adam on batches of 32, three seeds. The test is retrieval among 100 pairs of
# *test* digits, one per caption: for each picture, is its own caption the most similar of
# the 100 (image → text), and for each caption, is its own picture (text → image)? Chance is
# 1 in 100 each way.
#
# The temperature's role: the logits are cosines divided by $\tau$, so with $\tau = 1$ they
# stay within $[-1, 1]$ and no softmax over 32 of them can be confident. The lowest loss any
# embedding can reach at a fixed scale $s = 1/\tau$ is that of the regular simplex (matching
# pairs at cosine 1, all others at $-1/(B-1)$):
# $\ln\bigl(1 + (B-1)\, e^{-s B/(B-1)}\bigr)$ (`ch07.contrastive_loss_floor`). We train the same
# model a second time with the scale fixed at 1.
#
# **Thresholds, from the claim.** Alignment works if retrieval is at least ten times chance
# (`MIN_RETRIEVAL` = 0.10) in both directions at every seed with the learned temperature. The
# temperature matters if the runs at $\tau = 1$ retrieve worse on average in both directions.

# %% tags=["nbval-check-output"] tolerance="trained"
MIN_RETRIEVAL, CLIP_STEPS = 0.10, 250
train_pairs = (data.train_images, data.train_labels)
test_pairs = (data.test_images, data.test_labels)
clip_runs = {
    (scale, seed): ch07.train_clip(
        train_pairs, test_pairs, seed=seed, steps=CLIP_STEPS, logit_scale=scale
    )
    for scale in (None, 1.0)
    for seed in progress(SEEDS, desc="tiny CLIP")
}
retrieval = {
    (scale, direction): spread([getattr(clip_runs[scale, s], direction) for s in SEEDS])
    for scale in (None, 1.0)
    for direction in ("image_to_text", "text_to_image")
}
floor_at_1 = ch07.contrastive_loss_floor(32, 1.0)
final_loss = {
    scale: spread([sum(clip_runs[scale, s].losses[-20:]) / 20 for s in SEEDS])
    for scale in (None, 1.0)
}
for scale in (None, 1.0):
    name = "learned τ" if scale is None else "τ = 1   "
    print(f"{name}: image → text {retrieval[scale, 'image_to_text'].format('.2f')}, "
          f"text → image {retrieval[scale, 'text_to_image'].format('.2f')}; "
          f"final loss {final_loss[scale].format('.3f')}")  # fmt: skip
learned_scales = [clip_runs[None, s].final_scale for s in SEEDS]
print(f"learned 1/τ after training: {', '.join(f'{v:.1f}' for v in learned_scales)} "
      f"(start {1 / 0.07:.1f}); lowest possible loss at τ = 1, B = 32: {floor_at_1:.3f}; "
      f"chance loss ln 32 = {math.log(32):.3f}")  # fmt: skip

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for scale, label in ((None, "learned τ"), (1.0, "τ = 1")):
    for s in SEEDS:
        axes[0].plot(moving_average(clip_runs[scale, s].losses, 10),
                     color="tab:blue" if scale is None else "tab:orange", lw=1,
                     label=f"{label}" if s == 0 else None)  # fmt: skip
reference_line(axes[0], math.log(32), "chance: ln 32")
reference_line(axes[0], floor_at_1, "lowest loss possible at τ = 1", color="tab:red")
axes[0].set_title("tiny CLIP training loss (10-step mean, 3 seeds each)")
axes[0].set_xlabel("training step")
axes[0].set_ylabel("symmetric contrastive loss (nats)")
axes[0].legend()
plot_bar_spread(
    {
        "image → text\nlearned τ": retrieval[None, "image_to_text"].values,
        "text → image\nlearned τ": retrieval[None, "text_to_image"].values,
        "image → text\nτ = 1": retrieval[1.0, "image_to_text"].values,
        "text → image\nτ = 1": retrieval[1.0, "text_to_image"].values,
    },
    title="C27: retrieval among 100 held-out pairs",
    ylabel="top-1 retrieval accuracy",
    reference=(0.01, "chance (1 in 100)"),
    ax=axes[1],
)
fig.tight_layout()

# %%
ch07.assert_c27_clip_aligns(
    image_to_text=retrieval[None, "image_to_text"].values,
    text_to_image=retrieval[None, "text_to_image"].values,
    min_retrieval=MIN_RETRIEVAL,
)
ch07.assert_c27_temperature_matters(
    learned=(retrieval[None, "image_to_text"].values, retrieval[None, "text_to_image"].values),
    fixed=(retrieval[1.0, "image_to_text"].values, retrieval[1.0, "text_to_image"].values),
    fixed_losses=final_loss[1.0].values, floor=floor_at_1,
)  # fmt: skip
record_claim(
    "C27 CLIP",
    claim="CLIP aligns paired image and text embeddings by a contrastive loss, after "
    "projecting both to a shared width",
    experiment=f"tiny CLIP (1-layer ViT + 1-layer text encoder, CLIPHead to width 32) on "
    f"two-digit pictures and captions, {CLIP_STEPS} steps, 3 seeds; retrieval among 100 test "
    "pairs",
    verdict="reproduced",
    measured=f"image → text {retrieval[None, 'image_to_text'].format('.2f')}, text → image "
    f"{retrieval[None, 'text_to_image'].format('.2f')} (chance 0.01); loss with equal logits "
    f"= ln B to {abs(uniform_loss - math.log(B_CHECK)):.0e}",
)
record_claim(
    "C27 τ",
    claim="The temperature matters: cosine logits need a scale (CLIP learns 1/τ)",
    experiment="the same tiny CLIP with 1/τ fixed at 1, 3 seeds",
    verdict="reproduced",
    measured=f"τ = 1: image → text {retrieval[1.0, 'image_to_text'].format('.2f')}, text → "
    f"image {retrieval[1.0, 'text_to_image'].format('.2f')}; final loss "
    f"{final_loss[1.0].format('.2f')} ≥ floor {floor_at_1:.2f}; learned 1/τ "
    f"{min(learned_scales):.1f}–{max(learned_scales):.1f}",
)

# %% [markdown]
# With the learned temperature the tiny CLIP retrieves the right caption for 0.31 of the
# held-out pictures and the right picture for 0.43 of the captions, against 0.01 by chance,
# at every seed well above the threshold. It has learned, without a single class label, which
# digit shapes go with which words and in which order. With $\tau = 1$ both directions drop to
# about 0.2, and the loss stalls at 2.73, close to the lowest value that scale allows (2.488)
# and far from the learned runs' 0.99: the embeddings cannot express more confidence than the
# scale lets through, so the gradients stop pushing pairs apart long before they are well
# separated. (The learned runs *start* above $\ln 32$: at a scale of 14.3, even random
# embeddings give confident logits, and confidently wrong ones cost more than uniform ones.)
# The learned scale ends near 16, a little above its starting point, 14.3: the
# model asked for sharper logits. That is why CLIP learns $\tau$ rather than fixing it (and
# why it clamps $1/\tau$ at 100: unbounded, it can run away and destabilise training).
#
# What the small scale cannot show: CLIP's reason for being is zero-shot transfer — hundreds of
# millions of web pairs and an open vocabulary, so that any new class can be named in words. Our
# vocabulary is ten tokens and our "captions" are closed-form, so retrieval here is a
# well-posed matching problem, not open-ended understanding. Everything the claim says about
# the *mechanism* — two encoders, a projection to a shared width, a symmetric contrastive
# loss, a temperature — is what we built and measured. **Verdict on C27: reproduced**, for
# both the cross-attention and the contrastive alignment, with the temperature as an
# ingredient that matters.
#
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - An image becomes a sequence by cutting it into patches; a reshape alone does not do it
#   (exercise 07.1). What ViT gives up is the convolution's assumptions about images, and at
#   small data it pays for that: the CNN was ahead at every training-set size we tried, by
#   less as the data grew.
# - Global attention over patches costs a quadratic in their number, exactly: the FLOPs of a
#   ViT are a quadratic in the tokens whose leading coefficient is $4 \cdot$ layers $\cdot d$.
#   Window attention costs the same per token at every size.
# - Windows are islands unless the grid moves. The shifted window is what lets information
#   cross, and without it a model provably cannot see past a border — which the trained model
#   showed as chance accuracy exactly there.
# - For forecasting, a fair comparison needs a split in time, one budget, several seeds and a
#   seasonal-naive line to beat. On our two series no architecture won everywhere; the
#   additions meant to help Transformers (calendar embeddings, ProbSparse) hurt at this input
#   length, and a linear model with 888 parameters was the best on one series and beat the
#   Informer-style model on both.
# - Cross-attention lets words read image regions; contrastive learning aligns two encoders
#   without labels, provided the temperature lets the logits be confident.
#
# ## Exercises
#
# Your workbook `my-exercises/07_variants_by_task.py` (`make lab` copies it there) has five: cut
# images into patch tokens (in the order the patch embedding expects); write Swin's
# shifted-window attention (and roll it back); write CLIP's symmetric loss (both directions);
# count the attention scores of a ViT layer; and write the seasonal-naive forecast. Check your
# answers in the notebook, or all at once with `make check CH=07`.
#
# ## Further reading
#
# - Dosovitskiy, Beyer, Kolesnikov, Weissenborn, Zhai, Unterthiner, Dehghani, Minderer,
#   Heigold, Gelly, Uszkoreit, Houlsby (2021), *An Image is Worth 16x16 Words: Transformers
#   for Image Recognition at Scale* — ViT, and its results against data size.
# - Liu, Lin, Cao, Hu, Wei, Zhang, Lin, Guo (2021), *Swin Transformer: Hierarchical Vision
#   Transformer using Shifted Windows* — window attention, the cyclic shift and its mask,
#   patch merging.
# - Zhou, Zhang, Peng, Zhang, Li, Xiong, Zhang (2021), *Informer: Beyond Efficient Transformer
#   for Long Sequence Time-Series Forecasting* — ProbSparse attention and time-stamp
#   encodings.
# - Zeng, Chen, Zhang, Xu (2023, AAAI; arXiv 2022), *Are Transformers Effective for Time Series
#   Forecasting?* — DLinear and NLinear against the Transformer forecasters.
# - Nie, Nguyen, Sinthong, Kalagnanam (2023), *A Time Series is Worth 64 Words: Long-term
#   Forecasting with Transformers* — PatchTST: patches and instance normalisation.
# - Bai, Kolter, Koltun (2018), *An Empirical Evaluation of Generic Convolutional and Recurrent
#   Networks for Sequence Modeling* — the TCN.
# - Radford, Kim, Hallacy, Ramesh, Goh, Agarwal, Sastry, Askell, Mishkin, Clark, Krueger,
#   Sutskever (2021), *Learning Transferable Visual Models From Natural Language Supervision*
#   — CLIP.
# - Alayrac et al. (2022), *Flamingo: a Visual Language Model for Few-Shot Learning* —
#   cross-attention from a language model to image features.
# - Keeling, Whorf (2004), *Atmospheric CO₂ records from sites in the SIO air sampling
#   network* — the source of the Mauna Loa series statsmodels ships.
