"""Scaled dot-product attention: the reference every other variant is tested against, and
torch's fused version with the same conventions (:func:`torch_sdpa`, the ``"torch"`` backend
of :mod:`attention.dispatch`, which the GPU paths fall back to).

Layout: ``[batch, heads, seq, dim]``. Boolean masks: ``True`` = may attend (the polarity of
``torch.nn.functional.scaled_dot_product_attention``). Float masks are additive biases.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import (
    check_bool,
    check_choice,
    check_dim,
    check_float,
    check_generator,
    check_mask,
    check_probability,
    check_qkv,
    check_scale,
    compute_dtype,
    resolve_scale,
)
from .masks import CAUSAL_ALIGNMENTS, causal_mask, combine_masks, to_additive

Tensor = torch.Tensor


def safe_softmax(scores: Tensor, *, dim: int = -1) -> Tensor:
    """Softmax that returns zeros (not NaN) for a row whose entries are all ``-inf``.

    A fully masked row has no key to attend to; the convention (torch >= 2.5's SDPA too) is an
    all-zero weight row, hence a zero output. Gradients stay finite: the masked entries never
    reach ``exp`` with a NaN. A 0-dim ``scores`` is one row of one entry, as in
    ``torch.softmax``: ``1`` (``0`` for ``-inf``).

    A ``+inf`` score is refused (``ValueError``): its softmax is ``inf / inf`` (torch returns
    NaN), and the limit is not defined when a row holds two of them. The check reads the row
    maxima the shift computes anyway, so it costs no pass over ``scores``. NaN scores are not
    scanned and give NaN in their row (the package's NaN policy). The attention functions
    compute their scores from their inputs and apply the same softmax without this check, so
    an inf in an input propagates as the NaN policy says instead of raising.
    """
    check_float("scores", scores)
    check_dim("dim", dim, scores.dim())
    if scores.dim() == 0:  # one row of one entry
        return safe_softmax(scores.reshape(1), dim=0).reshape(())
    weights, row_max = _softmax_and_row_max(scores, dim)
    n_pos_inf = int((row_max == float("inf")).sum())
    if n_pos_inf:
        raise ValueError(
            f"scores must be finite or -inf (= not allowed), got {n_pos_inf} rows holding +inf "
            f"(softmax of +inf is inf / inf, undefined)"
        )
    return weights


def _softmax(scores: Tensor, dim: int = -1) -> Tensor:
    """:func:`safe_softmax` without its argument checks, for scores computed from inputs."""
    return _softmax_and_row_max(scores, dim)[0]


def _softmax_and_row_max(scores: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Softmax along ``dim`` (zeros for an all ``-inf`` row) and the detached row maxima."""
    if scores.shape[dim] == 0:  # no keys at all: nothing to attend to
        return torch.zeros_like(scores), scores.detach().sum(dim=dim, keepdim=True)
    # The shift only guards exp against overflow (softmax ignores it): detached, so that
    # autograd neither keeps the scores for amax's backward nor routes gradient through it.
    row_max = scores.detach().amax(dim=dim, keepdim=True)
    # A row of -inf has max -inf; subtracting it would give (-inf) - (-inf) = NaN.
    shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(scores - shift)
    denom = exp.sum(dim=dim, keepdim=True)
    return exp / torch.where(denom == 0, torch.ones_like(denom), denom), row_max


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
    enable_gqa: bool = False,
    need_weights: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale + bias) V, written out step by step.

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, Hk, Lk, E)``; ``Hk == H``, or ``H % Hk == 0`` with ``enable_gqa``.
        value: ``(B, Hk, Lk, Ev)``.
        mask: bool (``True`` = may attend) or float (added to the scores), broadcastable to
            ``(B, H, Lq, Lk)``.
        causal: forbid attending to later positions. Combined with ``mask`` by AND.
        causal_alignment: when ``Lq != Lk``, ``"top_left"`` (torch's ``is_causal``: query i
            sees keys ``j <= i``) or ``"bottom_right"`` (FlashAttention's, for decoding with a
            cache: the last query sees every key, ``j <= i + Lk - Lq``).
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        dropout_p: dropout on the attention weights, applied only when ``training``.
        enable_gqa: allow fewer key/value heads than query heads (grouped-query attention);
            query head ``h`` uses key head ``h // (H // Hk)``, as in torch.
        need_weights: also return the weights ``(B, H, Lq, Lk)`` (before dropout).
        generator: random generator for dropout.

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query``, and the weights if asked. Half-precision
        inputs are computed in float32 and cast back. A query with no allowed key gets zeros.
    """
    check_qkv(query, key, value, enable_gqa=enable_gqa)
    check_bool("causal", causal)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    dropout_p = check_probability("dropout_p", dropout_p)
    check_bool("training", training)
    check_bool("need_weights", need_weights)
    check_generator("generator", generator)
    b, h, lq, e = query.shape
    lk = key.shape[-2]
    check_mask(mask, (b, h, lq, lk), device=query.device)
    scale = resolve_scale(scale, e)

    out_dtype = query.dtype
    cdt = compute_dtype(out_dtype)
    q, k, v = (t.to(cdt) for t in (query, key, value))
    if k.shape[1] != h:  # grouped-query attention: share each key/value head across a group
        group = h // k.shape[1]
        k = k.repeat_interleave(group, dim=1)  # (B, H, Lk, E)
        v = v.repeat_interleave(group, dim=1)  # (B, H, Lk, Ev)

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
    allowed = None
    if causal and lq > 0 and lk > 0:  # an empty side has nothing to mask
        allowed = causal_mask(  # (Lq, Lk)
            lq, lk, causal_alignment=causal_alignment, device=q.device
        )
    if mask is not None and mask.dtype == torch.bool:
        allowed = mask if allowed is None else allowed & mask
    elif mask is not None:
        scores = scores + mask.to(cdt)  # additive bias (may hold -inf)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))

    weights = _softmax(scores, dim=-1)  # (B, H, Lq, Lk)
    dropped = weights
    if training and dropout_p > 0.0:
        keep = torch.rand(weights.shape, device=weights.device, generator=generator) >= dropout_p
        dropped = weights * keep / (1.0 - dropout_p)
    out = torch.matmul(dropped, v).to(out_dtype)  # (B, H, Lq, Ev)
    if need_weights:
        return out, weights.to(out_dtype)
    return out


def torch_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with the book's conventions.

    Args:
        query: ``(B, H, Lq, E)``; key ``(B, H, Lk, E)``; value ``(B, H, Lk, Ev)``.
        mask: bool (``True`` = may attend) or float (additive bias), broadcastable to
            ``(B, H, Lq, Lk)``.
        causal: top-left causal mask, ANDed with ``mask`` (torch refuses both at once, so they
            are merged here into one mask; without a mask torch's ``is_causal`` fast path runs).
        scale: default ``1 / sqrt(E)``.

    Returns:
        ``(B, H, Lq, Ev)``. Rows with no allowed key are zeros: some fused CUDA kernels return
        NaN there, so such rows are opened to every key before the call (no NaN in the forward
        or the backward pass) and zeroed after it.
    """
    check_qkv(query, key, value)
    check_bool("causal", causal)
    scale = check_scale(scale)
    b, h, lq, _ = query.shape
    lk = key.shape[-2]
    check_mask(mask, (b, h, lq, lk), device=query.device)
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal, scale=scale)

    if causal:
        allowed = causal_mask(lq, lk, device=query.device)  # (Lq, Lk)
        if mask.dtype == torch.bool:
            mask = combine_masks(mask, allowed)
        else:
            mask = mask + to_additive(allowed, dtype=mask.dtype)
    if mask.dtype == torch.bool:
        has_key = mask.any(dim=-1, keepdim=True)  # (..., Lq, 1)
        safe_mask = mask | ~has_key
    else:
        mask = mask.to(query.dtype)  # torch wants the bias in the query's dtype
        has_key = ~torch.isneginf(mask).all(dim=-1, keepdim=True)  # (..., Lq, 1)
        safe_mask = mask.masked_fill(~has_key, 0.0)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=safe_mask, scale=scale)
    return torch.where(has_key, out, torch.zeros((), dtype=out.dtype, device=out.device))
