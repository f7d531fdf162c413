"""Diagrams of chapter 7: an image cut into patch tokens, regular and shifted windows, and
CLIP's contrastive matrix."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import COLORS, arrow, box, caption, grid, new_diagram


def patches_to_tokens() -> plt.Figure:
    """A 4 × 4 grid of patches read row by row into a sequence, with [CLS] in front."""
    fig, ax = new_diagram(
        "ViT: an image becomes a sequence of patch tokens", xlim=(0, 14), ylim=(0, 5.2)
    )
    values = np.arange(16).reshape(4, 4) / 15
    grid(ax, (0.4, 4.6), values, cell=0.9, cmap="Blues", caption="image, 4 × 4 patches")
    for n in range(16):
        r, c = divmod(n, 4)
        ax.text(0.85 + 0.9 * c, 4.15 - 0.9 * r, str(n), ha="center", va="center", fontsize=8)
    arrow(ax, (4.2, 2.8), (5.5, 2.8))
    caption(ax, (4.85, 3.25), "flatten,\n× W_E", fontsize=8)
    box(ax, (6.1, 2.8), "[CLS]", size=(0.8, 0.6), color=COLORS["output"], fontsize=8)
    for n in range(8):
        label = str(n) if n < 7 else "…15"
        box(ax, (7.0 + 0.85 * n, 2.8), label, size=(0.7, 0.6), color=COLORS["input"], fontsize=8)
    caption(ax, (9.6, 3.7), "+ a learned position embedding per slot", fontsize=8)
    arrow(ax, (9.6, 2.4), (9.6, 1.5))
    box(ax, (9.6, 1.0), "Transformer encoder (every token attends to every token)",
        size=(7.6, 0.7), color=COLORS["op"], fontsize=8)  # fmt: skip
    caption(ax, (9.6, 0.25), "N = (S / p)² tokens: scores ∝ N² = (S / p)⁴", fontsize=8)
    return fig


def _window_labels(side: int, window: int, shift: int) -> np.ndarray:
    """Window id of every cell, for windows offset by ``shift`` (no wrap-around)."""
    rows = (np.arange(side) + shift) // window
    return rows[:, None] * (side // window + 1) + rows[None, :]


def shifted_windows() -> plt.Figure:
    """An 8 × 8 token map: regular 4 × 4 windows, then windows shifted by 2, where the cells
    that wrap around (cyclic shift) are kept apart by the region mask."""
    fig, ax = new_diagram(
        "Swin: regular windows, then windows shifted by half a window", xlim=(0, 13), ylim=(-0.6, 6)
    )
    cell = 0.6
    for offset, shift, title in ((0.6, 0, "layer l: regular 4 × 4 windows"),
                                 (7.0, 2, "layer l + 1: shifted by 2")):  # fmt: skip
        labels = _window_labels(8, 4, shift)
        grid(ax, (offset, 5.4), (labels % 5) / 4, cell=cell, cmap="Pastel1", vmin=0, vmax=1)
        caption(ax, (offset + 4 * cell, 0.35), title, fontsize=9)
        # window borders
        edges = [0, 8] + [b for b in range(1, 8) if (b + shift) % 4 == 0]
        for e in edges:
            x = offset + e * cell
            ax.plot([x, x], [5.4, 5.4 - 8 * cell], color="0.2", lw=1.6)
            y = 5.4 - e * cell
            ax.plot([offset, offset + 8 * cell], [y, y], color="0.2", lw=1.6)
    ax.plot(offset + 3.5 * cell, 5.4 - 3.5 * cell, "o", color="tab:red", ms=6)
    ax.plot(0.6 + 3.5 * cell, 5.4 - 3.5 * cell, "o", color="tab:red", ms=6)
    caption(ax, (6.35, 3.0), "→", fontsize=18)
    caption(ax, (6.4, 5.75), "the red token's window now reaches across the old border",
            fontsize=8)  # fmt: skip
    caption(ax, (9.4, -0.15), "(cyclic shift: the edge pieces are rolled into whole windows;\n"
            "a mask keeps cells that were not neighbours apart)", fontsize=7)  # fmt: skip
    return fig


def clip_contrastive() -> plt.Figure:
    """Two encoders, a shared width, and the B × B similarity matrix whose diagonal holds the
    matching pairs."""
    fig, ax = new_diagram(
        "CLIP: match each image to its caption within the batch", xlim=(0, 13), ylim=(0, 5)
    )
    box(ax, (1.2, 3.8), "images", size=(1.6, 0.6), color=COLORS["input"])
    box(ax, (1.2, 1.2), "captions", size=(1.6, 0.6), color=COLORS["input"])
    box(ax, (3.6, 3.8), "image encoder\n+ projection", size=(2.2, 0.8), color=COLORS["query"])
    box(ax, (3.6, 1.2), "text encoder\n+ projection", size=(2.2, 0.8), color=COLORS["key"])
    arrow(ax, (2.0, 3.8), (2.5, 3.8))
    arrow(ax, (2.0, 1.2), (2.5, 1.2))
    arrow(ax, (4.7, 3.8), (6.3, 3.2))
    arrow(ax, (4.7, 1.2), (6.3, 1.8))
    caption(ax, (5.3, 2.5), "unit vectors\nof one width", fontsize=8)
    values = np.eye(5) * 0.9 + 0.05
    grid(ax, (7.3, 4.1), values, cell=0.65, cmap="Oranges",
         row_labels=[f"img {i}" for i in range(5)], col_labels=[f"txt {j}" for j in range(5)],
         caption="logits = cos(img_i, txt_j) / τ")  # fmt: skip
    caption(ax, (11.0, 2.5), "softmax over each row\nand each column;\nthe diagonal is right",
            fontsize=8, ha="left")  # fmt: skip
    return fig
