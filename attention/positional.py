"""Positional information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention alone is permutation-equivariant: shuffle the tokens and the outputs shuffle the
same way. Each scheme here breaks that symmetry differently:

- **sinusoidal** and **learned** encodings are *added* to the token vectors ``x (B, L, D)``;
- **RoPE** *rotates* each query/key head ``(B, H, L, Dh)`` by an angle proportional to its
  position, so that ``<q_m, k_n>`` depends only on ``m - n``;
- **ALiBi** adds a distance penalty ``-slope * |i - j|`` to the attention scores (an additive
  float mask, ``(H, Lq, Lk)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import (
    check_base,
    check_choice,
    check_device,
    check_even,
    check_float,
    check_float_dtype,
    check_positive_int,
    check_rank,
    check_span,
    check_tensor,
    check_tokens,
    compute_dtype,
)
from .masks import CAUSAL_ALIGNMENTS, _offsets

Tensor = torch.Tensor


def _inverse_frequencies(dim: int, base: float, dtype: torch.dtype, device) -> Tensor:
    """``base ** (-2i / dim)`` for ``i = 0 .. dim/2 - 1``: shape ``(dim // 2,)``.

    Computed in float64 (it is ``dim / 2`` numbers) so that every dtype starts from the same,
    correctly rounded frequencies, then cast.
    """
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # (dim/2,)
    return (base ** (-two_i / dim)).to(dtype=dtype, device=device)  # (dim/2,)


# --------------------------------------------------------------------------------------------
# Sinusoidal and learned absolute encodings (added to x)
# --------------------------------------------------------------------------------------------


def sinusoidal_encoding(
    max_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The fixed encoding of "Attention Is All You Need": shape ``(max_len, d_model)``.

    ``PE[pos, 2i] = sin(pos / base^(2i/d))`` and ``PE[pos, 2i+1] = cos(pos / base^(2i/d))``:
    channel pair ``i`` is a point on a circle turning with frequency ``base^(-2i/d)``, so
    ``PE[pos + k]`` is a fixed rotation of ``PE[pos]`` (one 2x2 block per pair) for every
    ``pos``. ``d_model`` must be even. Computed in float64, returned in ``dtype``.
    """
    max_len = check_positive_int("max_len", max_len)
    d_model = check_even("d_model", d_model)
    base = check_base(base)
    check_float_dtype("dtype", dtype)
    check_device("device", device)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    angles = pos * _inverse_frequencies(d_model, base, torch.float64, None)  # (L, D/2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)  # (L, D)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(dtype=dtype, device=device)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds :func:`sinusoidal_encoding` to token vectors: ``forward(x (B, L, D), *, offset=0)``.

    ``offset`` is the position of ``x``'s first token (for decoding with a cache). The table is
    a non-persistent buffer: it follows ``.to(device)`` but is not saved in ``state_dict``
    (it is a function of ``max_len`` and ``d_model``, not a parameter).
    """

    def __init__(self, d_model: int, *, max_len: int = 4096, base: float = 10000.0):
        super().__init__()
        pe = sinusoidal_encoding(max_len, d_model, base=base)  # (max_len, D), checks the args
        self.d_model = d_model
        self.max_len = max_len
        self.base = float(base)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        check_tokens("x", x, self.d_model)
        offset = check_span(offset, x.shape[1], self.max_len)
        if x.dtype == torch.float64:
            # The buffer is float32 (or a float32 table cast by ``.double()``): float64 inputs
            # get the positions computed in float64, exact to float64 rounding.
            pe = sinusoidal_encoding(
                offset + x.shape[1], self.d_model, base=self.base, dtype=x.dtype, device=x.device
            )[offset:]  # (L, D)
            return x + pe
        pe = self.pe[offset : offset + x.shape[1]]  # (L, D)
        return x + pe.to(x.dtype)  # (B, L, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position (BERT, GPT-2): ``forward(x (B, L, D), *, offset=0)``
    returns ``x + P``.

    It cannot extrapolate: asking for a position ``>= max_len`` raises ``ValueError`` naming
    ``max_len`` and the position asked (offset included).
    """

    def __init__(self, d_model: int, *, max_len: int):
        super().__init__()
        self.max_len = check_positive_int("max_len", max_len)
        self.d_model = check_positive_int("d_model", d_model)
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Small, like GPT-2's 0.02, so that positions start as a mild perturbation of tokens.
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        check_tokens("x", x, self.d_model, dtype=self.weight.dtype)
        offset = check_span(offset, x.shape[1], self.max_len)
        pe = self.weight[offset : offset + x.shape[1]]  # (L, D)
        return x + pe.to(x.dtype)  # (B, L, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


# --------------------------------------------------------------------------------------------
# Rotary position embedding (RoPE), applied to per-head queries and keys
# --------------------------------------------------------------------------------------------


def rope_angles(
    positions: Tensor,
    *,
    head_dim: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Rotation angles ``positions[..., None] * base^(-2i / head_dim)``.

    Args:
        positions: ``(L,)`` (or ``(B, L)``) integer or float positions.
        head_dim: even per-head width; there is one angle per channel pair.
        dtype: float32 (default) or float64. Never half precision: a float16 angle of a
            position in the thousands is off by whole radians.

    Returns:
        ``(L, head_dim // 2)`` (or ``(B, L, head_dim // 2)``) in ``dtype``.
    """
    check_tensor("positions", positions)
    if positions.dim() not in (1, 2):
        raise ValueError(
            f"positions must have 1 dim [seq] or 2 dims [batch, seq], got shape "
            f"{tuple(positions.shape)}"
        )
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(
            f"positions must be an integer or float tensor, got dtype {positions.dtype}"
        )
    if positions.dtype in (torch.float16, torch.bfloat16):
        # bfloat16 holds every integer only up to 256, float16 up to 2048: arange(4096) in
        # bfloat16 has 769 distinct values, so distinct tokens would share a rotation.
        raise TypeError(
            f"positions must be an integer tensor or float32/float64, got dtype "
            f"{positions.dtype}, which cannot hold distinct integer positions (use torch.long)"
        )
    head_dim = check_even("head_dim", head_dim)
    base = check_base(base)
    check_choice("dtype", dtype, (torch.float32, torch.float64))
    inv_freq = _inverse_frequencies(head_dim, base, dtype, positions.device)  # (Dh/2,)
    return positions.to(dtype).unsqueeze(-1) * inv_freq  # (..., L, Dh/2)


def apply_rope(
    x: Tensor,
    *,
    offset: int = 0,
    positions: Tensor | None = None,
    base: float = 10000.0,
    interleaved: bool = False,
) -> Tensor:
    """Rotate each channel pair of ``x`` by ``position * base^(-2i / Dh)``.

    Args:
        x: queries or keys ``(B, H, L, Dh)``, ``Dh`` even.
        offset: position of the first token (decoding with a key/value cache); positions are
            ``offset .. offset + L - 1``. Ignored when ``positions`` is given (must be 0 then).
        positions: explicit positions ``(L,)`` or per sequence ``(B, L)`` (left-padded batches).
        interleaved: which channels form a pair. ``False`` (default, the "rotate-half"
            convention of GPT-NeoX and Hugging Face's Llama port): pairs ``(i, i + Dh/2)``.
            ``True`` (the RoFormer paper, GPT-J, Meta's reference Llama): pairs
            ``(2i, 2i + 1)``. The two agree up to that channel permutation.

    Returns:
        Same shape and dtype as ``x``. The rotation is computed in float32 (float64 for a
        float64 ``x``) and cast back, so half-precision inputs lose nothing to the angles.
    """
    check_float("x", x)
    check_rank("x", x, 4, "[batch, heads, seq, head_dim]")
    b, _, seq, head_dim = x.shape
    if head_dim % 2:
        raise ValueError(
            f"x must have an even head_dim for RoPE (channels rotate in pairs), got "
            f"head_dim={head_dim} in shape {tuple(x.shape)}"
        )
    offset = check_positive_int("offset", offset, allow_zero=True)
    if positions is None:
        positions = torch.arange(offset, offset + seq, device=x.device)  # (L,)
    else:
        check_tensor("positions", positions)
        if offset:
            raise ValueError(f"pass offset or positions, not both: got offset={offset}")
        if positions.shape not in ((seq,), (b, seq)):
            raise ValueError(
                f"positions must have shape ({seq},) or ({b}, {seq}) to match x of shape "
                f"{tuple(x.shape)} [batch, heads, seq, head_dim], got {tuple(positions.shape)}"
            )
    compute = compute_dtype(x.dtype)
    positions = positions.to(x.device)
    angles = rope_angles(positions, head_dim=head_dim, base=base, dtype=compute)  # (..., L, Dh/2)
    if angles.dim() == 3:  # per-sequence positions: broadcast over heads
        angles = angles.unsqueeze(1)  # (B, 1, L, Dh/2)
    cos, sin = torch.cos(angles), torch.sin(angles)  # (..., L, Dh/2)

    xc = x.to(compute)
    if interleaved:
        x1, x2 = xc[..., 0::2], xc[..., 1::2]  # (B, H, L, Dh/2) each
    else:
        x1, x2 = xc[..., : head_dim // 2], xc[..., head_dim // 2 :]  # (B, H, L, Dh/2) each
    # The 2x2 rotation [[cos, -sin], [sin, cos]] applied to every pair (x1, x2).
    y1 = x1 * cos - x2 * sin  # (B, H, L, Dh/2)
    y2 = x1 * sin + x2 * cos  # (B, H, L, Dh/2)
    if interleaved:
        out = torch.stack((y1, y2), dim=-1).flatten(-2)  # (B, H, L, Dh): y1_0, y2_0, y1_1, ...
    else:
        out = torch.cat((y1, y2), dim=-1)  # (B, H, L, Dh)
    return out.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE as a module, to hand to attention layers: ``forward(x (B, H, L, Dh), *, offset=0,
    positions=None)``.

    Holds no parameters; it fixes ``head_dim``, ``base`` and the pairing convention so that
    queries and keys are rotated the same way. See :func:`apply_rope`.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0, interleaved: bool = False):
        super().__init__()
        self.head_dim = check_even("head_dim", head_dim)
        self.base = check_base(base)
        self.interleaved = bool(interleaved)

    def forward(self, x: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        check_float("x", x)
        check_rank("x", x, 4, "[batch, heads, seq, head_dim]")
        if x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x must have last dim head_dim={self.head_dim}, got shape {tuple(x.shape)} "
                f"[batch, heads, seq, head_dim]"
            )
        return apply_rope(
            x, offset=offset, positions=positions, base=self.base, interleaved=self.interleaved
        )

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, interleaved={self.interleaved}"


# --------------------------------------------------------------------------------------------
# ALiBi: a linear distance penalty added to the scores
# --------------------------------------------------------------------------------------------


def _geometric_slopes(n: int) -> list[float]:
    # For n a power of two: 2^(-8/n), 2^(-16/n), ..., 2^(-8) (a geometric sequence).
    return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Per-head ALiBi slopes ``(H,)`` in ``dtype`` (a float dtype; default float32) (Press et
    al., 2022). Computed in float64 and rounded once to ``dtype``.

    For ``H`` a power of two: ``2^(-8 k / H)`` for ``k = 1 .. H``. Otherwise (the paper's rule):
    the slopes for the closest lower power of two ``P``, followed by every other slope of
    ``2P`` (``k = 1, 3, 5, ...``) until there are ``H``.
    """
    num_heads = check_positive_int("num_heads", num_heads)
    check_float_dtype("dtype", dtype)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = _geometric_slopes(closest)
    if closest < num_heads:
        slopes += _geometric_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=dtype)  # (H,)


def alibi_bias(
    num_heads: int,
    n_queries: int,
    n_keys: int | None = None,
    *,
    causal_alignment: str = "top_left",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """ALiBi as an additive float mask ``(H, Lq, Lk)``: ``bias[h, i, j] = -slope_h * |i - j|``.

    This is the symmetric (bidirectional) form. Under a causal mask it equals the paper's
    causal form ``-slope_h * (i - j)`` for ``j <= i`` on every allowed entry, so one function
    serves both: pass it as ``mask`` together with ``causal=True``. ``causal_alignment`` places
    the queries when ``Lq != Lk``, as in :func:`attention.masks.causal_mask`: ``"bottom_right"``
    puts query ``i`` at position ``i + Lk - Lq`` (decoding with a cache). Broadcasts against
    scores ``(B, H, Lq, Lk)``.
    """
    check_float_dtype("dtype", dtype)
    check_device("device", device)
    # float64 slopes for a float64 bias; every other dtype rounds the float32 slopes once.
    slopes_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    slopes = alibi_slopes(num_heads, dtype=slopes_dtype).to(dtype=dtype, device=device)  # (H,)
    n_queries = check_positive_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else check_positive_int("n_keys", n_keys)
    check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    shift = n_keys - n_queries if causal_alignment == "bottom_right" else 0
    distance = (_offsets(n_queries, n_keys, device) - shift).abs().to(dtype)  # (Lq, Lk)
    return -slopes[:, None, None] * distance  # (H, Lq, Lk)
