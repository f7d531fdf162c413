"""ProbSparse self-attention (Informer, Zhou et al. 2021): full attention for a few queries.

Most queries of a long sequence attend almost uniformly, and uniform attention returns about
the mean of the values. Informer ranks queries by a sparsity measurement — how far their
largest score stands above their mean score — estimated on a random sample of keys, gives full
attention only to the top ``u = factor · ceil(ln Lq)`` queries, and gives every other query
the mean of the values (with ``causal``: the mean of the values up to its position, what
uniform attention over its allowed keys returns). Cost ``O(Lq log Lk + u · Lk)``: no
``Lq × Lk`` tensor.
"""

from __future__ import annotations

import math

import torch

from .._checks import (
    check_bool,
    check_generator,
    check_positive_int,
    check_qkv,
    check_rank,
    check_scale,
    check_tensor,
    compute_dtype,
    resolve_scale,
)
from ..functional import scaled_dot_product_attention

Tensor = torch.Tensor


def n_selected(length: int, factor: int) -> int:
    """Informer's count ``factor · ceil(ln length)``, kept within ``[1, length]``.

    Used for both the ``U`` sampled keys (with ``Lk``) and the ``u`` selected queries (with
    ``Lq``). An empty sequence gives 0.
    """
    if length == 0:
        return 0
    return max(1, min(length, factor * math.ceil(math.log(length))))


def sparsity_measure(query: Tensor, key: Tensor, sample_index: Tensor, *, scale: float) -> Tensor:
    """Informer's query sparsity measurement, estimated on a sample of keys.

    ``M(q_i) = max_s (q_i · k_s) · scale - mean_s (q_i · k_s) · scale`` over the sampled keys
    ``s in sample_index``: the max-minus-mean of the paper's Eq. (4). With every key in the
    sample it is Eq. (4) exactly. (Informer's reference code draws a separate sample for each
    query and divides the sampled sum by ``Lk``; one sample shared by all queries ranks them on
    common ground and costs one ``(Lq, U)`` matrix product instead of an ``(Lq, U, E)``
    gather.)

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, H, Lk, E)``.
        sample_index: ``(U,)`` integer key positions in ``[0, Lk)``, shared by every query.
        scale: multiplies the scores.

    Returns:
        ``(B, H, Lq)``.
    """
    scale = check_scale(scale)
    if scale is None:
        raise TypeError("scale must be a float, got None (the scores' factor, e.g. 1/sqrt(E))")
    check_tensor("sample_index", sample_index)
    check_rank("sample_index", sample_index, 1, "[n_samples]")
    if sample_index.is_floating_point() or sample_index.dtype == torch.bool:
        raise TypeError(f"sample_index must hold integer key positions, got {sample_index.dtype}")
    if sample_index.numel() == 0:
        raise ValueError("sample_index must hold at least one key position, got none")
    lk = key.shape[-2]
    low, high = int(sample_index.min()), int(sample_index.max())
    if low < 0 or high >= lk:
        raise ValueError(
            f"sample_index positions must lie in [0, {lk - 1}] (Lk = {lk}), got {low}..{high}"
        )
    k_sample = key.index_select(2, sample_index.to(key.device))  # (B, H, U, E)
    scores = query @ k_sample.transpose(-2, -1) * scale  # (B, H, Lq, U)
    return scores.amax(dim=-1) - scores.mean(dim=-1)  # (B, H, Lq)


def _lazy_outputs(v: Tensor, n_queries: int, causal: bool) -> Tensor:
    """What uniform attention over its allowed keys gives every query: ``mean(V)``, or with
    ``causal`` the running mean ``mean(v_0 .. v_i)``. ``v (B, H, Lk, Ev)`` -> ``(B, H, Lq, Ev)``."""
    b, h, lk, ev = v.shape
    if causal:
        counts = torch.arange(1, lk + 1, device=v.device, dtype=v.dtype)[:, None]  # (L, 1)
        return v.cumsum(dim=-2) / counts  # (B, H, L, Ev) running mean
    return v.mean(dim=-2, keepdim=True).expand(b, h, n_queries, ev)  # (B, H, Lq, Ev)


