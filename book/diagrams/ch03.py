"""Diagram of chapter 3: multi-head attention as split → attend per head → concatenate → W_O,
with the shape at every stage."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import COLORS, arrow, box, caption, new_diagram


def split_attend_concat(d_model: int = 32, num_heads: int = 4, seq_len: int = 12) -> plt.Figure:
    """Project X to Q, K, V; split each into ``num_heads`` heads of width d_k = d_model / h;
    attend within each head; concatenate the heads' outputs back to d_model; mix with W_O.
    Draws every head when there are at most four, else the first two, "⋮" and the last."""
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    d_k, n = d_model // num_heads, seq_len
    shown = list(range(num_heads)) if num_heads <= 4 else [0, 1, None, num_heads - 1]
    fig, ax = new_diagram(
        f"Multi-head attention: split, attend, concatenate, W_O (h = {num_heads})",
        xlim=(0, 18),
        ylim=(0, 6.4),
        width=11.5,
    )
    box(ax, (1.2, 3.2), f"X\n(L, d_model)\n= ({n}, {d_model})", size=(2.1, 1.1),
        color=COLORS["input"])  # fmt: skip
    box(ax, (4.6, 3.2), "Q, K, V\n= X W_Q, X W_K, X W_V\n(L, d_model) each", size=(3.4, 1.2),
        color=COLORS["query"])  # fmt: skip
    arrow(ax, (2.25, 3.2), (2.9, 3.2))
    caption(ax, (7.4, 6.05), f"split the last axis:\n(L, d_model) → (h, L, d_k), d_k = "
            f"{d_model} / {num_heads} = {d_k}", fontsize=8)  # fmt: skip
    ys = [5.1 - i * (4.0 / max(len(shown) - 1, 1)) for i in range(len(shown))]
    for head, y in zip(shown, ys, strict=True):
        if head is None:
            caption(ax, (9.9, y), "⋮", fontsize=14)
            continue
        arrow(ax, (6.3, 3.2), (7.55, y))
        box(ax, (9.9, y), f"head {head}: softmax(Q_{head} K_{head}ᵀ / √{d_k}) V_{head}\n"
            f"(L, d_k) = ({n}, {d_k})", size=(4.7, 0.8), color=COLORS["value"],
            fontsize=8)  # fmt: skip
        arrow(ax, (12.25, y), (12.95, 3.2))
    box(ax, (14.0, 3.2), f"concatenate\n(L, h·d_k)\n= ({n}, {d_model})", size=(2.1, 1.2))
    box(ax, (16.85, 3.2), f"· W_O\n(L, d_model)\n= ({n}, {d_model})", size=(2.0, 1.2),
        color=COLORS["output"])  # fmt: skip
    arrow(ax, (15.05, 3.2), (15.85, 3.2))
    caption(ax, (9.9, 0.35), "each head sees only its own d_k channels; W_O mixes the heads",
            fontsize=8, color="0.35")  # fmt: skip
    return fig
