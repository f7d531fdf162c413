"""Block-sparse attention (BigBird): attend only the key blocks a layout switches on.

A layout is a bool matrix over blocks, ``layout[a, b] = True`` letting query block ``a`` attend
key block ``b`` (``attention.masks.block_layout_to_mask`` expands it to the equivalent dense
mask). Here each query block gathers only its active key blocks, so time and memory grow with
the number of active blocks, not with ``Lq × Lk``. Query blocks are grouped by how many key
blocks they see, so a few dense rows (BigBird's global blocks) do not pad every other row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .._checks import (
    check_block_layout,
    check_generator,
    check_positive_int,
    check_qkv,
    compute_dtype,
    resolve_scale,
)
from ..functional import scaled_dot_product_attention
from ._recompute import probabilities, softmax_backward

Tensor = torch.Tensor

# Scores computed at once (4 MiB in float32): the softmax passes stay in cache and, without
# autograd, memory stays bounded (bench/README.md, "Implementation notes").
_CHUNK_SCORES = 2**20


def bigbird_layout(
    n_blocks: int,
    *,
    n_window: int = 1,
    n_global: int = 1,
    n_random: int = 1,
    generator: torch.Generator | None = None,
) -> Tensor:
    """BigBird block layout ``(n_blocks, n_blocks)`` bool, ``True`` = query block may attend.

    The exact rule, for query block ``a`` and key block ``b``:

    * window: ``|a - b| <= n_window`` (``n_window`` blocks on each side of the diagonal);
    * global: ``a < n_global`` or ``b < n_global`` (the first blocks see and are seen by all);
    * random: every non-global row ``a`` also gets ``n_random`` key blocks drawn uniformly
      without replacement among those the two rules above left off (all of them if fewer
      remain). The draw uses ``generator``; the default is a fresh generator seeded with 0, so
      the layout is reproducible.
    """
    n_blocks = check_positive_int("n_blocks", n_blocks)
    n_window = check_positive_int("n_window", n_window, allow_zero=True)
    n_global = check_positive_int("n_global", n_global, allow_zero=True)
    n_random = check_positive_int("n_random", n_random, allow_zero=True)
    check_generator("generator", generator)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    a = torch.arange(n_blocks)[:, None]  # (n, 1) query blocks
    b = torch.arange(n_blocks)[None, :]  # (1, n) key blocks
    layout = ((a - b).abs() <= n_window) | (a < n_global) | (b < n_global)  # (n, n)
    if n_random and n_global < n_blocks:
        # A random key per row = the smallest uniform draws among the blocks still off.
        draws = torch.rand((n_blocks, n_blocks), generator=generator, device=generator.device)
        draws = draws.cpu().masked_fill(layout, float("inf"))  # (n, n)
        k = min(n_random, n_blocks)
        smallest, picks = draws.topk(k, dim=-1, largest=False)  # (n, k)
        chosen = torch.zeros_like(layout).scatter_(1, picks, torch.isfinite(smallest))
        chosen[:n_global] = False  # global rows already see everything
        layout = layout | chosen
    return layout


class _BlockRows(torch.autograd.Function):
    """Attention of a chunk of query blocks ``q (B, G, r, bs, E)`` over their gathered key
    blocks ``k (B, G, r, c*bs, E)``, ``v (B, G, r, c*bs, Ev)`` (``padding (r, 1, c*bs)``: key
    positions past the sequence, or None), with a FlashAttention-style backward: it saves
    ``q, k, v``, the output and the row log-sum-exp, and recomputes the weights, so training
    does not hold the weights and softmax intermediates of every chunk."""

    @staticmethod
    def forward(ctx, q, k, v, padding):
        scores = q @ k.transpose(-2, -1)  # (B, G, r, bs, c*bs)
        if padding is not None:
            scores = scores.masked_fill_(padding, float("-inf"))
        p, lse = probabilities(scores)  # (B, G, r, bs, c*bs), (B, G, r, bs, 1)
        out = p @ v  # (B, G, r, bs, Ev)
        ctx.save_for_backward(q, k, v, padding, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, padding, out, lse = ctx.saved_tensors
        scores = q @ k.transpose(-2, -1)  # (B, G, r, bs, c*bs)
        if padding is not None:
            scores = scores.masked_fill_(padding, float("-inf"))
        p, _ = probabilities(scores, lse)  # (B, G, r, bs, c*bs)
        d_s = softmax_backward(p, d_out @ v.transpose(-2, -1), d_out, out)  # (B, G, r, bs, c*bs)
        d_q = d_s @ k  # (B, G, r, bs, E)
        d_k = d_s.transpose(-2, -1) @ q  # (B, G, r, c*bs, E)
        d_v = p.transpose(-2, -1) @ d_out  # (B, G, r, c*bs, Ev)
        return d_q, d_k, d_v, None


def _gather_blocks(blocks: Tensor, index: Tensor, sizes: list[int], together: bool):
    """``blocks[:, :, index]`` in consecutive pieces of ``sizes`` along axis 2: one gather then
    views of it (``together``), or one gather per piece, made when the piece is reached."""
    if together:
        return blocks[:, :, index].split(sizes, dim=2)
    return (blocks[:, :, piece] for piece in index.split(sizes))


def _block_rows(
    q: Tensor, k: Tensor, v: Tensor, layout: Tensor, block_size: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Padded, scaled ``q (B, H, Nq*bs, E)``, ``k``, ``v`` viewed as rows of blocks, with the
    layout as one row of key blocks per query-block row.

    Returns ``q_rows (B, G, R, bs, E)``, ``k_rows (B, G, Rk, bs, E)``, ``v_rows``,
    ``row_layout (R, Nk)`` and ``key_offset (R,)``, the index of a row's first key block in
    ``k_rows``. A layout shared by the heads keeps them in ``G = H``; a per-head layout folds
    them into the rows (``G = 1``, row ``h*Nq + a`` is query block ``a`` of head ``h`` and it
    gathers key blocks ``h*Nk + c``).
    """
    b, h, n_q, e = q.shape
    n_qb, n_kb = n_q // block_size, k.shape[2] // block_size
    if layout.dim() == 3 and layout.shape[0] == h and h > 1:
        q_rows = q.reshape(b, 1, h * n_qb, block_size, e)  # (B, 1, H*Nq, bs, E)
        k_rows = k.reshape(b, 1, h * n_kb, block_size, e)  # (B, 1, H*Nk, bs, E)
        v_rows = v.reshape(b, 1, h * n_kb, block_size, -1)  # (B, 1, H*Nk, bs, Ev)
        row_layout = layout.reshape(h * n_qb, n_kb)  # (H*Nq, Nk)
        key_offset = torch.arange(h, device=q.device).repeat_interleave(n_qb) * n_kb  # (H*Nq,)
    else:
        q_rows = q.view(b, h, n_qb, block_size, e)  # (B, H, Nq, bs, E)
        k_rows = k.view(b, h, n_kb, block_size, e)  # (B, H, Nk, bs, E)
        v_rows = v.view(b, h, n_kb, block_size, -1)  # (B, H, Nk, bs, Ev)
        row_layout = layout.reshape(n_qb, n_kb)  # (Nq, Nk)
        key_offset = torch.zeros(n_qb, dtype=torch.long, device=q.device)  # (Nq,)
    return q_rows, k_rows, v_rows, row_layout, key_offset


