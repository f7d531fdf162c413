"""Diagrams of chapter 10: the capstone model, and what each attention kind lets a patch see.

- :func:`capstone_pipeline`: a digit cut into 16 patches, embedded, given positions, encoded,
  pooled and classified — with the two places the chapter swaps a part marked.
- :func:`reach_in_the_image`: for one patch, the patches it may attend to under each attention
  kind, drawn on the 4 × 4 grid of the image (reading order is not 2-D distance).
"""

from __future__ import annotations

import numpy as np
import torch

from book.data import digits
from book.diagrams import COLORS, arrow, box, caption, grid, new_diagram
from book.pages.ch10 import BLOCK, GRID, PATCH_SIZE, SEQ_LEN, WINDOW, allowed_pairs

__all__ = ["capstone_pipeline", "reach_in_the_image"]


def _example_digit() -> np.ndarray:
    """The first test image of the split (a real digit, 8 × 8, values in [0, 1])."""
    return digits().test_images[0].numpy()


def capstone_pipeline():
    """The capstone: image → patches → tokens → positions → encoder → mean → logits."""
    fig, ax = new_diagram(
        "Chapter 10's capstone: a digit read as 16 patch tokens", xlim=(0, 16), ylim=(0, 6.2),
        width=11,
    )  # fmt: skip
    image = _example_digit()
    corner = grid(ax, (0.3, 5.0), image, cell=0.36, cmap="Greys", caption="image 8 × 8")
    for k in range(1, GRID):  # patch boundaries
        x = 0.3 + k * PATCH_SIZE * 0.36
        ax.plot([x, x], [5.0, corner[1]], color=COLORS["output"], lw=1.2)
        y = 5.0 - k * PATCH_SIZE * 0.36
        ax.plot([0.3, corner[0]], [y, y], color=COLORS["output"], lw=1.2)
    order = np.arange(SEQ_LEN).reshape(GRID, GRID)
    grid(ax, (4.0, 4.6), np.zeros((GRID, GRID)), cell=0.4, cmap="Blues",
         caption="16 patches of 2 × 2")  # fmt: skip
    for r in range(GRID):
        for c in range(GRID):
            ax.text(4.0 + (c + 0.5) * 0.4, 4.6 - (r + 0.5) * 0.4, str(order[r, c]), ha="center",
                    va="center", fontsize=7)  # fmt: skip
    arrow(ax, (corner[0] + 0.1, 3.6), (3.9, 3.8), text="cut")
    caption(ax, (4.8, 2.55), "reading order: left to right, top to bottom", fontsize=7)

    steps = [
        ((8.2, 5.2), "patch embedding\nlinear 4 → 32", COLORS["input"]),
        ((8.2, 4.0), "+ positions\nsinusoidal · learned · none", COLORS["state"]),
        ((8.2, 2.5), "pre-LN encoder layer × 2\nLN → attention → +\nLN → feed-forward → +",
         COLORS["query"]),
        ((8.2, 1.0), "LayerNorm, mean over\nthe 16 tokens", COLORS["op"]),
        ((12.6, 1.0), "linear head\n10 logits", COLORS["output"]),
    ]  # fmt: skip
    sizes = [(2.8, 0.8), (2.8, 0.8), (2.8, 1.2), (2.8, 0.8), (2.2, 0.8)]
    centers = [
        box(ax, xy, text, size=size, color=color, fontsize=8)
        for (xy, text, color), size in zip(steps, sizes, strict=True)
    ]
    arrow(ax, (5.7, 3.8), (6.75, 5.1))
    for a, b in zip(centers[:3], centers[1:4], strict=True):
        arrow(ax, (a[0], a[1] - 0.45), (b[0], b[1] + 0.45 if b is not centers[2] else b[1] + 0.65))
    arrow(ax, (9.65, 1.0), (11.45, 1.0))
    box(ax, (12.9, 4.0), "swap 1: positions\n(RoPE and ALiBi act\ninside attention)",
        size=(2.9, 1.0), color=COLORS["state"], fontsize=8)  # fmt: skip
    box(ax, (12.9, 2.6), "swap 2: attention kind\nfull · window ±4 ·\nlinear · block-sparse",
        size=(2.9, 1.0), color=COLORS["query"], fontsize=8)  # fmt: skip
    arrow(ax, (11.4, 4.0), (9.65, 4.0), linestyle="--")
    arrow(ax, (11.4, 2.6), (9.65, 2.6), linestyle="--")
    return fig


def reach_in_the_image(query: int = 5):
    """Which patches patch ``query`` may attend to, per attention kind, on the 4 × 4 grid."""
    if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < SEQ_LEN:
        raise ValueError(f"query must be a patch index in [0, {SEQ_LEN}), got {query!r}")
    r0, c0 = divmod(query, GRID)
    rows = torch.arange(SEQ_LEN) // GRID
    cols = torch.arange(SEQ_LEN) % GRID
    neighbours = ((rows - r0).abs() <= 1) & ((cols - c0).abs() <= 1)  # 2-D 3 × 3
    panels = [
        ("full / linear", allowed_pairs("full")[query]),
        (f"window ±{WINDOW} (reading order)", allowed_pairs("window")[query]),
        (f"block-sparse, blocks of {BLOCK}", allowed_pairs("block-sparse")[query]),
        ("the 3 × 3 neighbours in 2-D", neighbours),
    ]
    fig, ax = new_diagram(
        f"What patch {query} may attend to, drawn on the image's 4 × 4 grid of patches",
        xlim=(0, 14), ylim=(0, 3.4), width=10,
    )  # fmt: skip
    for p, (name, row) in enumerate(panels):
        x0 = 0.6 + p * 3.4
        values = row.reshape(GRID, GRID).float().numpy() * 0.8
        grid(ax, (x0, 2.7), values, cell=0.5, cmap="Blues", caption=name)
        qx, qy = x0 + (c0 + 0.5) * 0.5, 2.7 - (r0 + 0.5) * 0.5
        ax.text(qx, qy, "q", ha="center", va="center", fontsize=9, color="white",
                fontweight="bold")  # fmt: skip
    caption(ax, (7.0, 0.15), "dark = may attend; q = the query patch", fontsize=8)
    return fig
