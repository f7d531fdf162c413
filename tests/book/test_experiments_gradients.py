"""book.experiments.gradients against independent references: torch.autograd.functional's
full Jacobian, the closed form of a linear recurrence; the rounds of a recurrence against the
modules' own full-sequence outputs, and path lengths against models whose dependence is known
(an RNN, attention, a per-token control that mixes nothing)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from book.experiments.gradients import (
    gradient_vs_distance,
    layer_rounds,
    path_lengths,
    recurrence_rounds,
    sequential_depth,
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
# path_lengths / sequential_depth / recurrence_rounds / layer_rounds
# ------------------------------------------------------------------------------------------


def _rnn_modules(d: int, h: int):
    torch.manual_seed(0)
    return {
        "LSTMCell": nn.LSTMCell(d, h),
        "GRUCell": nn.GRUCell(d, h),
        "RNNCell": nn.RNNCell(d, h),
        "LSTM": nn.LSTM(d, h, batch_first=True),
        "GRU": nn.GRU(d, h),
        "RNN x2": nn.RNN(d, h, num_layers=2, batch_first=True),
    }


def _reference_outputs(rnn, x):
    """The module's own full-sequence output (cells: a plain loop)."""
    if isinstance(rnn, (nn.LSTMCell, nn.GRUCell, nn.RNNCell)):
        h = x.new_zeros(x.shape[0], rnn.hidden_size)
        state, outs = ((h, h) if isinstance(rnn, nn.LSTMCell) else h), []
        for x_t in x.unbind(1):
            state = rnn(x_t, state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outs, 1)
    if rnn.batch_first:
        return rnn(x)[0]
    return rnn(x.transpose(0, 1))[0].transpose(0, 1)


@pytest.mark.parametrize("name", list(_rnn_modules(3, 4)))
def test_recurrence_rounds_end_at_the_modules_own_output(name):
    rnn = _rnn_modules(3, 4)[name].double()
    x = torch.randn(2, 7, 3, dtype=torch.float64, generator=_gen())
    outs = recurrence_rounds(rnn)(x)
    assert len(outs) == 7
    want = _reference_outputs(rnn, x)
    torch.testing.assert_close(outs[-1], want, rtol=1e-10, atol=1e-12)
    for k, y in enumerate(outs, start=1):  # after round k, positions 0 .. k-1 are exact
        torch.testing.assert_close(y[:, :k], want[:, :k], rtol=1e-10, atol=1e-12)
        if k < 7:
            assert not torch.allclose(y[:, k:], want[:, k:])


@pytest.mark.parametrize("name", list(_rnn_modules(3, 4)))
def test_rnn_path_is_distance_plus_one_and_depth_is_n(name):
    rnn = _rnn_modules(3, 4)[name].double()
    x = torch.randn(1, 9, 3, dtype=torch.float64, generator=_gen(1))
    paths = path_lengths(recurrence_rounds(rnn), x, generator=_gen(2))
    assert paths == [9 - j for j in range(9)]  # j -> t = 8: t - j + 1 rounds
    mid = path_lengths(recurrence_rounds(rnn), x, position=4, generator=_gen(2))
    assert mid == [5 - j for j in range(5)] + [None] * 4  # causal: the future never reaches
    assert sequential_depth(recurrence_rounds(rnn), x, generator=_gen(3)) == 9


def test_attention_paths_are_one_layer_and_a_per_token_model_has_no_path():
    from attention.heads import MultiHeadAttention

    torch.manual_seed(0)
    x = torch.randn(2, 10, 4, dtype=torch.float64, generator=_gen())
    mha = MultiHeadAttention(4, 2).double()
    assert path_lengths(layer_rounds([mha]), x) == [1] * 10
    assert path_lengths(layer_rounds([mha, mha]), x) == [1] * 10  # reached after the first
    assert sequential_depth(layer_rounds([mha]), x) == 1
    linear = nn.Linear(4, 4).double()  # per token: mixes nothing
    control = path_lengths(layer_rounds([linear, torch.tanh, linear]), x, position=3)
    assert control == [None, None, None, 1] + [None] * 6
    # A stack is only as mixing as its mixing layer: Linear after attention reaches all.
    assert path_lengths(layer_rounds([linear, mha]), x) == [2] * 9 + [1]
    # ...while torch.stack of per-token leaves (what fooled the autograd-graph count) does not.
    assert path_lengths(lambda z: [torch.stack([linear(t) for t in z.unbind(1)], 1)], x) == (
        [None] * 9 + [1]
    )


def test_a_recurrence_whose_step_ignores_its_state_has_depth_one():
    """A control for the depth: a 'cell' with no recurrent weights is not sequential."""
    torch.manual_seed(0)
    cell = nn.RNNCell(3, 4).double()
    with torch.no_grad():
        cell.weight_hh.zero_()
    x = torch.randn(1, 6, 3, dtype=torch.float64, generator=_gen())
    assert path_lengths(recurrence_rounds(cell), x) == [None] * 5 + [1]
    assert sequential_depth(recurrence_rounds(cell), x) == 1


def test_path_helpers_reject_bad_inputs():
    x = torch.randn(1, 4, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match="rnn must be a torch RNN"):
        recurrence_rounds(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="unidirectional"):
        recurrence_rounds(nn.GRU(3, 3, bidirectional=True))
    with pytest.raises(ValueError, match="n_rounds must be >= 1"):
        recurrence_rounds(nn.GRUCell(3, 3), n_rounds=0)
    with pytest.raises(TypeError, match="layers must be a non-empty"):
        layer_rounds([])
    with pytest.raises(TypeError, match="rounds must be callable"):
        path_lengths("rounds", x)
    with pytest.raises(ValueError, match="position must be in"):
        path_lengths(layer_rounds([torch.tanh]), x, position=4)
    with pytest.raises(ValueError, match=r"must have shape \(B, L, D_out\)"):
        path_lengths(lambda z: [z[:, 0]], x)
    with pytest.raises(ValueError, match="at least one output"):
        path_lengths(lambda z: [], x)
    with pytest.raises(ValueError, match="depends on no input"):
        sequential_depth(lambda z: [torch.zeros_like(z)], x)