def _active_outputs(
    q: Tensor, k: Tensor, v: Tensor, index: Tensor, causal: bool, scale: float
) -> Tensor:
    """Ordinary attention for the selected queries ``index (B, H, u)``: ``(B, H, u, Ev)``.
    With ``causal`` each one gets its row of ``causal_mask(L)`` (keys ``j <= i``), built per
    selected row, without the L × L mask."""
    q_top = q.gather(2, index[..., None].expand(-1, -1, -1, q.shape[-1]))  # (B, H, u, E)
    allowed = None
    if causal:
        allowed = torch.arange(k.shape[-2], device=q.device) <= index[..., None]  # (B, H, u, Lk)
    return scaled_dot_product_attention(q_top, k, v, allowed, scale=scale)  # (B, H, u, Ev)


def probsparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    factor: int = 5,
    causal: bool = False,
    scale: float | None = None,
    generator: torch.Generator | None = None,
    return_index: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """ProbSparse attention: the top-``u`` queries by sparsity attend fully, the rest get mean(V).

    1. Sample ``U = factor · ceil(ln Lk)`` distinct key positions, uniformly (``torch.randperm``
       with ``generator``), one sample for all queries, batches and heads. With ``causal``
       the sample is drawn from all keys, as in Informer.
    2. Rank queries by :func:`sparsity_measure`; keep the top ``u = factor · ceil(ln Lq)``
       per (batch, head) (both counts clamped to ``[1, length]``, :func:`n_selected`).
    3. Selected queries: ``scaled_dot_product_attention`` over all keys (``causal``: keys
       ``j <= i``, the rows of ``causal_mask(L)``). Others: ``mean(V)``, or with ``causal`` the
       running mean ``mean(v_0 .. v_i)``.

    When ``u >= Lq`` every query is selected and the result is exactly dense attention.

    Args:
        query: ``(B, H, Lq, E)``.
        key: ``(B, H, Lk, E)``.
        value: ``(B, H, Lk, Ev)``; ``causal`` needs ``Lq == Lk``.
        factor: Informer's sampling factor ``c`` (int >= 1).
        causal: mask future keys (``True`` = may attend for ``j <= i``).
        scale: multiplies the scores; default ``1 / sqrt(E)``.
        generator: random generator for the key sample; default a fresh one seeded with 0.
        return_index: also return the selected query positions ``(B, H, u)``, sorted (``u = 0``
            when ``Lq`` or ``Lk`` is 0).

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (half precision is computed in float32),
        and the index if asked.
    """
    check_qkv(query, key, value)
    factor = check_positive_int("factor", factor)
    check_bool("causal", causal)
    b, h, lq, e = query.shape
    lk = key.shape[-2]
    scale = resolve_scale(scale, e)
    if causal and lq != lk:
        raise ValueError(f"causal ProbSparse attention needs Lq == Lk, got Lq={lq}, Lk={lk}")
    if lq == 0 or lk == 0:
        # No query, or no key to attend (every row fully masked): the dense answer, empty or
        # zeros, and no query is selected.
        out = scaled_dot_product_attention(query, key, value, scale=scale)  # (B, H, Lq, Ev)
        index = torch.empty(b, h, 0, dtype=torch.long, device=query.device)
        return (out, index) if return_index else out
    check_generator("generator", generator)
    if generator is None:
        generator = torch.Generator(device=query.device).manual_seed(0)
    elif generator.device.type != query.device.type:
        raise ValueError(
            f"generator must be on the device of query ({query.device}), got a generator on "
            f"{generator.device}"
        )
    out_dtype = query.dtype
    cdt = compute_dtype(out_dtype)
    q, k, v = (t.to(cdt) for t in (query, key, value))

    n_sample, n_top = n_selected(lk, factor), n_selected(lq, factor)
    sample_index = torch.randperm(lk, generator=generator, device=generator.device)[:n_sample]
    with torch.no_grad():  # the ranking is a discrete choice: no gradient flows through it
        measure = sparsity_measure(q, k, sample_index, scale=scale)  # (B, H, Lq)
        index = measure.topk(n_top, dim=-1, sorted=False).indices.sort(dim=-1).values  # (B,H,u)

    out = _lazy_outputs(v, lq, causal)  # (B, H, Lq, Ev)
    out_top = _active_outputs(q, k, v, index, causal, scale)  # (B, H, u, Ev)
    out = out.scatter(2, index[..., None].expand(-1, -1, -1, v.shape[-1]), out_top)
    out = out.to(out_dtype)  # (B, H, Lq, Ev)
    if return_index:
        return out, index
    return out
