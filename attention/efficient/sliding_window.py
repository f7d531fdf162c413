"""Sliding-window (banded) attention in O(n·w), with optional Longformer global tokens.

Query ``i`` attends keys ``i - left .. i + right`` (both inclusive): the mask
``attention.masks.sliding_window_mask(Lq, Lk, left=left, right=right)``. Dense attention with
that mask still computes all ``Lq × Lk`` scores and throws most away. Here the queries are cut
into blocks of ``block_size`` rows; each block only ever meets the keys its rows can see, a
strip of ``block_size + left + right`` keys cut out of the (padded) key sequence with
``Tensor.unfold``, which is a view, not a copy. Query blocks go in cache-sized groups; the
largest float tensor is one group's scores: time ``O(Lq · (w + block_size))`` per head, never
``O(Lq · Lk)``. Training holds ``O(Lq)`` per head for the backward (inputs, output and row
log-sum-exp; FlashAttention's trick, :class:`_BandTile`), which recomputes each group's
weights instead of keeping all ``O(Lq · w)`` of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .._checks import (
    check_positive_int,
    check_qkv,
    check_tensor,
    compute_dtype,
    resolve_scale,
)
from ..functional import scaled_dot_product_attention
from ..masks import sliding_window_mask
from ._recompute import probabilities, softmax_backward

Tensor = torch.Tensor

# Scores computed at once per group of query blocks (2**19 floats = 2 MiB in float32): large
# enough to amortise the Python loop, small enough to stay in cache through the softmax
# (bench/README.md, "Implementation notes").
SCORE_TILE_ELEMENTS = 2**19


def default_block_size(left: int, right: int, n_queries: int) -> int:
    """Query-block size used when none is given: a quarter of the window, within [16, 64].

    A block of ``bq`` queries scores ``bq + left + right`` keys, so the work per query is
    ``1 + (left + right) / bq`` band-widths' worth: small blocks waste less, but very small
    matrix products are slow. A quarter of the window wastes at most 1.25x (the measured
    choice: bench/README.md, "Implementation notes").
    """
    target = (left + right + 1) // 4
    return max(1, min(n_queries, max(16, min(64, target))))


def _global_positions(global_tokens: object, n: int, device: torch.device) -> Tensor:
    """Normalise ``global_tokens`` (positions or a bool mask of length ``n``) to sorted unique
    positions ``(G,)`` (int64)."""
    check_tensor("global_tokens", global_tokens)
    if global_tokens.dim() != 1:
        raise ValueError(
            f"global_tokens must be 1-D (positions, or a bool mask of length {n}), got shape "
            f"{tuple(global_tokens.shape)}"
        )
    if global_tokens.dtype == torch.bool:
        if global_tokens.numel() != n:
            raise ValueError(
                f"global_tokens as a bool mask must have length {n} (the sequence length), got "
                f"{global_tokens.numel()}"
            )
        return global_tokens.to(device).nonzero().flatten()
    if global_tokens.is_floating_point() or global_tokens.is_complex():
        raise TypeError(
            f"global_tokens must be an integer tensor of positions or a bool mask, got dtype "
            f"{global_tokens.dtype}"
        )
    if global_tokens.numel() and (int(global_tokens.min()) < 0 or int(global_tokens.max()) >= n):
        raise ValueError(
            f"global_tokens positions must lie in [0, {n - 1}] (sequence length {n}), got "
            f"min {int(global_tokens.min())}, max {int(global_tokens.max())}"
        )
    # Duplicates would give a global key two columns, hence twice the weight: drop them.
    return torch.unique(global_tokens.to(device=device, dtype=torch.long))


def _tile_scores(q: Tensor, k: Tensor, blocked: Tensor, k_glob: Tensor | None) -> Tensor:
    """Scores of one group of query blocks: ``q (g, bq, E)`` (already scaled) against its key
    strips ``k (g, E, W)``, ``-inf`` where ``blocked (g, bq, W)``, then the global keys
    ``k_glob (G, E)`` as ``G`` more columns. Returns ``(g, bq, W + G)``."""
    scores = torch.bmm(q, k).masked_fill_(blocked, float("-inf"))  # (g, bq, W): ours, in place
    if k_glob is None:
        return scores
    # The global keys join the band in one softmax (the band no longer holds them).
    return torch.cat([scores, torch.matmul(q, k_glob.T)], dim=-1)  # (g, bq, W + G)


def _weighted_values(p: Tensor, v: Tensor, v_glob: Tensor | None) -> Tensor:
    """``p (g, bq, W + G)`` applied to the value strips ``v (g, W, Ev)`` and the global values
    ``v_glob (G, Ev)``. Returns ``(g, bq, Ev)``."""
    width = v.shape[1]
    out = torch.bmm(p[..., :width], v)  # (g, bq, Ev)
    if v_glob is not None:
        out = out + torch.matmul(p[..., width:], v_glob)  # (g, bq, Ev)
    return out


class _BandTile(torch.autograd.Function):
    """Attention of one group of query blocks over their key strips (and the global keys),
    with a FlashAttention-style backward: the forward saves the inputs (views), the output and
    the row log-sum-exp, and the backward recomputes the probabilities. Training then holds
    O(n) per head between forward and backward, not the O(n·w) weights and softmax
    intermediates autograd would keep, and every tile is reused while it is in cache.
    """

    @staticmethod
    def forward(ctx, q, k, v, blocked, k_glob, v_glob):
        p, lse = probabilities(_tile_scores(q, k, blocked, k_glob))  # (g, bq, W + G), (g, bq, 1)
        out = _weighted_values(p, v, v_glob)  # (g, bq, Ev)
        ctx.save_for_backward(q, k, v, blocked, k_glob, v_glob, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, blocked, k_glob, v_glob, out, lse = ctx.saved_tensors
        width = k.shape[-1]
        p, _ = probabilities(_tile_scores(q, k, blocked, k_glob), lse)  # (g, bq, W + G)
        d_p = torch.bmm(d_out, v.transpose(1, 2))  # (g, bq, W)
        if v_glob is not None:
            d_p = torch.cat([d_p, torch.matmul(d_out, v_glob.T)], dim=-1)  # (g, bq, W + G)
        d_s = softmax_backward(p, d_p, d_out, out)  # (g, bq, W + G)
        d_q = torch.bmm(d_s[..., :width], k.transpose(1, 2))  # (g, bq, E)
        d_k = torch.bmm(q.transpose(1, 2), d_s[..., :width])  # (g, E, W)
        d_v = torch.bmm(p[..., :width].transpose(1, 2), d_out)  # (g, W, Ev)
        d_k_glob = d_v_glob = None
        if k_glob is not None:
            d_s_glob = d_s[..., width:]  # (g, bq, G)
            d_q = d_q + torch.matmul(d_s_glob, k_glob)  # (g, bq, E)
            d_k_glob = d_s_glob.flatten(0, 1).T @ q.flatten(0, 1)  # (G, E)
            d_v_glob = p[..., width:].flatten(0, 1).T @ d_out.flatten(0, 1)  # (G, Ev)
        return d_q, d_k, d_v, None, d_k_glob, d_v_glob


def _attend_strips(
    q_blocks: Tensor,
    k_strips: Tensor,
    v_strips: Tensor,
    blocked: Tensor,
    glob: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """One head: scaled ``q_blocks (nb, bq, E)`` against ``k_strips (nb, E, W)`` and
    ``v_strips (nb, W, Ev)``, ``blocked (nb, bq, W)`` (``True`` = may not attend), plus optional
    global keys and values ``glob = ((G, E), (G, Ev))`` that every query sees.
    Returns ``(nb, bq, Ev)``."""
    k_glob, v_glob = (None, None) if glob is None else glob
    return _BandTile.apply(q_blocks, k_strips, v_strips, blocked, k_glob, v_glob)


def _blocked_strips(
    n_queries: int,
    n_keys: int,
    left: int,
    right: int,
    bq: int,
    g_pos: Tensor | None,
    device: torch.device,
) -> Tensor:
    """Which (query, key strip) entries may NOT be attended: ``(nb, bq, W)`` bool, for query
    blocks of ``bq`` rows and strips of ``W = bq + left + right`` keys.

    Row ``r`` of block ``i`` is query ``i*bq + r``, column ``c`` is key ``i*bq - left + c``, so
    ``j - i = c - left - r`` and the band is ``0 <= c - r <= left + right``: the same band for
    every block. Padding keys (before 0, after ``Lk``) and the global keys (which get their own
    columns, so that they count once) are blocked too.
    """
    n_blocks = -(-n_queries // bq)
    width = bq + left + right
    band = sliding_window_mask(bq, width, left=0, right=left + right, device=device)  # (bq, W)
    key_pos = torch.arange(n_blocks, device=device)[:, None] * bq - left  # (nb, 1)
    key_pos = key_pos + torch.arange(width, device=device)  # (nb, W)
    real_key = (key_pos >= 0) & (key_pos < n_keys)  # (nb, W): padding never gets weight
    if g_pos is not None:
        is_global = torch.zeros(n_keys, dtype=torch.bool, device=device)
        is_global[g_pos] = True
        real_key = real_key & ~is_global[key_pos.clamp(0, n_keys - 1)]
    return ~(band & real_key[:, None, :])  # (nb, bq, W)


def _attend_bands(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocked: Tensor,
    right: int,
    scale: float,
    glob: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """The band of every query: ``q (B, H, Lq, E)``, ``k (B, H, Lk, E)``, ``v (B, H, Lk, Ev)``
    in the compute dtype, ``blocked`` from :func:`_blocked_strips`, ``glob`` the global keys
    and values ``((B, H, G, E), (B, H, G, Ev))`` or ``None``. Returns ``(B, H, Lq, Ev)``.

    One (batch, head) at a time: bmm reads the overlapping strips through their strided view
    (a matmul batched over (B, H, nb) would first copy them). Within a head, query blocks go in
    groups whose score tile stays cache-sized, so the time per token does not grow with n.
    The pieces come from ``unbind`` and ``split``, never from indexing, whose backward would
    write each piece's gradient into a zero tensor as large as the whole (O(n²) in all).
    """
    b, h, lq, e = q.shape
    n_blocks, bq, width = blocked.shape
    left = width - bq - right
    # Block i needs keys i*bq-left .. i*bq+bq-1+right: pad `left` zero keys in front, enough at
    # the back (or crop keys no window reaches), then unfold.
    needed = n_blocks * bq + right  # key positions 0 .. needed-1 are reachable
    k_used, v_used = k[:, :, :needed], v[:, :, :needed]
    pad = (0, 0, left, needed - k_used.shape[-2])
    q_pad = (0, 0, 0, n_blocks * bq - lq)
    n_groups = -(-n_blocks * bq * width // SCORE_TILE_ELEMENTS)  # ceil
    group = -(-n_blocks // n_groups)  # query blocks per group, groups of equal size
    blocked_groups = blocked.split(group)  # (<=group, bq, W) each
    q_heads, k_heads, v_heads = (t.flatten(0, 1).unbind(0) for t in (q, k_used, v_used))
    globs = [None] * (b * h)
    if glob is not None:
        k_glob, v_glob = (t.flatten(0, 1).unbind(0) for t in glob)  # (G, E), (G, Ev) each
        globs = list(zip(k_glob, v_glob, strict=True))
    heads = []
    for q_head, k_head, v_head, glob_head in zip(q_heads, k_heads, v_heads, globs, strict=True):
        # Padded head by head: whole-tensor copies would be large allocations, paid afresh on
        # every call.
        q_head = F.pad(q_head, q_pad).view(n_blocks, bq, e) * scale  # (nb, bq, E)
        k_head = F.pad(k_head, pad).unfold(0, width, bq)  # (nb, E, W), a view
        v_head = F.pad(v_head, pad).unfold(0, width, bq)  # (nb, Ev, W)
        v_head = v_head.transpose(-2, -1)  # (nb, W, Ev)
        parts = [
            _attend_strips(q_g, k_g, v_g, blocked_g, glob_head)  # (<=group, bq, Ev)
            for q_g, k_g, v_g, blocked_g in zip(
                q_head.split(group),
                k_head.split(group),
                v_head.split(group),
                blocked_groups,
                strict=True,
            )
        ]
        heads.append(torch.cat(parts) if len(parts) > 1 else parts[0])  # (nb, bq, Ev)
    out = torch.stack(heads)  # (B*H, nb, bq, Ev)
    return out.view(b, h, n_blocks * bq, -1)[:, :, :lq]  # (B, H, Lq, Ev)


def sliding_window_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    left: int,
    right: int,
    global_tokens: Tensor | None = None,
    scale: float | None = None,
    block_size: int | None = None,
) -> Tensor:
    """Banded attention: query ``i`` attends keys ``j`` with ``i - left <= j <= i + right``.

    Equal to ``scaled_dot_product_attention(query, key, value, sliding_window_mask(Lq, Lk,
    left=left, right=right))`` (bool mask, ``True`` = may attend) but in
    ``O(Lq · (w + block_size))`` time and memory, ``w = left + right + 1``. ``right=0`` is the
    causal sliding window; ``left=right=0`` lets each token see only itself; windows wider than
    the sequence are fine.

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, H, Lk, E)``.
        value: ``(B, H, Lk, Ev)``.
        left: how many earlier keys a query sees (int >= 0).
        right: how many later keys a query sees (int >= 0).
        global_tokens: optional Longformer global positions (needs ``Lq == Lk``): a 1-D integer
            tensor of positions or a bool mask ``(L,)``. A global query attends every key and
            every query attends the global keys, i.e. the mask becomes
            ``band | g[:, None] | g[None, :]``.
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        block_size: queries per block (default :func:`default_block_size`); any value gives
            the same result, it only trades waste against matrix-product size.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (half precision is computed in float32).
        A query with no key in its window (possible when ``Lq > Lk``, or ``Lk == 0``) gets
        zeros.
    """
    check_qkv(query, key, value)
    left = check_positive_int("left", left, allow_zero=True)
    right = check_positive_int("right", right, allow_zero=True)
    if block_size is not None:
        check_positive_int("block_size", block_size)
    b, h, lq, e = query.shape
    lk = key.shape[-2]
    scale = resolve_scale(scale, e)
    out_dtype = query.dtype
    cdt = compute_dtype(out_dtype)
    q, k, v = (t.to(cdt) for t in (query, key, value))
    g_pos = None
    if global_tokens is not None:
        if lq != lk:
            raise ValueError(
                f"global_tokens needs self-attention lengths (Lq == Lk), got Lq={lq}, Lk={lk}"
            )
        g_pos = _global_positions(global_tokens, lq, q.device)  # (G,)
    if lq == 0 or lk == 0:  # no query, or no key to attend: the dense answer (empty or zeros)
        return scaled_dot_product_attention(query, key, value, scale=scale)
    if b * h == 0 or e == 0:
        # An empty batch or no heads (an empty result), or empty dot products (every score 0:
        # the uniform average over each window): the dense answer under the equivalent mask.
        band = sliding_window_mask(lq, lk, left=left, right=right, device=q.device)  # (Lq, Lk)
        if g_pos is not None:
            is_global = torch.zeros(lq, dtype=torch.bool, device=q.device)
            is_global[g_pos] = True
            band = band | is_global[:, None] | is_global[None, :]
        return scaled_dot_product_attention(query, key, value, band, scale=scale)

    # Offsets beyond the sequence change nothing (j - i lies in [-(Lq-1), Lk-1]): clamp them so
    # that a huge window does not become a huge strip of padding.
    left, right = min(left, lq - 1), min(right, lk - 1)
    bq = default_block_size(left, right, lq) if block_size is None else block_size
    blocked = _blocked_strips(lq, lk, left, right, bq, g_pos, q.device)  # (nb, bq, W)
    glob = None
    if g_pos is not None:
        glob = (k.index_select(2, g_pos), v.index_select(2, g_pos))  # (B, H, G, E), (.., Ev)
    out = _attend_bands(q, k, v, blocked, right, scale, glob)  # (B, H, Lq, Ev)

    if g_pos is not None and g_pos.numel():
        # Global queries see every key: G dense rows, O(G · Lk).
        q_glob = q.index_select(2, g_pos)  # (B, H, G, E)
        out_glob = scaled_dot_product_attention(q_glob, k, v, scale=scale)  # (B, H, G, Ev)
        out = out.index_copy(2, g_pos, out_glob)  # (B, H, Lq, Ev)
    return out.to(out_dtype)
