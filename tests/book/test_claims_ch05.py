"""book.claims.ch05: every verdict and assert function fed the cases that give each of its
outcomes, including a false case (the claim fails), so that each can fail."""

from __future__ import annotations

import math

import pytest

from book.claims.ch05 import (
    SCEPTIC_SWEEPS,
    assert_c16_paths,
    assert_c17_links,
    assert_c19_blind_at_chance,
    assert_c19_linear_learns_slower,
    c16_verdict,
    c17_link_failures,
    c17_verdict,
    c18_verdict,
    c19_cost_verdict,
    c19_extension_verdict,
    c19_linear_verdict,
    c19_reach_verdict,
    c19_reach_verdict_at_lengths,
    c19_window_verdict,
)


def test_c16_assert_fails_on_counter_examples():
    assert_c16_paths([1, 2, 3], {"attention": [1, 1, 1]}, [1, None, None])
    with pytest.raises(AssertionError, match="RNN path"):
        assert_c16_paths([7, 7, 7], {"attention": [1, 1, 1]}, [1, None, None])
    with pytest.raises(AssertionError, match="one layer"):
        assert_c16_paths([1, 2, 3], {"encoder": [1, 2, 2]}, [1, None, None])
    with pytest.raises(AssertionError, match="no-mixing control"):  # the autograd-graph count
        assert_c16_paths([1, 2, 3], {"attention": [1, 1, 1]}, [5, 5, 5])


def test_c19_blind_assert_and_reach_verdict_fail_when_the_claim_is_false():
    predicted = {"blind": 0.5, "sighted": 1.0}
    good = {"blind": [0.5, 0.52, 0.49], "sighted": [1.0, 0.98, 0.99]}
    assert_c19_blind_at_chance(good, predicted)
    assert c19_reach_verdict(good, predicted) == "reproduced"
    leaky = {"blind": [0.5, 0.9, 0.5], "sighted": [1.0, 1.0, 1.0]}
    with pytest.raises(AssertionError, match="cannot reach the topic"):
        assert_c19_blind_at_chance(leaky, predicted)
    # Reach without learning: the deep model stays at chance on some seeds.
    assert c19_reach_verdict({"blind": [0.5], "sighted": [1.0, 0.5, 0.5]}, predicted) == "partly"
    assert c19_reach_verdict({"blind": [0.8], "sighted": [1.0]}, predicted) == "not reproduced"
    with pytest.raises(ValueError, match="predicted blind"):
        assert_c19_blind_at_chance(good, {"sighted": 1.0})


def test_c19_linear_assert_fails_when_linear_is_as_fast_or_never_learns():
    assert_c19_linear_learns_slower([40, 50, 60], [90, None, 120], [1.0, 0.5, 1.0])
    with pytest.raises(AssertionError, match="as fast as full"):
        assert_c19_linear_learns_slower([40, 50, 60], [55, 120, 130], [1.0, 1.0, 1.0])
    with pytest.raises(AssertionError, match="a ceiling"):
        assert_c19_linear_learns_slower([40, 50, 60], [None, None, None], [0.5, 0.55, 0.6])
    with pytest.raises(AssertionError, match="full attention did not solve"):
        assert_c19_linear_learns_slower([40, None, 60], [90, 100, 110], [1.0, 1.0, 1.0])


def test_c19_extension_verdict_follows_the_seeds():
    predicted = {"1 layer": 0.5, "2 layers": 1.0}
    assert c19_extension_verdict({"1 layer": [0.5], "2 layers": [1.0, 0.99, 0.95]}, predicted) == (
        "reproduced"
    )
    assert c19_extension_verdict({"1 layer": [0.5], "2 layers": [1.0, 0.5, 0.5]}, predicted) == (
        "partly"
    )
    # What chapter 5 measured: neither the relay nor the deep windows learned within 200 steps.
    assert c19_extension_verdict({"1 layer": [0.5], "2 layers": [0.46, 0.52, 0.5]}, predicted) == (
        "not reproduced"
    )
    assert c19_extension_verdict({"1 layer": [0.9], "2 layers": [1.0]}, predicted) == (
        "not reproduced"
    )
    with pytest.raises(ValueError, match="nothing to judge"):
        c19_extension_verdict({"1 layer": [0.5]}, {"1 layer": 0.5})


C17_GOOD = dict(  # chapter 5's seed 0 at L = 128, roughly
    accuracy=1.0,
    topic_over_filler=60.0,
    reverse_per_uniform=0.9,
    filler_mass_linked=0.02,
    filler_mass_unlinked=0.9,
)
SHARP_CELLS = {(0, 0): 0.99, (0, 1): 0.01, (1, 0): 0.02, (1, 1): 0.98}


