"""Tests of attention.timeseries: windows, the seasonal-naive baseline and the forecasters.

References are independent of the code under test: explicit Python loops over the series,
the moving average written element by element in float64, torch's ``nn.LSTM`` and
``F.conv1d`` driven by hand, the dense encoder (ProbSparse with every query selected must equal
it), and gradients to check what each output can see.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient.probsparse import probsparse_attention
from attention.timeseries import (
    DLinear,
    LastValueNormalization,
    LSTMForecaster,
    ProbSparseAttention,
    TCNForecaster,
    TransformerForecaster,
    moving_average_trend,
    seasonal_naive,
    sliding_windows,
)

TF_SIZES = dict(d_model=16, num_heads=2, d_ff=32)  # TransformerForecaster, with num_layers


def _history(b: int, length: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(b, length, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --------------------------------------------------------------------------------------------
# Windows and the seasonal-naive baseline
# --------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(length=st.integers(2, 40), lookback=st.integers(1, 12), horizon=st.integers(1, 12))
def test_sliding_windows_equal_a_python_loop(length, lookback, horizon):
    series = torch.arange(length) * 10
    if length < lookback + horizon:
        with pytest.raises(ValueError, match="too short"):
            sliding_windows(series, lookback=lookback, horizon=horizon)
        return
    hist, target = sliding_windows(series, lookback=lookback, horizon=horizon)
    s = series.tolist()
    expect_h = [s[i : i + lookback] for i in range(length - lookback - horizon + 1)]
    expect_t = [s[i + lookback : i + lookback + horizon] for i in range(len(expect_h))]
    assert hist.tolist() == expect_h and target.tolist() == expect_t


@settings(max_examples=30, deadline=None)
@given(period=st.integers(1, 8), extra=st.integers(0, 8), horizon=st.integers(1, 20))
def test_seasonal_naive_repeats_the_last_period(period, extra, horizon):
    history = _history(3, period + extra, seed=period)
    got = seasonal_naive(history, horizon=horizon, period=period)
    lookback = period + extra
    for b in range(3):
        for t in range(horizon):
            assert got[b, t] == history[b, lookback - period + t % period]


def test_seasonal_naive_is_exact_on_a_periodic_series_and_lags_a_trend_by_one_period():
    t = torch.arange(60, dtype=torch.float64)
    periodic = torch.sin(2 * torch.pi * t / 12)
    hist, target = sliding_windows(periodic, lookback=36, horizon=12)
    torch.testing.assert_close(seasonal_naive(hist, horizon=12, period=12), target)
    trend = 0.5 * t
    hist, target = sliding_windows(trend, lookback=36, horizon=12)
    torch.testing.assert_close(
        target - seasonal_naive(hist, horizon=12, period=12), 6.0 + 0 * target
    )


def test_seasonal_naive_refuses_a_period_longer_than_the_history():
    with pytest.raises(ValueError, match="period \\(13\\) must be at most the lookback"):
        seasonal_naive(_history(2, 12), horizon=4, period=13)
    with pytest.raises(ValueError, match="history must have 2 dimensions"):
        seasonal_naive(torch.randn(12), horizon=4, period=4)


# --------------------------------------------------------------------------------------------
# DLinear
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", [1, 3, 5, 25])
def test_moving_average_trend_equals_an_explicit_float64_average(kernel):
    x = _history(2, 17, dtype=torch.float64)
    pad = (kernel - 1) // 2
    expected = torch.empty_like(x)
    for b in range(2):
        for i in range(17):
            # positions outside the series take the nearest end value
            vals = [x[b, min(max(j, 0), 16)] for j in range(i - pad, i + pad + 1)]
            expected[b, i] = sum(vals) / kernel
    torch.testing.assert_close(moving_average_trend(x, kernel_size=kernel), expected)


def test_dlinear_is_two_linear_maps_of_trend_and_remainder():
    torch.manual_seed(0)
    model = DLinear(20, 6, kernel_size=5).double()
    x = _history(4, 20, dtype=torch.float64)
    trend = moving_average_trend(x, kernel_size=5)
    expected = (
        trend @ model.trend.weight.T
        + model.trend.bias
        + (x - trend) @ model.remainder.weight.T
        + model.remainder.bias
    )
    torch.testing.assert_close(model(x), expected)
    # Linear in the history: f(a x + y) - f(0) = a (f(x) - f(0)) + (f(y) - f(0)).
    y, zero = _history(4, 20, seed=1, dtype=torch.float64), torch.zeros(4, 20).double()
    f0 = model(zero)
    torch.testing.assert_close(model(2 * x + y) - f0, 2 * (model(x) - f0) + model(y) - f0)
    assert sum(p.numel() for p in model.parameters()) == 2 * (20 * 6 + 6)


def test_dlinear_refuses_an_even_kernel_and_a_wrong_lookback():
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        DLinear(20, 6, kernel_size=4)
    with pytest.raises(ValueError, match="must be odd"):
        moving_average_trend(_history(1, 5), kernel_size=2)
    with pytest.raises(ValueError, match=r"history must have shape \(B, 20\)"):
        DLinear(20, 6, kernel_size=5)(_history(2, 19))


# --------------------------------------------------------------------------------------------
# LSTM and TCN
# --------------------------------------------------------------------------------------------


def test_lstm_forecaster_reads_the_last_hidden_state_of_torchs_lstm():
    torch.manual_seed(0)
    model = LSTMForecaster(10, 3, 8)
    x = _history(5, 10)
    reference = torch.nn.LSTM(1, 8, batch_first=True)
    reference.load_state_dict(model.lstm.state_dict())
    _, (h, _) = reference(x.unsqueeze(-1))
    torch.testing.assert_close(model(x), model.head(h[-1]))


def _tcn_by_hand(model: TCNForecaster, x: torch.Tensor) -> torch.Tensor:
    """The TCN with explicit causal convolutions: output t = sum_j w_j · h[t - (k-1-j)·d]."""
    h = torch.nn.functional.conv1d(x.unsqueeze(1), model.input.weight, model.input.bias)
    k = model.kernel_size
    for conv, d in zip(model.convs, model.dilations, strict=True):
        out = torch.zeros_like(h) + conv.bias[None, :, None]
        for j in range(k):
            lag = (k - 1 - j) * d  # tap j looks this many steps back
            shifted = torch.zeros_like(h)
            shifted[:, :, lag:] = h[:, :, : h.shape[2] - lag]
            out = out + torch.einsum("oc,bct->bot", conv.weight[:, :, j], shifted)
        h = h + torch.relu(out)
    return model.head(h[:, :, -1])


@pytest.mark.parametrize(("lookback", "kernel"), [(36, 3), (10, 2), (50, 4)])
def test_tcn_equals_explicit_causal_convolutions_and_sees_the_whole_history(lookback, kernel):
    torch.manual_seed(0)
    model = TCNForecaster(lookback, 4, 6, kernel_size=kernel).double()
    assert model.receptive_field >= lookback
    assert model.receptive_field == 1 + (kernel - 1) * sum(model.dilations)
    # the last layer is needed: without it the field would not cover the history
    assert 1 + (kernel - 1) * sum(model.dilations[:-1]) < lookback or len(model.dilations) == 1
    x = _history(3, lookback, dtype=torch.float64).requires_grad_(True)
    out = model(x)
    torch.testing.assert_close(out, _tcn_by_hand(model, x))
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert bool((grad[0] != 0).all())  # every history value reaches the forecast


def test_tcn_is_causal_inside():
    """Every intermediate time step sees only the past: perturbing x[t] leaves steps < t."""
    torch.manual_seed(0)
    model = TCNForecaster(16, 2, 4).double()
    x = _history(1, 16, dtype=torch.float64)
    h0 = model.input(x.unsqueeze(1))
    x2 = x.clone()
    x2[0, 9] += 1.0
    h1 = model.input(x2.unsqueeze(1))
    for conv, d in zip(model.convs, model.dilations, strict=True):
        pad = (model.kernel_size - 1, 0)
        h0 = h0 + torch.relu(conv(torch.nn.functional.pad(h0, (pad[0] * d, 0))))
        h1 = h1 + torch.relu(conv(torch.nn.functional.pad(h1, (pad[0] * d, 0))))
        torch.testing.assert_close(h0[..., :9], h1[..., :9])


def test_recurrent_and_convolutional_forecasters_refuse_bad_sizes():
    with pytest.raises(ValueError, match="kernel_size must be >= 2"):
        TCNForecaster(10, 2, 4, kernel_size=1)
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        LSTMForecaster(10, 2, 4.0)
    with pytest.raises(TypeError, match="history must be a floating-point tensor"):
        LSTMForecaster(10, 2, 4)(torch.ones(2, 10, dtype=torch.long))


# --------------------------------------------------------------------------------------------
# Transformer and ProbSparse
# --------------------------------------------------------------------------------------------


def test_transformer_forecaster_is_embedding_plus_position_then_encoder_then_flat_head():
    torch.manual_seed(0)
    model = TransformerForecaster(12, 4, **TF_SIZES, num_layers=1).double()
    x = _history(3, 12, dtype=torch.float64)
    pe = torch.zeros(12, 16, dtype=torch.float64)
    for pos in range(12):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            pe[pos, 2 * i] = torch.sin(torch.tensor(angle, dtype=torch.float64))
            pe[pos, 2 * i + 1] = torch.cos(torch.tensor(angle, dtype=torch.float64))
    tokens = x.unsqueeze(-1) * model.value_embedding.weight[:, 0] + model.value_embedding.bias
    expected = model.head(model.encoder(tokens + pe).flatten(1))
    torch.testing.assert_close(model(x), expected)


def test_time_aware_forecaster_adds_one_learned_vector_per_calendar_phase():
    torch.manual_seed(0)
    model = TransformerForecaster(12, 4, **TF_SIZES, num_layers=1, period=12).double()
    x = _history(2, 12, dtype=torch.float64)
    phase = (torch.arange(12) + torch.tensor([[0], [5]])) % 12  # two different calendar starts
    out = model(x, phase)
    # the same history at another time of the year gives another forecast
    shifted = model(x, (phase + 1) % 12)
    assert not torch.allclose(out, shifted)
    with torch.no_grad():  # with every phase vector equal, the calendar cannot matter
        model.phase_embedding.weight.copy_(model.phase_embedding.weight[0].clone())
    torch.testing.assert_close(model(x, phase), model(x, (phase + 1) % 12))


def test_time_aware_forecaster_needs_a_valid_phase():
    model = TransformerForecaster(12, 4, **TF_SIZES, num_layers=1, period=12)
    x = _history(2, 12)
    with pytest.raises(ValueError, match="phase is required"):
        model(x)
    with pytest.raises(ValueError, match=r"phase values must lie in \[0, period=12\)"):
        model(x, torch.full((2, 12), 12))
    with pytest.raises(TypeError, match="phase must hold integer"):
        model(x, torch.zeros(2, 12))
    with pytest.raises(ValueError, match="phase must have the shape of history"):
        model(x, torch.zeros(2, 11, dtype=torch.long))
    plain = TransformerForecaster(12, 4, **TF_SIZES, num_layers=1)
    torch.testing.assert_close(plain(x), plain(x, torch.zeros(2, 12, dtype=torch.long)))


def test_probsparse_attn_fn_calls_the_package_kernel_with_a_fixed_sample():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 40, 8, generator=g) for _ in range(3))
    attn = ProbSparseAttention(factor=2, seed=3)
    expected = probsparse_attention(q, k, v, factor=2, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(attn(q, k, v), expected)
    torch.testing.assert_close(attn(q, k, v), attn(q, k, v))  # deterministic call to call
    with pytest.raises(ValueError, match="takes no mask"):
        attn(q, k, v, mask=torch.ones(40, 40, dtype=torch.bool))
    assert "factor=2" in repr(attn)


def test_probsparse_forecaster_equals_the_dense_one_when_every_query_is_selected():
    """u = factor · ceil(ln L) >= L selects every query: ProbSparse is then dense attention."""
    torch.manual_seed(0)
    dense = TransformerForecaster(12, 4, **TF_SIZES, num_layers=2, period=12).double()
    sparse = TransformerForecaster(
        12, 4, **TF_SIZES, num_layers=2, period=12, attn_fn=ProbSparseAttention(factor=5)
    ).double()
    sparse.load_state_dict(dense.state_dict())
    x, phase = _history(3, 12, dtype=torch.float64), torch.arange(12).expand(3, -1)
    torch.testing.assert_close(sparse(x, phase), dense(x, phase))
    few = TransformerForecaster(
        12, 4, **TF_SIZES, num_layers=2, period=12, attn_fn=ProbSparseAttention(factor=1)
    ).double()
    few.load_state_dict(dense.state_dict())
    assert not torch.allclose(few(x, phase), dense(x, phase))  # 3 of 12 queries: different


# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------


def test_last_value_normalization_makes_forecasts_shift_with_the_level():
    torch.manual_seed(0)
    model = LastValueNormalization(LSTMForecaster(10, 3, 8)).double()
    x = _history(4, 10, dtype=torch.float64)
    inner = model.forecaster(x - x[:, -1:]) + x[:, -1:]
    torch.testing.assert_close(model(x), inner)
    torch.testing.assert_close(model(x + 100.0), model(x) + 100.0)  # level-equivariant
    with pytest.raises(TypeError, match="forecaster must be a torch.nn.Module"):
        LastValueNormalization(lambda h, p: h)


@pytest.mark.parametrize(
    "build",
    [
        lambda: DLinear(8, 3, kernel_size=3),
        lambda: LSTMForecaster(8, 3, 4),
        lambda: TCNForecaster(8, 3, 4),
        lambda: TransformerForecaster(8, 3, d_model=8, num_heads=2, d_ff=16, num_layers=1),
        lambda: TransformerForecaster(
            8, 3, d_model=8, num_heads=2, d_ff=16, num_layers=1, period=4
        ),
        lambda: LastValueNormalization(DLinear(8, 3, kernel_size=3)),
    ],
)
def test_every_forecaster_maps_b_by_lookback_to_b_by_horizon_and_trains(build):
    torch.manual_seed(0)
    model = build()
    x, phase = _history(5, 8), torch.arange(8).expand(5, -1) % 4
    out = model(x, phase)
    assert out.shape == (5, 3) and out.dtype == torch.float32
    out.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
