"""Boolean attention masks, ``True`` = may attend (torch SDPA's polarity).

Every builder returns a bool tensor that broadcasts against scores of shape
``(B, H, Lq, Lk)``: 2-D ``(Lq, Lk)`` for position-only masks, ``(B, 1, 1, Lk)`` for padding.
``nn.MultiheadAttention`` uses the opposite polarity (``True`` = ignore); convert with
:func:`from_key_padding_mask` / :func:`from_torch_attn_mask`.
"""

from __future__ import annotations

import torch

from ._checks import (
    check_choice,
    check_device,
    check_float_dtype,
    check_positive_int,
    check_rank,
    check_same_device,
    check_tensor,
)

Tensor = torch.Tensor

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def _offsets(n_queries: int, n_keys: int, device=None) -> Tensor:
    """``j - i`` for every (query i, key j): shape ``(Lq, Lk)``."""
    i = torch.arange(n_queries, device=device).unsqueeze(1)
    j = torch.arange(n_keys, device=device).unsqueeze(0)
    return j - i


def causal_mask(
    n_queries: int,
    n_keys: int | None = None,
    *,
    causal_alignment: str = "top_left",
    device: torch.device | str | None = None,
) -> Tensor:
    """``(Lq, Lk)`` bool mask: query i may attend key j iff j is not in its future.

    ``causal_alignment="top_left"`` (torch's ``is_causal``): ``j <= i``.
    ``causal_alignment="bottom_right"`` (FlashAttention, cached decoding):
    ``j <= i + Lk - Lq``, so the last query sees all keys.
    """
    n_queries = check_positive_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else check_positive_int("n_keys", n_keys)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    check_device("device", device)
    shift = n_keys - n_queries if causal_alignment == "bottom_right" else 0
    return _offsets(n_queries, n_keys, device) <= shift


def sliding_window_mask(
    n_queries: int,
    n_keys: int | None = None,
    *,
    left: int | None,
    right: int | None,
    device: torch.device | str | None = None,
) -> Tensor:
    """``(Lq, Lk)`` bool mask of a band: query i sees keys ``i - left <= j <= i + right``.

    Both bounds are inclusive; ``None`` means unbounded on that side. ``left=w, right=0`` is the
    causal sliding window of width ``w + 1``; ``left=right=0`` lets a token see only itself.
    """
    n_queries = check_positive_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else check_positive_int("n_keys", n_keys)
    if left is not None:
        check_positive_int("left", left, allow_zero=True)
    if right is not None:
        check_positive_int("right", right, allow_zero=True)
    check_device("device", device)
    d = _offsets(n_queries, n_keys, device)
    allowed = torch.ones_like(d, dtype=torch.bool)
    if left is not None:
        allowed &= d >= -left
    if right is not None:
        allowed &= d <= right
    return allowed


