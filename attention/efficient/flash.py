"""Exact attention in O(n) memory: FlashAttention-style tiles, and Rabe & Staats' chunks.

Dense attention builds the ``Lq × Lk`` score matrix. Both functions here give the same result
(up to rounding) without ever holding it:

* :func:`flash_attention` (Dao et al. 2022, FlashAttention-2's loop order and backward). The
  queries are cut into blocks of ``block_q`` rows; each block walks over the keys in blocks of
  ``block_k`` with an *online softmax*: a running row max ``m``, a running denominator ``l``
  and an unnormalised accumulator, rescaled by ``exp(m_old - m_new)`` when the max grows. The
  forward keeps only the output and the log-sum-exp ``lse`` of each row; the backward is a
  hand-written ``torch.autograd.Function`` that recomputes each tile's probabilities from
  ``lse`` (``P = exp(S - lse)``), with ``D = rowsum(dO ∘ O)`` and ``dS = P ∘ (dP - D)``. So
  autograd stores q, k, v, out and lse, never a graph through the tile loop: training memory
  is O(n) too.
* :func:`chunked_attention` (Rabe & Staats 2021, "Self-attention does not need O(n²)
  memory"). It teaches two different ideas, which is why it is kept next to the flash loop:
  each (query chunk, key chunk) pair is summarised *independently* by its own max, sum and
  weighted values, and the summaries are merged afterwards with a log-sum-exp combination
  (the algebra behind split-KV decoding and ring attention; the flash loop instead streams
  one running state). And it writes no backward at all: autograd differentiates the chunk
  code, and ``torch.utils.checkpoint`` per query chunk keeps only the chunk outputs, trading
  one recomputation of the forward for O(n) memory. Simpler to trust, slower to run.

Speed habits of the flash loop (pure PyTorch, CPU or GPU): every head of the batch is one
``bmm``; the scale and ``log2(e)`` are folded into ``q`` once, so the probabilities are
``exp2`` (about 3x faster than ``exp`` on CPU); scores go into one preallocated tile buffer and
the running max is subtracted inside the ``baddbmm`` that computes them; ``exp2_``,
``baddbmm_`` work in place; the accumulator is rescaled only when a row max grew by more than
``2**8`` (FlashAttention-4's lazy rescaling: exact, because the final division uses the same
reference max, and safe from overflow with that bound). With causal masking, tiles entirely
in the future are skipped and only tiles cut by the diagonal are masked. On a CPU with several
threads, large calls give each thread its own heads (see :func:`run_over_heads`).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch.autograd.function import once_differentiable
from torch.utils._python_dispatch import _get_current_dispatch_mode
from torch.utils.checkpoint import checkpoint

from .._checks import check_choice, check_positive_int, check_qkv
from ..functional import CAUSAL_ALIGNMENTS
from ..masks import sliding_window_mask

Tensor = torch.Tensor

LOG2E = math.log2(math.e)  # exp(x) == exp2(x * log2(e))
LN2 = math.log(2.0)
# Lazy rescaling: the running max used as the exponent's offset may lag the true row max by up
# to this many powers of two, so probabilities stay <= 2**8 and row sums <= Lk * 2**8, far from
# float32 overflow (half inputs are computed in float32); the result is exact either way.
RESCALE_THRESHOLD = 8.0
# Defaults measured on a 2-core CPU (fp32, B=1, H=8, head dim 64, n = 2048..8192; 128..1024
# tried): blocks this large amortise the Python loop (a tile is ~1 ms of work), and one
# thread's (4 heads × 256 × 256) float32 tile, 1 MiB, stays in its core's L2 cache.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 256


def _check_scale(scale: object) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _causal_shift(n_queries: int, n_keys: int, causal: bool, alignment: str) -> int | None:
    """``c`` such that query ``i`` may attend key ``j`` iff ``j <= i + c`` (``None``: no mask).

    The two alignments of ``attention.masks.causal_mask``: top-left ``c = 0``, bottom-right
    ``c = Lk - Lq``.
    """
    if not causal:
        return None
    return n_keys - n_queries if alignment == "bottom_right" else 0


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


class _TileMasks:
    """The causal masks of the diagonal tiles of one call (few distinct ones: cache them)."""

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


def _first_query(n_queries: int, shift: int | None) -> int:
    """Queries before this one see no key at all (bottom-right causal with Lq > Lk)."""
    return 0 if shift is None else min(n_queries, max(0, -shift))


def _flash_forward(
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
    first = _first_query(n_queries, shift)
    if n_keys == 0 or first == n_queries:
        return
    masks = _TileMasks(shift, q2.device)
    k_t = k.transpose(1, 2)  # (BH, E, Lk): a view; BLAS reads it transposed
    bq, bk = min(block_q, n_queries - first), min(block_k, n_keys)
    # Preallocated once per call: the tile loop allocates only (BH, bq, 1) row vectors.
    scores_buf = q2.new_empty(bh, bq, bk)  # (BH, bq, bk)
    acc_buf = q2.new_empty(bh, bq, dim_v)  # (BH, bq, Ev)
    for q0 in range(first, n_queries, block_q):
        q1 = min(q0 + block_q, n_queries)
        q_blk = q2[:, q0:q1]  # (BH, nq, E)
        acc = acc_buf[:, : q1 - q0]  # (BH, nq, Ev) unnormalised output
        # Causal: keys j < q1 + shift are the only ones any row of this block sees.
        k_end = n_keys if shift is None else min(n_keys, q1 + shift)
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
            if float(grow.max()) > RESCALE_THRESHOLD:  # rare after the first tiles
                grow.clamp_(min=0.0)
                s.sub_(grow)
                neg_max.sub_(grow)
                alpha = grow.neg_().exp2_()  # (BH, nq, 1) = exp2(m_old - m_new)
                row_sum.mul_(alpha)
                acc.mul_(alpha)
            s.exp2_()
            row_sum.add_(s.sum(dim=-1, keepdim=True))
            acc.baddbmm_(s, v[:, k0:k1])
        torch.div(acc, row_sum, out=out[:, q0:q1])
        # lse in natural units: (m + log2 l) * ln 2, with m = -neg_max in log2 units.
        lse[:, q0:q1] = (row_sum.log2().sub_(neg_max)).mul_(LN2).squeeze(-1)


def _flash_backward(
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
    first = _first_query(n_queries, shift)
    if n_keys == 0 or first == n_queries:
        return
    # D_i = rowsum(dO ∘ O) = Σ_j P_ij dP_ij, so that dS = P ∘ (dP - D). A gradient flowing
    # into lse adds P ∘ d_lse to dS (d lse / d S = P): fold it into D.
    delta = (d_out * out).sum(dim=-1)  # (BH, Lq)
    if d_lse is not None:
        delta = delta - d_lse
    neg_delta = delta.neg_().unsqueeze(-1)  # (BH, Lq, 1)
    neg_lse2 = (lse * -LOG2E).unsqueeze(-1)  # (BH, Lq, 1) lse in log2 units, negated
    masks = _TileMasks(shift, q2.device)
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


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# Below this much work (multiply-adds) a call runs in the calling thread: starting threads
# would cost more than it saves (2**28 is ~10 ms on one core).
PARALLEL_MIN_WORK = 1 << 28

T = TypeVar("T")
_POOL: ThreadPoolExecutor | None = None
_POOL_KEY: tuple[int, int] | None = None  # (process id, workers) the pool was made for
_POOL_LOCK = threading.Lock()


def _worker_pool(n_workers: int) -> ThreadPoolExecutor:
    """A pool kept across calls: new threads cost ~4 ms per call (thread start, per-thread
    BLAS and OpenMP set-up). Remade after a fork (the child has none of the threads)."""
    global _POOL, _POOL_KEY
    with _POOL_LOCK:
        key = (os.getpid(), n_workers)
        if _POOL is None or _POOL_KEY != key:
            _POOL = ThreadPoolExecutor(n_workers, thread_name_prefix="attention-heads")
            _POOL_KEY = key
        return _POOL


def run_over_heads(fn: Callable[[slice], T], n_heads: int, work: int, device) -> list[T]:
    """``[fn(heads) for heads in slices]`` over a flattened batch·heads axis, in parallel on CPU.

    Why threads: a tiled loop issues thousands of small torch ops. With torch's intra-op
    threading each is an OpenMP fork/join, and on a busy machine every join waits for a
    descheduled thread (10x slowdowns measured on 2 shared cores). Here each Python thread
    runs its own heads with single-threaded ops (torch releases the GIL inside an op), so the
    threads meet once, at the end, like torch's fused CPU kernel. A thread takes its op
    thread count from the global setting when it first runs an op, hence the temporary
    ``set_num_threads(1)``; the pool's threads keep that count.

    Runs ``[fn(slice(0, n_heads))]`` in the calling thread instead when: not on a CPU, one
    thread or head, less than ``PARALLEL_MIN_WORK`` multiply-adds, or a dispatch mode (memory
    or FLOP counting, fake tensors) is active: modes are per thread and would miss the ops.
    """
    n_threads = torch.get_num_threads()
    n_workers = min(n_threads, n_heads)
    if (
        torch.device(device).type != "cpu"
        or n_workers < 2
        or work < PARALLEL_MIN_WORK
        or _get_current_dispatch_mode() is not None
    ):
        return [fn(slice(0, n_heads))]
    grad_enabled = torch.is_grad_enabled()  # grad mode is per thread: carry the caller's

    def run(heads: slice) -> T:
        with torch.set_grad_enabled(grad_enabled):
            return fn(heads)

    bounds = [i * n_heads // n_workers for i in range(n_workers + 1)]
    pool = _worker_pool(n_workers)
    torch.set_num_threads(1)
    try:
        return list(pool.map(run, [slice(bounds[i], bounds[i + 1]) for i in range(n_workers)]))
    finally:
        torch.set_num_threads(n_threads)


class _FlashAttention(torch.autograd.Function):
    """Tiled attention on ``(BH, L, dim)`` tensors; saves q, k, v, out and lse only."""

    @staticmethod
    def forward(ctx, q, k, v, scale, shift, block_q, block_k):
        cdt = _compute_dtype(q.dtype)
        q2 = q.to(cdt) * (scale * LOG2E)  # (BH, Lq, E): fold the scale into q once
        k_c, v_c = k.to(cdt), v.to(cdt)
        bh, n_queries, n_keys = q.shape[0], q.shape[1], k.shape[1]
        out = q2.new_zeros(bh, n_queries, v.shape[2])  # (BH, Lq, Ev)
        lse = q2.new_full((bh, n_queries), float("-inf"))  # (BH, Lq)

        def work(hs: slice) -> None:
            _flash_forward(q2[hs], k_c[hs], v_c[hs], out[hs], lse[hs], shift, block_q, block_k)

        run_over_heads(work, bh, bh * n_queries * n_keys * (q.shape[2] + v.shape[2]), q.device)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.shift, ctx.block_q, ctx.block_k = scale, shift, block_q, block_k
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        cdt = _compute_dtype(q.dtype)
        q2 = q.to(cdt) * (ctx.scale * LOG2E)  # recomputed: cheaper than storing it
        k_c, v_c, out_c = k.to(cdt), v.to(cdt), out.to(cdt)
        d_out = d_out.to(cdt).contiguous()  # an expanded gradient has stride 0: BLAS needs 1
        d_lse = None if d_lse is None else d_lse.to(cdt)
        d_q2, d_k, d_v = torch.zeros_like(q2), torch.zeros_like(k_c), torch.zeros_like(v_c)

        def work(hs: slice) -> None:
            _flash_backward(
                q2[hs], k_c[hs], v_c[hs], out_c[hs], lse[hs], d_out[hs],
                None if d_lse is None else d_lse[hs],
                d_q2[hs], d_k[hs], d_v[hs], ctx.shift, ctx.block_q, ctx.block_k,
            )  # fmt: skip

        bh, n_queries, n_keys = q.shape[0], q.shape[1], k.shape[1]
        run_over_heads(work, bh, 3 * bh * n_queries * n_keys * (q.shape[2] + v.shape[2]), q.device)
        # Natural scores are t = scale q·k; the loop used q2 = scale log2(e) q, so
        # dq = scale (dT K) and dk = dTᵀ (scale q) = (dTᵀ q2) / log2(e).
        d_q = d_q2.mul_(ctx.scale).to(q.dtype)  # (BH, Lq, E)
        d_k = d_k.mul_(1.0 / LOG2E).to(k.dtype)  # (BH, Lk, E)
        return d_q, d_k, d_v.to(v.dtype), None, None, None, None


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
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

    Equals ``attention.functional.scaled_dot_product_attention(q, k, v, causal=causal,
    causal_alignment=causal_alignment, scale=scale)`` up to rounding, without materialising
    the ``(Lq, Lk)`` scores: the largest temporary is one ``(B·H, block_q, block_k)`` tile.

    Args:
        q: ``(B, H, Lq, E)``.
        k: ``(B, Hk, Lk, E)``; ``Hk == H``, or ``H % Hk == 0`` with ``enable_gqa``.
        v: ``(B, Hk, Lk, Ev)``.
        causal: query ``i`` attends only keys ``j <= i`` (``"top_left"``, torch's
            ``is_causal``) or ``j <= i + Lk - Lq`` (``"bottom_right"``, for decoding with a
            cache). No other masks: use the dense reference or ``attention.dispatch``.
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        block_q, block_k: tile sizes (any ints >= 1; they need not divide the lengths).
        return_lse: also return the log-sum-exp of each row's scaled scores ``(B, H, Lq)``.
        enable_gqa: grouped-query attention; query head ``h`` uses key head
            ``h // (H // Hk)``, as in torch.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``q`` (float16/bfloat16 are computed in float32),
        and with ``return_lse`` the log-sum-exp ``(B, H, Lq)`` in the compute dtype (float32
        for half inputs; natural log). A query that sees no key (bottom-right causal with
        ``Lq > Lk``) gets zeros and ``lse = -inf``; its gradients are zero. Both outputs are
        differentiable.
    """
    check_qkv(q, k, v, enable_gqa=enable_gqa)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    scale = _check_scale(scale)
    b, h, n_queries, dim_k = q.shape
    n_keys, dim_v = k.shape[2], v.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(dim_k) if dim_k > 0 else 1.0
    if k.shape[1] != h:  # grouped-query attention: share each key/value head across its group
        group = h // k.shape[1]
        k = k.repeat_interleave(group, dim=1)  # (B, H, Lk, E); autograd sums the group's grads
        v = v.repeat_interleave(group, dim=1)  # (B, H, Lk, Ev)
    shift = _causal_shift(n_queries, n_keys, causal, causal_alignment)
    out, lse = _FlashAttention.apply(
        q.reshape(b * h, n_queries, dim_k),  # (BH, Lq, E)
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


def _attend_query_chunk(
    q_chunk: Tensor, k: Tensor, v: Tensor, q0: int, key_chunk: int, shift: int | None
) -> Tensor:
    """One query chunk ``(B, H, cq, E)`` (already scaled) against all keys, Rabe & Staats style.

    Each key chunk is summarised on its own: its row max ``m_c``, ``sum_c = Σ exp(s - m_c)``
    and ``values_c = Σ exp(s - m_c) v``. The summaries merge exactly with the global max
    ``M = max_c m_c``: ``out = Σ_c values_c e^(m_c - M) / Σ_c sum_c e^(m_c - M)``.
    Plain autograd code: the caller checkpoints it.
    """
    n_rows, n_keys = q_chunk.shape[2], k.shape[2]
    q1 = q0 + n_rows
    k_end = n_keys if shift is None else min(n_keys, q1 + shift)
    masks = _TileMasks(shift, q_chunk.device)
    maxes, sums, values = [], [], []
    for k0 in range(0, k_end, key_chunk):
        k1 = min(k0 + key_chunk, k_end)
        scores = q_chunk @ k[:, :, k0:k1].transpose(-2, -1)  # (B, H, cq, ck)
        blocked = masks.get(q0, q1, k0, k1)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        # The max is only a shift for stability: the merged result does not depend on it, so
        # it needs no gradient. A row with no allowed key here keeps -inf (weight 0 in the
        # merge) but is shifted by 0 so that exp never sees (-inf) - (-inf).
        row_max = scores.detach().amax(dim=-1, keepdim=True)  # (B, H, cq, 1)
        shift_by = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        p = torch.exp(scores - shift_by)  # (B, H, cq, ck)
        maxes.append(row_max)
        sums.append(p.sum(dim=-1, keepdim=True))  # (B, H, cq, 1)
        values.append(p @ v[:, :, k0:k1])  # (B, H, cq, Ev)
    if not maxes:  # no key visible to any row of the chunk
        return q_chunk.new_zeros(*q_chunk.shape[:-1], v.shape[-1])
    global_max = torch.stack(maxes).amax(dim=0)  # (B, H, cq, 1)
    global_max = torch.where(torch.isfinite(global_max), global_max, torch.zeros_like(global_max))
    weights = [torch.exp(m - global_max) for m in maxes]  # exp(-inf) = 0 for empty chunks
    numerator = sum(val * w for val, w in zip(values, weights, strict=True))  # (B, H, cq, Ev)
    denominator = sum(s * w for s, w in zip(sums, weights, strict=True))  # (B, H, cq, 1)
    # A row with no key at all: 0 / 1 = 0, with finite gradients.
    denominator = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return numerator / denominator


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    query_chunk: int = 256,
    key_chunk: int = 1024,
    causal: bool = False,
    causal_alignment: str = "top_left",
    scale: float | None = None,
) -> Tensor:
    """Memory-efficient exact attention by chunks (Rabe & Staats 2021), backward by autograd.

    Queries are processed ``query_chunk`` at a time, each inside ``torch.utils.checkpoint``
    (only the chunk outputs are kept for the backward, which recomputes one chunk at a time);
    within a chunk, keys are processed ``key_chunk`` at a time and merged by log-sum-exp (see
    the module docstring). Peak memory: one chunk's ``(B, H, query_chunk, Lk)`` worth of
    autograd graph, linear in ``Lk``. The paper used 1024 and 4096 on TPUs; on a CPU smaller
    chunks stay in cache (256 and 1024 measured 2x faster at n = 2048).

    Args:
        q: ``(B, H, Lq, E)``; k: ``(B, H, Lk, E)``; v: ``(B, H, Lk, Ev)``.
        query_chunk, key_chunk: chunk sizes (ints >= 1; need not divide the lengths).
        causal, causal_alignment, scale: as in :func:`flash_attention`.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``q`` (half precision computed in float32). A query
        that sees no key gets zeros.
    """
    check_qkv(q, k, v)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    query_chunk = check_positive_int("query_chunk", query_chunk)
    key_chunk = check_positive_int("key_chunk", key_chunk)
    scale = _check_scale(scale)
    b, h, n_queries, dim_k = q.shape
    n_keys, dim_v = k.shape[2], v.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(dim_k) if dim_k > 0 else 1.0
    cdt = _compute_dtype(q.dtype)
    # Heads flattened into one axis (batch 1), so that run_over_heads can split them.
    q_scaled = q.to(cdt).reshape(1, b * h, n_queries, dim_k) * scale  # (1, BH, Lq, E)
    k = k.to(cdt).reshape(1, b * h, n_keys, dim_k)  # (1, BH, Lk, E)
    v = v.to(cdt).reshape(1, b * h, n_keys, dim_v)  # (1, BH, Lk, Ev)
    shift = _causal_shift(n_queries, n_keys, causal, causal_alignment)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q_scaled, k, v))

    def heads(hs: slice) -> Tensor:
        chunks = []
        for q0 in range(0, n_queries, query_chunk):
            q_chunk = q_scaled[:, hs, q0 : q0 + query_chunk]  # (1, bh, cq, E)
            args = (q_chunk, k[:, hs], v[:, hs], q0, key_chunk, shift)
            if needs_grad:
                chunks.append(checkpoint(_attend_query_chunk, *args, use_reentrant=False))
            else:
                chunks.append(_attend_query_chunk(*args))
        return torch.cat(chunks, dim=2) if chunks else v.new_zeros(1, hs.stop - hs.start, 0, dim_v)

    parts = run_over_heads(heads, b * h, b * h * n_queries * n_keys * (dim_k + dim_v), q.device)
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (1, BH, Lq, Ev)
    return out.view(b, h, n_queries, dim_v).to(q.dtype)
