"""Sliding-window and block-sparse attention through FlexAttention.

``torch.nn.attention.flex_attention`` takes the mask as a *function* ``mask_mod(b, h, q_idx,
kv_idx) -> bool`` (``True`` = may attend, the book's polarity). ``create_block_mask`` evaluates
it once per tile of 128 x 128 and records which tiles are empty, full or partial; the compiled
kernel then skips the empty tiles entirely and evaluates ``mask_mod`` only inside partial ones.
So a band or a block layout costs time in proportion to the tiles it touches, with one generic
kernel instead of one hand-written kernel per pattern.

Paths (``path=``):

* ``"flex"``: compiled ``flex_attention`` with a block mask. The fast path on CUDA. The first
  call for a new shape or window compiles (seconds to tens of seconds); later calls reuse it.
  (It also compiles on the CPU, in about a minute per shape: not chosen automatically there.)
* ``"flex_eager"``: the same mask_mod and block mask through ``flex_attention`` run eagerly,
  torch's unfused reference implementation. Any device; it materialises the scores, so it is
  for checking the mask functions, not for speed.
* ``"sdpa"``: the dense fallback: the bool mask from ``attention.masks`` and torch's SDPA
  (``attention.functional.torch_sdpa``).
* ``"auto"``: ``"flex"`` on CUDA, else ``"sdpa"``.

Every function can return which path ran (``return_path=True``). Queries with no allowed key
get zeros on every path.
"""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from .._checks import (
    check_block_layout,
    check_choice,
    check_positive_int,
    check_qkv,
    check_scale,
    resolve_scale,
)
from ..functional import torch_sdpa
from ..masks import block_layout_to_mask, sliding_window_mask

Tensor = torch.Tensor

FLEX_PATHS = ("auto", "flex", "flex_eager", "sdpa")


def choose_flex_path(device: torch.device | str, path: str = "auto") -> str:
    """Resolve ``path`` for tensors on ``device`` (``"auto"``: ``"flex"`` on CUDA, else
    ``"sdpa"``)."""
    check_choice("path", path, FLEX_PATHS)
    if path == "auto":
        return "flex" if torch.device(device).type == "cuda" else "sdpa"
    return path


# ---------------------------------------------------------------------------------------------
# mask_mod functions: the masks of attention.masks, written as index predicates
# ---------------------------------------------------------------------------------------------


