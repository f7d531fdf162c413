"""FlashAttention-2 in Triton: forward and backward kernels, wrapped for autograd.

The algorithm of ``attention.efficient.flash`` (tiles of queries, an online softmax over tiles of
keys, nothing of size ``Lq x Lk`` in memory) written as GPU kernels:

* forward: one program per (query tile, head, batch); it keeps the running row max ``m``, the
  running denominator ``l`` and the unnormalised output in float32 registers, and writes the
  output and the log-sum-exp ``lse`` of every row (all the backward pass needs to rebuild the
  weights);
* backward, FlashAttention-2 style: a preprocessing kernel ``delta = rowsum(dO * O)``, one kernel
  per key tile for ``dK, dV`` (it loops over the query tiles), one kernel per query tile for
  ``dQ`` (it loops over the key tiles). The weights are recomputed from ``lse``, never stored.
  No atomics, so gradients are deterministic.

Speed habits (for Hopper, H100/H200): ``exp2`` with ``log2(e)`` folded into the scale; the key
loop split into tiles that need no mask (causal: the tiles left of the diagonal; always: whole
tiles inside the sequence) and the few that do (the diagonal, the ragged last tile); float32
accumulators; causal query tiles launched heaviest first; the batch and head in the grid's slow
axes so that programs running together share keys and values in L2.

Supported: float16, bfloat16, float32 (float32 dots use TF32 unless
``torch.get_float32_matmul_precision() == "highest"``); head dims 1..128 (widths that are not a
power of two >= 16 are padded inside the kernel with masked loads; the tensors are not copied);
any lengths, and ``Lq != Lk``. ``causal`` is top-left aligned like torch's ``is_causal`` (query
``i`` sees keys ``j <= i``), so no row is ever fully masked. Not supported (use
``attention.dispatch.attend``, which routes elsewhere): arbitrary masks, dropout,
grouped-query attention, a value width different from the query width.

The module imports without triton and without a GPU: ``TRITON_AVAILABLE`` says whether triton
imported, :func:`triton_unavailable_reason` why the kernel cannot run for a device. On a
machine without a GPU set ``TRITON_INTERPRET=1`` *before this module is imported* and the same
kernels run on CPU tensors in Triton's interpreter (slowly; for tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from .._checks import check_bool, check_qkv, resolve_scale

Tensor = torch.Tensor

try:  # triton is optional: the package must import on any machine
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
    _TRITON_IMPORT_ERROR: str | None = None
except Exception as err:  # ImportError, or a broken install failing at import
    triton = None
    tl = None
    TRITON_AVAILABLE = False
    _TRITON_IMPORT_ERROR = f"{type(err).__name__}: {err}"

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * log2(e))
MAX_HEAD_DIM = 128
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and launch parameters of one kernel.

    ``block_m`` queries x ``block_n`` keys per step. The forward and dQ kernels loop over key
    tiles and need ``block_m % block_n == 0``; the dK/dV kernel loops over query tiles and
    needs ``block_n % block_m == 0`` (so the causal diagonal is a whole number of tiles).
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class FlashConfigs:
    """The three kernels' configurations for one call (the preprocessing kernel is trivial)."""

    forward: KernelConfig
    dkdv: KernelConfig
    dq: KernelConfig

    def validate(self) -> None:
        """Raise ``ValueError`` unless every tile is >= 16 and each kernel's looping tile
        divides its fixed one."""
        for name, cfg, outer, inner in (
            ("forward", self.forward, self.forward.block_m, self.forward.block_n),
            ("dq", self.dq, self.dq.block_m, self.dq.block_n),
            ("dkdv", self.dkdv, self.dkdv.block_n, self.dkdv.block_m),
        ):
            if min(cfg.block_m, cfg.block_n) < 16 or outer % inner:
                raise ValueError(
                    f"{name} config {cfg} is invalid: tiles must be >= 16 and the looping tile "
                    f"must divide the fixed one"
                )