def padding_mask(
    lengths: Tensor, max_len: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Key padding mask ``(B, 1, 1, max_len)`` from sequence lengths ``(B,)``.

    ``True`` marks real tokens (position < length). Broadcasts over heads and queries.
    """
    check_tensor("lengths", lengths)
    check_rank("lengths", lengths, 1, "[batch]")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else check_positive_int("max_len", max_len)
    check_device("device", device)
    if longest > max_len:
        raise ValueError(f"lengths must be <= max_len={max_len}, got a length of {longest}")
    device = lengths.device if device is None else device
    positions = torch.arange(max_len, device=device)
    keep = positions.unsqueeze(0) < lengths.to(device).unsqueeze(1)  # (B, L)
    return keep[:, None, None, :]


def padding_mask_from_keep(keep: Tensor) -> Tensor:
    """Key padding mask ``(B, 1, 1, L)`` from a keep mask ``(B, L)`` (``True`` = real token)."""
    check_tensor("keep", keep)
    check_rank("keep", keep, 2, "[batch, seq]")
    if keep.dtype != torch.bool:
        raise TypeError(f"keep must be a bool tensor (True = real token), got {keep.dtype}")
    return keep[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """AND together bool masks (``None`` entries are skipped; all ``None`` gives ``None``).

    Shapes must broadcast (e.g. a causal ``(L, L)`` with a padding ``(B, 1, 1, L)`` gives
    ``(B, 1, L, L)``).
    """
    out = None
    for idx, m in enumerate(masks):
        if m is None:
            continue
        check_tensor(f"masks[{idx}]", m)
        if m.dtype != torch.bool:
            raise TypeError(f"masks[{idx}] must be a bool mask (True = may attend), got {m.dtype}")
        if out is None:
            out, first = m, idx
            continue
        check_same_device(f"masks[{idx}]", m, f"masks[{first}]", out)
        try:
            shape = torch.broadcast_shapes(out.shape, m.shape)
        except RuntimeError as err:
            raise ValueError(
                f"masks[{idx}] of shape {tuple(m.shape)} does not broadcast with the masks "
                f"before it (shape {tuple(out.shape)})"
            ) from err
        out = (out & m).expand(shape)
    return out


def block_layout_to_mask(
    layout: Tensor,
    block_size: int,
    n_queries: int | None = None,
    n_keys: int | None = None,
) -> Tensor:
    """Expand a block layout ``(..., Nq_blocks, Nk_blocks)`` to a dense mask ``(..., Lq, Lk)``.

    Block ``(a, b)`` being ``True`` lets queries ``a*bs .. a*bs+bs-1`` attend keys
    ``b*bs .. b*bs+bs-1``. The result is cropped to ``n_queries`` × ``n_keys`` (default: the
    full multiple of ``block_size``), so lengths need not divide the block size.
    """
    check_tensor("layout", layout)
    if layout.dtype != torch.bool:
        raise TypeError(f"layout must be a bool tensor, got {layout.dtype}")
    if layout.dim() < 2:
        raise ValueError(
            f"layout must have at least 2 dims (..., q_blocks, k_blocks), got shape "
            f"{tuple(layout.shape)}"
        )
    block_size = check_positive_int("block_size", block_size)
    nqb, nkb = layout.shape[-2:]
    n_queries = nqb * block_size if n_queries is None else n_queries
    n_keys = nkb * block_size if n_keys is None else n_keys
    for name, n, nb in (("n_queries", n_queries, nqb), ("n_keys", n_keys, nkb)):
        check_positive_int(name, n)
        if not (nb - 1) * block_size < n <= nb * block_size:
            raise ValueError(
                f"{name}={n} does not fit a layout of {nb} blocks of {block_size}: expected "
                f"{(nb - 1) * block_size + 1}..{nb * block_size}"
            )
    dense = layout.repeat_interleave(block_size, dim=-2).repeat_interleave(block_size, dim=-1)
    return dense[..., :n_queries, :n_keys]


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert ``nn.MultiheadAttention``'s ``key_padding_mask`` to the book's polarity.

    torch's MHA takes ``(B, Lk)`` with ``True`` = *ignore this key*. Returns ``(B, 1, 1, Lk)``
    with ``True`` = may attend. Float masks (additive, 0 / -inf) are returned as
    ``(B, 1, 1, Lk)`` biases unchanged in meaning.
    """
    check_tensor("key_padding_mask", key_padding_mask)
    check_rank("key_padding_mask", key_padding_mask, 2, "[batch, k_len]")
    if key_padding_mask.dtype == torch.bool:
        return (~key_padding_mask)[:, None, None, :]
    if key_padding_mask.is_floating_point():
        return key_padding_mask[:, None, None, :]
    raise TypeError(
        f"key_padding_mask must be bool (True = ignore) or float, got {key_padding_mask.dtype}"
    )


def from_torch_attn_mask(attn_mask: Tensor) -> Tensor:
    """Convert ``nn.MultiheadAttention``'s ``attn_mask`` to the book's polarity.

    In MHA a bool ``attn_mask`` means ``True`` = *not allowed*; this inverts it. A float mask is
    additive in both conventions and is returned as is. (``F.scaled_dot_product_attention``
    already uses the book's polarity and needs no conversion.)
    """
    check_tensor("attn_mask", attn_mask)
    if attn_mask.dtype == torch.bool:
        return ~attn_mask
    if attn_mask.is_floating_point():
        return attn_mask
    raise TypeError(f"attn_mask must be bool (True = not allowed) or float, got {attn_mask.dtype}")


def to_additive(mask: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool mask → additive bias: 0 where allowed, ``-inf`` where not."""
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")
    check_float_dtype("dtype", dtype)
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, float("-inf"))