def sliding_window_mask_mod(left: int | None, right: int | None):
    """``mask_mod`` of :func:`attention.masks.sliding_window_mask`: query ``i`` may attend key
    ``j`` iff ``i - left <= j <= i + right`` (``None`` = unbounded on that side)."""
    if left is not None:
        check_positive_int("left", left, allow_zero=True)
    if right is not None:
        check_positive_int("right", right, allow_zero=True)

    def mask_mod(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx  # j - i
        allowed = kv_idx >= 0  # all True (indices are never negative): the unbounded band
        if left is not None:
            allowed = allowed & (offset >= -left)
        if right is not None:
            allowed = allowed & (offset <= right)
        return allowed

    return mask_mod


def block_sparse_mask_mod(layout: Tensor, block_size: int):
    """``mask_mod`` of :func:`attention.masks.block_layout_to_mask`: query ``i`` may attend key
    ``j`` iff ``layout[b, h, i // block_size, j // block_size]``.

    ``layout``: bool ``(B, H, n_q_blocks, n_k_blocks)`` (an expanded view is fine).
    """
    check_positive_int("block_size", block_size)

    def mask_mod(b, h, q_idx, kv_idx):
        return layout[b, h, q_idx // block_size, kv_idx // block_size]

    return mask_mod


# ---------------------------------------------------------------------------------------------
# Running a mask_mod
# ---------------------------------------------------------------------------------------------


@functools.cache
def _compiled_flex():
    # One compiled wrapper for the process: torch.compile caches a kernel per shape/mask kind.
    return torch.compile(flex_attention, dynamic=False)


def _run_flex(q, k, v, mask_mod, mask_batch, mask_heads, scale, path):
    """flex_attention with a block mask built from ``mask_mod``; ``mask_batch``/``mask_heads``
    None = the mask is the same for every batch element / head."""
    lq, lk = q.shape[-2], k.shape[-2]
    block_mask = create_block_mask(
        mask_mod, mask_batch, mask_heads, lq, lk, device=q.device
    )  # tiles: empty / full / partial
    fn = _compiled_flex() if path == "flex" else flex_attention
    return fn(q, k, v, block_mask=block_mask, scale=scale)


def _finish(out: Tensor, path: str, return_path: bool):
    return (out, path) if return_path else out


def flex_sliding_window(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    left: int | None,
    right: int | None,
    scale: float | None = None,
    path: str = "auto",
    return_path: bool = False,
) -> Tensor | tuple[Tensor, str]:
    """Banded attention: query ``i`` attends keys ``i - left <= j <= i + right``.

    Equal to ``scaled_dot_product_attention(q, k, v, sliding_window_mask(Lq, Lk, left=left,
    right=right))``; ``right=0`` is the causal sliding window, ``None`` leaves a side unbounded.

    Args:
        query: ``(B, H, Lq, E)``; key ``(B, H, Lk, E)``; value ``(B, H, Lk, Ev)``.
        left, right: window bounds (ints >= 0, or ``None``).
        scale: default ``1 / sqrt(E)``.
        path: ``"auto"``, ``"flex"``, ``"flex_eager"`` or ``"sdpa"`` (module docstring).
        return_path: also return the name of the path that ran.

    Returns:
        ``(B, H, Lq, Ev)`` (and the path). A query whose window holds no key gets zeros.
    """
    check_qkv(query, key, value)
    check_scale(scale)
    mask_mod = sliding_window_mask_mod(left, right)  # validates left/right
    path = choose_flex_path(query.device, path)
    lq, lk = query.shape[-2], key.shape[-2]
    if path == "sdpa":
        allowed = sliding_window_mask(lq, lk, left=left, right=right, device=query.device)
        return _finish(torch_sdpa(query, key, value, allowed, scale=scale), path, return_path)
    scale = resolve_scale(scale, query.shape[-1])
    out = _run_flex(query, key, value, mask_mod, None, None, scale, path)
    return _finish(out, path, return_path)


def _layout_4d(layout: object, block_size: int, query: Tensor, key: Tensor) -> Tensor:
    """Check a block layout against the inputs; return it as ``(Bl, Hl, nqb, nkb)``."""
    b, h, lq, _ = query.shape
    lk = key.shape[-2]
    target = (b, h, -(-lq // block_size), -(-lk // block_size))
    layout = check_block_layout(layout, target, block_size)
    padded = (1,) * (4 - layout.dim()) + tuple(layout.shape)
    return layout.reshape(padded).to(query.device)


def flex_block_sparse(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: Tensor,
    *,
    block_size: int,
    scale: float | None = None,
    path: str = "auto",
    return_path: bool = False,
) -> Tensor | tuple[Tensor, str]:
    """Block-sparse attention: query block ``a`` attends key block ``c`` iff ``layout[..., a, c]``.

    Equal to ``scaled_dot_product_attention(q, k, v, block_layout_to_mask(layout, block_size,
    Lq, Lk))``; lengths need not be multiples of ``block_size``.

    Args:
        query: ``(B, H, Lq, E)``; key ``(B, H, Lk, E)``; value ``(B, H, Lk, Ev)``.
        layout: bool ``(nqb, nkb)``, ``(H, nqb, nkb)`` or ``(B, H, nqb, nkb)`` (leading dims may
            be 1), ``nqb = ceil(Lq / block_size)``, ``nkb = ceil(Lk / block_size)``; ``True`` =
            the block may attend (e.g. ``attention.efficient.block_sparse.bigbird_layout``).
        block_size: tokens per block side (the layout's unit, independent of flex's tiles).
        scale: default ``1 / sqrt(E)``.
        path: ``"auto"``, ``"flex"``, ``"flex_eager"`` or ``"sdpa"`` (module docstring).
        return_path: also return the name of the path that ran.

    Returns:
        ``(B, H, Lq, Ev)`` (and the path). Queries whose layout row is empty get zeros.
    """
    check_qkv(query, key, value)
    check_scale(scale)
    block_size = check_positive_int("block_size", block_size)
    layout4 = _layout_4d(layout, block_size, query, key)  # (Bl, Hl, nqb, nkb)
    path = choose_flex_path(query.device, path)
    lq, lk = query.shape[-2], key.shape[-2]
    if path == "sdpa":
        allowed = block_layout_to_mask(layout4, block_size, lq, lk)  # (Bl, Hl, Lq, Lk)
        return _finish(torch_sdpa(query, key, value, allowed, scale=scale), path, return_path)
    bl, hl = layout4.shape[:2]
    # Flex's eager path evaluates mask_mod for every (b, h) of the inputs, whatever the block
    # mask's shape: index an expanded view (no copy) so that shared dims broadcast.
    mask_mod = block_sparse_mask_mod(layout4.expand(*query.shape[:2], -1, -1), block_size)
    out = _run_flex(
        query,
        key,
        value,
        mask_mod,
        bl if bl > 1 else None,
        hl if hl > 1 else None,
        resolve_scale(scale, query.shape[-1]),
        path,
    )
    return _finish(out, path, return_path)
