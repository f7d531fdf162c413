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
# Attention needs no sentence: it lets each of a set of vectors read from the others. This
# chapter feeds it three other things. **Images**: a Vision Transformer (ViT) treats each patch
# as a word, so its cost explodes with the resolution; Swin attends inside small windows,
# shifted between layers so that information still travels. **Time series**: on periodic,
# trending data, where simpler models do well, attention meets a seasonal copy, a linear model,
# an LSTM and a convolutional network on equal terms. **Two modalities**: words attend to image
# patches through cross-attention, and CLIP aligns images with captions by contrast.
#
# The data is real and ships with installed packages: scikit-learn's 1,797 handwritten digits
# (8 × 8 pixels, 16 grey levels) and statsmodels' Mauna Loa CO₂ record. Every model trains in a
# second or two on one CPU core; where that limits an experiment, the text says so.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - turn an image into patch tokens by hand and count what attention over them costs as the
#   resolution grows;
# - explain why window attention is linear in the image area, and measure how far information
#   travels with and without Swin's shift;
# - set up a fair forecasting comparison and read it against the known result that linear models
#   are hard to beat;
# - read cross-attention weights as "which patch did this word look at", and train a contrastive
#   image–text model, knowing what its temperature does.

# %%
#| default_exp ch07
import math

import matplotlib.pyplot as plt
import torch
from matplotlib import patheffects
from torch import nn

from attention.blocks import EncoderLayer
from attention.efficient.probsparse import n_selected, probsparse_attention
from attention.functional import scaled_dot_product_attention
from attention.multimodal import clip_contrastive_loss
from attention.timeseries import seasonal_naive
from attention.vision import shifted_window_mask, window_partition
from book.claims import ch07 as claims07
from book.claims import claims_table, record_claim
from book.data import co2_monthly, digits
from book.diagrams.ch07 import clip_contrastive, patches_to_tokens, shifted_windows
from book.experiments.parallel import run_keyed
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.experiments.training import moving_average, train_classifier
from book.plotting import plot_bar_spread, plot_lines, plot_spread, reference_line, set_style
from book.sceptic import sweep_summary
from measure.cost import fit_power, measure_cost

set_style()
make_deterministic(0)
torch.set_num_threads(1)  # tiny models: one thread is the fastest, and the steadiest

# %% [markdown]
# Each section defines the models and tasks its claims rest on; the `#| export` cells make up
# `book.pages.ch07` (`make export`), which the claims, tests and exercise checks import. Its
# imports:

# %%
#| export
import copy
import math  # noqa: F811 (the page's module needs its own imports)
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn  # noqa: F811

from attention.blocks import Encoder
from attention.checks import check_float, check_positive_int, check_rank, check_tensor
from attention.multimodal import CLIPHead, CrossAttentionBlock, clip_logits
from attention.positional import sinusoidal_encoding
from attention.timeseries import (
    DLinear,
    LastValueNormalization,
    ProbSparseAttention,
    sliding_windows,
)
from attention.vision import PatchEmbedding, PatchMerging, SwinBlock, VisionTransformer

Tensor = torch.Tensor

# %% [markdown]
# ## 7.1 Images as sequences: the Vision Transformer
#
# ViT (Dosovitskiy et al., 2021) cuts an image into non-overlapping $p \times p$ squares,
# flattens each into $C p^2$ numbers and maps each with one shared linear layer to the model
# width. The squares are read row by row, each with a learned position embedding (nothing else
# tells the model that patch 5 sits under patch 1), and a learned `[CLS]` token in front
# collects a summary for the classifier.

# %%
fig = patches_to_tokens()

# %% [markdown]
# Our images are the digits: 1,347 for training and 450 for testing, scaled to $[0, 1]$. With
# $p = 2$ a digit becomes 16 patch tokens of 4 pixels. Cutting is a reshape and a permutation:
# split each axis into (patch index, pixel inside the patch), bring the patch indices to the
# front, flatten the rest. `PatchEmbedding` does the same in one convolution whose kernel and
# stride are the patch size; the two must agree.