# Hopper-sized tiles. Registers decide most of it: the dK/dV kernel holds two (block_n, d)
# float32 accumulators, so at d = 128 it wants 8 warps and a short query tile. float32 tiles
# are halved (twice the shared memory per element). bench/gpu_check.py sweeps alternatives.
_CONFIGS_16BIT_D128 = FlashConfigs(
    forward=KernelConfig(128, 64, num_warps=8, num_stages=3),
    dkdv=KernelConfig(32, 128, num_warps=8, num_stages=3),
    dq=KernelConfig(128, 32, num_warps=8, num_stages=3),
)
_CONFIGS_16BIT_D64 = FlashConfigs(
    forward=KernelConfig(128, 64, num_warps=4, num_stages=4),
    dkdv=KernelConfig(32, 128, num_warps=4, num_stages=4),
    dq=KernelConfig(128, 32, num_warps=4, num_stages=4),
)
_CONFIGS_FP32 = FlashConfigs(
    forward=KernelConfig(64, 32, num_warps=4, num_stages=2),
    dkdv=KernelConfig(16, 64, num_warps=4, num_stages=2),
    dq=KernelConfig(64, 16, num_warps=4, num_stages=2),
)
# Small enough to fit any CUDA GPU's shared memory: the retry after an OutOfResources error.
_CONFIGS_SMALL = FlashConfigs(
    forward=KernelConfig(32, 32, num_warps=4, num_stages=1),
    dkdv=KernelConfig(16, 32, num_warps=4, num_stages=1),
    dq=KernelConfig(32, 16, num_warps=4, num_stages=1),
)
# The interpreter runs each program as numpy code: small tiles keep the tests fast and make
# short test sequences span several tiles, so every loop stage is exercised.
_CONFIGS_INTERPRETER = FlashConfigs(
    forward=KernelConfig(16, 16, num_warps=1, num_stages=1),
    dkdv=KernelConfig(16, 16, num_warps=1, num_stages=1),
    dq=KernelConfig(16, 16, num_warps=1, num_stages=1),
)


