"""attention.efficient._recompute: the weights and the softmax backward that the recomputing
backwards of the sliding-window and block-sparse variants share, against torch in float64."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient._recompute import probabilities, softmax_backward


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 6), keys=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_probabilities_are_softmax_and_lse_rebuilds_them(rows, keys, seed):
    g = torch.Generator().manual_seed(seed)
    scores = 10 * torch.randn(2, rows, keys, generator=g, dtype=torch.float64)
    masked = torch.rand(2, rows, keys, generator=g) < 0.4
    masked[0, 0] = True  # at least one row with no key it may attend
    scores = scores.masked_fill(masked, float("-inf"))
    p, lse = probabilities(scores.clone())
    empty = masked.all(dim=-1, keepdim=True)  # (2, rows, 1)
    want = torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)  # zeros, not NaN
    torch.testing.assert_close(p, want, rtol=1e-12, atol=1e-12)
    want_lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    torch.testing.assert_close(lse[~empty], want_lse[~empty], rtol=1e-12, atol=1e-12)
    assert (lse[empty] == float("inf")).all()
    again, same = probabilities(scores.clone(), lse)  # what a backward recomputes
    torch.testing.assert_close(again, p, rtol=1e-12, atol=1e-12)
    assert same is lse


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 5), keys=st.integers(1, 8), ev=st.integers(1, 4), seed=st.integers(0, 99)
)
def test_softmax_backward_matches_autograd(rows, keys, ev, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, keys, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(keys, ev, generator=g, dtype=torch.float64)
    d_out = torch.randn(rows, ev, generator=g, dtype=torch.float64)
    out = torch.softmax(scores, dim=-1) @ v  # (rows, Ev)
    (want,) = torch.autograd.grad(out, scores, d_out)
    p, _ = probabilities(scores.detach().clone())
    got = softmax_backward(p, d_out @ v.T, d_out, out.detach())
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
