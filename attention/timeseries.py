"""Forecasting periodic, trending series: attention forecasters and the baselines they must beat.

Layout: a batch of univariate histories ``history (B, L)`` (``L`` = the lookback, oldest value
first), optional calendar phases ``phase (B, L)`` int64 in ``[0, period)`` (the month of the
year of each value, say), and forecasts ``(B, horizon)`` of the next ``horizon`` values. Every
forecaster here is called the same way, ``model(history, phase=None) -> (B, horizon)``, so that
one training loop serves all of them; a model without calendar features ignores ``phase``.

- :func:`sliding_windows`: a series cut into (history, target) pairs.
- :func:`seasonal_naive`: repeat the last observed period, the baseline with no parameters.
- :func:`moving_average_trend`, :class:`DLinear`: Zeng et al. (2022)'s linear forecaster, one
  linear map from the lookback to the horizon for the trend (a moving average) and one for the
  rest.
- :class:`LSTMForecaster`, :class:`TCNForecaster`: a recurrent and a causal dilated
  convolutional forecaster, read at the last time step.
- :class:`TransformerForecaster`: each time step a token (value embedding + sinusoidal
  position), a pre-LN encoder, a linear head on all tokens; with ``period`` a learned embedding
  of the calendar phase is added ("time-aware" encodings, as Informer's time-stamp embedding);
  with ``attn_fn=ProbSparseAttention()`` Informer's ProbSparse self-attention replaces the
  dense one.
- :class:`LastValueNormalization`: wraps any forecaster to work relative to the last observed
  value (NLinear's trick, RevIN's simplest form), which removes the level of a trending series.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_float,
    check_module_input,
    check_positive_int,
    check_rank,
    check_tensor,
)
from .blocks import Encoder
from .efficient.probsparse import probsparse_attention
from .positional import sinusoidal_encoding

Tensor = torch.Tensor

__all__ = [
    "DLinear",
    "LSTMForecaster",
    "LastValueNormalization",
    "ProbSparseAttention",
    "TCNForecaster",
    "TransformerForecaster",
    "moving_average_trend",
    "seasonal_naive",
    "sliding_windows",
]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _check_history(history: object, lookback: int | None = None) -> Tensor:
    """``history`` must be a float ``(B, L)`` tensor, with ``L == lookback`` when given."""
    check_float("history", history)
    check_rank("history", history, 2, "[batch, lookback]")
    if lookback is not None and history.shape[1] != lookback:
        raise ValueError(
            f"history must have shape (B, {lookback}) for lookback={lookback}, got "
            f"{tuple(history.shape)}"
        )
    return history


def _check_phase(phase: object, history: Tensor, period: int) -> Tensor:
    """``phase`` must be an integer ``(B, L)`` tensor like ``history``, values in [0, period)."""
    check_tensor("phase", phase)
    if phase.is_floating_point() or phase.dtype == torch.bool:
        raise TypeError(f"phase must hold integer calendar positions, got dtype {phase.dtype}")
    if phase.shape != history.shape:
        raise ValueError(
            f"phase must have the shape of history {tuple(history.shape)} (one calendar "
            f"position per value), got {tuple(phase.shape)}"
        )
    if phase.numel() and (int(phase.min()) < 0 or int(phase.max()) >= period):
        raise ValueError(
            f"phase values must lie in [0, period={period}), got {int(phase.min())}.."
            f"{int(phase.max())}"
        )
    return phase


# --------------------------------------------------------------------------------------------
# Data and the parameter-free baseline
# --------------------------------------------------------------------------------------------


def sliding_windows(series: Tensor, *, lookback: int, horizon: int) -> tuple[Tensor, Tensor]:
    """Every (history, target) pair of a 1-D series, one step apart.

    ``series (T,)`` (any dtype: values, or their calendar phases) →
    ``histories (N, lookback)`` and ``targets (N, horizon)`` with ``N = T - lookback - horizon
    + 1``; pair ``i`` is ``series[i : i + lookback]`` and the ``horizon`` values after it.
    """
    check_tensor("series", series)
    check_rank("series", series, 1, "[time]")
    lookback = check_positive_int("lookback", lookback)
    horizon = check_positive_int("horizon", horizon)
    n = series.shape[0] - lookback - horizon + 1
    if n < 1:
        raise ValueError(
            f"series of length {series.shape[0]} is too short for lookback={lookback} + "
            f"horizon={horizon}: it needs at least {lookback + horizon} values"
        )
    windows = series.unfold(0, lookback + horizon, 1)  # (N, L + H)
    return windows[:, :lookback], windows[:, lookback:]


def seasonal_naive(history: Tensor, *, horizon: int, period: int) -> Tensor:
    """Forecast by repeating the last observed period: ``ŷ[t] = history[L - period + t mod
    period]`` for ``t = 0 .. horizon - 1``.

    ``history (B, L)`` with ``L >= period`` → ``(B, horizon)``. On a purely periodic series it
    is exact; on a trending one it lags the trend by one period.
    """
    _check_history(history)
    horizon = check_positive_int("horizon", horizon)
    period = check_positive_int("period", period)
    if period > history.shape[1]:
        raise ValueError(
            f"period ({period}) must be at most the lookback (history has {history.shape[1]} "
            f"values): the last period must have been observed"
        )
    last = history[:, -period:]  # (B, period)
    index = torch.arange(horizon, device=history.device) % period  # (horizon,)
    return last[:, index]  # (B, horizon)


# --------------------------------------------------------------------------------------------
# Linear: DLinear
# --------------------------------------------------------------------------------------------


def moving_average_trend(x: Tensor, *, kernel_size: int) -> Tensor:
    """The trend of DLinear / Autoformer: a centred moving average of ``kernel_size`` values,
    the series' first and last values repeated at the ends so that the output keeps the length.

    ``x (B, L)`` → ``(B, L)``; ``kernel_size`` must be odd (a centred window).
    """
    _check_history(x)
    kernel_size = check_positive_int("kernel_size", kernel_size)
    if kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a centred window), got {kernel_size}")
    pad = (kernel_size - 1) // 2
    front = x[:, :1].expand(-1, pad)  # (B, pad)
    back = x[:, -1:].expand(-1, pad)  # (B, pad)
    padded = torch.cat([front, x, back], dim=1)  # (B, L + 2·pad)
    return padded.unfold(1, kernel_size, 1).mean(-1)  # (B, L)


class DLinear(nn.Module):
    """DLinear (Zeng et al. 2022): split the history into a moving-average trend and the
    remainder, map each to the horizon with its own linear layer, add.

    ``forward(history (B, lookback), phase=None) -> (B, horizon)``; ``phase`` is ignored. The
    whole model is linear in the history: ``2 · (lookback · horizon + horizon)`` parameters.
    """

    def __init__(self, lookback: int, horizon: int, *, kernel_size: int = 25) -> None:
        super().__init__()
        self.lookback = check_positive_int("lookback", lookback)
        self.horizon = check_positive_int("horizon", horizon)
        kernel_size = check_positive_int("kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centred window), got {kernel_size}")
        self.kernel_size = kernel_size
        self.trend = nn.Linear(lookback, horizon)
        self.remainder = nn.Linear(lookback, horizon)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        _check_history(history, self.lookback)
        check_module_input("history", history, self)
        trend = moving_average_trend(history, kernel_size=self.kernel_size)  # (B, L)
        return self.trend(trend) + self.remainder(history - trend)  # (B, horizon)


# --------------------------------------------------------------------------------------------
# Recurrent and convolutional
# --------------------------------------------------------------------------------------------


class LSTMForecaster(nn.Module):
    """An LSTM reads the history one value at a time; its last hidden state → the horizon.

    ``forward(history (B, lookback), phase=None) -> (B, horizon)``; ``phase`` is ignored.
    """

    def __init__(
        self, lookback: int, horizon: int, hidden_size: int, *, num_layers: int = 1
    ) -> None:
        super().__init__()
        self.lookback = check_positive_int("lookback", lookback)
        self.horizon = check_positive_int("horizon", horizon)
        hidden_size = check_positive_int("hidden_size", hidden_size)
        num_layers = check_positive_int("num_layers", num_layers)
        self.lstm = nn.LSTM(1, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, horizon)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        _check_history(history, self.lookback)
        check_module_input("history", history, self)
        states, _ = self.lstm(history.unsqueeze(-1))  # (B, L, hidden)
        return self.head(states[:, -1])  # (B, horizon)


class TCNForecaster(nn.Module):
    """A temporal convolutional network: causal dilated convolutions with residuals, read at
    the last time step.

    Layer ``i`` has dilation ``2^i``; there are just enough layers for the last step to see the
    whole history (receptive field ``1 + (kernel_size - 1)·(2^n - 1) >= lookback``), each
    ``x = x + relu(conv(x))`` with left padding only, so no output sees the future.
    ``forward(history (B, lookback), phase=None) -> (B, horizon)``; ``phase`` is ignored.
    """

    def __init__(self, lookback: int, horizon: int, channels: int, *, kernel_size: int = 3) -> None:
        super().__init__()
        self.lookback = check_positive_int("lookback", lookback)
        self.horizon = check_positive_int("horizon", horizon)
        channels = check_positive_int("channels", channels)
        self.kernel_size = check_positive_int("kernel_size", kernel_size)
        if kernel_size < 2:
            raise ValueError(f"kernel_size must be >= 2 for the field to grow, got {kernel_size}")
        dilations = [1]
        while 1 + (kernel_size - 1) * (2 * dilations[-1] - 1) < lookback:
            dilations.append(2 * dilations[-1])
        self.dilations = tuple(dilations)
        self.receptive_field = 1 + (kernel_size - 1) * sum(dilations)
        self.input = nn.Conv1d(1, channels, 1)
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d) for d in dilations
        )
        self.head = nn.Linear(channels, horizon)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        _check_history(history, self.lookback)
        check_module_input("history", history, self)
        x = self.input(history.unsqueeze(1))  # (B, C, L)
        for conv, d in zip(self.convs, self.dilations, strict=True):
            x = x + F.relu(conv(F.pad(x, ((self.kernel_size - 1) * d, 0))))  # (B, C, L) causal
        return self.head(x[:, :, -1])  # (B, horizon)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


class ProbSparseAttention:
    """Informer's ProbSparse self-attention as an ``attn_fn`` for the package's encoders.

    ``attn(q, k, v, mask=None, causal=False) -> (B, H, L, Ev)`` calls
    :func:`attention.efficient.probsparse.probsparse_attention` with ``factor`` (the top
    ``factor · ceil(ln L)`` queries attend fully, the others get the mean of the values). The
    key sample comes from a generator seeded ``seed`` on every call, so a model is a
    deterministic function of its input. Masks are not supported (ProbSparse's lazy queries
    take the mean of *all* values).
    """

    def __init__(self, factor: int = 5, *, seed: int = 0) -> None:
        self.factor = check_positive_int("factor", factor)
        self.seed = check_positive_int("seed", seed, allow_zero=True)

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        if mask is not None:
            raise ValueError(
                "ProbSparseAttention takes no mask (its lazy queries average all values); got "
                f"a mask of shape {tuple(mask.shape)}"
            )
        generator = torch.Generator(device=q.device).manual_seed(self.seed)
        return probsparse_attention(
            q, k, v, factor=self.factor, causal=causal, generator=generator
        )  # (B, H, L, Ev)

    def __repr__(self) -> str:
        return f"ProbSparseAttention(factor={self.factor}, seed={self.seed})"


class TransformerForecaster(nn.Module):
    """Each time step one token; a pre-LN Transformer encoder; a linear head on all tokens.

    Token ``t`` = ``Linear(1, d_model)(history[:, t])`` + the sinusoidal encoding of position
    ``t`` (+ a learned embedding of ``phase[:, t]`` when ``period`` is given: the "time-aware"
    encoding, which tells each token where in the calendar it sits, as Informer's time-stamp
    embedding). The head flattens the ``lookback`` output tokens and maps them to the horizon.

    Args:
        lookback, horizon: the window geometry.
        d_model, num_heads, num_layers, d_ff: the encoder's sizes.
        period: the number of calendar phases (12 for months of the year); ``None``: no
            calendar features, ``phase`` is ignored.
        attn_fn: replaces dense attention in every layer (e.g. :class:`ProbSparseAttention`).
        dropout: in the encoder.

    ``forward(history (B, lookback), phase (B, lookback) | None) -> (B, horizon)``; ``phase``
    is required when ``period`` is set.
    """

    def __init__(
        self,
        lookback: int,
        horizon: int,
        *,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        period: int | None = None,
        attn_fn=None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.lookback = check_positive_int("lookback", lookback)
        self.horizon = check_positive_int("horizon", horizon)
        self.d_model = check_positive_int("d_model", d_model)
        self.period = None if period is None else check_positive_int("period", period)
        self.value_embedding = nn.Linear(1, d_model)
        self.register_buffer(
            "position", sinusoidal_encoding(lookback, d_model), persistent=False
        )  # (L, D)
        self.phase_embedding = nn.Embedding(period, d_model) if period is not None else None
        self.encoder = Encoder(
            d_model,
            num_heads,
            d_ff,
            num_layers=num_layers,
            dropout=dropout,
            pre_ln=True,
            activation="gelu",
            attn_fn=attn_fn,
        )
        self.head = nn.Linear(lookback * d_model, horizon)

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        _check_history(history, self.lookback)
        check_module_input("history", history, self)
        x = self.value_embedding(history.unsqueeze(-1)) + self.position  # (B, L, D)
        if self.phase_embedding is not None:
            if phase is None:
                raise ValueError(
                    f"phase is required: this forecaster was built with period={self.period} "
                    f"(time-aware); pass the calendar phase of every history value, (B, L)"
                )
            x = x + self.phase_embedding(_check_phase(phase, history, self.period))  # (B, L, D)
        x = self.encoder(x)  # (B, L, D)
        return self.head(x.flatten(1))  # (B, horizon)


# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------


class LastValueNormalization(nn.Module):
    """Run ``forecaster`` on ``history - last value`` and add the last value back.

    A trending series drifts out of the range the network was trained on; relative to its last
    observation every window looks alike. (NLinear's normalisation, the simplest form of
    RevIN.) ``forward(history (B, L), phase=None) -> (B, horizon)``.
    """

    def __init__(self, forecaster: nn.Module) -> None:
        super().__init__()
        if not isinstance(forecaster, nn.Module):
            raise TypeError(
                f"forecaster must be a torch.nn.Module, got {type(forecaster).__name__}"
            )
        self.forecaster = forecaster

    def forward(self, history: Tensor, phase: Tensor | None = None) -> Tensor:
        _check_history(history)
        last = history[:, -1:]  # (B, 1)
        return self.forecaster(history - last, phase) + last  # (B, horizon)
