"""Diagrams of chapter 8: torch's weight layout, and where the data goes under each head layout.

The layout diagrams apply the real split and merge functions of
:data:`book.pages.ch08.LAYOUTS` to a tensor of labels, so they show what the code does.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import torch

from book.diagrams import COLORS, arrow, box, caption, grid, new_diagram
from book.pages.ch08 import CORRECT, LAYOUTS, source_map

# A tiny example: 4 tokens of 6 features, 2 heads of 3.
L, D, H = 4, 6, 2
TOKEN_CMAP = "Pastel1"  # colour = token (qualitative)


def _labelled_grid(ax, origin, colours, labels, *, cell, cmap, vmax, caption_text=None):
    """A grid coloured by ``colours`` with the integer ``labels`` written in the cells."""
    grid(ax, origin, colours, cell=cell, cmap=cmap, vmin=0, vmax=vmax, caption=caption_text)
    x0, y0 = origin
    for r, row in enumerate(np.asarray(labels)):
        for c, value in enumerate(row):
            caption(ax, (x0 + (c + 0.5) * cell, y0 - (r + 0.5) * cell), str(value), fontsize=7)


def weight_layout() -> plt.Figure:
    """``nn.MultiheadAttention``'s packed weights and the four projections they stand for."""
    d, h = 6, 2
    dh = d // h
    cell = 0.22
    fig, ax = new_diagram(
        "nn.MultiheadAttention's weights: in_proj_weight = [W_Q; W_K; W_V] by rows",
        xlim=(0, 15),
        ylim=(-0.6, 5.3),
        width=10,
    )
    top = 4.6
    heads = np.repeat(np.arange(h), dh)[:, None].repeat(d, axis=1) / max(h - 1, 1)  # (D, D)
    blocks = (
        ("W_Q", "Oranges", "q_proj"),
        ("W_K", "Greens", "k_proj"),
        ("W_V", "Purples", "v_proj"),
    )
    caption(ax, (1.6, top + 0.3), "in_proj_weight\n(3D, D)", fontsize=8)
    caption(ax, (3.31, top + 0.3), "in_proj_bias\n(3D,)", fontsize=8)
    for i, (name, cmap, proj) in enumerate(blocks):
        y = top - i * d * cell
        grid(ax, (0.95, y), 0.3 + 0.5 * heads, cell=cell, cmap=cmap)
        grid(ax, (3.2, y), 0.3 + 0.5 * heads[:, :1], cell=cell, cmap=cmap)
        for j in range(h):
            caption(ax, (0.45, y - (j + 0.5) * dh * cell), f"{name}\nhead {j}", fontsize=7)
        mid = y - d * cell / 2
        rows = ("0 … D−1", "D … 2D−1", "2D … 3D−1")[i]
        arrow(ax, (3.6, mid), (6.0, mid), text=f"rows {rows}")
        box(ax, (7.6, mid), f"{proj}.weight (D, D)\n{proj}.bias (D,)", size=(2.9, 0.75),
            color=COLORS["query" if i == 0 else "key" if i == 1 else "value"])  # fmt: skip
    y_out = top - 3 * d * cell - 0.25
    grid(ax, (0.95, y_out), 0.3 + 0.5 * heads.T, cell=cell, cmap="Reds")
    caption(ax, (1.6, y_out - d * cell - 0.2), "out_proj.weight (D, D):\ncolumns of head h",
            fontsize=8)  # fmt: skip
    arrow(ax, (2.4, y_out - d * cell / 2), (6.0, y_out - d * cell / 2), text="as is")
    box(ax, (7.6, y_out - d * cell / 2), "out_proj.weight, .bias", size=(2.9, 0.6),
        color=COLORS["output"])  # fmt: skip
    notes = (
        "nn.Linear stores (out, in): x @ W_Q = x @ q_proj.weight.T",
        "head h = rows h·Dh … (h+1)·Dh − 1 of each block",
        "batch_first=False (default): x is (L, B, D)",
        "need_weights=True (default): weights averaged over heads",
        "attn_mask / key_padding_mask: True = blocked",
    )
    for i, note in enumerate(notes):
        caption(ax, (9.3, 4.3 - 0.55 * i), note, fontsize=8, ha="left")
    return fig


def _split_panels() -> list[tuple[str, str, torch.Tensor]]:
    """(label, code, source map) for each distinct split, the correct one first."""
    seen, panels = set(), []
    for name, layout in LAYOUTS.items():
        if layout.split_code in seen:
            continue
        seen.add(layout.split_code)
        panels.append((name, layout.split_code, source_map(name, L, D, H)))
    return panels


