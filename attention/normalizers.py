"""Attention with other normalisers than softmax: sigmoid, ReLU-normalised, plain-normalised.

Layout: ``[batch, heads, seq, dim]``. Boolean masks: ``True`` = may attend; a forbidden key gets
weight exactly 0 under every normaliser. Float masks are additive biases on the scores.

- ``"softmax"``: ``exp(s) / Σ exp(s)`` (the reference; :func:`attention.functional.safe_softmax`).
- ``"sigmoid"``: ``σ(s + b)``, each weight on its own; the row does not sum to 1. Ramapuram et
  al. (2024) add the bias ``b = −log n`` (``n`` = number of keys) so that, at initialisation,
  the weights of a row sum to about 1 whatever the length. ``score_bias=None`` uses ``−log n``
  with ``n`` the number of keys a row may attend to; pass ``score_bias=0.0`` for the plain
  sigmoid.
- ``"relu"``: ``relu(s) / Σ relu(s)``: non-negative and sums to 1, but a row whose scores are
  all ≤ 0 has nothing to normalise: it gives zeros, and no gradient reaches its scores.
- ``"plain"``: ``s / Σ s``: sums to 1 but may be negative, and explodes when ``Σ s`` is near 0;
  a row whose sum is exactly 0 gives zeros.

Every normaliser gives zeros (never NaN) for a fully masked row.
"""

from __future__ import annotations

import math

import torch

from ._checks import (
    check_choice,
    check_float,
    check_mask,
    check_qkv,
    compute_dtype,
    resolve_scale,
)
from .functional import _softmax

Tensor = torch.Tensor

__all__ = ["NORMALIZERS", "normalize_scores", "normalized_attention", "sigmoid_attention"]

NORMALIZERS = ("softmax", "sigmoid", "relu", "plain")


def _check_score_bias(score_bias: object) -> float | None:
    if score_bias is None:
        return None
    if isinstance(score_bias, bool) or not isinstance(score_bias, (int, float)):
        raise TypeError(
            f"score_bias must be a float or None (−log n), got {type(score_bias).__name__}"
        )
    if not math.isfinite(score_bias):
        raise ValueError(f"score_bias must be finite, got {score_bias}")
    return float(score_bias)


def normalize_scores(
    scores: Tensor,
    *,
    normalizer: str = "softmax",
    mask: Tensor | None = None,
    score_bias: float | None = None,
) -> Tensor:
    """Attention weights from scores ``(..., Lq, Lk)`` along the last dim.

    Args:
        scores: float tensor ``(..., Lq, Lk)`` (already scaled).
        normalizer: one of :data:`NORMALIZERS`.
        mask: bool (``True`` = may attend; forbidden keys get 0) or float (added to the scores),
            broadcastable to ``scores`` and covering every key.
        score_bias: only for ``"sigmoid"``: added to every score; ``None`` = ``−log n``, ``n``
            the number of allowed keys of the row (at least 1).
    """
    check_float("scores", scores)
    check_choice("normalizer", normalizer, NORMALIZERS)
    score_bias = _check_score_bias(score_bias)
    if score_bias is not None and normalizer != "sigmoid":
        raise ValueError(
            f"score_bias is only used by normalizer='sigmoid', got normalizer={normalizer!r}"
        )
    check_mask(mask, scores.shape, device=scores.device)
    allowed = torch.ones((), dtype=torch.bool, device=scores.device)
    if mask is not None and mask.dtype == torch.bool:
        allowed = mask
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)  # additive bias (may hold -inf)
    allowed = allowed.expand_as(scores)  # (..., Lq, Lk)
    zero = torch.zeros_like(scores)
    if normalizer == "softmax":
        return _softmax(scores.masked_fill(~allowed, float("-inf")))
    if normalizer == "sigmoid":
        if score_bias is None:
            n = allowed.sum(dim=-1, keepdim=True).clamp(min=1).to(scores.dtype)  # (..., Lq, 1)
            shift = -torch.log(n)
        else:
            shift = score_bias
        return torch.where(allowed, torch.sigmoid(scores + shift), zero)
    if normalizer == "relu":
        top = torch.where(allowed, torch.relu(scores), zero)  # (..., Lq, Lk)
    else:  # plain
        top = torch.where(allowed, scores, zero)
    denom = top.sum(dim=-1, keepdim=True)  # (..., Lq, 1)
    safe = torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.where(denom == 0, zero, top / safe)


def normalized_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    normalizer: str = "softmax",
    score_bias: float | None = None,
    scale: float | None = None,
    need_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """``normalize(q kᵀ · scale) v`` with the normaliser of :func:`normalize_scores`.

    query ``(B, H, Lq, E)``, key ``(B, H, Lk, E)``, value ``(B, H, Lk, Ev)`` → ``(B, H, Lq, Ev)``
    (and the weights ``(B, H, Lq, Lk)`` with ``need_weights``). ``mask``: bool (``True`` = may
    attend) or float (additive bias), broadcastable to ``(B, H, Lq, Lk)``. ``scale``: ``None``
    = ``1/√E``. float16/bfloat16 inputs are computed in float32 and returned in their dtype.
    """
    check_qkv(query, key, value)
    check_choice("normalizer", normalizer, NORMALIZERS)
    score_bias = _check_score_bias(score_bias)
    b, h, lq, e = query.shape
    lk = key.shape[2]
    mask = check_mask(mask, (b, h, lq, lk))
    scale = resolve_scale(scale, e)
    dtype = compute_dtype(query.dtype)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
    weights = normalize_scores(scores, normalizer=normalizer, mask=mask, score_bias=score_bias)
    out = (weights @ v).to(query.dtype)  # (B, H, Lq, Ev)
    return (out, weights.to(query.dtype)) if need_weights else out


def sigmoid_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    score_bias: float | None = None,
    scale: float | None = None,
    need_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Sigmoid attention ``σ(q kᵀ · scale + b) v``; ``score_bias=None``: ``b = −log n``
    (Ramapuram et al. 2024), ``n`` the number of keys each row may attend to;
    ``score_bias=0.0``: plain sigmoid.
    Shapes and masks as :func:`normalized_attention`."""
    return normalized_attention(
        query,
        key,
        value,
        mask,
        normalizer="sigmoid",
        score_bias=score_bias,
        scale=scale,
        need_weights=need_weights,
    )