# %%
#| export
def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut ``images (B, C, H, W)`` into ``p × p`` squares: ``(B, N, C·p·p)``, ``N = (H/p)·(W/p)``.

    Patches row-major over the patch grid; each vector holds its patch's pixels in ``(C, p, p)``
    order, the layout of the kernel of :class:`attention.vision.PatchEmbedding`'s convolution.
    """
    check_float("images", images)
    check_rank("images", images, 4, "[batch, channels, height, width]")
    p = check_positive_int("patch_size", patch_size)
    b, c, h, w = images.shape
    if h % p or w % p:
        raise ValueError(f"images of {h}x{w} pixels cannot be cut into {p}x{p} patches")
    x = images.view(b, c, h // p, p, w // p, p)  # (B, C, H/p, p, W/p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, H/p, W/p, C, p, p): the patch grid first
    return x.reshape(b, (h // p) * (w // p), c * p * p)  # (B, N, C·p·p)


# %% tags=["nbval-check-output"]
data = digits()
n_digits = len(data.train_labels) + len(data.test_labels)
print(f"{n_digits} digits: train {tuple(data.train_images.shape)}, "
      f"test {tuple(data.test_images.shape)}")  # fmt: skip

torch.manual_seed(0)
embed = PatchEmbedding(8, 2, 1, 32)
images = data.train_images[:4].unsqueeze(1)  # (4, 1, 8, 8)
by_hand = patchify(images, 2)  # (4, 16, 4): 16 patches of 1·2·2 pixels
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
    outlined = [patheffects.withStroke(linewidth=2.5, foreground="black")]  # readable on ink
    axes[0].text(2 * c + 0.5, 2 * r + 0.5, str(n), ha="center", va="center", color="white",
                 fontsize=9, fontweight="bold", path_effects=outlined)  # fmt: skip
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
# With patches of side $p$, an image of side $S$ gives $N = (S/p)^2$ tokens: doubling the side
# quadruples the tokens and multiplies the score table by sixteen. We count one forward pass of
# a small ViT (width 32, 4 heads, 2 layers, patches of 2 pixels) at sides 8 to 64 (up to 1,024
# patches): FLOPs, peak bytes and, shown only, this machine's time.
#
# The prediction is exact. Embedding, projections and feed-forward are linear in $N' = N + 1$
# (with `[CLS]`); the two products of attention take $4 N'^2 d$ FLOPs per layer. So the four
# counts must lie on one quadratic in $N'$ (three points fix it, the fourth can miss) **whose
# $N'^2$ coefficient is exactly $4 \cdot \text{layers} \cdot d = 256$**.

# %%
VIT_SIDES = (8, 16, 32, 64)
VIT_WIDTH, VIT_LAYERS = 32, 2
vit_costs = [claims07.vit_cost(s, 2, d_model=VIT_WIDTH, num_layers=VIT_LAYERS) for s in VIT_SIDES]
tokens_vit = [c.seq_len for c in vit_costs]  # N' = (side / 2)² + 1
vit_fit = claims07.quadratic_fit(tokens_vit, [c.flops for c in vit_costs])
for s, c in zip(VIT_SIDES, vit_costs, strict=True):  # time: shown, never asserted
    print(f"side {s:>3}: {c.seconds * 1e3:7.2f} ms per forward pass (this machine)")

# %% tags=["nbval-check-output"] tolerance="round-off"
print(f"{'side':>5} {'tokens':>7} {'MFLOP':>9} {'peak MiB':>9} {'FLOPs in attention':>19}")
for s, c in zip(VIT_SIDES, vit_costs, strict=True):
    share = 4 * VIT_LAYERS * VIT_WIDTH * c.seq_len**2 / c.flops
    print(f"{s:>5} {c.seq_len:>7} {c.flops / 1e6:>9.2f} {c.peak_bytes / 2**20:>9.2f} "
          f"{share:>19.0%}")  # fmt: skip
print(f"FLOPs = {vit_fit.c0:.0f} + {vit_fit.c1:.0f}·N' + {vit_fit.c2:.2f}·N'²  "
      f"(largest residual {vit_fit.max_residual:.1e} FLOPs)")  # fmt: skip

# %%
vit_flops = [c.flops for c in vit_costs]
claims07.assert_vit_cost_quadratic(tokens_vit, vit_flops, d_model=VIT_WIDTH, num_layers=VIT_LAYERS)
last_two = vit_costs[-2:]
vit_mem_exponent = fit_power([c.seq_len for c in last_two], [c.peak_bytes for c in last_two])
share = [4 * VIT_LAYERS * VIT_WIDTH * c.seq_len**2 / c.flops for c in vit_costs]
record_claim(
    "ViT cost",
    claim="ViT turns an image into patch tokens; its cost explodes with the resolution "
    "(quadratic in the number of patches)",
    experiment="one forward pass of a ViT (width 32, 2 layers, 2×2 patches) on images of side "
    "8…64: exact FLOP count, peak bytes",
    verdict=claims07.vit_cost_verdict(
        tokens_vit, vit_flops, d_model=VIT_WIDTH, num_layers=VIT_LAYERS
    ),
    measured=f"FLOPs = {vit_fit.c0:.0f} + {vit_fit.c1:.0f}·N' + {vit_fit.c2:.0f}·N'² exactly "
    f"(N'² coefficient = 4·layers·d); attention's share {share[0]:.0%} at side 8, "
    f"{share[-1]:.0%} at side 64; peak memory ∝ N^{vit_mem_exponent:.2f} between sides 32 and 64",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("ViT cost"))

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
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
# The per-token part wins on the smallest image (17 tokens); by side 64 the two attention
# products are 89 % of the bill. **Verdict on ViT cost: reproduced**, exactly, at every setting
# of the sweep above, including a model of width 64 with 4 layers, whose $N'^2$ coefficient is
# the predicted 1024. At the sizes of real photographs, with the original ViT's 16-pixel
# patches:

# %% tags=["nbval-check-output"]
for side in (224, 1024):
    n_patches = (side // 16) ** 2
    print(f"{side} × {side} pixels: {n_patches} patches, {(n_patches + 1) ** 2:,} scores per "
          f"head and layer")  # fmt: skip

# %% [markdown]
# 196 patches are affordable; 4,096 are not, and detection and segmentation want smaller patches
# still. Swin addresses this in section 7.2.
#
# ### Does a ViT learn digits as well as a convolutional network?
#
# Trained on ImageNet alone, ViTs fell behind ResNets of similar size, and overtook them only
# after pre-training on one to two orders of magnitude more images. The explanation offered is
# inductive bias: a convolution *assumes* that nearby pixels belong together and that a pattern
# means the same anywhere; a ViT must learn both. Assumptions that hold are free data. Does the
# CNN win with scarce data, and does the gap close as data grows? Two models of similar size:
# the library's `VisionTransformer` (2×2 patches, width 32, 4 heads, 2 layers) and a small
# LeNet-style CNN:


# %%
#| export
class SmallCNN(nn.Module):
    """LeNet-style, for 8 × 8 digits: two 3 × 3 convolutions with max-pooling (8 → 4 → 2),
    then a two-layer classifier. ``forward(images (B, 1, 8, 8)) -> logits (B, 10)``."""

    def __init__(self, channels: int = 16, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        c = check_positive_int("channels", channels)
        self.features = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (B, c, 4, 4)
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (B, 2c, 2, 2)
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(8 * c, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(self.features(images))  # (B, 10)


def digit_batches(images: Tensor, labels: Tensor, n_train: int, seed: int):
    """``make_batch(batch_size, generator)`` for `train_classifier`: random draws from the
    first ``n_train`` digits of a shuffle seeded with ``seed + 1`` (so that every model trained
    with one seed sees the same subset), as ``(images (B, 1, 8, 8), labels (B,))``."""
    n_train = check_positive_int("n_train", n_train)
    if n_train > len(labels):
        raise ValueError(f"n_train must be at most {len(labels)}, got {n_train}")
    subset = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed + 1))  # (N,)
    x, y = images[subset[:n_train]].unsqueeze(1), labels[subset[:n_train]]  # (n, 1, 8, 8), (n,)

    def make_batch(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(0, n_train, (batch_size,), generator=generator)  # (B,)
        return x[idx], y[idx]

    return make_batch


# %% [markdown]
# Same budget for both: 200 steps of Adam ($3 \cdot 10^{-3}$) on batches of 32, three seeds,
# trained on 150 digits and on all 1,347, tested on the same 450. Each run seeds what it
# draws, so the twelve runs go side by side, one per core: `run_keyed(f, settings)` returns
# what `{s: f(s) for s in settings}` would, bit for bit.
#
# **Threshold, from the claim.** "ViTs need more data" predicts that with 150 training images
# the CNN's mean accuracy beats the ViT's by at least `DATA_GAP` = 3 points, and that with all
# of them the deficit shrinks by at least `GAP_SHRINK` = 3 points.

# %%
SIZES = (150, 1347)
VIT_STEPS = 200
test_digits = (data.test_images.unsqueeze(1), data.test_labels)  # (450, 1, 8, 8), (450,)


def build_vit() -> VisionTransformer:
    return VisionTransformer(
        8, 2, 1, 10, d_model=VIT_WIDTH, num_heads=4, num_layers=VIT_LAYERS, d_ff=2 * VIT_WIDTH
    )


BUILDS = {"ViT": build_vit, "CNN": SmallCNN}


def train_on_digits(setting: tuple[str, int, int]):
    name, n_train, seed = setting
    batches = digit_batches(data.train_images, data.train_labels, n_train, seed)
    return train_classifier(
        BUILDS[name], batches, steps=VIT_STEPS, seed=seed, clip=None, test=test_digits
    )


settings = [(name, n, seed) for n in SIZES for name in BUILDS for seed in SEEDS]
digit_runs = run_keyed(train_on_digits, settings, desc="ViT and CNN")
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
claims07.assert_vit_needs_more_data(
    vit_small=acc_digits["ViT", SIZES[0]].values, cnn_small=acc_digits["CNN", SIZES[0]].values,
    vit_full=acc_digits["ViT", SIZES[1]].values, cnn_full=acc_digits["CNN", SIZES[1]].values,
)  # fmt: skip
record_claim(
    "ViT data",
    claim="ViTs need more data than convolutional networks (weaker inductive bias)",
    experiment=f"ViT ({digit_runs['ViT', SIZES[0], 0].n_params} params) vs small CNN "
    f"({digit_runs['CNN', SIZES[0], 0].n_params}) on 150 and 1 347 real digits, "
    f"{VIT_STEPS} steps each, 3 seeds",
    verdict=claims07.vit_data_verdict(gaps[SIZES[0]], gaps[SIZES[1]]),
    measured=f"150 digits: CNN {acc_digits['CNN', 150].format('.3f')}, ViT "
    f"{acc_digits['ViT', 150].format('.3f')}; 1 347: CNN {acc_digits['CNN', 1347].format('.3f')}, "
    f"ViT {acc_digits['ViT', 1347].format('.3f')}",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("ViT data"))

# %% [markdown]
# **Verdict: reproduced on seeds 0–2, partly on seeds 3–5.** With 150 training digits the CNN
# leads by about 20 points, with all 1,347 by about 12: the gap shrinks by about 9 points, three
# times `GAP_SHRINK`. In the sweep the CNN's lead with little data holds everywhere, and the gap
# shrinks at 600 steps (to 0.027) and with 75 against 600 digits, but on seeds 3–5 by only
# 0.015, under `GAP_SHRINK`. The crossover is out of reach: the ViT paper needed millions of
# images; our training set is about one ImageNet class. Two caveats: after 200 steps the ViT's
# training loss is still almost four times the CNN's (0.588 against 0.158) and falling faster,
# so "needs more data" is partly "needs more optimisation"; and neither model is tuned.
#
# ## 7.2 Windows instead of the whole image: Swin (C25)
#
# **Claim C25.** *Swin attends inside windows, with windows shifted from one layer to the next:
# the cost becomes linear in the image size while information still crosses windows, and its
# hierarchical feature maps suit detection and segmentation.*
#
# Swin (Liu et al., 2021) lets each patch token attend only within its $w \times w$ window:
# $w^4$ scores per window, and a number of windows that grows with the area, so a cost linear in
# the tokens. So that the windows are not islands, every second block moves the grid by $w/2$
# tokens along both axes as a cyclic roll: the shifted grid is again regular, so the same
# batched code applies; a mask keeps apart the pieces that wrap around, and the roll is undone
# afterwards.

# %%
fig = shifted_windows()

# %% [markdown]
# The three pieces on an 8 × 8 map of token ids (4 × 4 windows, shift 2), checked against the
# package's `window_partition` and `shifted_window_mask`. The mask labels each cell of the
# rolled grid by the region it came from and lets two tokens attend each other only when their
# labels match. Exercise 07.2 assembles the block's attention.

# %%
side, win, shift = 8, 4, 2
grid_ids = torch.arange(side * side).view(1, side, side, 1)  # (B=1, H, W, C=1): token ids
rolled = torch.roll(grid_ids, shifts=(-shift, -shift), dims=(1, 2))  # up and left by s
windows = rolled.view(1, side // win, win, side // win, win, 1).permute(0, 1, 3, 2, 4, 5)
windows = windows.reshape(-1, win * win, 1)  # (B·nW, w², C): windows row-major, then tokens
assert torch.equal(windows, window_partition(rolled, window_size=win))

labels = torch.zeros(1, side, side, 1, dtype=torch.long)  # (1, H, W, 1): region of each cell
bands = (slice(0, -win), slice(-win, -shift), slice(-shift, None))
for i, rows in enumerate(bands):
    for j, cols in enumerate(bands):
        labels[:, rows, cols] = 3 * i + j
per_window = window_partition(labels, window_size=win)[..., 0]  # (nW, w²)
mask = per_window[:, :, None] == per_window[:, None, :]  # (nW, w², w²) True = may attend
assert torch.equal(mask, shifted_window_mask(side, side, win, shift))
print("last window after the roll, token ids:", windows[-1, :, 0].view(win, win).tolist())
print("tokens each of them may attend:", mask[-1].sum(-1).tolist())

# %% [markdown]
# ### Cost against image size
#
# One `SwinBlock` (width 32, 2 heads, 4 × 4 windows, shifted by 2) against one pre-LN
# `EncoderLayer` with global attention (same width, heads and feed-forward size), on token maps
# of side 8, 16 and 32 (64 to 1,024 tokens).
#
# **Threshold, from the claim.** Window attention must be exactly linear: FLOPs and peak bytes
# grow by 4.00 per doubling of the side, to the last FLOP. Global attention must grow more than
# 4× per doubling.

# %%
SWIN_SIDES = (8, 16, 32)
SWIN_WIDTH, SWIN_WINDOW = 32, 4
window_costs, global_costs = [], []
for side in SWIN_SIDES:
    block = SwinBlock(SWIN_WIDTH, side, 2, SWIN_WINDOW, shift=SWIN_WINDOW // 2)
    dense_layer = EncoderLayer(SWIN_WIDTH, 2, 4 * SWIN_WIDTH, pre_ln=True)
    window_costs.append(claims07.layer_cost(block, side, SWIN_WIDTH))
    global_costs.append(claims07.layer_cost(dense_layer, side, SWIN_WIDTH))
for side, w, g in zip(SWIN_SIDES, window_costs, global_costs, strict=True):  # shown only
    print(f"side {side:>2}: window {w.seconds * 1e3:6.2f} ms, global {g.seconds * 1e3:6.2f} ms "
          "(this machine)")  # fmt: skip

# %% tags=["nbval-check-output"]
print(f"{'side':>4} {'tokens':>6} {'window MFLOP':>12} {'global MFLOP':>12} "
      f"{'window KiB':>10} {'global KiB':>10}")  # fmt: skip
for side, w, g in zip(SWIN_SIDES, window_costs, global_costs, strict=True):
    print(f"{side:>4} {w.seq_len:>6} {w.flops / 1e6:>12.2f} {g.flops / 1e6:>12.2f} "
          f"{w.peak_bytes / 2**10:>10.0f} {g.peak_bytes / 2**10:>10.0f}")  # fmt: skip
window_growth = claims07.growth([c.flops for c in window_costs])
global_growth = claims07.growth([c.flops for c in global_costs])
print("FLOPs × per doubling of the side: window", window_growth, "global", global_growth)

# %%
swin_costs = dict(
    tokens=[c.seq_len for c in window_costs],
    window=[(c.flops, c.peak_bytes) for c in window_costs],
    dense=[(c.flops, c.peak_bytes) for c in global_costs],
)
claims07.assert_c25_window_cost_linear(**swin_costs)
record_claim(
    "C25 cost",
    claim="Window attention makes the cost linear in the image size",
    experiment="one SwinBlock (4×4 windows, shift 2) vs one global EncoderLayer, width 32, "
    "2 heads, token maps of side 8, 16, 32: exact FLOPs and peak bytes",
    verdict=claims07.c25_cost_verdict(**swin_costs),
    measured=f"window: FLOPs and peak bytes ×{window_growth[0]:.2f} per doubling of the side "
    f"(= the area, exactly); global: FLOPs ×{global_growth[0]:.1f}, ×{global_growth[1]:.1f}",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("C25 cost"))

# %% [markdown]
# ### How far information travels, with and without the shift
#
# An output token of a stack of window blocks can depend only on the input tokens some chain of
# windows connects to it. Back-propagating from one output token shows that set exactly:
# attention outside a window, or across the mask, gets weight *exactly* zero, so "no influence"
# is an exact zero gradient (`receptive_field`, in float64).


# %%
#| export
def swin_stack(
    num_blocks: int, *, shifted: bool, grid: int, window_size: int, d_model: int = 16,
    num_heads: int = 1,
) -> nn.Sequential:  # fmt: skip
    """``num_blocks`` `SwinBlock`s on a ``grid × grid`` token map, ``(B, grid², D) -> (B,
    grid², D)``; with ``shifted`` every second block shifts by ``window_size // 2`` (Swin's
    alternation), otherwise every block uses the regular windows."""
    shift = window_size // 2 if shifted else 0
    return nn.Sequential(*[
        SwinBlock(d_model, grid, num_heads, window_size, shift=shift if i % 2 else 0)
        for i in range(check_positive_int("num_blocks", num_blocks))
    ])  # fmt: skip


def receptive_field(
    model: nn.Module, grid: int, d_model: int, token: tuple[int, int], *, n_probes: int = 2,
    seed: int = 0,
) -> Tensor:  # fmt: skip
    """Bool ``(grid, grid)``: the input tokens that can change output ``token`` of ``model``
    (``(1, grid², D) -> (1, grid², D)``): where the gradient of ``n_probes`` random projections
    of that output is non-zero, on random float64 inputs (a float64 copy of ``model``)."""
    row, col = token
    if not (0 <= row < grid and 0 <= col < grid):
        raise ValueError(f"token must lie on the {grid}x{grid} grid, got {token}")
    g = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(model).double().eval()
    x = torch.randn(1, grid * grid, d_model, generator=g, dtype=torch.float64)  # (1, G², D)
    x.requires_grad_(True)
    out = model(x)  # (1, G², D)
    field = torch.zeros(grid * grid, dtype=torch.bool)  # (G²,)
    for _ in range(check_positive_int("n_probes", n_probes)):
        probe = torch.randn(d_model, generator=g, dtype=torch.float64)  # (D,)
        (grad,) = torch.autograd.grad(out[0, row * grid + col] @ probe, x, retain_graph=True)
        field |= (grad[0] != 0).any(-1)  # (G²,)
    return field.view(grid, grid)


def field_map(model: nn.Module, grid: int, d_model: int, *, seed: int = 0) -> Tensor:
    """Bool ``(grid², grid, grid)``: for every output token (row-major), the input tokens that
    can change it, from one backward pass per token of a random projection of that output
    (float64 copy of ``model``, random input): ``receptive_field`` for the whole map at once."""
    g = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(model).double().eval()
    x = torch.randn(1, grid * grid, d_model, generator=g, dtype=torch.float64)  # (1, G², D)
    x.requires_grad_(True)
    out = model(x)  # (1, G², D)
    probes = torch.randn(grid * grid, d_model, generator=g, dtype=torch.float64)  # (G², D)
    rows = []
    for t in range(grid * grid):
        (grad,) = torch.autograd.grad(out[0, t] @ probes[t], x, retain_graph=True)  # (1, G², D)
        rows.append((grad[0] != 0).any(-1).view(grid, grid))  # (G, G)
    return torch.stack(rows)  # (G², G, G)


def window_of(token: tuple[int, int], grid: int, window_size: int) -> Tensor:
    """Bool ``(grid, grid)``: the regular ``window_size × window_size`` window holding
    ``token``."""
    r0, c0 = (t // window_size * window_size for t in token)
    mask = torch.zeros(grid, grid, dtype=torch.bool)  # (G, G)
    mask[r0 : r0 + window_size, c0 : c0 + window_size] = True
    return mask


# %% [markdown]
# We stack 1, 2 and 4 freshly initialised `SwinBlock`s on a 16 × 16 token map with 4 × 4
# windows, with and without Swin's alternation of regular and shifted windows, and read the
# field of every output token; the figure shows the token at row 5, column 6.
#
# **Threshold, from the claim.** Without the shift every token's field must stay its own window
# (16 tokens) at every depth; with it, fields must leave their window from two blocks on, every
# token's by the deepest stack, and keep growing with depth.

# %%
RF_GRID, RF_TOKEN, RF_DEPTHS = 16, (5, 6), (1, 2, 4)
torch.manual_seed(0)
field_maps = {
    (shifted, depth): field_map(
        swin_stack(depth, shifted=shifted, grid=RF_GRID, window_size=SWIN_WINDOW), RF_GRID, 16
    )  # (G², G, G)
    for shifted in (False, True)
    for depth in RF_DEPTHS
}
own_windows = torch.stack([
    window_of((r, c), RF_GRID, SWIN_WINDOW) for r in range(RF_GRID) for c in range(RF_GRID)
])  # (G², G, G): each token's regular window  # fmt: skip
token_index = RF_TOKEN[0] * RF_GRID + RF_TOKEN[1]
fields = {key: maps[token_index] for key, maps in field_maps.items()}  # (G, G) each
own_window = own_windows[token_index]  # (G, G)

# %% tags=["nbval-check-output"]
for (shifted, depth), maps in field_maps.items():
    left = (maps & ~own_windows).flatten(-2).any(-1).view(RF_GRID, RF_GRID)  # (G, G)
    stuck = (~left).nonzero().tolist() if 0 < left.sum() < RF_GRID**2 else None
    print(f"{'shifted' if shifted else 'regular'} windows, {depth} block(s): token {RF_TOKEN} "
          f"sees {int(fields[shifted, depth].sum()):>3} tokens; {int(left.sum()):>3} of "
          f"{RF_GRID**2} tokens see outside their own window"
          + (f"; those that do not: {stuck}" if stuck else ""))  # fmt: skip

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
left_by_depth = claims07.assert_c25_shift_crosses_windows(field_maps, own_windows)
record_claim(
    "C25 shift",
    claim="Shifted windows let information cross window borders",
    experiment="receptive field (exact non-zero pattern of the gradient) of every output token "
    "after 1, 2, 4 SwinBlocks on 16×16 tokens, 4×4 windows, with and without the shift",
    verdict=claims07.c25_shift_verdict(field_maps, own_windows),
    measured="tokens whose field leaves their window, shifted: "
    + ", ".join(f"{d} block(s): {n}" for d, n in left_by_depth.items())
    + "; regular: 0 at every depth; "
    + ", ".join(
        f"{'shifted' if s else 'regular'}/{d}: {int(f.sum())}" for (s, d), f in fields.items()
    )
    + f" tokens seen by token {RF_TOKEN}",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("C25 shift"))

# %% [markdown]
# With regular windows every field stays its own window at any depth. With the shift, one block
# (regular) still gives one window, two blocks take the red token to four windows' worth (64
# tokens), four to 192. The 16 tokens in the 2 × 2 corners of the map still see only their own
# window at two blocks: there the rolled windows are pieces from opposite sides, which the mask
# keeps apart. They cross one pair of blocks later, through tokens that did. The field grows by
# up to a window's width per pair of blocks, so a large image takes depth — or the patch merging
# below, which halves every distance at each stage.
#
# **Verdict on "information crosses windows": reproduced** for every token by four blocks (for
# all but the 16 corner tokens by two); without the shift it provably never does. A stack
# stopped at two blocks gives only *partly*; three blocks suffice, and windows of 8 or a map of
# side 8 change nothing.
#
# ### Patch merging: a pyramid of feature maps
#
# Between stages Swin merges every 2 × 2 group of neighbouring tokens into one (`PatchMerging`:
# concatenate, normalise, project $4C \to 2C$): the side halves and the width doubles. Below, a
# 16 × 16 map of width 16 goes through three stages; at the last, one window covers the whole
# 4 × 4 map, so the shift is turned off.


# %%
#| export
def swin_pyramid(
    x: Tensor, side: int, width: int, *, stages: int = 3, window_size: int = 4
) -> tuple[Tensor, list[tuple[int, int]]]:
    """``stages`` Swin stages on ``x (B, side², width)``: each a regular and a shifted
    `SwinBlock` (no shift once one window fills the map), then `PatchMerging` between stages.
    Returns the last map ``(B, side'², width')`` and the ``(side, width)`` of every stage."""
    pyramid = [(side, width)]
    for stage in range(check_positive_int("stages", stages)):
        shift = window_size // 2 if side > window_size else 0  # none: one window fills the map
        for s in (0, shift):  # a regular block, then a shifted one
            x = SwinBlock(width, side, 1, min(window_size, side), shift=s)(x)  # (B, side², width)
        if stage < stages - 1:
            x = PatchMerging(side, width)(x)  # (B, (side/2)², 2·width)
            side, width = side // 2, width * 2
            pyramid.append((side, width))
    return x, pyramid


# %%
torch.manual_seed(0)
x_stage = torch.randn(2, 16 * 16, 16)  # (B, H·W, C)
x_stage, pyramid = swin_pyramid(x_stage, 16, 16, stages=3, window_size=SWIN_WINDOW)
print(" → ".join(f"{s}×{s}×{c}" for s, c in pyramid), "| last tensor", tuple(x_stage.shape))

# %% [markdown]
# The map becomes 8 × 8 × 32, then 4 × 4 × 64: the shapes a convolutional backbone (ResNet)
# hands to a detection or segmentation head, at a cost linear in the area at every stage.
# Whether they *suit* detection and segmentation would take a detection data set and a head
# (FPN, UPerNet) to test, so the verdict is *partly*, at every setting of the sweep below.

# %%
claims07.assert_c25_pyramid(pyramid)
record_claim(
    "C25 pyramid",
    claim="Swin's patch merging gives hierarchical feature maps that suit detection and "
    "segmentation",
    experiment="three stages of SwinBlocks with PatchMerging on a 16×16×16 token map",
    verdict=claims07.c25_pyramid_verdict(pyramid, suits_detection=None),
    measured=" → ".join(f"{s}×{s}×{c}" for s, c in pyramid)
    + " (side halves, width doubles); suitability for detection not tested",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("C25 pyramid"))

# %% [markdown]
# ### A task that only the shift can solve
#
# The receptive field says what *can* flow; a trained model shows whether it matters. Every cell
# of an 8 × 8 map holds one of four colours and must output its right neighbour's colour. With
# 4 × 4 windows, the right neighbour of a cell in column 3 lies in the next window; for other
# columns, in its own. Two Swin blocks (width 16, one head), 150 steps of Adam, three seeds;
# once with the second block shifted, once with both regular. Their relative position bias is
# the only source of position.


# %%
#| export
def neighbour_copy_batch(
    batch_size: int, grid: int, n_colours: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``colours (B, grid, grid)`` random, and ``targets (B, grid, grid - 1)``: each cell's
    right neighbour's colour (the last column has none)."""
    colours = torch.randint(0, n_colours, (batch_size, grid, grid), generator=generator)  # (B,G,G)
    return colours, colours[:, :, 1:]  # (B, G, G), (B, G, G-1)


