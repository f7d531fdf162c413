"""Diagram of chapter 2: scaled dot-product self-attention in five steps, with the shape of
every intermediate."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import COLORS, arrow, box, caption, new_diagram


def five_steps(seq_len: int = 10, d_model: int = 16, d_k: int = 8, d_v: int = 8) -> plt.Figure:
    """X → (1) Q, K, V → (2) S = QKᵀ → (3) S / √d_k → (4) row softmax A → (5) Z = AV, then W_O;
    every box carries its shape for the given sizes (the chapter's running example by
    default: L = 10 tokens, d_model = 16, d_k = d_v = 8)."""
    n = seq_len
    fig, ax = new_diagram(
        "Self-attention in five steps (shapes for one sequence)",
        xlim=(0, 18),
        ylim=(0, 5.6),
        width=11.5,
    )
    box(ax, (1.2, 2.8), f"X\n(L, d_model)\n= ({n}, {d_model})", size=(2.1, 1.1),
        color=COLORS["input"])  # fmt: skip
    rows = {"Q": (4.5, COLORS["query"], d_k, "d_k"), "K": (2.8, COLORS["key"], d_k, "d_k"),
            "V": (1.1, COLORS["value"], d_v, "d_v")}  # fmt: skip
    for name, (y, color, width, wname) in rows.items():
        box(ax, (4.6, y), f"{name} = X W_{name}\n(L, {wname}) = ({n}, {width})", size=(2.9, 0.9),
            color=color)  # fmt: skip
        arrow(ax, (2.25, 2.8), (3.15, y))
    caption(ax, (4.6, 5.35), "① project", fontsize=9, style="italic")
    box(ax, (8.3, 3.65), f"S = Q Kᵀ\n(L, L) = ({n}, {n})", size=(2.6, 0.9))
    arrow(ax, (6.05, 4.5), (7.0, 3.85))
    arrow(ax, (6.05, 2.8), (7.0, 3.45))
    caption(ax, (8.3, 4.45), "② score", fontsize=9, style="italic")
    box(ax, (11.4, 3.65), f"S / √d_k\n√{d_k} ≈ {d_k**0.5:.2f}", size=(2.2, 0.9))
    arrow(ax, (9.6, 3.65), (10.3, 3.65))
    caption(ax, (11.4, 4.45), "③ scale", fontsize=9, style="italic")
    box(ax, (14.9, 3.65), "A = softmax(·) per row\n(L, L), rows sum to 1", size=(3.4, 0.9))
    arrow(ax, (12.5, 3.65), (13.2, 3.65))
    caption(ax, (14.9, 4.45), "④ normalise", fontsize=9, style="italic")
    box(ax, (12.4, 1.1), f"Z = A V\n(L, d_v) = ({n}, {d_v})", size=(2.7, 0.9),
        color=COLORS["output"])  # fmt: skip
    arrow(ax, (14.9, 3.2), (13.75, 1.35))
    arrow(ax, (6.05, 1.1), (11.05, 1.1))
    caption(ax, (12.4, 1.9), "⑤ mix the values", fontsize=9, style="italic")
    box(ax, (16.5, 1.1), f"Z W_O\n(L, d_model)\n= ({n}, {d_model})", size=(2.1, 1.1),
        color=COLORS["output"])  # fmt: skip
    arrow(ax, (13.75, 1.1), (15.45, 1.1))
    caption(ax, (9.0, 0.25), "no step loops over positions: every row is computed at once",
            fontsize=8, color="0.35")  # fmt: skip
    return fig