def test_c17_passes_sharp_links_and_fails_each_way_the_claim_can_be_false():
    assert c17_link_failures(SHARP_CELLS, **C17_GOOD) == []
    assert_c17_links(SHARP_CELLS, where="seed 0, L=128", **C17_GOOD)
    cases = {
        "does not solve the task": (SHARP_CELLS, {"accuracy": 0.6}),
        "only 2.0x a filler token": (SHARP_CELLS, {"topic_over_filler": 2.0}),
        "fewer than two linked": ({c: 0.01 for c in SHARP_CELLS} | {(0, 0): 0.95}, {}),
        "fewer than two linked combinations": ({**SHARP_CELLS, (1, 1): 0.5}, {}),
        "reverse link is 5.0/L": (SHARP_CELLS, {"reverse_per_uniform": 5.0}),
        "filler gets 0.70 of the weight with the link": (SHARP_CELLS, {"filler_mass_linked": 0.7}),
    }
    for message, (cells, change) in cases.items():
        with pytest.raises(AssertionError, match=message):
            assert_c17_links(cells, where="a false case", **(C17_GOOD | change))
    # Seed 4 at L = 512 (round 1): 0.89 on the topic is a link, not a failure (no sharpness
    # threshold is in the claim).
    assert c17_link_failures({**SHARP_CELLS, (1, 1): 0.89}, **C17_GOOD) == []
    # Every document linked: no unlinked filler mass to compare, and that is no failure.
    assert c17_link_failures(SHARP_CELLS, **(C17_GOOD | {"filler_mass_unlinked": math.nan})) == []
    with pytest.raises(ValueError, match="at least one"):
        c17_link_failures({}, **C17_GOOD)


def test_c19_reach_verdict_at_lengths_holds_only_where_every_length_holds():
    predicted = {"window": 0.5, "bigbird": 0.62}
    lands = ({"window": [0.5], "bigbird": [0.62, 0.61, 0.63]}, predicted)
    misses = ({"window": [0.5], "bigbird": [0.5, 0.5, 0.5]}, predicted)  # reach, no learning
    leaks = ({"window": [0.9], "bigbird": [0.62]}, predicted)  # the blind one beats chance
    assert c19_reach_verdict_at_lengths({128: lands, 512: lands}) == "reproduced"
    assert c19_reach_verdict_at_lengths({128: lands, 512: misses}) == "partly"
    assert c19_reach_verdict_at_lengths({128: lands, 512: leaks}) == "not reproduced"
    with pytest.raises(ValueError, match="at least one length"):
        c19_reach_verdict_at_lengths({})


FLAT = {"attention, 1 layer": 1.0004, "encoder, 2 layers": 0.9998}
FLAT_FAR_NEAR = {"attention, 1 layer": 1.02, "encoder, 2 layers": 0.97}


def test_c16_verdict():
    vanished = {"RNN (tanh)": 1e-60, "LSTM": 1e-40}
    kw = dict(attention_rates=FLAT, attention_far_near=FLAT_FAR_NEAR)
    assert c16_verdict(recurrent_far_near=vanished, **kw) == "reproduced"
    # An LSTM whose gradient survives (forget-gate bias +1: 1.9e-19): the contrast fails.
    survives = {"RNN (tanh)": 1e-60, "LSTM": 1.9e-19}
    assert c16_verdict(recurrent_far_near=survives, **kw) == "partly"
    # A false case: attention's gradient falls with the distance.
    decaying = {"attention, 1 layer": 0.9, "encoder, 2 layers": 1.0}
    assert (
        c16_verdict(
            recurrent_far_near=vanished,
            attention_rates=decaying,
            attention_far_near=FLAT_FAR_NEAR,
        )
        == "not reproduced"
    )
    assert (
        c16_verdict(
            recurrent_far_near=vanished,
            attention_rates=FLAT,
            attention_far_near={"attention, 1 layer": 1e-3, "encoder, 2 layers": 1.0},
        )
        == "not reproduced"
    )
    with pytest.raises(ValueError, match="same attention models"):
        c16_verdict(
            recurrent_far_near=vanished, attention_rates=FLAT, attention_far_near={"x": 1.0}
        )


ALL_LINKED = {(0, 0): 0.99, (0, 1): 0.97, (1, 0): 0.98, (1, 1): 0.99}


def test_c17_verdict():
    one_way = [(SHARP_CELLS, C17_GOOD), (ALL_LINKED, C17_GOOD)]  # what chapter 5 measured
    assert c17_verdict(one_way) == "partly"
    mutual = C17_GOOD | {"reverse_per_uniform": 5.0, "filler_mass_unlinked": math.nan}
    assert c17_verdict([(ALL_LINKED, mutual)]) == "reproduced"
    # Mutual, but some combinations are never linked: still partly.
    assert c17_verdict([(SHARP_CELLS, mutual)]) == "partly"
    # A false case: the model does not solve the task, or fewer than two links, or the topic
    # does not stand out against the filler.
    assert c17_verdict([(SHARP_CELLS, C17_GOOD | {"accuracy": 0.6})]) == "not reproduced"
    weak = {**SHARP_CELLS, (0, 0): 0.5}
    assert c17_verdict([(SHARP_CELLS, C17_GOOD), (weak, C17_GOOD)]) == "not reproduced"
    flat = C17_GOOD | {"topic_over_filler": 3.0}
    assert c17_verdict([(SHARP_CELLS, flat)]) == "not reproduced"
    with pytest.raises(ValueError, match="at least one"):
        c17_verdict([])


