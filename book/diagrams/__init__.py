"""Schematic diagrams, drawn by code so that they cannot drift from the text.

Each chapter's diagrams live in ``book/diagrams/chNN.py`` as functions that take no required
argument and return a matplotlib ``Figure`` with a title (``tests/book/test_diagrams.py``
renders every one of them). They are built from the few primitives here:

- :func:`new_diagram`: a blank canvas in data coordinates, axes hidden, with a title;
- :func:`box`: a labelled rounded box (a layer, an operation, a token);
- :func:`arrow`: an arrow between two points, optionally labelled and curved;
- :func:`grid`: a matrix of cells coloured by value (a mask, a layout, a tensor), with an
  optional caption for its shape;
- :func:`caption`: free text.

Coordinates are plain numbers in the canvas's own units: ``new_diagram(..., xlim=(0, 10),
ylim=(0, 4))`` gives a 10 × 4 canvas.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

# Fill colours used across the book's diagrams (one meaning each, everywhere).
COLORS = {
    "input": "#dbe9f6",  # tokens, embeddings, data
    "query": "#f9d8b5",  # queries and the heads' outputs
    "key": "#cfe8cf",  # keys
    "value": "#e3d3ef",  # values
    "op": "#f2f2f2",  # an operation (matmul, softmax, ...)
    "state": "#fde9a9",  # a recurrent state
    "output": "#f6c7c7",  # results
}


def new_diagram(
    title: str,
    *,
    xlim: tuple[float, float] = (0.0, 10.0),
    ylim: tuple[float, float] = (0.0, 4.0),
    width: float = 8.0,
) -> tuple[plt.Figure, plt.Axes]:
    """A blank canvas ``xlim × ylim`` (equal aspect), axes hidden, titled; ``width`` inches."""
    if not isinstance(title, str) or not title:
        raise ValueError(f"title must be a non-empty string, got {title!r}")
    (x0, x1), (y0, y1) = xlim, ylim
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"xlim and ylim must be increasing, got xlim={xlim}, ylim={ylim}")
    height = width * (y1 - y0) / (x1 - x0) + 0.5  # room for the title
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title)
    return fig, ax


def box(
    ax: plt.Axes,
    center: tuple[float, float],
    text: str,
    *,
    size: tuple[float, float] = (1.6, 0.7),
    color: str = COLORS["op"],
    fontsize: float = 9,
    edgecolor: str = "0.3",
) -> tuple[float, float]:
    """A rounded box of ``size`` centred at ``center`` holding ``text``; returns the centre."""
    (cx, cy), (w, h) = center, size
    patch = FancyBboxPatch(
        (cx - w / 2, cy - h / 2),
        w,
        h,
        boxstyle="round,pad=0.02,rounding_size=0.08",
        facecolor=color,
        edgecolor=edgecolor,
        linewidth=1.0,
    )
    ax.add_patch(patch)
    ax.text(cx, cy, text, ha="center", va="center", fontsize=fontsize)
    return (cx, cy)


def arrow(
    ax: plt.Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    *,
    text: str | None = None,
    curve: float = 0.0,
    color: str = "0.25",
    style: str = "-|>",
    linestyle: str = "-",
    fontsize: float = 8,
) -> None:
    """An arrow from ``start`` to ``end``; ``curve`` bends it (0 = straight); ``text`` labels
    its middle."""
    patch = FancyArrowPatch(
        start,
        end,
        arrowstyle=style,
        mutation_scale=10,
        color=color,
        linewidth=1.1,
        linestyle=linestyle,
        connectionstyle=f"arc3,rad={curve}",
        shrinkA=2,
        shrinkB=2,
    )
    ax.add_patch(patch)
    if text:
        (x0, y0), (x1, y1) = start, end
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        # Offset the label to the side the curve bulges to.
        dx, dy = x1 - x0, y1 - y0
        mx, my = mx - curve * dy / 2, my + curve * dx / 2
        ax.text(mx, my, text, ha="center", va="bottom", fontsize=fontsize, color=color)


def grid(
    ax: plt.Axes,
    origin: tuple[float, float],
    values: Sequence[Sequence[float]] | np.ndarray,
    *,
    cell: float = 0.3,
    cmap: str = "Blues",
    vmin: float = 0.0,
    vmax: float = 1.0,
    caption: str | None = None,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    fontsize: float = 7,
) -> tuple[float, float]:
    """A matrix of square cells with its top-left corner at ``origin``, coloured by
    ``values`` (rows top to bottom); returns the bottom-right corner. ``caption`` goes under
    it (e.g. its shape, ``"(Lq, Lk)"``)."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"values must be a non-empty 2-D matrix, got shape {arr.shape}")
    rows, cols = arr.shape
    x0, y0 = origin
    colormap = plt.get_cmap(cmap)
    span = (vmax - vmin) or 1.0
    for r in range(rows):
        for c in range(cols):
            shade = colormap(0.1 + 0.85 * float(np.clip((arr[r, c] - vmin) / span, 0, 1)))
            ax.add_patch(
                plt.Rectangle(
                    (x0 + c * cell, y0 - (r + 1) * cell),
                    cell,
                    cell,
                    facecolor=shade,
                    edgecolor="white",
                    linewidth=0.6,
                )
            )
    if row_labels is not None:
        for r, label in enumerate(row_labels):
            ax.text(x0 - 0.08, y0 - (r + 0.5) * cell, str(label), ha="right", va="center",
                    fontsize=fontsize)  # fmt: skip
    if col_labels is not None:
        for c, label in enumerate(col_labels):
            ax.text(x0 + (c + 0.5) * cell, y0 + 0.08, str(label), ha="center", va="bottom",
                    fontsize=fontsize)  # fmt: skip
    x1, y1 = x0 + cols * cell, y0 - rows * cell
    if caption:
        ax.text((x0 + x1) / 2, y1 - 0.12, caption, ha="center", va="top", fontsize=fontsize + 1)
    return (x1, y1)


def caption(
    ax: plt.Axes,
    xy: tuple[float, float],
    text: str,
    *,
    fontsize: float = 9,
    ha: str = "center",
    color: str = "0.15",
    style: str = "normal",
) -> None:
    """Free text at ``xy``."""
    ax.text(xy[0], xy[1], text, ha=ha, va="center", fontsize=fontsize, color=color, style=style)
