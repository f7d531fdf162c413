"""book.experiments.gradients against independent references: torch.autograd.functional's
full Jacobian, the closed form of a linear recurrence, and a depth/shortest-path computed on a
random computation DAG recorded while it is built."""

from __future__ import annotations

import math
from collections import deque

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from book.experiments.gradients import (
    autograd_depth,
    autograd_path_lengths,
    gradient_vs_distance,
)

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _jacobian_norms(fn, x: torch.Tensor, t: int) -> torch.Tensor:
    """(B, L) Frobenius norms of ∂y[b, t] / ∂x[b, j] from the full Jacobian, one example at a
    time."""
    rows = []
    for b in range(x.shape[0]):
        jac = torch.autograd.functional.jacobian(lambda xb: fn(xb[None])[0, t], x[b])  # (Do, L, D)
        rows.append(jac.permute(1, 0, 2).flatten(1).norm(dim=-1))  # (L,): one block per j
    return torch.stack(rows).double()  # (B, L)


def _linear_recurrence(lam: float):
    """h_t = lam * h_{t-1} + x_t, elementwise, h_{-1} = 0: ∂h_t/∂x_j = lam^(t-j) I for j <= t."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros_like(x[:, 0])  # (B, D)
        out = []
        for x_t in x.unbind(1):
            h = lam * h + x_t
            out.append(h)
        return torch.stack(out, 1)  # (B, L, D)

    return fn


# ------------------------------------------------------------------------------------------
# gradient_vs_distance
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gru", "attention"])
def test_exact_norms_match_full_jacobian(kind):
    torch.manual_seed(0)
    if kind == "gru":
        gru = nn.GRU(3, 4, batch_first=True).double()

        def fn(x):
            return gru(x)[0]  # (B, L, 4)
    else:
        from attention.heads import MultiHeadAttention

        mha = MultiHeadAttention(4, 2).double()

        def fn(x):
            return mha(x)  # (B, L, 4)

    d_in = 3 if kind == "gru" else 4
    x = torch.randn(2, 6, d_in, dtype=torch.float64, generator=_gen(1))
    for position in (2, -1):
        profile = gradient_vs_distance(fn, x, position=position)
        t = position % 6
        want = _jacobian_norms(fn, x, t)
        torch.testing.assert_close(profile.per_example, want, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(profile.norms, want.mean(0), rtol=1e-10, atol=1e-12)
        assert profile.position == t
        assert profile.distances.tolist() == [t - j for j in range(6)]


def test_linear_recurrence_closed_form():
    lam, length, dim = 0.8, 40, 3
    x = torch.randn(2, length, dim, dtype=torch.float64, generator=_gen())
    profile = gradient_vs_distance(_linear_recurrence(lam), x)
    d = profile.distances.double()
    want = torch.where(d >= 0, lam**d * math.sqrt(dim), torch.zeros_like(d))
    torch.testing.assert_close(profile.norms, want, rtol=1e-10, atol=0.0)
    assert profile.decay_per_step(1, 39) == pytest.approx(lam, rel=1e-10)
    assert profile.band_mean(0, 0) == pytest.approx(math.sqrt(dim))
    assert profile.band_mean(10, 12) == pytest.approx(
        math.sqrt(dim) * (lam**10 + lam**11 + lam**12) / 3
    )


def test_input_is_not_modified_and_may_not_require_grad():
    x = torch.randn(1, 4, 2, generator=_gen())
    before = x.clone()
    gradient_vs_distance(_linear_recurrence(0.5), x)
    assert torch.equal(x, before) and not x.requires_grad


@FAST
@given(
    length=st.integers(1, 8),
    dim=st.integers(1, 4),
    d_out=st.integers(1, 4),
    data=st.data(),
)
def test_positionwise_map_has_gradient_only_at_distance_zero(length, dim, d_out, data):
    """y_t = x_t W: the Jacobian block is W at j = t and zero elsewhere."""
    position = data.draw(st.integers(-length, length - 1))
    w = torch.randn(dim, d_out, dtype=torch.float64, generator=_gen(length + dim))
    x = torch.randn(2, length, dim, dtype=torch.float64, generator=_gen(d_out))
    profile = gradient_vs_distance(lambda z: z @ w, x, position=position)
    want = torch.zeros(length, dtype=torch.float64)
    want[position % length] = torch.linalg.matrix_norm(w)
    torch.testing.assert_close(profile.norms, want, rtol=1e-12, atol=0.0)


def test_probes_estimate_the_exact_norm():
    torch.manual_seed(0)
    rnn = nn.RNN(3, 5, batch_first=True).double()
    x = torch.randn(4, 6, 3, dtype=torch.float64, generator=_gen())

    def fn(z):
        return rnn(z)[0]

    exact = gradient_vs_distance(fn, x).norms
    estimate = gradient_vs_distance(fn, x, n_probes=500, generator=_gen(3)).norms
    # Hutchinson with 500 probes: relative error of the squared norm ~ sqrt(2/500) = 6 %.
    torch.testing.assert_close(estimate, exact, rtol=0.15, atol=0.0)
    again = gradient_vs_distance(fn, x, n_probes=500, generator=_gen(3)).norms
    assert torch.equal(estimate, again)  # the generator makes it reproducible


def test_decay_per_step_refuses_underflow_and_empty_bands():
    x = torch.randn(1, 5, 2, generator=_gen())
    profile = gradient_vs_distance(_linear_recurrence(0.5), x, position=2)
    with pytest.raises(ValueError, match="is 0"):
        profile.decay_per_step(-2, 3)  # negative distances (the future) have zero gradient
    with pytest.raises(ValueError, match="no position"):
        profile.band_mean(10, 20)
    with pytest.raises(ValueError, match="low <= high"):
        profile.band_mean(3, 1)
    with pytest.raises(ValueError, match="at least 2"):
        profile.decay_per_step(2, 2)


def test_gradient_vs_distance_rejects_bad_inputs():
    fn = _linear_recurrence(0.5)
    x = torch.randn(1, 5, 2)
    with pytest.raises(TypeError, match="fn must be callable"):
        gradient_vs_distance("rnn", x)
    with pytest.raises(TypeError, match="x must be a floating-point"):
        gradient_vs_distance(fn, torch.ones(1, 5, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions"):
        gradient_vs_distance(fn, torch.randn(5, 2))
    with pytest.raises(ValueError, match="position must be in"):
        gradient_vs_distance(fn, x, position=5)
    with pytest.raises(TypeError, match="position must be an int"):
        gradient_vs_distance(fn, x, position=1.0)
    with pytest.raises(ValueError, match="n_probes must be >= 1"):
        gradient_vs_distance(fn, x, n_probes=0)
    with pytest.raises(ValueError, match=r"fn\(x\) must have shape"):
        gradient_vs_distance(lambda z: z[:, -1], x)


# ------------------------------------------------------------------------------------------
# autograd_path_lengths / autograd_depth
# ------------------------------------------------------------------------------------------


@FAST
@given(n_ops=st.integers(1, 30))
def test_chain_of_operations(n_ops):
    x = torch.randn(3, requires_grad=True)
    y = x
    for i in range(n_ops):
        y = y * 1.5 if i % 2 else y + 1.0
    assert autograd_depth(y) == n_ops
    assert autograd_path_lengths(y, [x]) == [n_ops]


@FAST
@given(data=st.data(), n_leaves=st.integers(1, 4), n_ops=st.integers(1, 25))
def test_random_dag_matches_recorded_structure(data, n_leaves, n_ops):
    """Build a random DAG of binary ops, record its edges, and compare with plain BFS/DP."""
    leaves = [torch.randn(2, requires_grad=True) for _ in range(n_leaves)]
    values = list(leaves)
    parents: list[tuple[int, ...]] = [()] * n_leaves  # node index -> parent node indices
    for _ in range(n_ops):
        a = data.draw(st.integers(0, len(values) - 1))
        b = data.draw(st.integers(0, len(values) - 1))
        op = data.draw(st.sampled_from(["add", "mul"]))
        values.append(values[a] + values[b] if op == "add" else values[a] * values[b])
        parents.append((a, b))
    root = len(values) - 1  # n_ops >= 1: the root is an op
    # Reference depth: longest chain of ops down to a leaf.
    depth = [0] * len(values)
    for node in range(n_leaves, len(values)):
        depth[node] = 1 + max(depth[p] for p in parents[node])
    # Reference shortest path from the root to every node (edges = ops crossed).
    dist = {root: 0}
    queue = deque([root])
    while queue:
        node = queue.popleft()
        for p in parents[node]:
            if p not in dist:
                dist[p] = dist[node] + 1
                queue.append(p)
    assert autograd_depth(values[root]) == depth[root]
    assert autograd_path_lengths(values[root], leaves) == [dist.get(i) for i in range(n_leaves)]


def test_unrolled_rnn_paths_grow_by_a_constant_per_step_and_attention_paths_do_not():
    from attention.heads import MultiHeadAttention

    torch.manual_seed(0)
    cell = nn.RNNCell(4, 4)
    mha = MultiHeadAttention(4, 2)
    xs = [torch.randn(2, 4, requires_grad=True) for _ in range(12)]
    h = torch.zeros(2, 4)
    for x_t in xs:
        h = cell(x_t, h)
    rnn_paths = autograd_path_lengths(h, xs)
    steps = {a - b for a, b in zip(rnn_paths, rnn_paths[1:], strict=False)}
    assert len(steps) == 1 and steps.pop() > 0  # linear in the distance
    y = mha(torch.stack(xs, 1))[:, -1]  # (B, D): the last position's output
    attn_paths = autograd_path_lengths(y, xs)
    assert len(set(attn_paths)) == 1  # the same for every distance


def test_path_helpers_reject_bad_inputs():
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).sum()
    assert autograd_path_lengths(y, [torch.randn(3, requires_grad=True)]) == [None]
    with pytest.raises(ValueError, match=r"inputs\[0\] must be a leaf"):
        autograd_path_lengths(y, [x * 2])
    with pytest.raises(ValueError, match=r"inputs\[0\] must be a leaf"):
        autograd_path_lengths(y, [torch.randn(3)])
    with pytest.raises(ValueError, match="no grad_fn"):
        autograd_depth(torch.randn(3))
    with pytest.raises(TypeError, match="output must be a torch.Tensor"):
        autograd_depth([1.0])