def test_c18_verdict():
    exact = [4.0, 4.0, 4.0]
    assert c18_verdict(weight_ratios=exact, flop_ratios=exact, peak_ratios=[3.95, 3.99, 4.0]) == (
        "reproduced"
    )
    # The counts quadruple but something linear dominates the peak.
    assert c18_verdict(weight_ratios=exact, flop_ratios=exact, peak_ratios=[2.1, 2.5, 3.2]) == (
        "partly"
    )
    # A false case: the cost doubles per doubling.
    assert c18_verdict(weight_ratios=exact, flop_ratios=[2.0] * 3, peak_ratios=[3.95] * 3) == (
        "not reproduced"
    )
    with pytest.raises(ValueError, match="at least one doubling"):
        c18_verdict(weight_ratios=[], flop_ratios=exact, peak_ratios=exact)


def test_c19_cost_verdict():
    memory = {"dense": 1.98, "window": 1.0, "linear": 0.95}
    flops = {"dense": 2.0, "window": 1.0, "linear": 1.0}
    kw = dict(dense="dense", remedies=["window", "linear"])
    assert c19_cost_verdict(memory, flops, **kw) == "reproduced"
    assert c19_cost_verdict(memory | {"linear": 1.9}, flops, **kw) == "partly"
    # False cases: no remedy is linear, or dense attention was not quadratic to begin with.
    assert c19_cost_verdict(memory | {"linear": 1.9, "window": 1.9}, flops, **kw) == (
        "not reproduced"
    )
    assert c19_cost_verdict(memory | {"dense": 1.0}, flops, **kw) == "not reproduced"
    assert c19_cost_verdict(memory, flops | {"window": 2.0}, **kw) == "partly"
    with pytest.raises(ValueError, match="remedies"):
        c19_cost_verdict(memory, flops, dense="dense", remedies=[])


def test_c19_linear_verdict():
    full = [1.0, 1.0, 1.0]
    assert c19_linear_verdict(full, [1.0, 0.76, 0.78]) == "partly"  # chapter 5: slower
    assert c19_linear_verdict(full, [0.7, 0.76, 0.78]) == "reproduced"  # a ceiling
    assert c19_linear_verdict(full, [1.0, 0.99, 0.98]) == "not reproduced"  # nothing lost
    with pytest.raises(ValueError, match="at least one"):
        c19_linear_verdict(full, [])


def test_c19_window_verdict():
    assert c19_window_verdict([0.5], [1.0]) == "reproduced"
    assert c19_window_verdict([0.5, 0.52], [0.55, 0.6]) == "partly"  # nothing learned
    assert c19_window_verdict([0.8], [1.0]) == "not reproduced"  # the window saw the topic
    with pytest.raises(ValueError, match="at least one"):
        c19_window_verdict([], [1.0])


TINY = {  # claim id -> keyword arguments that make its sweep runner quick
    "C16": {"seeds": [1], "forget_bias": 1.0, "length": 220},
    "C17": {"seeds": [0], "steps": 3},
    "C19 window": {"seeds": [0], "steps": 3},
    "C19 window depth": {"seeds": [0], "steps": 3, "window": 12, "layers": 2},
    "C19 global relay": {"seeds": [0], "steps": 3, "dedicated_id": True},
    "C19 linear": {"seeds": [0], "steps": 3},
    "C18": {"lengths": [16, 32, 64], "head_dim": 8, "batch_size": 1, "num_heads": 2},
    "C19 BigBird": {"seeds": [0], "steps": 3, "block_size": 8, "eval_512": 8},
    "C19 cost": {"lengths": [128, 256], "window": 4, "block_size": 8},
    "C19 global": {"lengths": [128, 256], "window": 4, "n_global": 2},
}


@pytest.mark.parametrize("claim_id", sorted(TINY))
def test_each_sweep_runner_runs_and_judges(claim_id):
    sweeps = {s.claim_id: s for s in SCEPTIC_SWEEPS}
    assert set(sweeps) == set(TINY), "a chapter 5 sweep is missing or untested"
    outcome = sweeps[claim_id].run(**TINY[claim_id])
    assert outcome.verdict in ("reproduced", "partly", "not reproduced")
    assert outcome.numbers
