"""Diagrams of chapter 5: which keys a query may see under each remedy, and how far a
window reaches after several layers.

The masks are the real ones: :meth:`allowed` of the library's adapters
(:mod:`attention.efficient.adapters`), drawn for a short sequence so that every cell shows.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from attention.efficient.adapters import BigBirdAttnFn, LinearAttnFn, SlidingWindowAttnFn
from book.diagrams import caption, grid, new_diagram
from book.pages.ch05 import reach_after

L = 16  # tokens in the drawings


def attention_patterns() -> plt.Figure:
    """The ``(L, L)`` may-attend masks of full attention, a ±2 window, the window with one
    global token, BigBird (blocks of 2) and linear attention (every pair, no table)."""
    patterns = {
        "full: n² scores": torch.ones(L, L, dtype=torch.bool),
        "window ±2": SlidingWindowAttnFn(2, 2).allowed(L),
        "window ±2 + global token 8": SlidingWindowAttnFn(2, 2, global_tokens=(8,)).allowed(L),
        "BigBird, blocks of 2": BigBirdAttnFn(2, n_window=1, n_global=1, n_random=1).allowed(L),
        "linear: every pair": LinearAttnFn().allowed(L),
    }
    cell = 0.16
    fig, ax = new_diagram(
        f"Which keys each query may attend to (L = {L}; dark = may attend)",
        xlim=(0, 17.2),
        ylim=(-1.5, 3.4),
        width=12,
    )
    for i, (name, mask) in enumerate(patterns.items()):
        x0 = 0.5 + i * 3.4
        grid(ax, (x0, 2.9), mask.float().numpy(), cell=cell, cmap="Blues", caption=name)
        kept = int(mask.sum())
        caption(ax, (x0 + L * cell / 2, -0.35), f"{kept} of {L * L} pairs", fontsize=8)
    linear_note = "weights φ(q)·φ(k): rank ≤ d,\ncomputed as φ(Q)(φ(K)ᵀV), no table"
    caption(ax, (0.5 + 4 * 3.4 + L * cell / 2, -0.85), linear_note, fontsize=7)
    caption(ax, (0.3, 3.15), "rows: queries, columns: keys", ha="left", fontsize=7)
    return fig


def window_reach_by_depth() -> plt.Figure:
    """What the last query of a ±2 window model can depend on after 1, 2 and 3 layers: each
    layer lets information move one window further (the boolean mask multiplied by itself),
    and a global token in the middle relays everything in two layers."""
    window = SlidingWindowAttnFn(2, 2).allowed(L)  # (L, L) bool
    glob = SlidingWindowAttnFn(2, 2, global_tokens=(8,)).allowed(L)
    rows, names = [], []
    for name, mask in (("window ±2", window), ("+ global token 8", glob)):
        for depth in (1, 2, 3):
            reach = reach_after(mask, depth)  # (L, L): depends on, after `depth` layers
            rows.append(reach[-1].float().numpy())
            names.append(f"{name}, {depth} layer{'s' if depth > 1 else ''}")
    cell = 0.36
    fig, ax = new_diagram(
        "Reach grows with depth: inputs the last position depends on",
        xlim=(0, 10.5),
        ylim=(-0.9, 3.0),
        width=10,
    )
    grid(
        ax,
        (4.2, 2.4),
        rows,
        cell=cell,
        cmap="Oranges",
        row_labels=names,
        col_labels=[str(j) for j in range(L)],
        caption="input position j (dark: reached)",
    )
    caption(ax, (7.1, -0.55), "window: 2 more positions per layer; a global token relays "
            "everything in 2 layers", fontsize=8)  # fmt: skip
    return fig
