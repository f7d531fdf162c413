"""Causal masking tile by tile (used by the flash loop and the chunked variant).

Query ``i`` may attend key ``j`` iff ``j <= i + c``: ``c = 0`` for top-left alignment (torch's
``is_causal``), ``c = Lk - Lq`` for bottom-right (``attention.masks.causal_mask``). A tiled loop
skips the tiles entirely in the future and masks only the tiles the diagonal cuts.
"""

from __future__ import annotations

import torch

from ..masks import sliding_window_mask

Tensor = torch.Tensor


def causal_shift(n_queries: int, n_keys: int, causal: bool, alignment: str) -> int | None:
    """``c`` such that query ``i`` may attend key ``j`` iff ``j <= i + c`` (``None``: no mask)."""
    if not causal:
        return None
    return n_keys - n_queries if alignment == "bottom_right" else 0


def first_query(n_queries: int, shift: int | None) -> int:
    """Queries before this one see no key at all (bottom-right causal with Lq > Lk)."""
    return 0 if shift is None else min(n_queries, max(0, -shift))


def _blocked_tile(n_rows: int, n_cols: int, offset: int, device: torch.device) -> Tensor:
    """``(n_rows, n_cols)`` bool, ``True`` where the causal cut forbids attending.

    In a tile's local coordinates the rule ``j <= i + c`` reads ``jj - ii <= offset`` with
    ``offset = c + q0 - k0``: the band of ``attention.masks.sliding_window_mask`` (unbounded
    on the left), with its columns shifted when ``offset < 0``.
    """
    if offset >= 0:
        allowed = sliding_window_mask(n_rows, n_cols, left=None, right=offset, device=device)
    else:  # jj - ii <= offset  <=>  (jj - offset) - ii <= 0: pad -offset columns, drop them
        allowed = sliding_window_mask(n_rows, n_cols - offset, left=None, right=0, device=device)
        allowed = allowed[:, -offset:]
    return ~allowed


class TileMasks:
    """The causal masks of the diagonal tiles of one call (few distinct ones: cached)."""

    def __init__(self, shift: int | None, device: torch.device):
        self.shift, self.device, self.cache = shift, device, {}

    def get(self, q0: int, q1: int, k0: int, k1: int) -> Tensor | None:
        """The ``blocked`` mask of tile rows ``q0:q1`` × keys ``k0:k1``, ``None`` if none is
        blocked."""
        if self.shift is None:
            return None
        offset = self.shift + q0 - k0
        n_rows, n_cols = q1 - q0, k1 - k0
        if n_cols - 1 <= offset:  # the tile's top-right corner is allowed: all of it is
            return None
        key = (n_rows, n_cols, offset)
        if key not in self.cache:
            self.cache[key] = _blocked_tile(n_rows, n_cols, offset, self.device)
        return self.cache[key]
