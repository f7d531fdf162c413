"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), φ(x) = elu(x) + 1.

Softmax attention weighs key ``j`` for query ``i`` by ``exp(q_i · k_j)``. Linear attention
replaces that kernel by a dot product of positive features, ``φ(q_i) · φ(k_j)``, so the
product can be re-associated:

    out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j)
          = φ(q_i) S / (φ(q_i) · z + eps),   S = Σ_j φ(k_j) v_jᵀ  (E × Ev),  z = Σ_j φ(k_j)  (E,)

Non-causal: ``S`` and ``z`` once, then one product per query: O(n·E·Ev) time, no n × n matrix.

Causal: query ``i`` may only use the sums over ``j <= i``. Keeping ``S`` for every position
would cost ``n × E × Ev`` memory. Instead the sequence is cut into chunks of ``chunk_size``
(``C``): within a chunk the masked ``C × C`` products are computed directly (a small quadratic
attention, lower-triangular); everything before the chunk arrives through the running state
``(S, z)`` at the chunk's start. The states at all ``n / C`` chunk starts come at once from a
prefix sum over the per-chunk sums, so the whole computation is a handful of batched matrix
products (no Python loop, no per-position state): O(n·C·E + n·E·Ev) time and
O(n·C + n·E·Ev / C) memory. One more habit: a column of ones appended to ``V`` makes
``z`` the last column of ``S`` and the denominator the last column of the numerator, so each
product serves both.

Generation is the RNN view: :class:`LinearAttentionState` holds ``(S, z)`` and
:func:`linear_attention_step` adds one token and answers its query in O(E·Ev), whatever the
length so far. Half-precision inputs are computed in float32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from .._checks import (
    check_bool,
    check_float,
    check_nonnegative_float,
    check_positive_int,
    check_qkv,
    check_rank,
    compute_dtype,
)
from ..masks import causal_mask
from ._threads import run_over_heads

Tensor = torch.Tensor

# Near the head dim the intra-chunk (n·C·E) and state (n·E·Ev/C) costs balance (how it was
# chosen: bench/README.md, "Implementation notes").
DEFAULT_CHUNK_SIZE = 64


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1, elementwise: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise.

    Positive (so that every weight ``φ(q)·φ(k)`` is positive and the denominator cannot
    vanish), smooth, and cheap. Any shape; returns the same shape and dtype.
    """
    check_float("x", x)
    return F.elu(x).add_(1.0)  # in place: elu's backward needs its input, not its output


class LinearAttentionState(NamedTuple):
    """Running sums of causal linear attention after some tokens.

    ``S``: ``(B, H, E, Ev)`` = Σ φ(k_j) v_jᵀ. ``z``: ``(B, H, E)`` = Σ φ(k_j). Float32 for
    half-precision inputs (the sums grow with the length).
    """

    S: Tensor
    z: Tensor

    @classmethod
    def zeros(
        cls,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        value_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> LinearAttentionState:
        """The state before any token: ``S (B, H, E, Ev)`` and ``z (B, H, E)`` of zeros, ``E`` =
        ``head_dim`` (the query/key width), ``Ev`` = ``value_dim``."""
        sizes = (
            ("batch_size", batch_size),
            ("num_heads", num_heads),
            ("head_dim", head_dim),
            ("value_dim", value_dim),
        )
        for name, n in sizes:
            check_positive_int(name, n)
        return cls(
            torch.zeros(batch_size, num_heads, head_dim, value_dim, dtype=dtype, device=device),
            torch.zeros(batch_size, num_heads, head_dim, dtype=dtype, device=device),
        )


def _with_ones(v: Tensor) -> Tensor:
    """``v (..., L, Ev)`` with a column of ones appended ``(..., L, Ev + 1)``: then
    ``φ(K)ᵀ [V, 1] = [S, z]`` and ``φ(Q) [S, z] = [numerator, denominator]``, one product for
    both (the normaliser rides along as an extra value column)."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def _causal_chunked(phi_q: Tensor, phi_k: Tensor, v1: Tensor, chunk_size: int) -> Tensor:
    """Causal linear attention by chunks, before normalising. ``phi_q``/``phi_k``
    ``(BH, L, E)`` (features), ``v1 = [V, 1]`` ``(BH, L, Ev + 1)``. Returns
    ``[numerator, denominator]`` ``(BH, L, Ev + 1)``."""
    bh, n, e = phi_q.shape
    ev1 = v1.shape[-1]
    c = min(chunk_size, n)
    n_chunks = -(-n // c)
    pad = n_chunks * c - n
    if pad:  # zero features: padded keys add nothing to any sum; padded queries are dropped
        phi_q, phi_k, v1 = (F.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, v1))
    bhn = bh * n_chunks  # every chunk of every head is one matrix of a batched product
    qc = phi_q.reshape(bhn, c, e)  # (BHN, C, E)
    kc = phi_k.reshape(bhn, c, e)  # (BHN, C, E)
    vc = v1.reshape(bhn, c, ev1)  # (BHN, C, Ev+1)

    # Intra-chunk: the small quadratic form, lower-triangular (position i sees j <= i).
    weights = torch.bmm(qc, kc.transpose(1, 2))  # (BHN, C, C)
    weights = weights.mul_(causal_mask(c, device=weights.device))  # zero the future
    intra = torch.bmm(weights, vc)  # (BHN, C, Ev+1)

    # Inter-chunk: each chunk's own [S, z]; the running sums over the chunks before it are
    # the state at the chunk's start: N states, never one per position.
    chunk_state = torch.bmm(kc.transpose(1, 2), vc).view(bh, n_chunks, e, ev1)
    state_before = chunk_state.cumsum(dim=1).sub_(chunk_state)  # (BH, N, E, Ev+1)
    out = intra.baddbmm_(qc, state_before.view(bhn, e, ev1))  # (BHN, C, Ev+1) intra + inter
    return out.view(bh, n_chunks * c, ev1)[:, :n]