def split_layouts() -> plt.Figure:
    """Which token (colour) and feature (number) lands in which head, for each split."""
    panels = _split_panels()
    cell = 0.36
    row_h = 2.35
    fig, ax = new_diagram(
        "Where the data goes: x (4 tokens × 6 features) split into 2 heads",
        xlim=(0, 14),
        ylim=(-row_h * len(panels) + 0.2, 2.5),
        width=10,
    )
    tokens = torch.arange(L)[:, None].expand(L, D)
    features = torch.arange(D)[None, :].expand(L, D)
    _labelled_grid(ax, (0.9, 2.1), tokens, features, cell=cell, cmap=TOKEN_CMAP, vmax=L)
    for t in range(L):
        caption(ax, (0.6, 2.1 - (t + 0.5) * cell), f"token {t}", fontsize=7, ha="right")
    caption(ax, (4.3, 1.4), "x: colour = token, number = feature", fontsize=9, ha="left")
    for i, (name, code, where) in enumerate(panels):
        y = -row_h * i
        caption(ax, (0.1, y - 0.05), f"{name}: {code}", fontsize=9, ha="left")
        n_blocks = where.shape[0]  # heads as the attention sees them
        for j in range(n_blocks):
            x0 = 0.9 + j * (where.shape[2] * cell + 0.35)
            block = where[j]  # (positions, Dh, 2)
            _labelled_grid(ax, (x0, y - 0.3), block[..., 0], block[..., 1], cell=cell,
                           cmap=TOKEN_CMAP, vmax=L)  # fmt: skip
            label = f"head {j}" if n_blocks == H else f"token {j}"  # no transpose: L blocks
            caption(ax, (x0 + where.shape[2] * cell / 2, y - 0.3 - block.shape[0] * cell - 0.15),
                    label, fontsize=7)  # fmt: skip
        if name != CORRECT:
            caption(ax, (13.9, y - 0.7), LAYOUTS[name].effect, fontsize=7, ha="right",
                    style="italic")  # fmt: skip
    return fig


def merge_layouts() -> plt.Figure:
    """Where each head's output (colour: head, number: position) lands after the merge."""
    names = (CORRECT, "reshape merge", "no contiguous")  # the merges of a (B, H, L, Dh) tensor
    cell = 0.36
    row_h = 2.0
    fig, ax = new_diagram(
        "Merging 2 heads (4 positions × 3 features) back into 4 tokens × 6 features",
        xlim=(0, 14),
        ylim=(-row_h * len(names) + 0.4, 2.3),
        width=10,
    )
    head = torch.arange(H).view(1, H, 1, 1).expand(1, H, L, D // H)  # (1, H, L, Dh)
    position = torch.arange(L).view(1, 1, L, 1).expand(1, H, L, D // H)
    for j in range(H):
        x0 = 0.9 + j * (D // H * cell + 0.35)
        _labelled_grid(ax, (x0, 2.1), head[0, j], position[0, j], cell=cell, cmap="coolwarm",
                       vmax=H - 1)  # fmt: skip
        caption(ax, (x0 + D // H * cell / 2, 2.1 - L * cell - 0.15), f"head {j}", fontsize=7)
    caption(ax, (4.3, 1.4), "the heads' outputs: colour = head, number = position", fontsize=9,
            ha="left")  # fmt: skip
    for i, name in enumerate(names):
        layout = LAYOUTS[name]
        y = -row_h * i
        caption(ax, (0.1, y - 0.05), f"{name}: {layout.merge_code}", fontsize=9, ha="left")
        try:
            h_map = layout.merge(head.contiguous(), 1, L, D)[0]  # (L, D)
            p_map = layout.merge(position.contiguous(), 1, L, D)[0]
        except RuntimeError as err:
            message = textwrap.fill(f"RuntimeError: {str(err).split(';')[0]}", width=70)
            box(ax, (5.0, y - 0.9), message, size=(9.0, 0.8), color=COLORS["output"], fontsize=8)
            continue
        _labelled_grid(ax, (0.9, y - 0.3), h_map, p_map, cell=cell, cmap="coolwarm", vmax=H - 1)
        for t in range(L):
            caption(ax, (0.6, y - 0.3 - (t + 0.5) * cell), f"token {t}", fontsize=7, ha="right")
        caption(ax, (13.9, y - 0.9), layout.effect if name != CORRECT else
                "token t gets position t of every head", fontsize=7, ha="right",
                style="italic")  # fmt: skip
    return fig
