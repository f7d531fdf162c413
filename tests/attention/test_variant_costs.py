"""The sub-quadratic variants keep their cost in training too: forward + backward allocates
memory in proportion to n (n log n for ProbSparse), never n², counted op by op.

The forward-only bounds (no n × n tensor) live with each variant's tests; this file catches
a backward that brings the quadratic cost back through autograd, e.g. one gradient as large
as the whole input per block (a backward of 20 s instead of 1 s at n = 16384, found by the
benchmark's forward+backward timings).
"""

from __future__ import annotations

import pytest
import torch

from attention.efficient import block_sparse, sliding_window
from attention.efficient.block_sparse import bigbird_layout, block_sparse_attention
from attention.efficient.linear import linear_attention
from attention.efficient.probsparse import probsparse_attention
from attention.efficient.sliding_window import sliding_window_attention
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import random_qkv

pytestmark = pytest.mark.slow  # forward+backward at several lengths under a dispatch mode

BLOCK = 32


def _sliding(q, k, v):
    return sliding_window_attention(q, k, v, left=48, right=47)


def _sliding_globals(q, k, v):
    return sliding_window_attention(q, k, v, left=31, right=0, global_tokens=torch.tensor([0, 5]))


def _bigbird(q, k, v):
    n_blocks = -(-q.shape[-2] // BLOCK)
    return block_sparse_attention(q, k, v, bigbird_layout(n_blocks), block_size=BLOCK)


def _bigbird_per_head(q, k, v):
    n_blocks = -(-q.shape[-2] // BLOCK)
    layouts = [bigbird_layout(n_blocks, generator=torch.Generator().manual_seed(h)) for h in (0, 1)]
    return block_sparse_attention(q, k, v, torch.stack(layouts), block_size=BLOCK)


VARIANTS = {
    "sliding_window": (_sliding, 2.2),
    "sliding_window_globals": (_sliding_globals, 2.2),
    "block_sparse": (_bigbird, 2.2),
    "block_sparse_per_head": (_bigbird_per_head, 2.2),
    "linear": (lambda q, k, v: linear_attention(q, k, v), 2.2),
    "linear_causal": (lambda q, k, v: linear_attention(q, k, v, causal=True), 2.2),
    # u = 5 ceil(ln n) selected queries each see every key: n log n.
    "probsparse": (lambda q, k, v: probsparse_attention(q, k, v), 2.5),
}


def _training_bytes(fn, n: int) -> int:
    q, k, v = random_qkv(1, 2, n, n, 16, 16, dtype=torch.float32, requires_grad=True)
    with AllocationProbe() as probe:
        fn(q, k, v).sum().backward()
    return probe.allocated


@pytest.mark.parametrize("name", list(VARIANTS))
def test_forward_backward_allocations_grow_linearly(name, monkeypatch):
    # Small tiles, so that these short lengths already take many tiles per head, as n = 16384
    # does with the default sizes: a per-tile cost that grows with n shows up as n².
    monkeypatch.setattr(sliding_window, "SCORE_TILE_ELEMENTS", 2**12)
    monkeypatch.setattr(block_sparse, "_CHUNK_SCORES", 2**13)
    fn, bound = VARIANTS[name]
    small, large = (_training_bytes(fn, n) for n in (2048, 4096))
    # Quadratic growth would give 4; one input-sized gradient per tile gave 3.5-3.9 here.
    assert large / small <= bound, f"{name}: {small} -> {large} bytes, x{large / small:.2f}"
