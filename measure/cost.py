"""The cost of one attention call, counted (bytes, FLOPs) and timed, and how a cost grows with
the sequence length.

:func:`measure_cost` runs ``attn(q, k, v)`` on inputs from :func:`make_qkv` under
:mod:`measure.memory` (peak extra bytes) and :func:`measure.flops.matmul_flop_counter`
(matrix-multiply FLOPs, in-place products included) and times it with
:func:`measure.timing.time_forward`; :func:`fit_power` fits the exponent ``p`` of
``cost ∝ length^p`` to such costs measured at several lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attention.checks import check_positive_int

from .flops import matmul_flop_counter
from .memory import peak_extra_bytes
from .timing import time_forward

Tensor = torch.Tensor


@dataclass(frozen=True)
class Cost:
    """What :func:`measure_cost` measured for one call at one length.

    ``peak_bytes``: most bytes the call allocated and held at once (output included, inputs
    not), counted tensor by tensor; ``flops``: matrix-multiply FLOPs (2 per multiply-add) as
    :func:`measure.flops.matmul_flop_counter` counts them; ``seconds``: the fastest
    wall-clock time of ``repeats`` calls (machine-dependent: show it, never assert it).
    """

    seq_len: int
    peak_bytes: int
    flops: int
    seconds: float


def make_qkv(
    seq_len: int, *, batch_size: int = 1, num_heads: int = 2, head_dim: int = 32, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """Random float32 ``q, k, v``, each ``(B, H, L, E)``, from a generator seeded ``seed``."""
    shape = (
        check_positive_int("batch_size", batch_size),
        check_positive_int("num_heads", num_heads),
        check_positive_int("seq_len", seq_len),
        check_positive_int("head_dim", head_dim),
    )
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=g) for _ in range(3))  # (B, H, L, E) each


def measure_cost(
    attn: Callable[[Tensor, Tensor, Tensor], Tensor],
    seq_len: int,
    *,
    batch_size: int = 1,
    num_heads: int = 2,
    head_dim: int = 32,
    repeats: int = 3,
    timed: bool = True,
) -> Cost:
    """Bytes, FLOPs and time of one forward call ``attn(q, k, v)`` without autograd.

    ``q, k, v`` come from :func:`make_qkv`. Memory and FLOPs are counted in separate calls
    from the timed ones (the counting modes cost Python work per operator). ``timed=False``
    skips the timing (``seconds`` is then NaN).
    """
    if not callable(attn):
        raise TypeError(f"attn must be callable (q, k, v) -> out, got {type(attn).__name__}")
    q, k, v = make_qkv(seq_len, batch_size=batch_size, num_heads=num_heads, head_dim=head_dim)
    with torch.no_grad():
        peak = peak_extra_bytes(lambda: attn(q, k, v))
        counter = matmul_flop_counter()  # torch's counter + in-place products (flash)
        with counter:
            attn(q, k, v)
    seconds = time_forward(lambda: attn(q, k, v), repeats=repeats) if timed else math.nan
    return Cost(seq_len, int(peak), int(counter.get_total_flops()), seconds)


def fit_power(lengths: Sequence[int], values: Sequence[float]) -> float:
    """Least-squares slope of ``log value`` against ``log length``: the exponent ``p`` in
    ``value ∝ length^p`` (2 for O(n²), 1 for O(n))."""
    if len(lengths) != len(values) or len(lengths) < 2:
        raise ValueError(
            f"need as many values as lengths, at least 2; got {len(lengths)} lengths and "
            f"{len(values)} values"
        )
    if min(lengths) <= 0 or min(values) <= 0:
        raise ValueError("lengths and values must be > 0 to take logarithms")
    x = torch.tensor([math.log(n) for n in lengths], dtype=torch.float64)
    y = torch.tensor([math.log(v) for v in values], dtype=torch.float64)
    return float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