def _plan_chunks(
    row_layout: Tensor, rows_per_count: int, block_size: int
) -> list[tuple[Tensor, Tensor]]:
    """Rows of one active-block count in chunks of about ``_CHUNK_SCORES`` scores:
    ``(rows (r,), their active key blocks (r, c))`` per chunk, so that a few dense rows
    (BigBird's global blocks) do not pad every other row. ``rows_per_count`` is how many
    matrices of the batch and head dims each row stands for."""
    counts = row_layout.sum(-1)  # (R,) active key blocks per query-block row
    plan = []
    for count in counts.unique().tolist():
        per_row = rows_per_count * block_size * block_size * max(count, 1)
        step = max(1, _CHUNK_SCORES // per_row)
        for rows in (counts == count).nonzero().flatten().split(step):  # (r,)
            cols = row_layout[rows].nonzero()[:, 1].view(len(rows), count)  # (r, c), row-major
            plan.append((rows, cols))
    return plan


def block_sparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: Tensor,
    *,
    block_size: int,
    scale: float | None = None,
) -> Tensor:
    """Attention restricted to the active blocks of ``layout``, block by block.

    Equal to ``scaled_dot_product_attention(query, key, value, block_layout_to_mask(layout,
    block_size, Lq, Lk))`` (bool mask, ``True`` = may attend), at a cost proportional to the
    number of active blocks.

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, H, Lk, E)``.
        value: ``(B, H, Lk, Ev)``.
        layout: bool ``(Nq, Nk)`` shared by all heads, or ``(H, Nq, Nk)`` per head, with
            ``Nq = ceil(Lq / block_size)``, ``Nk = ceil(Lk / block_size)``. The last blocks may
            be partial: their missing positions never receive weight.
        block_size: positions per block (int >= 1).
        scale: multiplies the scores; default ``1 / sqrt(E)``.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (half precision is computed in float32).
        A query block with no active key block gets zeros (so does every query when
        ``Lk == 0``).
    """
    check_qkv(query, key, value)
    block_size = check_positive_int("block_size", block_size)
    b, h, lq, e = query.shape
    lk = key.shape[-2]
    n_qb, n_kb = -(-lq // block_size), -(-lk // block_size)
    layout = check_block_layout(layout, (h, n_qb, n_kb), block_size).to(query.device)
    scale = resolve_scale(scale, e)
    if lq == 0 or lk == 0:  # no query, or no key to attend: the dense answer (empty or zeros)
        return scaled_dot_product_attention(query, key, value, scale=scale)
    if b * h == 0:  # an empty batch or no heads: an empty result
        return query.new_zeros(b, h, lq, value.shape[-1])
    out_dtype = query.dtype
    cdt = compute_dtype(out_dtype)
    q, k, v = (t.to(cdt) for t in (query, key, value))

    bs = block_size
    q = F.pad(q * scale, (0, 0, 0, n_qb * bs - lq))  # (B, H, Nq*bs, E)
    k = F.pad(k, (0, 0, 0, n_kb * bs - lk))  # (B, H, Nk*bs, E)
    v = F.pad(v, (0, 0, 0, n_kb * bs - lk))  # (B, H, Nk*bs, Ev)
    q_rows, k_rows, v_rows, row_layout, key_offset = _block_rows(q, k, v, layout, bs)
    plan = _plan_chunks(row_layout, q_rows.shape[0] * q_rows.shape[1], bs)
    all_rows = torch.cat([rows for rows, _ in plan])  # (R,) every row once, chunk by chunk
    all_keys = torch.cat([(cols + key_offset[rows, None]).flatten() for rows, cols in plan])
    # With autograd, gather every chunk's rows and key blocks in one indexing each, then split
    # (one gather per chunk would make the backward O(n^2)); without, chunk by chunk, holding
    # one chunk's copy at a time.
    together = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    q_chunks = _gather_blocks(q_rows, all_rows, [len(rows) for rows, _ in plan], together)
    key_sizes = [cols.numel() for _, cols in plan]
    k_chunks = _gather_blocks(k_rows, all_keys, key_sizes, together)
    v_chunks = _gather_blocks(v_rows, all_keys, key_sizes, together)
    in_block = torch.arange(bs, device=q.device)  # (bs,)
    outs = []
    for (_, cols), q_sel, k_sel, v_sel in zip(plan, q_chunks, k_chunks, v_chunks, strict=True):
        r, count = cols.shape
        k_sel = k_sel.reshape(*k_sel.shape[:2], r, count * bs, e)  # (B, G, r, c*bs, E)
        v_sel = v_sel.reshape(*v_sel.shape[:2], r, count * bs, v.shape[-1])  # (B, G, r, c*bs, Ev)
        padding = None
        if lk % bs:
            # The last key block is partial: its padding positions must get no weight.
            key_pos = (cols[:, :, None] * bs + in_block).flatten(1)  # (r, c*bs)
            padding = (key_pos >= lk)[:, None, :]  # (r, 1, c*bs)
        # A row with no active block has no key: zeros, as dense attention gives a fully
        # masked row.
        outs.append(_BlockRows.apply(q_sel, k_sel, v_sel, padding))  # (B, G, r, bs, Ev)
    # Every row was done exactly once, bucket by bucket: put them back in order.
    order = all_rows.argsort()  # (R,)
    out = torch.cat(outs, dim=2)[:, :, order]  # (B, G, R, bs, Ev)
    out = out.reshape(b, h, n_qb * bs, -1)[:, :, :lq]  # (B, H, Lq, Ev)
    return out.to(out_dtype)
