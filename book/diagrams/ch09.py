"""Diagrams of chapter 9: where the LayerNorm sits (Post-LN vs Pre-LN, with Pre-LN's final
LayerNorm after the last layer), and how far one layer of attention, convolution and
recurrence reaches."""

from __future__ import annotations

import matplotlib.pyplot as plt

from book.diagrams import COLORS, arrow, box, caption, new_diagram


def _column(
    ax, x: float, steps: list[tuple[str, str]], title: str, note: str, *, post: bool
) -> None:
    """A residual block drawn bottom to top: ``steps`` = (label, kind) with kind one of
    ``"norm"``, ``"sub"`` (attention or feed-forward), ``"add"``, ``"final"`` (a LayerNorm
    after the stack, drawn dashed off from the block); residual arrows skip each sub-layer
    into the next ``add``. ``post``: the next residual branch starts after the LayerNorm that
    follows an ``add`` (Post-LN); else at the ``add`` itself (Pre-LN)."""
    caption(ax, (x, 9.55), title, fontsize=11)
    caption(ax, (x, 0.25), note, fontsize=8, style="italic")
    y = 1.0
    box(ax, (x, y), "x (input)", size=(1.8, 0.55), color=COLORS["input"])
    centres = []
    for label, kind in steps:
        y += 0.95
        color = {"norm": COLORS["state"], "final": COLORS["state"], "sub": COLORS["query"],
                 "add": COLORS["op"]}[kind]  # fmt: skip
        size = (0.6, 0.5) if kind == "add" else (1.8, 0.55)
        box(ax, (x, y), label, size=size, color=color, fontsize=8 if kind == "final" else 9)
        centres.append((label, kind, y))
    for (_, _, y0), (_, _, y1) in zip([("", "", 1.0), *centres[:-1]], centres, strict=True):
        arrow(ax, (x, y0 + 0.27), (x, y1 - 0.25))
    # residual paths: from the input of each branch to the next "+"
    branch_start = 1.0
    for i, (_, kind, yc) in enumerate(centres):
        if kind == "add":
            arrow(ax, (x - 0.95, branch_start), (x - 0.32, yc), curve=-0.35, color="#2166ac")
            nxt = centres[i + 1] if i + 1 < len(centres) else None
            branch_start = nxt[2] if post and nxt is not None and nxt[1] == "norm" else yc
    if any(kind == "final" for _, kind, _ in centres):
        y_final = centres[-1][2]
        ax.plot([x - 0.95, x + 0.95], [y_final - 0.475] * 2, ls="--", lw=0.8, color="0.5")
        caption(ax, (x + 1.0, y_final), "once, after\nthe last layer", fontsize=7, ha="left",
                color="0.4")  # fmt: skip
    box(ax, (x, y + 0.95), "output", size=(1.8, 0.55), color=COLORS["output"])
    arrow(ax, (x, y + 0.27), (x, y + 0.7))


def layernorm_placement() -> plt.Figure:
    """Post-LN (2017) and Pre-LN encoder layers side by side, with their residual paths."""
    fig, ax = new_diagram(
        "Where the LayerNorm sits: Post-LN (2017) vs Pre-LN", xlim=(0, 10), ylim=(0, 10), width=7
    )
    post = [
        ("self-attention", "sub"),
        ("+", "add"),
        ("LayerNorm", "norm"),
        ("feed-forward", "sub"),
        ("+", "add"),
        ("LayerNorm", "norm"),
    ]
    pre = [
        ("LayerNorm", "norm"),
        ("self-attention", "sub"),
        ("+", "add"),
        ("LayerNorm", "norm"),
        ("feed-forward", "sub"),
        ("+", "add"),
        ("final LayerNorm", "final"),
    ]
    _column(ax, 2.6, post, "Post-LN", "the residual stream is\nnormalised after every block",
            post=True)  # fmt: skip
    _column(
        ax,
        7.4,
        pre,
        "Pre-LN",
        "an identity path runs from the input to the\nfinal LayerNorm, the one norm of the stream",
        post=False,
    )
    caption(ax, (5.0, 5.0), "blue: residual\n(identity) paths", fontsize=8, color="#2166ac")
    return fig


def reach_per_layer() -> plt.Figure:
    """Which inputs one layer's output at the last position can see, for attention, a
    convolution of width 3 and a recurrence (through how many steps)."""
    n = 8
    fig, ax = new_diagram(
        "What one layer lets output position 8 see (8 tokens)", xlim=(0, 12), ylim=(0, 6.6), width=8
    )
    rows = (
        ("attention", list(range(n)), "1 step from every token"),
        ("convolution k=3", [n - 2, n - 1], "itself and x7; the far end needs 7 layers"),
        ("recurrence", list(range(n)), "every token, through up to 7 steps"),
    )
    for r, (name, seen, note) in enumerate(rows):
        y_out, y_in = 5.9 - r * 2.0, 4.9 - r * 2.0
        caption(ax, (1.2, (y_out + y_in) / 2), name, fontsize=9)
        for i in range(n):
            box(ax, (2.8 + i * 1.0, y_in), f"x{i + 1}", size=(0.6, 0.4), color=COLORS["input"],
                fontsize=7)  # fmt: skip
        box(ax, (2.8 + (n - 1) * 1.0, y_out), "y8", size=(0.6, 0.4), color=COLORS["output"],
            fontsize=7)  # fmt: skip
        if name == "recurrence":
            for i in range(n - 1):
                arrow(ax, (2.8 + i + 0.3, y_in), (2.8 + i + 0.7, y_in), color="#b8860b")
            arrow(ax, (2.8 + n - 1, y_in + 0.2), (2.8 + n - 1, y_out - 0.2))
        else:
            for i in seen:
                arrow(ax, (2.8 + i, y_in + 0.2), (2.8 + n - 1, y_out - 0.2), color="0.35")
        caption(ax, (6.3, y_in - 0.45), note, fontsize=8, style="italic")
    return fig
