"""book.experiments.seeds: the spread of a measurement over seeds, against statistics."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from book.experiments.seeds import SEEDS, make_deterministic, over_seeds, spread


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=12))
def test_spread_matches_the_statistics_module(values):
    s = spread(values)
    assert s.n == len(values)
    assert s.mean == pytest.approx(statistics.fmean(values), abs=1e-6)
    assert s.min == min(values) and s.max == max(values)
    expected_std = statistics.stdev(values) if len(values) > 1 else 0.0
    assert s.std == pytest.approx(expected_std, rel=1e-9, abs=1e-6)


def test_spread_formats_mean_min_max_and_count():
    assert str(spread([0.71, 0.85, 1.0])) == "0.85 (min 0.71, max 1.00) over 3 seeds"
    assert spread([2]).format(".1f") == "2.0 (min 2.0, max 2.0) over 1 seed"


@pytest.mark.parametrize(
    ("values", "error", "match"),
    [
        ([], ValueError, "at least one"),
        ([1.0, math.nan], ValueError, r"values\[1\] must be finite"),
        ([1.0, "2"], TypeError, r"values\[1\] must be a number"),
        ([True], TypeError, "must be a number"),
        ("12", TypeError, "values must be numbers"),
    ],
)
def test_spread_refuses_bad_values(values, error, match):
    with pytest.raises(error, match=match):
        spread(values)


def test_over_seeds_runs_once_per_seed_in_order():
    assert SEEDS == (0, 1, 2)
    assert over_seeds(lambda seed: seed * 10) == [0, 10, 20]
    assert over_seeds(lambda seed: -seed, [5, 3]) == [-5, -3]
    with pytest.raises(ValueError, match="distinct"):
        over_seeds(lambda seed: seed, [1, 1])
    with pytest.raises(ValueError, match="non-empty sequence of ints"):
        over_seeds(lambda seed: seed, [])
    with pytest.raises(TypeError, match="run must be callable"):
        over_seeds(3)


@pytest.fixture
def restore_torch_determinism():
    enabled = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    state = torch.get_rng_state()
    yield
    torch.use_deterministic_algorithms(enabled)
    torch.utils.deterministic.fill_uninitialized_memory = fill
    torch.set_rng_state(state)


def test_make_deterministic_seeds_and_switches_to_deterministic_algorithms(
    restore_torch_determinism,
):
    torch.use_deterministic_algorithms(False)
    torch.utils.deterministic.fill_uninitialized_memory = True
    make_deterministic(5)
    drawn = torch.randn(4)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    torch.manual_seed(5)
    torch.testing.assert_close(drawn, torch.randn(4), rtol=0, atol=0)
    make_deterministic(6)
    assert not torch.equal(torch.randn(4), drawn)  # the seed is used, not ignored


@pytest.mark.parametrize("seed", [1.0, True, "0"])
def test_make_deterministic_rejects_a_seed_that_is_not_an_int(seed):
    with pytest.raises(TypeError, match="seed must be an int"):
        make_deterministic(seed)
