"""Exact attention in O(n) memory, FlashAttention-style: tiles and an online softmax.

Dense attention builds the ``Lq × Lk`` score matrix. :func:`flash_attention` (Dao et al. 2022,
FlashAttention-2's loop order and backward) gives the same result (up to rounding) without ever
holding it. The queries are cut into blocks of ``block_q`` rows; each block walks over the keys
in blocks of ``block_k`` with an *online softmax*: a running row max ``m``, a running
denominator ``l`` and an unnormalised accumulator, rescaled by ``exp(m_old - m_new)`` when the
max grows. The forward keeps only the output and the log-sum-exp ``lse`` of each row; the
backward is a hand-written ``torch.autograd.Function`` that recomputes each tile's
probabilities from ``lse`` (``P = exp(S - lse)``), with ``D = rowsum(dO ∘ O)`` and
``dS = P ∘ (dP - D)``. So autograd stores q, k, v, out and lse, never a graph through the tile
loop: training memory is O(n) too. (:func:`attention.efficient.chunked_attention` reaches O(n)
memory another way, by chunks merged afterwards and checkpointing.)

How the loop avoids work (pure PyTorch, CPU or GPU): every head of the batch is one ``bmm``; the
scale and ``log2(e)`` are folded into ``q`` once, so the probabilities are ``exp2`` (cheaper
than ``exp``); scores go into one preallocated tile buffer and the running max is subtracted
inside the ``baddbmm`` that computes them; ``exp2_``, ``baddbmm_`` work in place; the
accumulator is rescaled only when a row max grew by more than ``2**8`` (FlashAttention-4's lazy
rescaling: exact, because the final division uses the same reference max, and safe from
overflow with that bound). The decision is taken once per tile for all the rows of every head
(one branch instead of a masked rescale): when any row needs it, every row is rescaled, which
is exact for each. A NaN row is ignored by that decision, so it cannot stop the rescaling
that the clean rows of other heads or batch elements need; their outputs may then differ from
a NaN-free call by rounding only. With causal masking, tiles entirely in the future are skipped and
only tiles cut by the diagonal are masked. On a CPU with several threads, large calls give each
thread its own heads (:func:`attention.efficient._threads.run_over_heads`). Measurements behind
these choices: ``bench/README.md``, "Implementation notes".
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from .._checks import (
    check_bool,
    check_choice,
    check_positive_int,
    check_qkv,
    compute_dtype,
    resolve_scale,
)
from ..masks import CAUSAL_ALIGNMENTS
from ._causal_tiles import TileMasks, causal_shift, first_query
from ._threads import run_over_heads

Tensor = torch.Tensor

LOG2E = math.log2(math.e)  # exp(x) == exp2(x * log2(e))
LN2 = math.log(2.0)
# Lazy rescaling: the running max used as the exponent's offset may lag the true row max by up
# to this many powers of two, so probabilities stay <= 2**8 and row sums <= Lk * 2**8, far from
# float32 overflow (half inputs are computed in float32); the result is exact either way.
RESCALE_THRESHOLD = 8.0
# Large blocks amortise the Python loop while one thread's tile stays in its core's L2 cache
# (how they were chosen: bench/README.md, "Implementation notes").
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 256


def _query_block_forward(
    q_blk: Tensor,
    k_t: Tensor,
    v: Tensor,
    acc: Tensor,
    scores_buf: Tensor,
    masks: TileMasks,
    q0: int,
    k_end: int,
    block_k: int,
) -> tuple[Tensor, Tensor]:
    """One query block ``q_blk (BH, nq, E)`` (rows ``q0 ..``) over keys ``0 .. k_end - 1`` of
    ``k_t (BH, E, Lk)`` and ``v (BH, Lk, Ev)``: the online softmax, tile by tile.

    Accumulates the unnormalised output into ``acc (BH, nq, Ev)`` and returns the negated
    running max and the row sum ``(BH, nq, 1)`` it is relative to (scores in log2 units).
    """
    q1 = q0 + q_blk.shape[1]
    neg_max = row_sum = None
    for k0 in range(0, k_end, block_k):
        k1 = min(k0 + block_k, k_end)
        s = scores_buf[:, : q1 - q0, : k1 - k0]  # (BH, nq, nk)
        blocked = masks.get(q0, q1, k0, k1)  # (nq, nk) or None
        if neg_max is None:  # first tile: it fixes the reference max of every row
            torch.bmm(q_blk, k_t[:, :, k0:k1], out=s)
            if blocked is not None:
                s.masked_fill_(blocked, float("-inf"))
            # Finite: every row that is processed sees key 0.
            neg_max = s.amax(dim=-1, keepdim=True).neg_()  # (BH, nq, 1)
            s.add_(neg_max).exp2_()  # probabilities relative to the row max
            row_sum = s.sum(dim=-1, keepdim=True)  # (BH, nq, 1)
            torch.bmm(s, v[:, k0:k1], out=acc)
            continue
        torch.baddbmm(neg_max, q_blk, k_t[:, :, k0:k1], out=s)  # scores - running max
        if blocked is not None:
            s.masked_fill_(blocked, float("-inf"))
        grow = s.amax(dim=-1, keepdim=True)  # (BH, nq, 1) how far the max moved
        # One decision for the whole tile (rare after the first tiles; rescaling a row whose
        # max did not move is a no-op). Written ``not max <= T`` so that a NaN row (whose max
        # is NaN) makes it rescale: ``max > T`` would be False for every row once one row is
        # NaN, and the clean rows of other heads or batch elements would overflow in exp2.
        # One reduction and one sync per tile, as many as the NaN-unsafe test.
        if not float(grow.max()) <= RESCALE_THRESHOLD:
            grow.clamp_(min=0.0)
            s.sub_(grow)
            neg_max.sub_(grow)
            alpha = grow.neg_().exp2_()  # (BH, nq, 1) = exp2(m_old - m_new)
            row_sum.mul_(alpha)
            acc.mul_(alpha)
        s.exp2_()
        row_sum.add_(s.sum(dim=-1, keepdim=True))
        acc.baddbmm_(s, v[:, k0:k1])
    return neg_max, row_sum


def _tiled_forward(
    q2: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    shift: int | None,
    block_q: int,
    block_k: int,
) -> None:
    """The tiled forward on flattened heads, written into ``out`` and ``lse``.

    ``q2 (BH, Lq, E)`` is the query already multiplied by ``scale * log2(e)``, so scores are in
    log2 units; ``k (BH, Lk, E)``, ``v (BH, Lk, Ev)``, all in the compute dtype. Fills the
    output ``out (BH, Lq, Ev)`` and the log-sum-exp ``lse (BH, Lq)`` in natural-log units;
    rows that see no key are left as the caller initialised them (zeros and ``-inf``).
    """
    bh, n_queries, _ = q2.shape
    n_keys, dim_v = v.shape[1], v.shape[2]
    first = first_query(n_queries, shift)
    if bh == 0 or n_keys == 0 or first == n_queries:  # nothing to compute
        return
    masks = TileMasks(shift, q2.device)
    k_t = k.transpose(1, 2)  # (BH, E, Lk): a view; BLAS reads it transposed
    bq, bk = min(block_q, n_queries - first), min(block_k, n_keys)
    # Preallocated once per call: the tile loop allocates only (BH, bq, 1) row vectors.
    scores_buf = q2.new_empty(bh, bq, bk)  # (BH, bq, bk)
    acc_buf = q2.new_empty(bh, bq, dim_v)  # (BH, bq, Ev)
    for q0 in range(first, n_queries, block_q):
        q1 = min(q0 + block_q, n_queries)
        acc = acc_buf[:, : q1 - q0]  # (BH, nq, Ev) unnormalised output
        # Causal: keys j < q1 + shift are the only ones any row of this block sees.
        k_end = n_keys if shift is None else min(n_keys, q1 + shift)
        neg_max, row_sum = _query_block_forward(
            q2[:, q0:q1], k_t, v, acc, scores_buf, masks, q0, k_end, block_k
        )
        torch.div(acc, row_sum, out=out[:, q0:q1])
        # lse in natural units: (m + log2 l) * ln 2, with m = -neg_max in log2 units.
        lse[:, q0:q1] = (row_sum.log2().sub_(neg_max)).mul_(LN2).squeeze(-1)


def _tiled_backward(
    q2: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    d_out: Tensor,
    d_lse: Tensor | None,
    d_q2: Tensor,
    d_k: Tensor,
    d_v: Tensor,
    shift: int | None,
    block_q: int,
    block_k: int,
) -> None:
    """FlashAttention-2 backward on flattened heads, all in the compute dtype.

    ``q2 = q * scale * log2(e)`` ``(BH, Lq, E)``, ``k (BH, Lk, E)``, ``v (BH, Lk, Ev)``,
    ``out``/``d_out`` ``(BH, Lq, Ev)``, ``lse``/``d_lse`` ``(BH, Lq)``. With ``dT`` the
    gradient of the natural-unit scores, adds ``dT K`` into ``d_q2``, ``dTᵀ q2`` into ``d_k``
    and ``Pᵀ dO`` into ``d_v`` (zeroed, the shapes of ``q2``, ``k``, ``v``); the caller
    applies the scale factors.
    """
    bh, n_queries, _ = q2.shape
    n_keys = k.shape[1]
    first = first_query(n_queries, shift)
    if bh == 0 or n_keys == 0 or first == n_queries:  # nothing to compute
        return
    # D_i = rowsum(dO ∘ O) = Σ_j P_ij dP_ij, so that dS = P ∘ (dP - D). A gradient flowing
    # into lse adds P ∘ d_lse to dS (d lse / d S = P): fold it into D.
    delta = (d_out * out).sum(dim=-1)  # (BH, Lq)
    if d_lse is not None:
        delta = delta - d_lse
    neg_delta = delta.neg_().unsqueeze(-1)  # (BH, Lq, 1)
    neg_lse2 = (lse * -LOG2E).unsqueeze(-1)  # (BH, Lq, 1) lse in log2 units, negated
    masks = TileMasks(shift, q2.device)
    bq, bk = min(block_q, n_queries - first), min(block_k, n_keys)
    p_buf = q2.new_empty(bh, bq, bk)  # (BH, bq, bk)
    dp_buf = q2.new_empty(bh, bq, bk)  # (BH, bq, bk)
    # Outer loop over key blocks (FlashAttention-2): dK_j and dV_j stay hot while every query
    # block that sees key block j adds to them.
    for k0 in range(0, n_keys, block_k):
        k1 = min(k0 + block_k, n_keys)
        k_blk, v_blk = k[:, k0:k1], v[:, k0:k1]  # (BH, nk, E), (BH, nk, Ev)
        d_k_blk, d_v_blk = d_k[:, k0:k1], d_v[:, k0:k1]
        # Causal: query i sees key k0 iff i >= k0 - shift; earlier rows are skipped.
        q_start = first if shift is None else max(first, k0 - shift)
        for q0 in range(q_start, n_queries, block_q):
            q1 = min(q0 + block_q, n_queries)
            q_blk, do_blk = q2[:, q0:q1], d_out[:, q0:q1]  # (BH, nq, E), (BH, nq, Ev)
            p = p_buf[:, : q1 - q0, : k1 - k0]  # (BH, nq, nk)
            torch.baddbmm(neg_lse2[:, q0:q1], q_blk, k_blk.transpose(1, 2), out=p)
            blocked = masks.get(q0, q1, k0, k1)
            if blocked is not None:
                p.masked_fill_(blocked, float("-inf"))
            p.exp2_()  # P = exp(S - lse): this tile's softmax weights, recomputed
            d_v_blk.baddbmm_(p.transpose(1, 2), do_blk)  # dV += Pᵀ dO
            dp = dp_buf[:, : q1 - q0, : k1 - k0]  # (BH, nq, nk)
            torch.baddbmm(neg_delta[:, q0:q1], do_blk, v_blk.transpose(1, 2), out=dp)
            ds = dp.mul_(p)  # dS = P ∘ (dP - D)
            d_q2[:, q0:q1].baddbmm_(ds, k_blk)  # dQ += dS K
            d_k_blk.baddbmm_(ds.transpose(1, 2), q_blk)  # dK += dSᵀ Q


class _FlashAttention(torch.autograd.Function):
    """Tiled attention on ``(BH, L, dim)`` tensors; saves q, k, v, out and lse only."""

    @staticmethod
    def forward(ctx, q, k, v, scale, shift, block_q, block_k):
        cdt = compute_dtype(q.dtype)
        q2 = q.to(cdt) * (scale * LOG2E)  # (BH, Lq, E): fold the scale into q once
        k_c, v_c = k.to(cdt), v.to(cdt)
        bh, n_queries, n_keys = q.shape[0], q.shape[1], k.shape[1]
        out = q2.new_zeros(bh, n_queries, v.shape[2])  # (BH, Lq, Ev)
        lse = q2.new_full((bh, n_queries), float("-inf"))  # (BH, Lq)

        def work(hs: slice) -> None:
            _tiled_forward(q2[hs], k_c[hs], v_c[hs], out[hs], lse[hs], shift, block_q, block_k)

        work_size = bh * n_queries * n_keys * (q.shape[2] + v.shape[2])  # multiply-adds
        run_over_heads(work, bh, work=work_size, device=q.device)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.shift, ctx.block_q, ctx.block_k = scale, shift, block_q, block_k
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        cdt = compute_dtype(q.dtype)
        q2 = q.to(cdt) * (ctx.scale * LOG2E)  # recomputed: cheaper than storing it
        k_c, v_c, out_c = k.to(cdt), v.to(cdt), out.to(cdt)
        d_out = d_out.to(cdt).contiguous()  # an expanded gradient has stride 0: BLAS needs 1
        d_lse = None if d_lse is None else d_lse.to(cdt)
        d_q2, d_k, d_v = torch.zeros_like(q2), torch.zeros_like(k_c), torch.zeros_like(v_c)

        def work(hs: slice) -> None:
            _tiled_backward(
                q2[hs], k_c[hs], v_c[hs], out_c[hs], lse[hs], d_out[hs],
                None if d_lse is None else d_lse[hs],
                d_q2[hs], d_k[hs], d_v[hs], ctx.shift, ctx.block_q, ctx.block_k,
            )  # fmt: skip

        bh, n_queries, n_keys = q.shape[0], q.shape[1], k.shape[1]
        work_size = 3 * bh * n_queries * n_keys * (q.shape[2] + v.shape[2])  # multiply-adds
        run_over_heads(work, bh, work=work_size, device=q.device)
        # Natural scores are t = scale q·k; the loop used q2 = scale log2(e) q, so
        # dq = scale (dT K) and dk = dTᵀ (scale q) = (dTᵀ q2) / log2(e).
        d_q = d_q2.mul_(ctx.scale).to(q.dtype)  # (BH, Lq, E)
        d_k = d_k.mul_(1.0 / LOG2E).to(k.dtype)  # (BH, Lk, E)
        return d_q, d_k, d_v.to(v.dtype), None, None, None, None


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    scale: float | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_k: int = DEFAULT_BLOCK_K,
    return_lse: bool = False,
    enable_gqa: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Exact softmax attention, tiled: O(n) memory in the forward and the backward.

    Equals ``attention.functional.scaled_dot_product_attention(query, key, value,
    causal=causal, causal_alignment=causal_alignment, scale=scale)`` up to rounding, without
    materialising the ``(Lq, Lk)`` scores: the largest temporary is one
    ``(B·H, block_q, block_k)`` tile.

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, Hk, Lk, E)``; ``Hk == H``, or ``H % Hk == 0`` with ``enable_gqa``.
        value: ``(B, Hk, Lk, Ev)``.
        causal: query ``i`` attends only keys ``j <= i`` (``"top_left"``, torch's
            ``is_causal``) or ``j <= i + Lk - Lq`` (``"bottom_right"``, for decoding with a
            cache). No other masks: use the dense reference or ``attention.dispatch``.
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        block_q, block_k: tile sizes (any ints >= 1; they need not divide the lengths).
        return_lse: also return the log-sum-exp of each row's scaled scores ``(B, H, Lq)``.
        enable_gqa: grouped-query attention; query head ``h`` uses key head
            ``h // (H // Hk)``, as in torch.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (float16/bfloat16 are computed in
        float32), and with ``return_lse`` the log-sum-exp ``(B, H, Lq)`` in the compute dtype
        (float32 for half inputs; natural log). A query that sees no key (bottom-right causal
        with ``Lq > Lk``) gets zeros and ``lse = -inf``; its gradients are zero. Both outputs
        are differentiable.
    """
    check_qkv(query, key, value, enable_gqa=enable_gqa)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    check_bool("causal", causal)
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    b, h, n_queries, dim_k = query.shape
    n_keys, dim_v = key.shape[2], value.shape[3]
    scale = resolve_scale(scale, dim_k)
    k, v = key, value
    if k.shape[1] != h:  # grouped-query attention: share each key/value head across its group
        group = h // k.shape[1]
        k = k.repeat_interleave(group, dim=1)  # (B, H, Lk, E); autograd sums the group's grads
        v = v.repeat_interleave(group, dim=1)  # (B, H, Lk, Ev)
    shift = causal_shift(n_queries, n_keys, causal, causal_alignment)
    out, lse = _FlashAttention.apply(
        query.reshape(b * h, n_queries, dim_k),  # (BH, Lq, E)
        k.reshape(b * h, n_keys, dim_k),  # (BH, Lk, E)
        v.reshape(b * h, n_keys, dim_v),  # (BH, Lk, Ev)
        scale,
        shift,
        block_q,
        block_k,
    )
    out = out.view(b, h, n_queries, dim_v)  # (B, H, Lq, Ev)
    if return_lse:
        return out, lse.view(b, h, n_queries)  # (B, H, Lq)
    return out