def _linear_heads(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, chunk_size: int, eps: float, with_state: bool
) -> tuple[Tensor, Tensor | None]:
    """Linear attention on flattened heads: ``q (BH, Lq, E)``, ``k (BH, Lk, E)``,
    ``v (BH, Lk, Ev)``. Returns the output ``(BH, Lq, Ev)`` in the compute dtype and, if
    ``with_state``, ``[S, z]`` after all keys ``(BH, E, Ev + 1)``."""
    cdt = compute_dtype(q.dtype)
    phi_q = elu_feature_map(q.to(cdt))  # (BH, Lq, E)
    phi_k = elu_feature_map(k.to(cdt))  # (BH, Lk, E)
    v1 = _with_ones(v.to(cdt))  # (BH, Lk, Ev+1)
    causal_chunks = causal and q.shape[1] > 0
    state = None  # the causal path needs the final state only when asked for it
    if with_state or not causal_chunks:
        state = phi_k.transpose(1, 2) @ v1  # (BH, E, Ev+1) = [S, z]
    if causal_chunks:
        both = _causal_chunked(phi_q, phi_k, v1, chunk_size)  # (BH, L, Ev+1)
    else:
        both = phi_q @ state  # (BH, Lq, Ev+1) = [numerator, denominator]
    dim_v = v.shape[-1]
    out = both[..., :dim_v] / (both[..., dim_v:] + eps)  # (BH, Lq, Ev)
    return out, state


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    eps: float = 1e-6,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Linear attention ``φ(Q)(φ(K)ᵀV) / (φ(Q)φ(K)ᵀ1 + eps)`` with φ = :func:`elu_feature_map`.

    Args:
        query: ``(B, H, Lq, E)``; key: ``(B, H, Lk, E)``; value: ``(B, H, Lk, Ev)``. No
            scale: φ is not the exponential, so a temperature would not cancel; the model
            learns it.
        causal: position ``i`` uses keys ``j <= i`` only (requires ``Lq == Lk``); computed by
            chunks of ``chunk_size`` (any int >= 1; need not divide the length).
        eps: added to the denominator (it is positive; eps guards the tiny-feature case).
        return_state: also return the :class:`LinearAttentionState` after all keys, to
            continue with :func:`linear_attention_step` (generation after a prompt).

    Returns:
        ``(B, H, Lq, Ev)`` in the dtype of ``query`` (float16/bfloat16 computed in float32),
        and the final state if asked.
    """
    check_qkv(query, key, value)
    check_bool("causal", causal)
    chunk_size = check_positive_int("chunk_size", chunk_size)
    eps = check_nonnegative_float("eps", eps)
    b, h, n_queries, dim_k = query.shape
    n_keys, dim_v = key.shape[2], value.shape[3]
    if causal and n_queries != n_keys:
        raise ValueError(
            f"causal linear attention needs as many queries as keys, got Lq={n_queries} and "
            f"Lk={n_keys} (for a prompt then new tokens use return_state and "
            f"linear_attention_step)"
        )
    q3 = query.reshape(b * h, n_queries, dim_k)  # (BH, Lq, E)
    k3 = key.reshape(b * h, n_keys, dim_k)  # (BH, Lk, E)
    v3 = value.reshape(b * h, n_keys, dim_v)  # (BH, Lk, Ev)
    # A few large ops per call; on a multi-core CPU each thread takes some heads (no fork/join
    # per op, see run_over_heads). Work in multiply-adds, roughly.
    work = b * h * max(n_queries, n_keys) * (chunk_size * (dim_k + dim_v) + 2 * dim_k * dim_v)
    parts = run_over_heads(
        lambda hs: _linear_heads(q3[hs], k3[hs], v3[hs], causal, chunk_size, eps, return_state),
        b * h,
        work=work,
        device=query.device,
    )
    out = parts[0][0] if len(parts) == 1 else torch.cat([p[0] for p in parts])  # (BH, Lq, Ev)
    out = out.view(b, h, n_queries, dim_v).to(query.dtype)
    if not return_state:
        return out
    state = parts[0][1] if len(parts) == 1 else torch.cat([p[1] for p in parts])
    state = state.view(b, h, dim_k, dim_v + 1)  # (B, H, E, Ev+1) = [S, z]
    return out, LinearAttentionState(state[..., :dim_v], state[..., dim_v])


def linear_attention_step(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    state: LinearAttentionState | None = None,
    *,
    eps: float = 1e-6,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention, as a recurrent network: O(E·Ev), any position.

    ``S ← S + φ(k_t) v_tᵀ``, ``z ← z + φ(k_t)``, ``out_t = φ(q_t) S / (φ(q_t)·z + eps)``
    (the new token sees itself, as in the causal mask).

    Args:
        query, key: the new token's ``(B, H, 1, E)``; value: ``(B, H, 1, Ev)`` (one position,
            the book's layout).
        state: the :class:`LinearAttentionState` after the previous tokens; ``None`` = none.

    Returns:
        ``out_t (B, H, 1, Ev)`` in the dtype of ``query`` and the new state (a new object; the
        old one is not modified).
    """
    check_qkv(query, key, value)
    eps = check_nonnegative_float("eps", eps)
    b, h, n, e = query.shape
    ev = value.shape[-1]
    if n != 1 or key.shape[2] != 1:
        raise ValueError(
            f"linear_attention_step takes one position: expected query, key, value of shape "
            f"(B, H, 1, dim), got query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    cdt = compute_dtype(query.dtype)
    if state is None:
        state = LinearAttentionState.zeros(b, h, e, ev, dtype=cdt, device=query.device)
    if not isinstance(state, LinearAttentionState):
        raise TypeError(f"state must be a LinearAttentionState or None, got {type(state).__name__}")
    check_float("state.S", state.S)
    check_float("state.z", state.z)
    check_rank("state.S", state.S, 4, "[batch, heads, dim_k, dim_v]")
    check_rank("state.z", state.z, 3, "[batch, heads, dim_k]")
    if tuple(state.S.shape) != (b, h, e, ev) or tuple(state.z.shape) != (b, h, e):
        raise ValueError(
            f"state does not match the inputs: expected S {(b, h, e, ev)} and z {(b, h, e)}, "
            f"got S {tuple(state.S.shape)} and z {tuple(state.z.shape)}"
        )
    phi_q = elu_feature_map(query.to(cdt))  # (B, H, 1, E)
    phi_k = elu_feature_map(key.to(cdt))  # (B, H, 1, E)
    new_s = state.S.to(cdt) + phi_k.transpose(-2, -1) @ value.to(cdt)  # (B, H, E, Ev)
    new_z = state.z.to(cdt) + phi_k.squeeze(-2)  # (B, H, E)
    numerator = phi_q @ new_s  # (B, H, 1, Ev)
    denominator = phi_q @ new_z.unsqueeze(-1)  # (B, H, 1, 1)
    out = (numerator / (denominator + eps)).to(query.dtype)  # (B, H, 1, Ev)
    return out, LinearAttentionState(new_s, new_z)
