"""Diagram of chapter 4: RoPE turns a query at position m and a key at position n by mθ and
nθ in each channel pair, so that their dot product sees only the offset (m − n)θ."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from . import caption, new_diagram


def _vector(ax, origin, angle, length, color, label):
    x0, y0 = origin
    x1, y1 = x0 + length * math.cos(angle), y0 + length * math.sin(angle)
    ax.annotate("", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "-|>", "color": color, "lw": 2})
    ax.text(x1 + 0.15 * math.cos(angle), y1 + 0.15 * math.sin(angle), label, color=color,
            ha="center", va="center", fontsize=10)  # fmt: skip


def _arc(ax, origin, start, stop, radius, color, label, fontsize=9):
    angles = np.linspace(start, stop, 40)
    ax.plot(origin[0] + radius * np.cos(angles), origin[1] + radius * np.sin(angles), color=color,
            lw=1.2)  # fmt: skip
    mid = (start + stop) / 2
    r = radius + 0.32
    ax.text(origin[0] + r * math.cos(mid), origin[1] + r * math.sin(mid), label, color=color,
            ha="center", va="center", fontsize=fontsize)  # fmt: skip


def rope_rotation(m: int = 2, n: int = 5, theta: float = 0.35) -> plt.Figure:
    """One channel pair (a 2-D plane) of a query and a key: before RoPE, and after turning the
    query by mθ and the key by nθ; the angle between them changes by (m − n)θ, whatever m and
    n are."""
    fig, ax = new_diagram(
        f"RoPE on one channel pair: q at position m = {m}, k at position n = {n}",
        xlim=(0, 12),
        ylim=(0, 5.4),
        width=9.5,
    )
    q_angle, k_angle, length = 0.25, 1.1, 1.9
    qk_color, rot_color = "tab:orange", "tab:green"
    for centre, title in (((2.8, 2.2), "before: q and k as projected"),
                          ((8.6, 2.2), "after: q turned by mθ, k by nθ")):  # fmt: skip
        circle = plt.Circle(centre, length, fill=False, color="0.8", lw=0.8)
        ax.add_patch(circle)
        ax.plot([centre[0] - 2.3, centre[0] + 2.3], [centre[1]] * 2, color="0.85", lw=0.8)
        ax.plot([centre[0]] * 2, [centre[1] - 2.1, centre[1] + 2.3], color="0.85", lw=0.8)
        caption(ax, (centre[0], 5.05), title, fontsize=9)
    left, right = (2.8, 2.2), (8.6, 2.2)
    _vector(ax, left, q_angle, length, qk_color, "q")
    _vector(ax, left, k_angle, length, rot_color, "k")
    _arc(ax, left, q_angle, k_angle, 0.7, "0.3", "φ")
    q_turned, k_turned = q_angle + m * theta, k_angle + n * theta
    _vector(ax, right, q_turned, length, qk_color, "q turned")
    _vector(ax, right, k_turned, length, rot_color, "k turned")
    _arc(ax, right, q_angle, q_turned, 1.45, qk_color, "mθ", fontsize=8)
    _arc(ax, right, k_angle, k_turned, 1.15, rot_color, "nθ", fontsize=8)
    _arc(ax, right, q_turned, k_turned, 0.55, "0.3", "φ − (m − n)θ", fontsize=8)
    caption(ax, (6.0, 0.15), "q · k depends on the angle between them: φ − (m − n)θ, a function of "
            "the offset m − n only", fontsize=8, color="0.3")  # fmt: skip
    return fig