class SwinTokenClassifier(nn.Module):
    """Colour embedding → `swin_stack` → LayerNorm → a colour per cell:
    ``forward(colours (B, G, G)) -> logits (B, G, G, n_colours)``."""

    def __init__(
        self, *, shifted: bool, grid: int = 8, window_size: int = 4, n_colours: int = 4,
        d_model: int = 16, num_heads: int = 1, num_blocks: int = 2,
    ) -> None:  # fmt: skip
        super().__init__()
        self.grid, self.n_colours = grid, n_colours
        self.embed = nn.Embedding(n_colours, d_model)
        self.blocks = swin_stack(
            num_blocks, shifted=shifted, grid=grid, window_size=window_size, d_model=d_model,
            num_heads=num_heads,
        )  # fmt: skip
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_colours)

    def forward(self, colours: Tensor) -> Tensor:
        x = self.embed(colours.flatten(1))  # (B, G², D)
        logits = self.head(self.norm(self.blocks(x)))  # (B, G², K)
        return logits.view(-1, self.grid, self.grid, self.n_colours)  # (B, G, G, K)


def train_neighbour_copy(
    *, shifted: bool, seed: int, steps: int, grid: int = 8, window_size: int = 4,
    n_colours: int = 4, batch_size: int = 32, lr: float = 1e-2, eval_size: int = 512,
) -> dict:  # fmt: skip
    """Train a `SwinTokenClassifier` (parameters from ``seed``, batches from ``seed + 1``);
    accuracy per column on ``eval_size`` held-out maps (from ``seed + 2``): ``{"border",
    "interior", "per_column", "losses"}``, border = the columns whose right neighbour lies in
    the next window."""
    from book.experiments.training import fit, torch_threads  # the book's training loop

    torch.manual_seed(seed)
    model = SwinTokenClassifier(
        shifted=shifted, grid=grid, window_size=window_size, n_colours=n_colours
    )

    def loss_of(m: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        colours, targets = batch  # (B, G, G), (B, G, G-1)
        logits = m(colours)[:, :, :-1]  # (B, G, G-1, K): cells with a right neighbour
        return F.cross_entropy(logits.reshape(-1, n_colours), targets.reshape(-1))

    log = fit(
        model, lambda g: neighbour_copy_batch(batch_size, grid, n_colours, g), loss_of,
        steps=steps, lr=lr, data_seed=seed + 1, threads=1,
    )  # fmt: skip
    colours, targets = neighbour_copy_batch(
        eval_size, grid, n_colours, torch.Generator().manual_seed(seed + 2)
    )
    with torch.no_grad(), torch_threads(1):
        correct = (model(colours)[:, :, :-1].argmax(-1) == targets).float()  # (B, G, G-1)
    border = [c for c in range(grid - 1) if (c + 1) % window_size == 0]
    interior = [c for c in range(grid - 1) if (c + 1) % window_size != 0]
    return {
        "border": float(correct[:, :, border].mean()),
        "interior": float(correct[:, :, interior].mean()),
        "per_column": correct.mean((0, 1)).tolist(),
        "losses": log.losses,
    }


# %% [markdown]
# **Threshold, from the claim.** At the window border the model without the shift cannot see the
# neighbour, so its accuracy there must stay within 0.10 of chance (0.25); with the shift it
# must reach `SOLVED` = 0.90 at every seed. Inside the windows both must reach 0.90.

# %% tags=["nbval-check-output"] tolerance="trained"
N_COLOURS, COPY_STEPS = 4, 150


def train_copy(setting: tuple[bool, int]) -> dict:
    shifted, seed = setting
    return train_neighbour_copy(shifted=shifted, seed=seed, steps=COPY_STEPS)


copy_settings = [(shifted, seed) for shifted in (False, True) for seed in SEEDS]
copy_runs = run_keyed(train_copy, copy_settings, desc="neighbour copy")
copy_border = {s: spread([copy_runs[s, seed]["border"] for seed in SEEDS]) for s in (False, True)}
copy_inside = {s: spread([copy_runs[s, seed]["interior"] for seed in SEEDS]) for s in (False, True)}
for shifted in (False, True):
    name = "shifted" if shifted else "regular"
    print(f"{name:>8} windows: accuracy at the border {copy_border[shifted]}, "
          f"inside {copy_inside[shifted]}")  # fmt: skip

# %%
fig, ax = plt.subplots(figsize=(9, 4))
plot_bar_spread(
    {
        "regular\nborder": copy_border[False].values,
        "shifted\nborder": copy_border[True].values,
        "regular\ninside": copy_inside[False].values,
        "shifted\ninside": copy_inside[True].values,
    },
    title="C25: copy the right neighbour's colour (8 × 8 cells, 4 × 4 windows)",
    ylabel="accuracy on held-out maps",
    reference=(1 / N_COLOURS, "chance (1 of 4 colours)"),
    ax=ax,
)
ax.set_ybound(0, 1.05)  # accuracy: the legend goes beside the axes, not above the bars
legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
fig.tight_layout()

# %%
copy_results = dict(
    border_shifted=copy_border[True].values, border_regular=copy_border[False].values,
    inside_shifted=copy_inside[True].values, inside_regular=copy_inside[False].values,
)  # fmt: skip
claims07.assert_c25_shift_decides(**copy_results)
record_claim(
    "C25 task",
    claim="Without the shift, windows cannot pass information across their borders",
    experiment=f"2 SwinBlocks, copy the right neighbour's colour on 8×8 maps, {COPY_STEPS} "
    "steps, 3 seeds, with and without the shifted second block",
    verdict=claims07.c25_task_verdict(**copy_results),
    measured=f"border accuracy {copy_border[False].format('.2f')} regular vs "
    f"{copy_border[True].format('.2f')} shifted (chance 0.25); inside "
    f"{copy_inside[False].min:.2f}+ and {copy_inside[True].min:.2f}+",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("C25 task"))

# %% [markdown]
# At the window border the regular windows score 0.26, chance for four colours, at every seed;
# with the second block shifted, 0.95–0.97; inside the windows both are perfect. The sweep holds
# this on seeds 3–5, at 450 steps and with 2 × 2 windows. **Verdict on C25: reproduced** in its
# three measurable parts — cost linear in the area (exactly, at every map side and window size
# the sweep tried), information crossing windows only with the shift (exactly, and decisively in
# a trained model), and a feature pyramid — with the pyramid's use for detection untested.
#
# ## 7.3 Time series: is attention the right tool for periodic, trending data? (C26)
#
# **Claim C26.** *On strongly periodic or trending series, a tuned LSTM or TCN can be as good as
# plain attention, or steadier; time-aware encodings or Informer-style sparse attention are the
# additions that help a Transformer.*
#
# A sharper version: Zeng, Chen, Zhang and Xu (2022) asked "Are Transformers effective for time
# series forecasting?" and answered with DLinear, a one-layer linear model that beat the
# Transformer forecasters of the day, Informer among them, on most of their own benchmarks:
# attention is permutation-invariant, and position encodings restore too little of the exact lag
# structure a forecaster needs. We test both versions on two series:
#
# - **Real**: the Mauna Loa CO₂ record (`book.data.co2_monthly`), March 1958 to December 2001,
#   averaged per month (526 months) so the yearly cycle has an exact period of 12.
# - **Synthetic**: 960 months of a linear trend, a yearly sine and its second harmonic, and
#   Gaussian noise of standard deviation 0.2, which is the best possible error.
#
# Each forecaster sees the last 36 months and predicts the next 12. The split is in time: the
# first seven tenths trains, the next tenth validates, the last fifth tests (a window belongs to
# the part its targets fall in). Values are standardised with the training part's statistics;
# errors are mean squared errors in those units.


# %%
#| export
def synthetic_series(
    length: int, *, period: int = 12, slope: float = 0.01, noise: float = 0.2, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """``slope·t + sin(2πt/P) + 0.5·sin(4πt/P + 1)`` plus Gaussian noise of standard deviation
    ``noise``: ``values (T,)`` float64, and the phase ``t mod P``, ``(T,)`` int64."""
    t = torch.arange(check_positive_int("length", length), dtype=torch.float64)  # (T,)
    angle = 2 * math.pi * t / check_positive_int("period", period)  # (T,)
    clean = slope * t + torch.sin(angle) + 0.5 * torch.sin(2 * angle + 1.0)  # (T,)
    g = torch.Generator().manual_seed(seed)
    values = clean + noise * torch.randn(length, generator=g, dtype=torch.float64)  # (T,)
    return values, torch.arange(length) % period


@dataclass(frozen=True)
class Windows:
    """``history (N, L)`` and ``target (N, H)`` float32 (standardised), ``phase (N, L)``."""

    history: Tensor
    target: Tensor
    phase: Tensor

    def __len__(self) -> int:
        return self.history.shape[0]


@dataclass(frozen=True)
class ForecastSplit:
    """Train / validation / test windows of one series, standardised by the training part's
    ``mean`` and ``std``."""

    train: Windows
    val: Windows
    test: Windows
    mean: float
    std: float
    lookback: int
    horizon: int


def forecast_split(
    values: Tensor, phase: Tensor, *, lookback: int, horizon: int,
    fractions: tuple[float, float] = (0.7, 0.1),
) -> ForecastSplit:  # fmt: skip
    """Chronological split of ``values (T,)``: the first ``fractions[0]`` of the time steps
    train, the next ``fractions[1]`` validate, the rest test; a window belongs to the part its
    *targets* fall in (its history may reach back into the previous part)."""
    check_float("values", values)
    check_rank("values", values, 1, "[time]")
    check_tensor("phase", phase)
    if phase.shape != values.shape:
        raise ValueError(f"phase must have the shape of values {tuple(values.shape)}")
    train_frac, val_frac = fractions
    if not (0 < train_frac and 0 < val_frac and train_frac + val_frac < 1):
        raise ValueError(f"fractions must be positive with a sum below 1, got {fractions}")
    n = values.shape[0]
    n_train, n_val = int(train_frac * n), int((train_frac + val_frac) * n)
    mean, std = float(values[:n_train].mean()), float(values[:n_train].std())
    z = ((values - mean) / std).float()  # (T,)
    history, target = sliding_windows(z, lookback=lookback, horizon=horizon)  # (N, L), (N, H)
    phases, _ = sliding_windows(phase, lookback=lookback, horizon=horizon)  # (N, L)
    first_target = torch.arange(history.shape[0]) + lookback  # (N,) time of target 0
    last_target = first_target + horizon - 1  # (N,)
    parts = [
        Windows(history[keep], target[keep], phases[keep])
        for keep in (
            last_target < n_train,
            (first_target >= n_train) & (last_target < n_val),
            first_target >= n_val,
        )
    ]
    if min(len(p) for p in parts) == 0:
        raise ValueError(
            f"a series of {n} steps leaves an empty part for lookback={lookback}, "
            f"horizon={horizon} and fractions={fractions}"
        )
    return ForecastSplit(*parts, mean, std, lookback, horizon)


def forecast_mse(model, windows: Windows) -> float:
    """Mean squared error of ``model(history, phase) -> (N, H)`` over every window and step."""
    with torch.no_grad():
        forecast = model(windows.history, windows.phase)  # (N, H)
    return float(F.mse_loss(forecast, windows.target))


# %% tags=["nbval-check-output"]
co2 = co2_monthly()
LOOKBACK, HORIZON, PERIOD = 36, 12, 12
synthetic_values, synthetic_phase = synthetic_series(960, period=PERIOD, noise=0.2)
series = {
    "CO₂ (Mauna Loa)": (co2.values, co2.month),
    "synthetic": (synthetic_values, synthetic_phase),
}
splits = {
    name: forecast_split(values, phase, lookback=LOOKBACK, horizon=HORIZON)
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
# - **seasonal naive**: repeat the last 12 months.
# - **DLinear**: a moving-average trend (13 months) and the remainder, each mapped to the
#   horizon by one linear layer (888 parameters).
# - **LSTM**: one layer of 44 units.
# - **TCN**: causal dilated convolutions, 24 channels, dilations 1 to 16, so the last step sees
#   all 36 months.
# - **Transformer**: every month a token (value embedding + sinusoidal position), one pre-LN
#   encoder layer of width 32 with 2 heads; **no attention**: the same with attention replaced
#   by the identity (`no_attention`), leaving an MLP per month, to show what attention adds.
# - **+ time**: plus a learned embedding of the calendar month, Informer's "time-stamp"
#   encoding.
# - **Informer-style**: + time, with ProbSparse self-attention: only the
#   $u = c \lceil \ln L \rceil$ queries whose scores stand out most attend; the rest receive the
#   mean of the values. Informer's $c = 5$ with 96-step inputs keeps 25 of 96 queries; with our
#   36 steps, $c = 2$ keeps a similar share (8 of 36).
#
# Every trained model works relative to the last observed value (`LastValueNormalization`, from
# DLinear's sibling NLinear), which removes the level of a series that keeps leaving the range
# seen in training. All train alike: 100 steps of Adam on batches of 32 windows, gradients
# clipped at 1, three seeds:


# %%
#| export
def train_forecaster(
    build, split: ForecastSplit, *, steps: int, lr: float, seed: int, batch_size: int = 32,
    clip: float | None = 1.0,
) -> dict:  # fmt: skip
    """Train ``build()`` (``model(history (B, L), phase (B, L)) -> (B, H)``) with Adam on the
    MSE of random training windows; parameters from ``seed``, batches from ``seed + 1``, so
    that every forecaster trained with one seed sees the same windows in the same order.
    Returns ``{"model", "test_mse", "val_mse", "n_params", "losses"}``."""
    from book.experiments.training import fit, torch_threads  # the book's training loop

    torch.manual_seed(seed)
    model = build()
    train = split.train

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        idx = torch.randint(0, len(train), (batch_size,), generator=generator)  # (B,)
        return train.history[idx], train.phase[idx], train.target[idx]  # (B,L), (B,L), (B,H)

    log = fit(
        model, make_batch, lambda m, b: F.mse_loss(m(b[0], b[1]), b[2]),
        steps=steps, lr=lr, data_seed=seed + 1, clip=clip, threads=1,
    )  # fmt: skip
    with torch_threads(1):
        test, val = forecast_mse(model, split.test), forecast_mse(model, split.val)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"model": model, "test_mse": test, "val_mse": val, "n_params": n_params,
            "losses": log.losses}  # fmt: skip


# %% [markdown]
# **One read-out, matched capacity.** The library's Transformer forecasts through a flat head
# holding most of its parameters, its LSTM and TCN from their last state: compared as they come,
# the head and not the mixing would decide. So here every model is a *body* giving one state per
# month, read by the same flat head (`Linear(L·D, 12)`), with bodies matched at about 8.5 k
# parameters (the table counts heads too).


# %%
#| export
class LSTMBody(nn.Module):
    """``(history (B, L), phase) -> (B, L, hidden)``: the LSTM's state after each month."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        states, _ = self.lstm(history.unsqueeze(-1))  # (B, L, hidden)
        return states


class TCNBody(nn.Module):
    """``(history (B, L), phase) -> (B, L, channels)``: causal dilated convolutions with
    residuals, dilations 1, 2, 4, … until the last step sees the whole history (left padding
    only, so no output sees a later month)."""

    def __init__(self, lookback: int, channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        dilations = [1]
        while 1 + (kernel_size - 1) * (2 * dilations[-1] - 1) < lookback:
            dilations.append(2 * dilations[-1])
        self.dilations, self.kernel_size = tuple(dilations), kernel_size
        self.input = nn.Conv1d(1, channels, 1)
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d) for d in dilations
        )

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        x = self.input(history.unsqueeze(1))  # (B, C, L)
        for conv, d in zip(self.convs, self.dilations, strict=True):
            x = x + F.relu(conv(F.pad(x, ((self.kernel_size - 1) * d, 0))))  # (B, C, L) causal
        return x.transpose(1, 2)  # (B, L, C)


class TransformerBody(nn.Module):
    """``(history (B, L), phase (B, L)) -> (B, L, d_model)``: each month a token (a linear
    embedding of its value + the sinusoidal encoding of its position, + a learned embedding of
    the calendar month when ``period`` is given), then a pre-LN encoder whose attention is
    ``attn_fn`` (dense when ``None``). No mask: every month may attend to every month of the
    history (all of it is the past)."""

    def __init__(
        self, lookback: int, d_model: int = 32, num_heads: int = 2, d_ff: int = 64,
        period: int | None = None, attn_fn=None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.value_embedding = nn.Linear(1, d_model)
        self.register_buffer("position", sinusoidal_encoding(lookback, d_model), persistent=False)
        self.phase_embedding = nn.Embedding(period, d_model) if period else None
        self.encoder = Encoder(d_model, num_heads, d_ff, num_layers=1, pre_ln=True,
                               activation="gelu", attn_fn=attn_fn)  # fmt: skip

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        x = self.value_embedding(history.unsqueeze(-1)) + self.position  # (B, L, D)
        if self.phase_embedding is not None:
            x = x + self.phase_embedding(phase)  # (B, L, D): + the calendar month
        return self.encoder(x)  # (B, L, D)


def no_attention(q: Tensor, k: Tensor, v: Tensor, mask=None, causal: bool = False) -> Tensor:
    """An ``attn_fn`` that returns the values: each token keeps its own, ``(B, H, L, dv)``."""
    return v


class Forecaster(nn.Module):
    """``body`` (``(history, phase) -> (B, L, width)``) and a linear head: ``read_out="last"``
    maps the last month's state to the horizon, ``"flat"`` all ``L`` states flattened.
    ``forward(history (B, L), phase (B, L)) -> (B, horizon)``."""

    def __init__(self, body: nn.Module, width: int, lookback: int, horizon: int,
                 read_out: str = "last") -> None:  # fmt: skip
        super().__init__()
        if read_out not in ("last", "flat"):
            raise ValueError(f"read_out must be 'last' or 'flat', got {read_out!r}")
        self.body, self.read_out = body, read_out
        self.head = nn.Linear(width if read_out == "last" else lookback * width, horizon)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        states = self.body(history, phase)  # (B, L, width)
        if self.read_out == "last":
            return self.head(states[:, -1])  # (B, horizon): the last month only
        return self.head(states.flatten(1))  # (B, horizon): every month, flattened


def forecaster_builds(
    lookback: int, horizon: int, period: int, factor: int = 2, read_outs=("flat",)
) -> dict:
    """Name → a function building the forecaster (last-value normalised, except the seasonal
    naive copy, which is not here). LSTM, TCN and Transformer with each head in
    ``read_outs``; the Transformer without attention, with the calendar embedding (+ time)
    and with ProbSparse on top (Informer-style), read like the library's Transformer (flat)."""

    def make(body, width, read_out):
        return lambda: LastValueNormalization(
            Forecaster(body(), width, lookback, horizon, read_out)
        )

    builds = {"DLinear": lambda: LastValueNormalization(DLinear(lookback, horizon, kernel_size=13))}
    for read_out in read_outs:
        builds[f"LSTM ({read_out})"] = make(lambda: LSTMBody(44), 44, read_out)
        builds[f"TCN ({read_out})"] = make(lambda: TCNBody(lookback, 24), 24, read_out)
        builds[f"Transformer ({read_out})"] = make(lambda: TransformerBody(lookback), 32, read_out)
    builds["no attention (flat)"] = make(
        lambda: TransformerBody(lookback, attn_fn=no_attention), 32, "flat"
    )
    builds["+ time (flat)"] = make(lambda: TransformerBody(lookback, period=period), 32, "flat")
    builds["Informer-style (flat)"] = make(
        lambda: TransformerBody(lookback, period=period, attn_fn=ProbSparseAttention(factor)),
        32, "flat",
    )  # fmt: skip
    return builds


def tune_and_train(
    build, split: ForecastSplit, *, grid, seeds, steps: int, batch_size: int = 16,
    bounds: tuple[float, float] = (1e-5, 0.3), tune_steps: int | None = None,
) -> dict:  # fmt: skip
    """Choose the learning rate by the validation MSE of ``seeds[0]`` trained for
    ``tune_steps`` (``None``: ``steps``) from ``grid``, widening the grid by ×(last/previous)
    while the choice sits at an edge, so that the chosen value lies inside the searched range
    (the grid stops at ``bounds``); then train every seed with it for ``steps``.
    Returns ``{"lr", "grid", "val": {lr: mse}, "runs": [run per seed]}``."""
    tune_steps = steps if tune_steps is None else tune_steps
    grid, val, first = sorted(grid), {}, {}
    while True:  # ends: the grid is bounded
        for lr in grid:
            if lr not in val:
                first[lr] = train_forecaster(build, split, steps=tune_steps, lr=lr,
                                             seed=seeds[0], batch_size=batch_size)  # fmt: skip
                val[lr] = first[lr]["val_mse"]
        best = min(grid, key=val.get)
        if best == grid[0] and grid[0] / (grid[1] / grid[0]) >= bounds[0] * (1 - 1e-9):
            grid.insert(0, grid[0] / (grid[1] / grid[0]))
        elif best == grid[-1] and grid[-1] * (grid[-1] / grid[-2]) <= bounds[1] * (1 + 1e-9):
            grid.append(grid[-1] * (grid[-1] / grid[-2]))
        else:
            break
    reuse = [first[best]] if tune_steps == steps else []  # seed 0's run, when at full budget
    runs = reuse + [
        train_forecaster(build, split, steps=steps, lr=best, seed=s, batch_size=batch_size)
        for s in seeds[len(reuse) :]
    ]
    return {"lr": best, "grid": grid, "val": val, "runs": runs}


# %% [markdown]
# "Tuned" means the same for every model: seed 0's validation error after half the budget picks
# the learning rate from $\{10^{-3}, 3 \cdot 10^{-3}, 10^{-2}\}$, the grid widening while the
# choice sits at its edge (so every chosen rate has a worse one on each side).
#
# **Thresholds, from the claim** (`book.claims.ch07`), LSTM and TCN against the Transformer with
# the same head, on every series: "as good as" = a mean test MSE at most `AS_GOOD` = 10 % above
# the Transformer's; "steadier" = a smaller range over the seeds *and* a worst seed no worse.
# The claim holds on a series if the LSTM or the TCN is as good or steadier. Attention "matters"
# if removing it raises the Transformer's mean MSE by more than `AS_GOOD`; an addition "helps"
# if it lowers it; DLinear "beats" a Transformer variant (Zeng et al.'s anchor) if its mean MSE
# is lower.

# %%
INFORMER_FACTOR = 2
print(f"active queries: Informer's c = 5 at L = 96: {n_selected(96, 5)} of 96; "
      f"ours, c = {INFORMER_FACTOR} at L = {LOOKBACK}: {n_selected(LOOKBACK, INFORMER_FACTOR)} "
      f"of {LOOKBACK}")  # fmt: skip
forecasters = forecaster_builds(LOOKBACK, HORIZON, PERIOD, INFORMER_FACTOR)
torch.manual_seed(0)
for name, build in forecasters.items():
    model = build().forecaster
    n = sum(p.numel() for p in model.parameters())
    head = sum(p.numel() for p in model.head.parameters()) if hasattr(model, "head") else 0
    print(f"{name:>22}: {n:6d} parameters, {n - head:5d} in the body, {head:5d} in the head")

# %% tags=["nbval-check-output"] tolerance="trained-ratio"
FORECAST_STEPS = claims07.C26_STEPS  # 100 steps of 32 windows, tuned at 50, grid (1e-3, 3e-3, 1e-2)
forecast_runs = claims07.c26_runs(splits, seeds=SEEDS, steps=FORECAST_STEPS, progress=True)
for (series_name, name), t in forecast_runs.items():
    print(f"{series_name:>16} {name:>22}: learning rate {t['lr']:g}, searched "
          f"{min(t['grid']):g} to {max(t['grid']):g}")
mse_table = claims07.c26_table(forecast_runs)
mse = {(s, n): spread(v) for s, by in mse_table.items() for n, v in by.items()}
naive_mse = {
    series_name: forecast_mse(
        lambda history, phase: seasonal_naive(history, horizon=HORIZON, period=PERIOD), split.test
    )
    for series_name, split in splits.items()
}

# %% [markdown]
# The validation errors behind each choice (seed 0, after 50 steps), printed only: diverging
# runs at the top of a grid land differently on different CPUs (the choice does not).

# %%
for (series_name, name), t in forecast_runs.items():
    vals = ", ".join(f"{g:.2g}: {t['val'][g]:.4f}" for g in t["grid"])
    print(f"{series_name:>16} {name:>22}: {vals}")

# %% tags=["nbval-check-output"] tolerance="trained-ratio"
for series_name in splits:
    print(f"{series_name}: test MSE (standardised), mean (min, max) over 3 seeds")
    print(f"  {'seasonal naive':>22}: {naive_mse[series_name]:.4f}")
    for name in forecasters:
        s = mse[series_name, name]
        print(f"  {name:>22}: {s.format('.4f')}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(14, 4.6))
for ax, series_name in zip(axes, splits, strict=True):
    plot_bar_spread(
        {name: mse[series_name, name].values for name in forecasters},
        title=f"C26: {series_name}, 12-month forecasts",
        ylabel="test MSE (standardised units)",
        reference=(naive_mse[series_name], "seasonal naive"),
        ax=ax,
    )
    ax.tick_params(axis="x", labelrotation=60, labelsize=8)
    top = max(max(mse[series_name, n].values) for n in forecasters)
    ax.set_ybound(0, 1.75 * max(top, naive_mse[series_name]))  # room for the legend above
reference_line(axes[1], noise_floor, "noise floor (perfect forecast)", color="tab:green")
for ax in axes:
    ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()

# %% tags=["nbval-check-output"] tolerance="trained-ratio"
holds = {(series, r): claims07.c26_claim_holds(by, read_out=r)
         for series, by in mse_table.items() for r in claims07.READ_OUTS}  # fmt: skip
print("C26 holds (LSTM or TCN as good as, or steadier than, the Transformer, same head):")
for (series, r), ok in holds.items():
    print(f"  {series:>16}, read-out {r}: {'holds' if ok else 'fails'}")
c26_verdicts = {
    "C26": claims07.c26_verdict(mse_table),
    "attention": claims07.c26_attention_verdict(mse_table),
    "additions": claims07.c26_additions_verdict(mse_table),
    "linear": claims07.c26_linear_verdict(mse_table),
}
print(c26_verdicts)
for claim in ("C26", "C26 attention", "C26 additions", "C26 linear"):
    print(f"{claim}, the sceptic's sweep (stored):\n{sweep_summary(claim)}")


def mse_text(series_name: str, *names: str) -> str:
    return "; ".join(f"{n} {mse[series_name, n].format('.4f')}" for n in names)


COMPARED = claims07.C26_COMPARED
record_claim(
    "C26",
    claim="On strongly periodic/trending series a tuned LSTM or TCN can be as good as plain "
    "attention, or steadier",
    experiment=f"36 → 12-month forecasts of Mauna Loa CO₂ and a synthetic series, "
    f"{FORECAST_STEPS} steps of 32 windows each, 3 seeds, last-value normalisation, bodies of "
    "≈ 8.5 k parameters, all read by the same flattened head, every lr tuned on validation",
    verdict=c26_verdicts["C26"],
    measured=f"synthetic: {mse_text('synthetic', *COMPARED)}; CO₂: "
    f"{mse_text('CO₂ (Mauna Loa)', *COMPARED)} (test MSE, standardised)",
)
record_claim(
    "C26 attention",
    claim="What the Transformer forecaster gains comes from attention",
    experiment="the Transformer (flat read-out) with its attention replaced by the identity "
    "on the values, same budget and tuning",
    verdict=c26_verdicts["attention"],
    measured=f"CO₂: {mse_text('CO₂ (Mauna Loa)', 'Transformer (flat)', 'no attention (flat)')}; "
    f"synthetic: {mse_text('synthetic', 'Transformer (flat)', 'no attention (flat)')}",
)
record_claim(
    "C26 additions",
    claim="Time-aware encodings or Informer-style ProbSparse attention improve a Transformer "
    "forecaster",
    experiment="the same Transformer + a learned calendar-month embedding, and + ProbSparse "
    f"(factor {INFORMER_FACTOR}), same budget",
    verdict=c26_verdicts["additions"],
    measured=f"CO₂: {mse_text('CO₂ (Mauna Loa)', *claims07.ADDITIONS)}; "
    f"synthetic: {mse_text('synthetic', *claims07.ADDITIONS)}",
)
record_claim(
    "C26 linear",
    claim="Zeng et al. 2022: a linear model (DLinear) beats Transformer forecasters",
    experiment="DLinear (888 parameters) against the four Transformer variants, same budget",
    verdict=c26_verdicts["linear"],
    measured=f"synthetic: {mse_text('synthetic', 'DLinear', *claims07.TRANSFORMERS)}; "
    f"CO₂: {mse_text('CO₂ (Mauna Loa)', 'DLinear', *claims07.TRANSFORMERS)}",
)

# %% [markdown]
# Every trained model is far below the seasonal copy on CO₂ (0.0293), which lags the trend by a
# year. With 95 test windows from one decade of CO₂ and three seeds, differences of a few
# ten-thousandths are within what a seed moves: the verdicts rest on the thresholds and on the
# sweep above (seeds 3–5; 300 steps, every model re-tuned).
#
# **Verdict on C26: reproduced** at 100 steps, on seeds 3–5 and at 300 steps: with the same head
# and tuning, an LSTM or TCN is as good as the Transformer on both series (at 100 steps on CO₂
# the LSTM, 0.0040, and the TCN, 0.0043, beat its 0.0062).
#
# **Verdict on attention in the forecaster: not reproduced** at 100 and at 300 steps. At 100,
# without it the error is lower on CO₂ (0.0049) and the same on the synthetic series, so a
# month's own value, its position and the flat head do the work. **Partly on seeds 3–5**, where
# removing it raises the synthetic series' error from 0.01266 to 0.0151: attention can matter
# here, but not reliably.
#
# **Verdict on the additions: reproduced at 100 steps** on both sets of seeds, **partly at
# 300**, where both raise the CO₂ error above the plain Transformer's and still lower the
# synthetic one. They seem to buy faster training more than a better forecast: a 36-month window
# holds three full years, so the calendar month is already in the values' own cycle, and
# ProbSparse gives all but 8 of the 36 queries the plain mean of the values.
#
# **Verdict on the anchor, Zeng et al.: not reproduced** at seeds 0–2 (DLinear beats only the
# plain Transformer, only on CO₂) and at 300 steps; **partly on seeds 3–5**, where it beats
# every Transformer variant on CO₂ but only the plain one on the synthetic series. The linear
# model is a strong baseline here, not a winner.
#
# ### What ProbSparse is for: long inputs
#
# Informer's sparse attention was designed to make inputs of hundreds or thousands of steps
# affordable, where dense attention's $L^2$ scores dominate, not to improve accuracy on short
# ones. The FLOPs of one call (batch 1, 2 heads, head width 32), dense against ProbSparse with
# Informer's $c = 5$:

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
assert ps_exponent["dense"] > 1.99 and ps_exponent["ProbSparse, c = 5"] < 1.3

# %% [markdown]
# ## 7.4 Two modalities: words that look at patches, and CLIP (C27)
#
# **Claim C27.** *Multimodal models connect text tokens and image patches by cross-attention;
# CLIP aligns paired image and text embeddings by contrastive learning, after projecting both to
# a shared width.*
#
# ### Cross-attention: which patch does each word read?
#
# Here the queries are words and the keys and values image patches, so each word's attention row
# is a distribution over the image: where that word looked. The task makes the right answer
# known. An image is four real digits tiled 2 × 2 (16 × 16 pixels, 16 patches of 4 × 4), and the
# "text" is four words, *top-left*, *top-right*, *bottom-left* and *bottom-right*, each of which
# must name the digit in its quadrant. Only the loss tells a word where its quadrant is.

# %%
#| export
QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")


def quadrant_batch(
    batch_size: int, images: Tensor, labels: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Four random digits ``images (N, 8, 8)`` tiled 2 × 2: ``(B, 1, 16, 16)``, and the digit
    in each quadrant in the order of `QUADRANTS`, ``(B, 4)``."""
    idx = torch.randint(0, len(labels), (batch_size, 4), generator=generator)  # (B, 4)
    tiles = images[idx]  # (B, 4, 8, 8)
    top = torch.cat([tiles[:, 0], tiles[:, 1]], dim=-1)  # (B, 8, 16)
    bottom = torch.cat([tiles[:, 2], tiles[:, 3]], dim=-1)  # (B, 8, 16)
    return torch.cat([top, bottom], dim=-2).unsqueeze(1), labels[idx]  # (B,1,16,16), (B,4)


def quadrant_patch_mask(image_size: int = 16, patch_size: int = 4) -> Tensor:
    """Bool ``(4, N)``: which of the ``N`` row-major patches lie in each quadrant."""
    side = image_size // patch_size
    rows = torch.arange(side)[:, None].expand(side, side).reshape(-1)  # (N,)
    cols = torch.arange(side)[None, :].expand(side, side).reshape(-1)  # (N,)
    top, left = rows < side // 2, cols < side // 2
    return torch.stack([top & left, top & ~left, ~top & left, ~top & ~left])  # (4, N)


class QuadrantReader(nn.Module):
    """Four learned "word" queries read a 16 × 16 image through one cross-attention block.

    Patch tokens (`PatchEmbedding`, 4 × 4 pixels, plus a learned position each) are the keys
    and values; each word of `QUADRANTS` is a learned vector; a linear layer turns each word's
    output into a digit. ``forward(images (B, 1, 16, 16), need_weights=False) -> logits
    (B, 4, 10)`` (and the weights ``(B, H, 4, N)``: which patches each word read).
    """

    def __init__(self, d_model: int = 32, num_heads: int = 2, patch_size: int = 4) -> None:
        super().__init__()
        self.patches = PatchEmbedding(16, patch_size, 1, d_model)
        self.position = nn.Parameter(torch.randn(self.patches.num_patches, d_model) * 0.02)
        self.words = nn.Parameter(torch.randn(len(QUADRANTS), d_model))
        self.cross = CrossAttentionBlock(d_model, num_heads, 2 * d_model)
        self.out = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 10))

    def forward(self, images: Tensor, need_weights: bool = False):
        patches = self.patches(images) + self.position  # (B, N, D)
        words = self.words.expand(images.shape[0], -1, -1)  # (B, 4, D)
        if need_weights:
            read, weights = self.cross(words, patches, need_weights=True)  # (B,4,D), (B,H,4,N)
            return self.out(read), weights  # (B, 4, 10)
        return self.out(self.cross(words, patches))  # (B, 4, 10)


def train_quadrant_reader(train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor], *,
                          seed: int, steps: int) -> dict:  # fmt: skip
    """Train a `QuadrantReader` (parameters from ``seed``, batches of 32 composites of the
    ``train`` digits ``(images (N, 8, 8), labels (N,))`` from ``seed + 1``, Adam at 3e-3) and
    test it on 500 composites of the ``test`` digits (from ``seed + 2``): ``{"model", "mass"
    (4,): each word's mean attention on its own quadrant, "accuracy", "test", "weights"
    (500, 4, 16), "seconds"}``."""
    from book.experiments.training import fit  # the book's training loop

    torch.manual_seed(seed)
    reader = QuadrantReader()
    log = fit(
        reader,
        lambda g: quadrant_batch(32, *train, g),
        lambda m, b: F.cross_entropy(m(b[0]).reshape(-1, 10), b[1].reshape(-1)),
        steps=steps, lr=3e-3, data_seed=seed + 1, threads=1,
    )  # fmt: skip
    test_x, test_y = quadrant_batch(500, *test, torch.Generator().manual_seed(seed + 2))
    with torch.no_grad():
        logits, weights = reader(test_x, need_weights=True)  # (500, 4, 10), (500, H, 4, 16)
    per_word = weights.mean(1)  # (500, 4, 16): heads averaged
    mass = (per_word * quadrant_patch_mask()).sum(-1).mean(0)  # (4,): on the word's quadrant
    accuracy = float((logits.argmax(-1) == test_y).float().mean())
    return {"model": reader, "mass": mass, "accuracy": accuracy, "test": (test_x, test_y),
            "weights": per_word, "seconds": log.seconds}  # fmt: skip


# %% [markdown]
# 300 steps of Adam on batches of 32 training composites, three seeds, tested on 500
# composites of test digits.
#
# **Threshold, from the claim.** If words find "their" patches, each word's attention mass on
# its quadrant (4 of the 16 patches: 0.25 if uniform) must be at least `MIN_MASS` = 0.5, twice
# uniform, for every word and every seed, and the digits must be read with accuracy of at least
# 0.8 (chance 0.1).

# %% tags=["nbval-check-output"] tolerance="trained"
READER_STEPS = claims07.C27_READER_STEPS  # 300


def train_reader(seed: int) -> dict:
    return train_quadrant_reader((data.train_images, data.train_labels),
                                 (data.test_images, data.test_labels),
                                 seed=seed, steps=READER_STEPS)  # fmt: skip


readers = run_keyed(train_reader, SEEDS, desc="quadrant reader")
read_accuracy = spread([r["accuracy"] for r in readers.values()])
read_mass = {
    w: spread([float(r["mass"][i]) for r in readers.values()]) for i, w in enumerate(QUADRANTS)
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
for i, word in enumerate(QUADRANTS):
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
reader_results = dict(
    mass=[r["mass"].tolist() for r in readers.values()],
    accuracy=[r["accuracy"] for r in readers.values()],
)
claims07.assert_c27_words_find_their_patches(**reader_results)
record_claim(
    "C27 cross",
    claim="Cross-attention connects text tokens to image patches",
    experiment=f"4 word queries → 16 patches of 2×2 tiled real digits, one CrossAttentionBlock "
    f"(2 heads), {READER_STEPS} steps, 3 seeds",
    verdict=claims07.c27_cross_verdict(**reader_results),
    measured=f"mass on the word's quadrant ≥ {min(s.min for s in read_mass.values()):.2f} "
    f"(uniform 0.25) for every word and seed; digits read {read_accuracy.format('.3f')}",
)


# %% tags=["nbval-check-output"]
print(sweep_summary("C27 cross"))

# %% [markdown]
# Every word found its quadrant, sharply: about 0.97 of each word's attention lands on its
# quadrant's 4 patches at every seed, and the digits are read correctly 0.93 of the time. This
# is how captioning and visual question-answering models let a word "look" at a region; as in
# chapter 5, the heat map shows where a query read, not why the model answered (chapter 9).
#
# The "words" are learned query vectors with no text in them; that real text tokens learn to
# address the right patches (grounding "the dog on the left") would need a text encoder and
# varied captions. **Verdict on the cross-attention part of C27: reproduced, for learned
# queries** (DETR's object queries and Perceiver's latents are exactly this), on seeds 3–5 and
# at 900 steps too.
#
# ### A tiny CLIP
#
# CLIP (Radford et al., 2021) never lets the two modalities attend to each other. An image
# encoder and a text encoder each produce one vector, projected to a shared width and normalised
# to unit length. For a batch of $B$ matching pairs, the $B \times B$ matrix of cosine
# similarities, divided by a temperature $\tau$, is trained so that each image picks out its own
# caption (a softmax over the row) and each caption its own image (over the column); the loss is
# the mean of the two cross-entropies (`clip_contrastive_loss`).

# %%
fig = clip_contrastive()

# %% [markdown]
# A property to check before training: when every logit is equal, each row's softmax puts
# $1/B$ on the right answer, so both cross-entropies and their mean are $\ln B$: an untrained
# model's starting point, the loss curve's "chance" level.

# %%
B_CHECK = 32
same = torch.randn(1, 16).expand(B_CHECK, -1)  # (B, 16): every embedding the same vector
other = torch.randn(1, 16).expand(B_CHECK, -1)  # (B, 16): every caption the same too
uniform_loss = float(clip_contrastive_loss(same, other, 1 / 0.07))
print(f"B = {B_CHECK}: loss with all logits equal {uniform_loss:.6f}, "
      f"ln B = {math.log(B_CHECK):.6f}")  # fmt: skip
claims07.assert_clip_uniform_loss(uniform_loss, B_CHECK)

# %% [markdown]
# A picture is two real training digits side by side (8 × 16 pixels), its caption their names
# left to right, such as "3 7"; "7 3" is a different caption, so the text encoder must use word
# order. Each batch holds 32 *different* captions (of the 100 possible), so every image has one
# right answer. A one-layer ViT on 4 × 4 patches and a one-layer Transformer for the text, both
# of width 32, are projected to a shared width of 32 by `CLIPHead`, whose temperature is learned
# (from CLIP's $\tau = 0.07$). 250 steps of Adam on batches of 32, three seeds. The test is
# retrieval among 100 pairs of *test* digits, one per caption, in both directions; chance is
# 1 in 100.


# %%
#| export
def by_class(labels: Tensor, num_classes: int = 10) -> list[Tensor]:
    """Indices of each class: ``[indices of label 0, indices of label 1, ...]``."""
    return [torch.nonzero(labels == c).squeeze(1) for c in range(num_classes)]


def digit_pair_batch(
    batch_size: int, images: Tensor, labels: Tensor, generator: torch.Generator, *,
    classes: list[Tensor] | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``batch_size <= 100`` pictures of two digits side by side, ``(B, 1, 8, 16)``, and their
    captions ``(B, 2)`` (the two classes, left to right), all captions distinct (drawn without
    replacement), each digit image drawn at random from its class."""
    batch_size = check_positive_int("batch_size", batch_size)
    if batch_size > 100:
        raise ValueError(
            f"batch_size must be <= 100 (distinct two-digit captions), got {batch_size}"
        )
    classes = by_class(labels) if classes is None else classes
    captions = torch.randperm(100, generator=generator)[:batch_size]  # (B,) pair ids
    pair = torch.stack([captions // 10, captions % 10], dim=1)  # (B, 2)
    picks = torch.empty_like(pair)  # (B, 2): an image index per digit
    for c in range(10):
        where = pair == c
        n = int(where.sum())
        if n:
            pool = classes[c]
            picks[where] = pool[torch.randint(0, len(pool), (n,), generator=generator)]
    tiles = images[picks]  # (B, 2, 8, 8)
    pictures = torch.cat([tiles[:, 0], tiles[:, 1]], dim=-1).unsqueeze(1)  # (B, 1, 8, 16)
    return pictures, pair


class CaptionEncoder(nn.Module):
    """Token embedding + learned positions → one pre-LN encoder layer → mean over tokens:
    ``forward(captions (B, Lt)) -> (B, d_model)``. Positions matter: "3 7" is not "7 3"."""

    def __init__(self, vocab_size: int = 10, length: int = 2, d_model: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.randn(length, d_model) * 0.02)
        self.encoder = Encoder(
            d_model, 2, 2 * d_model, num_layers=1, pre_ln=True, activation="gelu"
        )

    def forward(self, captions: Tensor) -> Tensor:
        x = self.embed(captions) + self.position  # (B, Lt, D)
        return self.encoder(x).mean(1)  # (B, D)


class TinyCLIP(nn.Module):
    """A one-layer ViT for the pictures (8 × 16 pixels, 4 × 4 patches + [CLS]) and a
    `CaptionEncoder`, projected to a shared ``embed_dim`` by `CLIPHead`.

    ``logit_scale=None``: the scale ``1/τ`` is learned (from CLIP's 1/0.07); a number: fixed.
    ``logits(images, captions) -> (B_img, B_txt)``; ``forward`` returns the symmetric loss.
    """

    def __init__(
        self, d_model: int = 32, embed_dim: int = 32, *, logit_scale: float | None = None
    ) -> None:
        super().__init__()
        self.image_encoder = VisionTransformer(
            (8, 16), 4, 1, d_model, d_model=d_model, num_heads=2, num_layers=1, d_ff=2 * d_model
        )
        self.text_encoder = CaptionEncoder(10, 2, d_model)
        self.head = CLIPHead(d_model, d_model, embed_dim)
        if logit_scale is not None and not logit_scale > 0:
            raise ValueError(f"logit_scale must be > 0 or None (learned), got {logit_scale}")
        self.fixed_scale = logit_scale
        if logit_scale is not None:
            self.head.log_logit_scale.requires_grad_(False)

    def scale(self) -> Tensor | float:
        """``1 / temperature`` in use."""
        return self.head.logit_scale() if self.fixed_scale is None else self.fixed_scale

    def logits(self, images: Tensor, captions: Tensor) -> Tensor:
        image_emb = self.head.image_projection(self.image_encoder(images))  # (B, E)
        text_emb = self.head.text_projection(self.text_encoder(captions))  # (B, E)
        return clip_logits(image_emb, text_emb, self.scale())  # (B_img, B_txt)

    def forward(self, images: Tensor, captions: Tensor) -> Tensor:
        logits = self.logits(images, captions)  # (B, B)
        targets = torch.arange(logits.shape[0])  # (B,): pair i is row i and column i
        return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2


def retrieval_accuracy(logits: Tensor) -> tuple[float, float]:
    """Top-1 retrieval when pair ``i`` is row and column ``i`` of ``logits (B, B)``: (image →
    text, text → image). Chance is ``1 / B`` each."""
    check_float("logits", logits)
    check_rank("logits", logits, 2, "[images, texts]")
    if logits.shape[0] != logits.shape[1]:
        raise ValueError(f"logits must be square (B, B), got {tuple(logits.shape)}")
    target = torch.arange(logits.shape[0], device=logits.device)  # (B,)
    image_to_text = float((logits.argmax(1) == target).float().mean())
    text_to_image = float((logits.argmax(0) == target).float().mean())
    return image_to_text, text_to_image


def train_clip(
    train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor], *, seed: int, steps: int,
    logit_scale: float | None = None, batch_size: int = 32, lr: float = 3e-3,
) -> dict:  # fmt: skip
    """Train a `TinyCLIP` on `digit_pair_batch` batches of ``train = (images, labels)``
    (parameters from ``seed``, batches from ``seed + 1``); retrieval among 100 pairs of test
    digits (from ``seed + 2``): ``{"image_to_text", "text_to_image", "final_scale",
    "losses"}``."""
    from book.experiments.training import fit, torch_threads  # the book's training loop

    torch.manual_seed(seed)
    model = TinyCLIP(logit_scale=logit_scale)
    train_classes = by_class(train[1])
    log = fit(
        model, lambda g: digit_pair_batch(batch_size, *train, g, classes=train_classes),
        lambda m, batch: m(*batch),  # the symmetric contrastive loss
        steps=steps, lr=lr, data_seed=seed + 1, threads=1,
    )  # fmt: skip
    pictures, captions = digit_pair_batch(100, *test, torch.Generator().manual_seed(seed + 2))
    with torch.no_grad(), torch_threads(1):
        i2t, t2i = retrieval_accuracy(model.logits(pictures, captions))
    return {"image_to_text": i2t, "text_to_image": t2i,
            "final_scale": float(torch.as_tensor(model.scale()).detach()),
            "losses": log.losses}  # fmt: skip


def contrastive_loss_floor(batch_size: int, logit_scale: float) -> float:
    """The lowest symmetric contrastive loss ``B`` pairs can reach at a fixed scale ``s``:
    the regular simplex, ``ln(1 + (B - 1)·exp(-s·B/(B-1)))`` (needs ``embed_dim >= B - 1``)."""
    b = check_positive_int("batch_size", batch_size)
    if b < 2:
        raise ValueError(f"batch_size must be >= 2 for a contrast, got {b}")
    return math.log1p((b - 1) * math.exp(-logit_scale * b / (b - 1)))


# %% [markdown]
# The temperature's role: the logits are cosines divided by $\tau$, so with $\tau = 1$ they stay
# within $[-1, 1]$ and no softmax over 32 of them can be confident. The lowest loss reachable at
# a fixed scale $s = 1/\tau$ is that of the regular simplex (matching pairs at cosine 1, all
# others at $-1/(B-1)$): $\ln\bigl(1 + (B-1)\, e^{-s B/(B-1)}\bigr)$ (`contrastive_loss_floor`).
# We train the same model again with the scale fixed at 1.
#
# **Thresholds, from the claim.** Alignment works if retrieval is at least ten times chance
# (`MIN_RETRIEVAL` = 0.10) in both directions at every seed with the learned temperature. The
# temperature matters if the runs at $\tau = 1$ retrieve worse on average in both directions.

# %% tags=["nbval-check-output"] tolerance="trained"
CLIP_STEPS = claims07.C27_STEPS  # 250
START = claims07.CLIP_START_SCALE  # 1/0.07 ≈ 14.3, CLIP's initial scale
SCALES = {None: "learned τ", START: "1/τ = 14.3", 1.0: "τ = 1"}
train_pairs = (data.train_images, data.train_labels)
test_pairs = (data.test_images, data.test_labels)


def train_tiny_clip(setting: tuple[float | None, int]) -> dict:
    scale, seed = setting
    return train_clip(train_pairs, test_pairs, seed=seed, steps=CLIP_STEPS, logit_scale=scale)


clip_runs = run_keyed(train_tiny_clip, [(scale, seed) for scale in SCALES for seed in SEEDS],
                      desc="tiny CLIP")  # fmt: skip
retrieval = {
    (scale, direction): spread([clip_runs[scale, s][direction] for s in SEEDS])
    for scale in SCALES
    for direction in ("image_to_text", "text_to_image")
}
floor_at_1 = contrastive_loss_floor(32, 1.0)
final_loss = {
    scale: spread([sum(clip_runs[scale, s]["losses"][-20:]) / 20 for s in SEEDS])
    for scale in SCALES
}
for scale, name in SCALES.items():
    print(f"{name:>10}: image → text {retrieval[scale, 'image_to_text'].format('.2f')}, "
          f"text → image {retrieval[scale, 'text_to_image'].format('.2f')}; "
          f"final loss {final_loss[scale].format('.3f')}")  # fmt: skip
learned_scales = [clip_runs[None, s]["final_scale"] for s in SEEDS]
print(f"learned 1/τ after training: {', '.join(f'{v:.1f}' for v in learned_scales)} "
      f"(start {START:.1f}); lowest possible loss at τ = 1, B = 32: {floor_at_1:.3f}; "
      f"chance loss ln 32 = {math.log(32):.3f}")  # fmt: skip

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
colours = {None: "tab:blue", START: "tab:green", 1.0: "tab:orange"}
for scale, label in SCALES.items():
    for s in SEEDS:
        axes[0].plot(moving_average(clip_runs[scale, s]["losses"], 10), color=colours[scale],
                     lw=1, label=label if s == 0 else None)  # fmt: skip
reference_line(axes[0], math.log(32), "chance: ln 32")
reference_line(axes[0], floor_at_1, "lowest loss possible at τ = 1", color="tab:red")
axes[0].set_title("tiny CLIP training loss (10-step mean, 3 seeds each)")
axes[0].set_xlabel("training step")
axes[0].set_ylabel("symmetric contrastive loss (nats)")
axes[0].legend()
plot_bar_spread(
    {
        f"{arrow}\n{label}": retrieval[scale, direction].values
        for scale, label in SCALES.items()
        for arrow, direction in (
            ("image → text", "image_to_text"),
            ("text → image", "text_to_image"),
        )
    },
    title="C27: retrieval among 100 held-out pairs",
    ylabel="top-1 retrieval accuracy",
    reference=(0.01, "chance (1 in 100)"),
    ax=axes[1],
)
axes[1].tick_params(axis="x", labelsize=8)
fig.tight_layout()


# %% tags=["nbval-check-output"] tolerance="trained"
def both(scale):
    return retrieval[scale, "image_to_text"].values, retrieval[scale, "text_to_image"].values


learned_retrieval = dict(zip(("image_to_text", "text_to_image"), both(None), strict=True))
claims07.assert_c27_clip_aligns(**learned_retrieval)
claims07.assert_c27_temperature_matters(
    learned=both(None), fixed=both(1.0), fixed_losses=final_loss[1.0].values, floor=floor_at_1
)
c27_verdicts = {
    "C27 CLIP": claims07.c27_clip_verdict(**learned_retrieval),
    "C27 τ": claims07.c27_temperature_verdict(learned=both(None), fixed=both(1.0)),
    "C27 τ learned": claims07.c27_learning_verdict(learned=both(None), fixed_large=both(START)),
}
print(c27_verdicts, f"(learning 'helps' by more than LEARN_MARGIN = {claims07.LEARN_MARGIN})")
for claim in c27_verdicts:
    print(sweep_summary(claim))


def retrieval_text(scale) -> str:
    return (f"image → text {retrieval[scale, 'image_to_text'].format('.2f')}, text → image "
            f"{retrieval[scale, 'text_to_image'].format('.2f')}")  # fmt: skip


record_claim(
    "C27 CLIP",
    claim="CLIP aligns paired image and text embeddings by a contrastive loss, after "
    "projecting both to a shared width",
    experiment=f"tiny CLIP (1-layer ViT + 1-layer text encoder, CLIPHead to width 32) on "
    f"two-digit pictures and captions, {CLIP_STEPS} steps, 3 seeds; retrieval among 100 test "
    "pairs",
    verdict=c27_verdicts["C27 CLIP"],
    measured=f"{retrieval_text(None)} (chance 0.01); loss with equal logits "
    f"= ln B to {abs(uniform_loss - math.log(B_CHECK)):.0e}",
)
record_claim(
    "C27 τ",
    claim="Cosine logits need a large scale 1/τ",
    experiment="the same tiny CLIP with 1/τ fixed at 1, 3 seeds",
    verdict=c27_verdicts["C27 τ"],
    measured=f"τ = 1: {retrieval_text(1.0)}; final loss {final_loss[1.0].format('.2f')} ≥ "
    f"floor {floor_at_1:.2f}; learned: {retrieval_text(None)}",
)
record_claim(
    "C27 τ learned",
    claim="Learning the temperature (as CLIP does) helps, over fixing it",
    experiment="the same tiny CLIP with 1/τ fixed at CLIP's start, 1/0.07 ≈ 14.3, 3 seeds",
    verdict=c27_verdicts["C27 τ learned"],
    measured=f"fixed 14.3: {retrieval_text(START)}; learned: {retrieval_text(None)}, ending at "
    f"1/τ {min(learned_scales):.1f}–{max(learned_scales):.1f}",
)

# %% [markdown]
# With the learned temperature the tiny CLIP retrieves the right caption for 0.31 of the
# held-out pictures and the right picture for 0.43 of the captions (chance 0.01), above the
# threshold at every seed, without a class label. With $\tau = 1$ both drop to about 0.2, and
# the loss stalls at 2.73, near the floor that scale allows (2.488) and far from the learned
# runs' 0.99.
#
# A third arm fixes $1/\tau$ at CLIP's starting value, 14.3: retrieval matches the learned
# scale's, which itself only drifts to about 16. So **a large scale is needed**, but learning it
# does not help ("C27 τ learned": not reproduced, by the margin `LEARN_MARGIN` = 0.05, the
# sampling error of 100 test pairs). In CLIP, learning $\tau$ saves a hyper-parameter search.
#
# The small scale cannot show zero-shot transfer, CLIP's reason for being, which needs hundreds
# of millions of web pairs and an open vocabulary; with ten tokens, retrieval here is a matching
# problem. **Verdict on C27: reproduced**, for the cross-attention (with learned queries) and
# the contrastive alignment, at 250 steps and at 750, on both sets of seeds; the scale must be
# large, and learning it did not beat fixing it.
#
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - An image becomes a sequence by cutting it into patches; a reshape alone does not do it
#   (exercise 07.1). Without the convolution's assumptions about images, ViT pays when data is
#   scarce: the CNN led at every training-set size we tried, by less as data grew on most, not
#   all, draws of seeds.
# - Global attention over patches costs exactly a quadratic in their number, with leading
#   coefficient $4 \cdot$ layers $\cdot d$; window attention costs the same per token at every
#   size.
# - Windows are islands unless the grid moves: without the shift a model provably cannot see
#   past a border, and the trained model scored chance exactly there.
# - A fair forecasting comparison needs a split in time, one budget, several seeds, the same
#   read-out and tuning for every model, and a seasonal-naive line to beat. So compared, a tuned
#   LSTM or TCN was as good as the Transformer at every seed and budget we tried; removing
#   attention mostly cost nothing, and which variant wins otherwise changes with the seeds and
#   the budget. A linear model with 888 parameters is a baseline to respect.
# - Cross-attention lets learned queries read image regions; contrastive learning aligns two
#   encoders without labels, provided the scale $1/\tau$ lets the logits be confident — a large
#   fixed scale does as well as a learned one here.
#
# ## Exercises
#
# Your workbook `my-exercises/07_variants_by_task.py` (`make lab` copies it there) has six: cut
# images into patch tokens; write Swin's shifted-window attention; write CLIP's symmetric loss;
# count the attention scores of a ViT layer; write the seasonal-naive forecast; and predict,
# then run, CLIP with its scale fixed at 2. Check your answers in the notebook, or all at once
# with `make check CH=07`.
#
# ## Further reading
#
# - Dosovitskiy et al. (2021), *An Image is Worth 16x16 Words: Transformers for Image
#   Recognition at Scale* — ViT, and its results against data size.
# - Liu et al. (2021), *Swin Transformer: Hierarchical Vision Transformer using Shifted Windows*
#   — window attention, the cyclic shift and its mask, patch merging.
# - Zhou et al. (2021), *Informer: Beyond Efficient Transformer for Long Sequence Time-Series
#   Forecasting* — ProbSparse attention and time-stamp encodings.
# - Zeng, Chen, Zhang, Xu (2023, AAAI; arXiv 2022), *Are Transformers Effective for Time Series
#   Forecasting?* — DLinear and NLinear against the Transformer forecasters.
# - Nie et al. (2023), *A Time Series is Worth 64 Words: Long-term Forecasting with
#   Transformers* — PatchTST: patches and instance normalisation.
# - Bai, Kolter, Koltun (2018), *An Empirical Evaluation of Generic Convolutional and Recurrent
#   Networks for Sequence Modeling* — the TCN.
# - Radford et al. (2021), *Learning Transferable Visual Models From Natural Language
#   Supervision* — CLIP.
# - Alayrac et al. (2022), *Flamingo: a Visual Language Model for Few-Shot Learning* —
#   cross-attention from a language model to image features.
# - Keeling, Whorf (2004), *Atmospheric CO₂ records from sites in the SIO air sampling network*
#   — the source of the Mauna Loa series statsmodels ships.
