"""Exact attention in O(n) memory by chunks (Rabe & Staats 2021, "Self-attention does not
need O(n²) memory"), differentiated by autograd.

It teaches two ideas different from the flash loop of :mod:`attention.efficient.flash`, which is
why both are kept. Each (query chunk, key chunk) pair is summarised *independently* by its own
max, sum and weighted values, and the summaries are merged afterwards with a log-sum-exp
combination (the algebra behind split-KV decoding and ring attention; the flash loop instead
streams one running state). And it writes no backward at all: autograd differentiates the chunk
code, and ``torch.utils.checkpoint`` per query chunk keeps only the chunk outputs, trading one
recomputation of the forward for O(n) memory. Simpler to trust, slower to run.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .._checks import (
    check_bool,
    check_choice,
    check_positive_int,
    check_qkv,
    compute_dtype,
    resolve_scale,
)
from ..masks import CAUSAL_ALIGNMENTS
from ._causal_tiles import TileMasks, causal_shift
from ._threads import run_over_heads

Tensor = torch.Tensor


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
    masks = TileMasks(shift, q_chunk.device)
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
    query: Tensor,
    key: Tensor,
    value: Tensor,
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
    autograd graph, linear in ``Lk``. The paper used chunks of 1024 and 4096 on TPUs; on a CPU
    smaller chunks stay in cache (bench/README.md, "Implementation notes").

    Args:
        query: ``(B, H, Lq, E)``; key: ``(B, H, Lk, E)``; value: ``(B, H, Lk, Ev)``.
        query_chunk, key_chunk: chunk sizes (ints >= 1; need not divide the lengths).
        causal, causal_alignment, scale: as in :func:`attention.efficient.flash_attention`.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (half precision computed in float32). A
        query that sees no key gets zeros.
    """
    check_qkv(query, key, value)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    check_bool("causal", causal)
    query_chunk = check_positive_int("query_chunk", query_chunk)
    key_chunk = check_positive_int("key_chunk", key_chunk)
    b, h, n_queries, dim_k = query.shape
    n_keys, dim_v = key.shape[2], value.shape[3]
    scale = resolve_scale(scale, dim_k)
    cdt = compute_dtype(query.dtype)
    # Heads flattened into one axis (batch 1), so that run_over_heads can split them.
    q_scaled = query.to(cdt).reshape(1, b * h, n_queries, dim_k) * scale  # (1, BH, Lq, E)
    k = key.to(cdt).reshape(1, b * h, n_keys, dim_k)  # (1, BH, Lk, E)
    v = value.to(cdt).reshape(1, b * h, n_keys, dim_v)  # (1, BH, Lk, Ev)
    shift = causal_shift(n_queries, n_keys, causal, causal_alignment)
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

    work = b * h * n_queries * n_keys * (dim_k + dim_v)  # multiply-adds
    parts = run_over_heads(heads, b * h, work=work, device=query.device)
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (1, BH, Lq, Ev)
    return out.view(b, h, n_queries, dim_v).to(query.dtype)