def _block_d(head_dim: int) -> int:
    """Head dim padded to a power of two >= 16 (tl.dot's smallest inner dimension)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def choose_configs(head_dim: int, dtype: torch.dtype) -> FlashConfigs:
    """The tiles used for a head dim and dtype (interpreter: small tiles)."""
    if _INTERPRETED:
        return _CONFIGS_INTERPRETER
    if dtype == torch.float32:
        return _CONFIGS_FP32
    return _CONFIGS_16BIT_D128 if _block_d(head_dim) > 64 else _CONFIGS_16BIT_D64


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------
# Lengths and head counts are not specialised (do_not_specialize): triton would otherwise
# compile a new binary whenever one of them changes divisibility by 16, and they only bound
# loops and masks. Strides are specialised (their alignment lets loads vectorise).

if TRITON_AVAILABLE:

    @triton.jit
    def _load_tile(ptrs, row_ok, d_ok, MASK_ROWS: tl.constexpr, PAD_D: tl.constexpr):
        """Load a (rows, BLOCK_D) tile; masks only where the tile can leave the tensor."""
        if MASK_ROWS:
            if PAD_D:
                tile = tl.load(ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            else:
                tile = tl.load(ptrs, mask=row_ok[:, None], other=0.0)
        else:
            if PAD_D:
                tile = tl.load(ptrs, mask=d_ok[None, :], other=0.0)
            else:
                tile = tl.load(ptrs)
        return tile

    @triton.jit
    def _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_vn,
        offs_m,
        offs_n,
        offs_d,
        d_ok,
        lo,
        hi,
        N_K,
        qk_scale,
        MASKED: tl.constexpr,
        CAUSAL: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        """Online softmax over key tiles [lo, hi). Scores are kept in log2 units."""
        k_ptrs = k_base + (lo + offs_n)[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_base + (lo + offs_n)[:, None] * stride_vn + offs_d[None, :]
        for start_n in range(lo, hi, BLOCK_N):
            n_ok = (start_n + offs_n) < N_K
            k = _load_tile(k_ptrs, n_ok, d_ok, MASKED, PAD_D)  # (BLOCK_N, BLOCK_D)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
            if MASKED:
                keep = n_ok[None, :]
                if CAUSAL:
                    keep = keep & ((start_n + offs_n)[None, :] <= offs_m[:, None])
                qk = tl.where(keep, qk * qk_scale, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(qk, 1))  # (BLOCK_M,)
                # A row that has seen no allowed key yet has max -inf; exponentiate against 0
                # instead (every term is exp2(-inf) = 0) so that no (-inf) - (-inf) = NaN.
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                p = tl.math.exp2(qk - m_use[:, None])  # (BLOCK_M, BLOCK_N)
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
                m_use = m_new
                p = tl.math.exp2(qk * qk_scale - m_use[:, None])  # (BLOCK_M, BLOCK_N)
            alpha = tl.math.exp2(m_i - m_use)  # rescales what was summed under the old max
            l_i = l_i * alpha + tl.sum(p, 1)
            v = _load_tile(v_ptrs, n_ok, d_ok, MASKED, PAD_D)  # (BLOCK_N, BLOCK_D)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
            m_i = m_new
            k_ptrs += BLOCK_N * stride_kn
            v_ptrs += BLOCK_N * stride_vn
        return acc, l_i, m_i

    @triton.jit(do_not_specialize=["H", "N_Q", "N_K"])
    def _fwd_kernel(
        Q,
        K,
        V,
        O,
        LSE,
        qk_scale,
        stride_qb,
        stride_qh,
        stride_qm,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_ob,
        stride_oh,
        stride_om,
        H,
        N_Q,
        N_K,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        if CAUSAL:  # late query tiles see the most keys: start them first
            pid_m = tl.cdiv(N_Q, BLOCK_M) - 1 - pid_m
        off_h = tl.program_id(1)
        off_b = tl.program_id(2)
        q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        k_base = K + off_b.to(tl.int64) * stride_kb + off_h.to(tl.int64) * stride_kh
        v_base = V + off_b.to(tl.int64) * stride_vb + off_h.to(tl.int64) * stride_vh
        o_base = O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = offs_m < N_Q
        d_ok = offs_d < HEAD_DIM
        q_ptrs = q_base + offs_m[:, None] * stride_qm + offs_d[None, :]
        q = _load_tile(q_ptrs, m_ok, d_ok, True, PAD_D)  # (BLOCK_M, BLOCK_D)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        # Key tiles [0, hi_free) need no mask: whole tiles inside the sequence and, if causal,
        # entirely left of this query tile. [hi_free, hi) are masked: the causal diagonal and
        # the ragged last tile. Keys from hi on are never visited.
        n_full = (N_K // BLOCK_N) * BLOCK_N
        if CAUSAL:
            hi_free = tl.minimum(pid_m * BLOCK_M, n_full)
            hi = tl.minimum((pid_m + 1) * BLOCK_M, N_K)
        else:
            hi_free = n_full
            hi = N_K
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            d_ok, 0, hi_free, N_K, qk_scale,
            False, CAUSAL, PAD_D, BLOCK_N, DOT_PRECISION,
        )  # fmt: skip
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d,
            d_ok, hi_free, hi, N_K, qk_scale,
            True, CAUSAL, PAD_D, BLOCK_N, DOT_PRECISION,
        )  # fmt: skip

        empty = l_i == 0.0  # no allowed key (cannot happen top-left causal; kept for safety)
        l_safe = tl.where(empty, 1.0, l_i)
        out = acc / l_safe[:, None]  # (BLOCK_M, BLOCK_D)
        # lse in log2 units of the scaled scores; +inf for an empty row makes the backward
        # pass's exp2(s - lse) zero there.
        lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe))  # (BLOCK_M,)
        lse_ptrs = LSE + (off_b * H + off_h).to(tl.int64) * N_Q + offs_m
        tl.store(lse_ptrs, lse, mask=m_ok)
        o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])

    @triton.jit(do_not_specialize=["H", "N_Q"])
    def _bwd_preprocess_kernel(
        O,
        DO,
        DELTA,
        stride_ob,
        stride_oh,
        stride_om,
        stride_dob,
        stride_doh,
        stride_dom,
        H,
        N_Q,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_M: tl.constexpr,
    ):
        """delta_i = sum_d dO_id * O_id: the row term of the softmax gradient."""
        pid_m = tl.program_id(0)
        off_h = tl.program_id(1)
        off_b = tl.program_id(2)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = offs_m < N_Q
        d_ok = offs_d < HEAD_DIM
        o_ptrs = (
            O
            + off_b.to(tl.int64) * stride_ob
            + off_h.to(tl.int64) * stride_oh
            + offs_m[:, None] * stride_om
            + offs_d[None, :]
        )
        do_ptrs = (
            DO
            + off_b.to(tl.int64) * stride_dob
            + off_h.to(tl.int64) * stride_doh
            + offs_m[:, None] * stride_dom
            + offs_d[None, :]
        )
        o = _load_tile(o_ptrs, m_ok, d_ok, True, PAD_D).to(tl.float32)  # (BLOCK_M, BLOCK_D)
        do = _load_tile(do_ptrs, m_ok, d_ok, True, PAD_D).to(tl.float32)  # (BLOCK_M, BLOCK_D)
        delta = tl.sum(o * do, 1)  # (BLOCK_M,)
        tl.store(DELTA + (off_b * H + off_h).to(tl.int64) * N_Q + offs_m, delta, mask=m_ok)

    @triton.jit
    def _dkdv_inner(
        dk,
        dv,
        k,
        v,
        q_base,
        do_base,
        stride_qm,
        stride_dom,
        lse_base,
        delta_base,
        offs_n,
        offs_mb,
        offs_d,
        d_ok,
        lo,
        hi,
        N_Q,
        qk_scale,
        MASKED: tl.constexpr,
        CAUSAL: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        """Accumulate dK, dV of one key tile over query tiles [lo, hi), transposed (keys x
        queries) so that the key tile stays in place."""
        q_ptrs = q_base + (lo + offs_mb)[:, None] * stride_qm + offs_d[None, :]
        do_ptrs = do_base + (lo + offs_mb)[:, None] * stride_dom + offs_d[None, :]
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + offs_mb
            m_ok = offs_m < N_Q
            q = _load_tile(q_ptrs, m_ok, d_ok, MASKED, PAD_D)  # (BLOCK_M, BLOCK_D)
            if MASKED:  # rows past the end: lse = +inf makes their weights exp2(-inf) = 0
                lse = tl.load(lse_base + offs_m, mask=m_ok, other=float("inf"))
                delta = tl.load(delta_base + offs_m, mask=m_ok, other=0.0)
            else:
                lse = tl.load(lse_base + offs_m)
                delta = tl.load(delta_base + offs_m)
            qk_t = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
            p_t = tl.math.exp2(qk_t * qk_scale - lse[None, :])  # the forward weights, Pᵀ
            if MASKED:
                keep = m_ok[None, :]
                if CAUSAL:
                    keep = keep & (offs_m[None, :] >= offs_n[:, None])
                p_t = tl.where(keep, p_t, 0.0)
            do = _load_tile(do_ptrs, m_ok, d_ok, MASKED, PAD_D)  # (BLOCK_M, BLOCK_D)
            dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
            ds_t = p_t * (dp_t - delta[None, :])  # dScoresᵀ (unscaled)
            dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=DOT_PRECISION)
            q_ptrs += BLOCK_M * stride_qm
            do_ptrs += BLOCK_M * stride_dom
        return dk, dv

    @triton.jit(do_not_specialize=["H", "N_Q", "N_K"])
    def _bwd_dkdv_kernel(
        Q,
        K,
        V,
        DO,
        DK,
        DV,
        LSE,
        DELTA,
        sm_scale,
        qk_scale,
        stride_qb,
        stride_qh,
        stride_qm,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_dob,
        stride_doh,
        stride_dom,
        stride_dkb,
        stride_dkh,
        stride_dkn,
        stride_dvb,
        stride_dvh,
        stride_dvn,
        H,
        N_Q,
        N_K,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        pid_n = tl.program_id(0)
        off_h = tl.program_id(1)
        off_b = tl.program_id(2)
        b64 = off_b.to(tl.int64)
        h64 = off_h.to(tl.int64)
        q_base = Q + b64 * stride_qb + h64 * stride_qh
        do_base = DO + b64 * stride_dob + h64 * stride_doh
        stats = (off_b * H + off_h).to(tl.int64) * N_Q
        lse_base = LSE + stats
        delta_base = DELTA + stats

        start_n = pid_n * BLOCK_N
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_mb = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        n_ok = offs_n < N_K
        d_ok = offs_d < HEAD_DIM
        # Keys past the end load as zeros; their dK/dV rows are computed but never stored, and
        # they cannot reach other rows (each key's gradient depends on that key alone).
        k_ptrs = K + b64 * stride_kb + h64 * stride_kh + offs_n[:, None] * stride_kn
        v_ptrs = V + b64 * stride_vb + h64 * stride_vh + offs_n[:, None] * stride_vn
        k = _load_tile(k_ptrs + offs_d[None, :], n_ok, d_ok, True, PAD_D)  # (BLOCK_N, BLOCK_D)
        v = _load_tile(v_ptrs + offs_d[None, :], n_ok, d_ok, True, PAD_D)  # (BLOCK_N, BLOCK_D)
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

        # Query tiles: [lo_free, m_full) need no mask; masked: the causal diagonal
        # [start_n, start_n + BLOCK_N) (queries before start_n see none of these keys) and the
        # ragged last tile.
        m_full = (N_Q // BLOCK_M) * BLOCK_M
        if CAUSAL:
            dk, dv = _dkdv_inner(
                dk, dv, k, v, q_base, do_base, stride_qm, stride_dom, lse_base, delta_base,
                offs_n, offs_mb, offs_d, d_ok, start_n, tl.minimum(start_n + BLOCK_N, N_Q),
                N_Q, qk_scale,
                True, CAUSAL, PAD_D, BLOCK_M, DOT_PRECISION,
            )  # fmt: skip
            lo_free = start_n + BLOCK_N
            lo_tail = tl.maximum(lo_free, m_full)
        else:
            lo_free = 0
            lo_tail = m_full
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, stride_qm, stride_dom, lse_base, delta_base,
            offs_n, offs_mb, offs_d, d_ok, lo_free, m_full,
            N_Q, qk_scale,
            False, CAUSAL, PAD_D, BLOCK_M, DOT_PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, stride_qm, stride_dom, lse_base, delta_base,
            offs_n, offs_mb, offs_d, d_ok, lo_tail, N_Q,
            N_Q, qk_scale,
            True, CAUSAL, PAD_D, BLOCK_M, DOT_PRECISION,
        )  # fmt: skip

        dk = dk * sm_scale  # d(scores)/dK carries the scale; the weights were in log2 units
        out_mask = n_ok[:, None] & d_ok[None, :]
        dk_ptrs = DK + b64 * stride_dkb + h64 * stride_dkh + offs_n[:, None] * stride_dkn
        dv_ptrs = DV + b64 * stride_dvb + h64 * stride_dvh + offs_n[:, None] * stride_dvn
        tl.store(dk_ptrs + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=out_mask)
        tl.store(dv_ptrs + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=out_mask)

    @triton.jit
    def _dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        stride_kn,
        stride_vn,
        offs_m,
        offs_n,
        offs_d,
        d_ok,
        lo,
        hi,
        N_K,
        qk_scale,
        MASKED: tl.constexpr,
        CAUSAL: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        """Accumulate dQ of one query tile over key tiles [lo, hi)."""
        k_ptrs = k_base + (lo + offs_n)[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_base + (lo + offs_n)[:, None] * stride_vn + offs_d[None, :]
        for start_n in range(lo, hi, BLOCK_N):
            n_ok = (start_n + offs_n) < N_K
            k = _load_tile(k_ptrs, n_ok, d_ok, MASKED, PAD_D)  # (BLOCK_N, BLOCK_D)
            v = _load_tile(v_ptrs, n_ok, d_ok, MASKED, PAD_D)  # (BLOCK_N, BLOCK_D)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
            p = tl.math.exp2(qk * qk_scale - lse[:, None])  # the forward weights
            if MASKED:
                keep = n_ok[None, :]
                if CAUSAL:
                    keep = keep & ((start_n + offs_n)[None, :] <= offs_m[:, None])
                p = tl.where(keep, p, 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
            ds = p * (dp - delta[:, None])  # dScores (unscaled)
            dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PRECISION)
            k_ptrs += BLOCK_N * stride_kn
            v_ptrs += BLOCK_N * stride_vn
        return dq

    @triton.jit(do_not_specialize=["H", "N_Q", "N_K"])
    def _bwd_dq_kernel(
        Q,
        K,
        V,
        DO,
        DQ,
        LSE,
        DELTA,
        sm_scale,
        qk_scale,
        stride_qb,
        stride_qh,
        stride_qm,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_dob,
        stride_doh,
        stride_dom,
        stride_dqb,
        stride_dqh,
        stride_dqm,
        H,
        N_Q,
        N_K,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
        PAD_D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        if CAUSAL:
            pid_m = tl.cdiv(N_Q, BLOCK_M) - 1 - pid_m
        off_h = tl.program_id(1)
        off_b = tl.program_id(2)
        b64 = off_b.to(tl.int64)
        h64 = off_h.to(tl.int64)
        k_base = K + b64 * stride_kb + h64 * stride_kh
        v_base = V + b64 * stride_vb + h64 * stride_vh

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = offs_m < N_Q
        d_ok = offs_d < HEAD_DIM
        q_ptrs = Q + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qm
        do_ptrs = DO + b64 * stride_dob + h64 * stride_doh + offs_m[:, None] * stride_dom
        q = _load_tile(q_ptrs + offs_d[None, :], m_ok, d_ok, True, PAD_D)  # (BLOCK_M, BLOCK_D)
        do = _load_tile(do_ptrs + offs_d[None, :], m_ok, d_ok, True, PAD_D)  # (BLOCK_M, BLOCK_D)
        stats = (off_b * H + off_h).to(tl.int64) * N_Q + offs_m
        lse = tl.load(LSE + stats, mask=m_ok, other=float("inf"))  # (BLOCK_M,)
        delta = tl.load(DELTA + stats, mask=m_ok, other=0.0)  # (BLOCK_M,)
        dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        n_full = (N_K // BLOCK_N) * BLOCK_N  # same tile split as the forward kernel
        if CAUSAL:
            hi_free = tl.minimum(pid_m * BLOCK_M, n_full)
            hi = tl.minimum((pid_m + 1) * BLOCK_M, N_K)
        else:
            hi_free = n_full
            hi = N_K
        dq = _dq_inner(
            dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
            offs_d, d_ok, 0, hi_free, N_K, qk_scale,
            False, CAUSAL, PAD_D, BLOCK_N, DOT_PRECISION,
        )  # fmt: skip
        dq = _dq_inner(
            dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
            offs_d, d_ok, hi_free, hi, N_K, qk_scale,
            True, CAUSAL, PAD_D, BLOCK_N, DOT_PRECISION,
        )  # fmt: skip

        dq = dq * sm_scale
        dq_ptrs = DQ + b64 * stride_dqb + h64 * stride_dqh + offs_m[:, None] * stride_dqm
        tl.store(
            dq_ptrs + offs_d[None, :],
            dq.to(DQ.dtype.element_ty),
            mask=m_ok[:, None] & d_ok[None, :],
        )

    # Decided when the kernels were decorated: TRITON_INTERPRET must be set before import.
    _INTERPRETED = type(_fwd_kernel).__name__ == "InterpretedFunction"
else:
    _INTERPRETED = False


# ---------------------------------------------------------------------------------------------
# Availability
# ---------------------------------------------------------------------------------------------


def interpreter_mode() -> bool:
    """True when the kernels were built for Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return _INTERPRETED


