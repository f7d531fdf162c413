"""measure.timing: the chapters' timers and the one-thread context."""

from __future__ import annotations

import time

import pytest
import torch

from measure.timing import min_seconds, time_forward


def test_time_forward_runs_warmup_plus_repeats_without_autograd():
    calls = []

    def fn():
        calls.append(torch.is_grad_enabled())

    seconds = time_forward(fn, repeats=3, warmup=2)
    assert len(calls) == 5 and not any(calls)
    assert seconds >= 0.0
    with pytest.raises(ValueError, match="repeats"):
        time_forward(fn, repeats=0)


def test_min_seconds_calls_warmup_plus_repeats_times():
    calls = []
    t = min_seconds(lambda: calls.append(1), repeats=5, warmup=3)
    assert len(calls) == 8 and t >= 0.0
    durations = iter([0.0, 0.0, 0.2, 0.01, 0.1])  # sleeps: warmup, warmup, then 3 timed

    def sleepy():
        time.sleep(next(durations))

    assert 0.01 <= min_seconds(sleepy, repeats=3, warmup=2) < 0.1
    with pytest.raises(ValueError, match="repeats"):
        min_seconds(lambda: None, repeats=0)
