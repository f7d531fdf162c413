"""What the benchmark times: the configurations (full and quick) and the methods, in cases.

A *case* is one attention pattern; every method of a case computes the same thing (or, for the
approximations, stands in for it), and is timed interleaved with the case's *reference*, torch's
fused ``F.scaled_dot_product_attention`` computing that pattern:

============ ==================================== ===========================================
case         reference                            methods
============ ==================================== ===========================================
``full``     ``sdpa`` (no mask)                   naive dense, flash, chunked, linear,
                                                  ProbSparse
``causal``   ``sdpa_causal`` (``is_causal=True``)  naive dense, flash, linear (chunked)
``band``     ``sdpa_band`` (band bool mask)       dense band-masked, sliding window
``bigbird``  ``sdpa_bigbird`` (block bool mask)   block-sparse
============ ==================================== ===========================================

"Naive dense" is the book's ``attention.functional.scaled_dot_product_attention``, which
materialises the ``n × n`` scores. Masks and layouts are built once per length, outside the
timed calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attention.efficient import (
    bigbird_layout,
    block_sparse_attention,
    chunked_attention,
    flash_attention,
    linear_attention,
    probsparse_attention,
    sliding_window_attention,
)
from attention.efficient.probsparse import n_selected
from attention.functional import scaled_dot_product_attention
from attention.masks import block_layout_to_mask, sliding_window_mask
from measure.flops import band_pairs, dense_flops, linear_attention_flops, pair_flops

Tensor = torch.Tensor
AttnFn = Callable[[Tensor, Tensor, Tensor], Tensor]

MODES = ("forward", "forward_backward")
CASES = ("full", "causal", "band", "bigbird")
# Cost classes whose methods also get a paired growth measurement t(2n)/t(n) per doubling.
GROWTH_COSTS = ("subquadratic",)
REFERENCE = {
    "full": "sdpa",
    "causal": "sdpa_causal",
    "band": "sdpa_band",
    "bigbird": "sdpa_bigbird",
}


@dataclass(frozen=True)
class BenchConfig:
    """Sizes and budgets of one benchmark run (fp32, ``batch_size`` sequences, ``num_heads``
    heads)."""

    mode: str
    batch_size: int
    num_heads: int
    head_dim: int
    lengths: tuple[int, ...]
    window: int  # sliding window w: keys i - w/2 .. i + w/2 (Longformer's w, both sides)
    block_size: int  # BigBird blocks
    # Longest n per cost class and mode: the quadratic methods stop before the long lengths.
    max_n: dict[str, dict[str, int]] = field(default_factory=dict)
    min_repeats: int = 3
    max_repeats: int = 15
    budget_s: float = 3.0  # timed rounds of one (case, n, mode) stop after this, >= min_repeats
    growth_budget_s: float = 2.0  # the same for one paired t(2n)/t(n) of a sub-quadratic method
    warmup_max_n: int = 2048  # one untimed warm-up round at lengths up to this
    collect_garbage: bool = True  # gc.collect() before each (case, n, mode)'s rounds
    matmul_size: int = 2048
    matmul_repeats: int = 7
    # Targets: ratios are judged at every n >= ratio_min_n, the rest at n_target (quick mode
    # scales these down to its own lengths; its numbers mean nothing).
    ratio_min_n: int = 2048
    n_target: int = 8192
    slope_ns: tuple[int, int] = (4096, 8192)
    dtype: torch.dtype = torch.float32

    @property
    def left(self) -> int:
        return self.window // 2

    @property
    def right(self) -> int:
        return self.window - self.window // 2


FULL = BenchConfig(
    mode="full",
    batch_size=1,
    num_heads=8,
    head_dim=64,
    lengths=(512, 1024, 2048, 4096, 8192, 16384),
    window=256,
    block_size=64,
    max_n={
        "quadratic": {"forward": 8192, "forward_backward": 8192},
        # torch SDPA with a bool mask (the band and BigBird references): its masked backward
        # is the slowest fused call; 4096 keeps the full run under ten minutes.
        "quadratic_masked": {"forward": 8192, "forward_backward": 4096},
        "naive": {"forward": 4096, "forward_backward": 4096},
        "naive_masked": {"forward": 4096, "forward_backward": 2048},
        # The dense band-masked form runs at 8192 for the sliding window's target.
        "naive_band": {"forward": 8192, "forward_backward": 2048},
        "chunked": {"forward": 4096, "forward_backward": 4096},
        "subquadratic": {"forward": 16384, "forward_backward": 16384},
    },
)

QUICK = BenchConfig(
    mode="quick",
    batch_size=1,
    num_heads=2,
    head_dim=32,
    lengths=(64, 128, 256),
    window=32,
    block_size=16,
    max_n={cost: {"forward": 256, "forward_backward": 256} for cost in FULL.max_n},
    min_repeats=2,
    max_repeats=3,
    budget_s=0.05,
    growth_budget_s=0.02,
    warmup_max_n=0,
    collect_garbage=False,
    matmul_size=256,
    matmul_repeats=3,
    ratio_min_n=64,
    n_target=256,
    slope_ns=(128, 256),
)


@dataclass(frozen=True)
class Method:
    """One timed method. ``make(n, config)`` returns the function of ``(q, k, v)`` to time,
    with masks and layouts for length ``n`` built in advance; ``flops(n, config)`` its forward
    FLOPs (see :mod:`measure.flops`)."""

    name: str
    label: str
    case: str
    cost: str  # key of BenchConfig.max_n
    make: Callable[[int, BenchConfig], AttnFn]
    flops: Callable[[int, BenchConfig], float]

    def runs_at(self, n: int, mode: str, config: BenchConfig) -> bool:
        return n <= config.max_n[self.cost][mode]


def _dense(causal: bool = False) -> Callable[[int, BenchConfig], float]:
    def flops(n: int, c: BenchConfig) -> float:
        return dense_flops(c.batch_size, c.num_heads, n, c.head_dim, causal=causal)

    return flops


def _band_flops(n: int, c: BenchConfig) -> float:
    return pair_flops(c.batch_size, c.num_heads, c.head_dim, band_pairs(n, c.left, c.right))


def _bigbird_layout(n: int, c: BenchConfig) -> Tensor:
    n_blocks = -(-n // c.block_size)
    return bigbird_layout(n_blocks, generator=torch.Generator().manual_seed(0))  # (Nq, Nk)


def _bigbird_flops(n: int, c: BenchConfig) -> float:
    pairs = int(block_layout_to_mask(_bigbird_layout(n, c), c.block_size, n, n).sum())
    return pair_flops(c.batch_size, c.num_heads, c.head_dim, pairs)


def _linear_flops(n: int, c: BenchConfig) -> float:
    return linear_attention_flops(c.batch_size, c.num_heads, n, c.head_dim)


def _probsparse_flops(n: int, c: BenchConfig) -> float:
    """Scores of the ``u`` selected queries against every key, plus the ``n × U`` sampled
    scores of the ranking (one product, half the pair cost)."""
    n_top, n_sample = n_selected(n, 5), n_selected(n, 5)
    return pair_flops(c.batch_size, c.num_heads, c.head_dim, n_top * n + (n * n_sample) // 2)


def _sdpa(n, c):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v)


def _sdpa_causal(n, c):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _naive(n, c):
    return lambda q, k, v: scaled_dot_product_attention(q, k, v)


def _naive_causal(n, c):
    return lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=True)


def _flash(causal: bool):
    def make(n, c):
        return lambda q, k, v: flash_attention(q, k, v, causal=causal)

    return make


def _chunked(n, c):
    return lambda q, k, v: chunked_attention(q, k, v)


def _linear(causal: bool):
    def make(n, c):
        return lambda q, k, v: linear_attention(q, k, v, causal=causal)

    return make


def _probsparse(n, c):
    return lambda q, k, v: probsparse_attention(q, k, v)


def _band_mask(n: int, c: BenchConfig) -> Tensor:
    return sliding_window_mask(n, left=c.left, right=c.right)  # (n, n)


def _sdpa_band(n, c):
    mask = _band_mask(n, c)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _dense_band(n, c):
    mask = _band_mask(n, c)
    return lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)


def _sliding_window(n, c):
    return lambda q, k, v: sliding_window_attention(q, k, v, left=c.left, right=c.right)


def _sdpa_bigbird(n, c):
    mask = block_layout_to_mask(_bigbird_layout(n, c), c.block_size, n, n)  # (n, n)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _block_sparse(n, c):
    layout = _bigbird_layout(n, c)
    return lambda q, k, v: block_sparse_attention(q, k, v, layout, block_size=c.block_size)


METHODS: tuple[Method, ...] = (
    Method("sdpa", "torch SDPA", "full", "quadratic", _sdpa, _dense()),
    Method("naive", "naive dense", "full", "naive", _naive, _dense()),
    Method("flash", "flash (tiled)", "full", "quadratic", _flash(False), _dense()),
    Method("chunked", "chunked (Rabe-Staats)", "full", "chunked", _chunked, _dense()),
    Method("linear", "linear", "full", "subquadratic", _linear(False), _linear_flops),
    Method(
        "probsparse",
        "ProbSparse",
        "full",
        "subquadratic",
        _probsparse,
        _probsparse_flops,
    ),
    Method("sdpa_causal", "torch SDPA causal", "causal", "quadratic", _sdpa_causal, _dense(True)),
    Method(
        "naive_causal", "naive dense causal", "causal", "naive_masked", _naive_causal, _dense(True)
    ),
    Method("flash_causal", "flash causal", "causal", "quadratic", _flash(True), _dense(True)),
    Method(
        "linear_causal",
        "linear causal (chunked)",
        "causal",
        "subquadratic",
        _linear(True),
        _linear_flops,
    ),
    Method(
        "sdpa_band", "torch SDPA band mask", "band", "quadratic_masked", _sdpa_band, _band_flops
    ),
    Method("dense_band", "naive dense band mask", "band", "naive_band", _dense_band, _band_flops),
    Method(
        "sliding_window",
        "sliding window",
        "band",
        "subquadratic",
        _sliding_window,
        _band_flops,
    ),
    Method(
        "sdpa_bigbird",
        "torch SDPA BigBird mask",
        "bigbird",
        "quadratic_masked",
        _sdpa_bigbird,
        _bigbird_flops,
    ),
    Method(
        "block_sparse",
        "block-sparse (BigBird)",
        "bigbird",
        "subquadratic",
        _block_sparse,
        _bigbird_flops,
    ),
)


def methods_by_name() -> dict[str, Method]:
    return {m.name: m for m in METHODS}


def make_inputs(n: int, config: BenchConfig, *, requires_grad: bool) -> tuple[Tensor, ...]:
    """Seeded ``q, k, v`` ``(B, H, n, d)`` and, for the backward, an upstream gradient."""
    generator = torch.Generator().manual_seed(n)
    shape = (config.batch_size, config.num_heads, n, config.head_dim)
    q, k, v, grad_out = (
        torch.randn(shape, generator=generator, dtype=config.dtype) for _ in range(4)
    )
    if requires_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v, grad_out