def triton_unavailable_reason(
    device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> str | None:
    """Why :func:`triton_flash_attention` cannot run on ``device`` (and ``dtype``); ``None`` if
    it can. ``device=None`` asks about the default device (CUDA if present, else the CPU)."""
    if not TRITON_AVAILABLE:
        return f"triton is not installed or failed to import ({_TRITON_IMPORT_ERROR})"
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if dtype is not None and dtype not in SUPPORTED_DTYPES:
        return f"the kernel supports {list(SUPPORTED_DTYPES)}, not {dtype}"
    if _INTERPRETED:
        if device.type != "cpu":
            return (
                f"triton runs in interpreter mode (TRITON_INTERPRET=1 at import), which takes "
                f"CPU tensors only; got device {device}"
            )
        return None
    if device.type != "cuda":
        return (
            f"the Triton kernel needs a CUDA device, got {device} (for CPU tests set "
            f"TRITON_INTERPRET=1 before importing attention.gpu.triton_flash)"
        )
    if not torch.cuda.is_available():
        return "torch sees no CUDA device (torch.cuda.is_available() is False)"
    if dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) < (8, 0):
        return "bfloat16 needs a GPU of compute capability >= 8.0 (Ampere or newer)"
    return None


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------


def _dot_precision(dtype: torch.dtype) -> str:
    """float32 dots: TF32 unless the user asked torch for full float32 matmuls."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"  # triton's default; for 16-bit inputs it changes nothing


def _last_dim_contiguous(t: Tensor) -> Tensor:
    # The kernels assume unit stride along the head dim (vectorised loads); any other strides
    # (e.g. a (B, L, H, E) tensor viewed as (B, H, L, E)) are passed through untouched.
    return t if t.stride(-1) == 1 else t.contiguous()


def _with_retry(launch, configs: FlashConfigs):
    """Run ``launch(configs)``; on a GPU without the shared memory for these tiles, retry once
    with small tiles."""
    try:
        return launch(configs)
    except Exception as err:
        if _INTERPRETED or type(err).__name__ != "OutOfResources" or configs == _CONFIGS_SMALL:
            raise
        return launch(_CONFIGS_SMALL)


def _launch_forward(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, configs: FlashConfigs
) -> tuple[Tensor, Tensor]:
    """Launch the forward kernel. Returns the output ``(B, H, Lq, E)`` (contiguous) and the
    log-sum-exp ``(B, H, Lq)`` float32 in log2 units of the scaled scores."""
    b, h, lq, e = q.shape
    lk = k.shape[2]
    block_d = _block_d(e)
    out = torch.empty((b, h, lq, e), dtype=q.dtype, device=q.device)  # (B, H, Lq, E)
    lse = torch.empty((b, h, lq), dtype=torch.float32, device=q.device)  # (B, H, Lq)

    def launch(cfgs: FlashConfigs):
        cfg = cfgs.forward
        grid = (triton.cdiv(lq, cfg.block_m), h, b)
        _fwd_kernel[grid](
            q, k, v, out, lse, scale * LOG2E,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            h, lq, lk,
            HEAD_DIM=e, BLOCK_D=block_d, PAD_D=block_d != e,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal,
            DOT_PRECISION=_dot_precision(q.dtype),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip

    _with_retry(launch, configs)
    return out, lse


def _launch_backward(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    causal: bool,
    scale: float,
    configs: FlashConfigs,
) -> tuple[Tensor, Tensor, Tensor]:
    """Launch the three backward kernels; returns ``dq, dk, dv`` shaped like ``q, k, v``."""
    b, h, lq, e = q.shape
    lk = k.shape[2]
    block_d = _block_d(e)
    d_out = _last_dim_contiguous(d_out)
    delta = torch.empty_like(lse)  # (B, H, Lq) float32
    dq = torch.empty((b, h, lq, e), dtype=q.dtype, device=q.device)  # (B, H, Lq, E)
    dk = torch.empty((b, h, lk, e), dtype=k.dtype, device=k.device)  # (B, H, Lk, E)
    dv = torch.empty((b, h, lk, e), dtype=v.dtype, device=v.device)  # (B, H, Lk, E)
    dims = {"HEAD_DIM": e, "BLOCK_D": block_d, "PAD_D": block_d != e}
    precision = _dot_precision(q.dtype)

    pre_block = 16 if _INTERPRETED else 64
    _bwd_preprocess_kernel[(triton.cdiv(lq, pre_block), h, b)](
        out, d_out, delta,
        out.stride(0), out.stride(1), out.stride(2),
        d_out.stride(0), d_out.stride(1), d_out.stride(2),
        h, lq, BLOCK_M=pre_block, **dims,
    )  # fmt: skip

    def launch_dkdv(cfgs: FlashConfigs):
        cfg = cfgs.dkdv
        _bwd_dkdv_kernel[(triton.cdiv(lk, cfg.block_n), h, b)](
            q, k, v, d_out, dk, dv, lse, delta, scale, scale * LOG2E,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            d_out.stride(0), d_out.stride(1), d_out.stride(2),
            dk.stride(0), dk.stride(1), dk.stride(2),
            dv.stride(0), dv.stride(1), dv.stride(2),
            h, lq, lk, **dims,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal, DOT_PRECISION=precision,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip

    def launch_dq(cfgs: FlashConfigs):
        cfg = cfgs.dq
        _bwd_dq_kernel[(triton.cdiv(lq, cfg.block_m), h, b)](
            q, k, v, d_out, dq, lse, delta, scale, scale * LOG2E,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            d_out.stride(0), d_out.stride(1), d_out.stride(2),
            dq.stride(0), dq.stride(1), dq.stride(2),
            h, lq, lk, **dims,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal, DOT_PRECISION=precision,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip

    _with_retry(launch_dkdv, configs)
    _with_retry(launch_dq, configs)
    return dq, dk, dv


class _TritonFlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, configs):
        out, lse = _launch_forward(q, k, v, causal, scale, configs)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.configs = causal, scale, configs
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _launch_backward(d_out, q, k, v, out, lse, ctx.causal, ctx.scale, ctx.configs)
        return dq, dk, dv, None, None, None


def triton_flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    configs: FlashConfigs | None = None,
) -> Tensor:
    """softmax(Q Kᵀ · scale) V by the Triton FlashAttention-2 kernels; differentiable.

    Args:
        query: ``(B, H, Lq, E)``, float16/bfloat16/float32, ``E <= 128``.
        key: ``(B, H, Lk, E)``; same dtype and device; ``Lk`` may differ from ``Lq``.
        value: ``(B, H, Lk, E)`` (value width equal to the query width).
        causal: query ``i`` attends keys ``j <= i`` (top-left aligned, torch's ``is_causal``).
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        configs: tile sizes (default :func:`choose_configs`); for tuning experiments.

    Returns:
        ``(B, H, Lq, E)`` in the input dtype. No mask argument: for boolean masks
        (``True`` = may attend) use ``attention.dispatch.attend`` or the FlexAttention paths.

    Raises:
        TypeError / ValueError: bad shapes or dtypes (the message names the argument).
        RuntimeError: the kernel cannot run here (no triton, no CUDA device and no
            interpreter); :func:`triton_unavailable_reason` gives the same text.
    """
    check_qkv(query, key, value)
    check_bool("causal", causal)
    if query.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"query must be float16, bfloat16 or float32 for the Triton kernel, got {query.dtype}"
        )
    b, h, lq, e = query.shape
    lk, ev = key.shape[2], value.shape[3]
    if ev != e:
        raise ValueError(
            f"value must have the query's last dim {e} for the Triton kernel, got value shape "
            f"{tuple(value.shape)}"
        )
    if e > MAX_HEAD_DIM:
        raise ValueError(f"query head dim must be <= {MAX_HEAD_DIM}, got {e}")
    if min(b, h, lq, lk, e) == 0:
        raise ValueError(
            f"query and key must be non-empty, got query shape {tuple(query.shape)} and key "
            f"shape {tuple(key.shape)}"
        )
    if b > 65535 or h > 65535:
        raise ValueError(f"batch and heads must be <= 65535 (grid limit), got {b} and {h}")
    scale = resolve_scale(scale, e)
    reason = triton_unavailable_reason(query.device, query.dtype)
    if reason is not None:
        raise RuntimeError(reason)
    configs = choose_configs(e, query.dtype) if configs is None else configs
    configs.validate()
    q, k, v = (_last_dim_contiguous(t) for t in (query, key, value))
    return _TritonFlashAttention.apply(q, k, v, causal, scale, configs)


def attention_flops(
    batch_size: int, num_heads: int, n_queries: int, n_keys: int, head_dim: int, *, causal: bool
) -> float:
    """Forward FLOPs by the usual count: two matmuls of ``2·Lq·Lk·E`` each, per head, halved
    when causal. The backward pass is counted as 2.5x this (five matmuls instead of two)."""
    flops = 4.0 * batch_size * num_heads * n_queries * n_keys * head_dim
    return flops / 2 if causal else flops
