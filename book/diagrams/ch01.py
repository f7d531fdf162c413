"""Diagrams of chapter 1: the recurrent chain against the attention graph.

The arrows are the dependences the chapter measures: in the RNN, token ``x_j`` reaches the
last state only through every state after it; in self-attention, through one layer.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from book.diagrams import COLORS, arrow, box, caption, new_diagram

N_TOKENS = 6  # x_0 .. x_5


def rnn_chain_vs_attention() -> plt.Figure:
    """Left: an RNN, ``h_t = f(h_(t-1), x_t)``: ``x_0`` reaches the read-out after
    ``N_TOKENS`` cell steps (the cell that reads it, then one per later token). Right: one
    self-attention layer, every token one step from every output."""
    fig, ax = new_diagram(
        "How far token x_0 is from the output at the last position",
        xlim=(0, 15.4),
        ylim=(-0.4, 4.6),
        width=11,
    )
    n, gap = N_TOKENS, 1.1
    # --- the RNN chain
    caption(ax, (3.3, 4.3), f"RNN: a chain ({n} cell steps from x_0 to h_{n - 1})", fontsize=10)
    xs = [0.6 + gap * t for t in range(n)]
    for t, x in enumerate(xs):
        box(ax, (x, 0.4), f"x_{t}", size=(0.8, 0.5), color=COLORS["input"])
        box(ax, (x, 2.2), f"h_{t}", size=(0.8, 0.5), color=COLORS["state"])
        arrow(ax, (x, 0.65), (x, 1.95))
        if t:
            highlight = "tab:red"
            arrow(ax, (xs[t - 1] + 0.4, 2.2), (x - 0.4, 2.2), color=highlight)
    box(ax, (xs[-1], 3.5), "read-out", size=(1.0, 0.5), color=COLORS["output"])
    arrow(ax, (xs[-1], 2.45), (xs[-1], 3.25))
    caption(ax, (3.3, 1.35), "step t waits for step t − 1", fontsize=8, style="italic")
    caption(ax, (3.3, -0.2), "red: the only road from x_0 to the read-out", fontsize=8,
            color="tab:red")  # fmt: skip
    # --- the attention graph
    left = 8.6
    caption(ax, (left + 3.3, 4.3), "self-attention: one layer between any two tokens",
            fontsize=10)  # fmt: skip
    xs = [left + 0.6 + gap * t for t in range(n)]
    for t, x in enumerate(xs):
        box(ax, (x, 0.4), f"x_{t}", size=(0.8, 0.5), color=COLORS["input"])
        box(ax, (x, 2.2), f"y_{t}", size=(0.8, 0.5), color=COLORS["query"])
    for j, xj in enumerate(xs):  # every token feeds the last output directly
        arrow(ax, (xj, 0.65), (xs[-1], 1.95), color="tab:red" if j == 0 else "0.45")
    for xt in xs[:-1]:  # and every other output (drawn faint)
        arrow(ax, (xs[0], 0.65), (xt, 1.95), color="0.8")
    box(ax, (xs[-1], 3.5), "read-out", size=(1.0, 0.5), color=COLORS["output"])
    arrow(ax, (xs[-1], 2.45), (xs[-1], 3.25))
    caption(ax, (left + 3.3, -0.2), "all positions computed at once; weights a_tj decide "
            "how much", fontsize=8)  # fmt: skip
    return fig
