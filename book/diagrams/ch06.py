"""Diagrams of chapter 6: FlashAttention's tiling, and decoding with a KV cache.

- :func:`flash_tiling`: the score matrix cut into tiles; one query block walks over the key
  blocks with a running max ``m``, a running sum ``l`` and an unnormalised accumulator, and
  never holds more than one tile of scores.
- :func:`kv_cache_decoding`: one decoding step with a cache: the new token's query reads every
  cached key and value; only its own key and value are computed and appended. With GQA / MQA
  the cache holds fewer key/value heads.
"""

from __future__ import annotations

import numpy as np

from book.diagrams import COLORS, arrow, box, caption, grid, new_diagram

__all__ = ["flash_tiling", "kv_cache_decoding"]


def flash_tiling(n_blocks: int = 4, active_row: int = 2):
    """The ``n_blocks × n_blocks`` tiles of ``S = Q Kᵀ``; row ``active_row`` is being computed:
    its tiles left of the current one are done, the current one is in fast memory."""
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, int) or n_blocks < 2:
        raise ValueError(f"n_blocks must be an int >= 2, got {n_blocks!r}")
    if not 0 <= active_row < n_blocks:
        raise ValueError(f"active_row must be in [0, {n_blocks}), got {active_row!r}")
    fig, ax = new_diagram(
        "FlashAttention-2's loop: one query block walks over the key blocks, one tile at a time",
        xlim=(0, 14), ylim=(0, 7.6), width=11,
    )  # fmt: skip
    cell = 1.1
    x0, y0 = 2.2, 6.2
    current = n_blocks - 2
    values = np.zeros((n_blocks, n_blocks))
    values[active_row, :current] = 0.45  # done: folded into m, l, acc and discarded
    values[active_row, current] = 1.0  # the tile in fast memory now
    grid(ax, (x0, y0), values, cell=cell, cmap="Oranges",
         caption="scores S = Q Kᵀ, never stored whole")  # fmt: skip
    for j in range(n_blocks):  # key blocks above the matrix
        box(ax, (x0 + (j + 0.5) * cell, y0 + 0.45), f"K{j}, V{j}", size=(0.95, 0.45),
            color=COLORS["key"], fontsize=7)  # fmt: skip
    for i in range(n_blocks):  # query blocks left of it
        box(ax, (x0 - 0.75, y0 - (i + 0.5) * cell), f"Q{i}", size=(0.8, 0.5),
            color=COLORS["query"], fontsize=7)  # fmt: skip
    ty = y0 - (active_row + 0.5) * cell
    arrow(ax, (x0 + 0.1, y0 + 0.85), (x0 + (current + 0.9) * cell, y0 + 0.85),
          text="inner loop over key blocks j", color="0.2")  # fmt: skip
    steps = (
        "for the tile (i, j):\n"
        "S = Q_i K_jᵀ · scale\n"
        "m_new = max(m, rowmax S)\n"
        "P = exp(S − m_new)\n"
        "l = l · exp(m − m_new) + rowsum P\n"
        "acc = acc · exp(m − m_new) + P V_j\n"
        "m = m_new"
    )
    box(ax, (10.6, 4.6), steps, size=(5.6, 3.0), color=COLORS["op"], fontsize=8)
    box(ax, (10.6, 2.2), "after the last key block:\nO_i = acc / l,  lse_i = m + log l\n"
        "(kept for the backward)", size=(5.6, 1.2), color=COLORS["output"], fontsize=8)  # fmt: skip
    arrow(ax, (x0 + (current + 1) * cell + 0.1, ty), (7.75, 4.6), curve=-0.15)
    caption(ax, (7.0, 0.45), "dark: the one tile in fast memory;  light: tiles already folded "
            "in;  memory per query block: one tile + m, l (per row) + acc (block × d)",
            fontsize=8)  # fmt: skip
    return fig


def kv_cache_decoding(cached: int = 6, num_heads: int = 4, num_kv_heads: int = 2):
    """Step ``t = cached``: the new token's query (``num_heads`` heads) against ``cached + 1``
    keys and values held by ``num_kv_heads`` heads (each shared by ``num_heads /
    num_kv_heads`` query heads)."""
    for name, v in (("cached", cached), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads must be a multiple of num_kv_heads, got {num_heads}, "
                         f"{num_kv_heads}")  # fmt: skip
    fig, ax = new_diagram(
        f"Decoding with a KV cache: {num_heads} query heads, {num_kv_heads} key/value heads",
        xlim=(0, 14), ylim=(0, 6), width=11,
    )  # fmt: skip
    cell = 0.5
    x0 = 4.0
    for h in range(num_kv_heads):
        y = 5.2 - h * 1.6
        filled = np.full((1, cached + 1), 0.35)
        filled[0, -1] = 1.0
        grid(ax, (x0, y), filled, cell=cell, cmap="Greens")
        grid(ax, (x0, y - 0.6), filled, cell=cell, cmap="Purples")
        ax.text(x0 - 0.2, y - 0.25, f"K head {h}", ha="right", va="center", fontsize=8)
        ax.text(x0 - 0.2, y - 0.85, f"V head {h}", ha="right", va="center", fontsize=8)
    group = num_heads // num_kv_heads
    for q in range(num_heads):
        y = 5.0 - q * (1.6 * num_kv_heads / num_heads)
        box(ax, (11.2, y), f"query head {q}", size=(1.8, 0.45), color=COLORS["query"],
            fontsize=8)  # fmt: skip
        kv = q // group
        arrow(ax, (10.25, y), (x0 + (cached + 1) * cell + 0.15, 5.2 - kv * 1.6 - 0.55),
              color="0.45")  # fmt: skip
    note = (f"positions 0 … {cached - 1}: cached (light); position {cached}: the new token's "
            "key and value, computed once and appended (dark)")  # fmt: skip
    caption(ax, (7.0, 0.75), note, fontsize=8)
    caption(ax, (7.0, 0.3), "cache size = 2 · layers · batch · H_kv · positions · d_head · "
            "bytes per number", fontsize=8)  # fmt: skip
    return fig
