"""book.claims.ch04: every verdict and assert function fed the cases that give each of its
outcomes, including a false case (the claim fails), so that each can fail."""

from __future__ import annotations

import pytest

from book.claims import VERDICTS
from book.claims.ch04 import (
    BETTER,
    DROP,
    LEARNED,
    assert_c14_quality_drops_past_training_length,
    assert_c15_rope_extrapolates_better,
    c11_verdict,
    c12_verdict,
    c13_verdict,
    c14_verdict,
    c15_verdict,
    learned_pe_verdict,
    lookback_accuracy_over_seeds,
)


def test_thresholds_are_the_ones_the_chapter_states():
    assert (LEARNED, DROP, BETTER) == (0.9, 0.3, 0.1)


def test_c11_verdict():
    gaps = {"sinusoidal": 0.6, "RoPE": 0.4}
    assert c11_verdict(perm_error=5e-7, pooled_gap=1e-7, position_gaps=gaps) == "reproduced"
    # Equivariant, but one position scheme leaves the two sentences alike.
    assert (
        c11_verdict(
            perm_error=5e-7, pooled_gap=1e-7, position_gaps={"sinusoidal": 0.6, "RoPE": 0.0}
        )
        == "partly"
    )
    # A false case: outputs move with the permutation (a position leak in "attention").
    assert c11_verdict(perm_error=0.3, pooled_gap=1e-7, position_gaps=gaps) == "not reproduced"
    assert c11_verdict(perm_error=5e-7, pooled_gap=0.1, position_gaps=gaps) == "not reproduced"
    with pytest.raises(ValueError, match="position_gaps"):
        c11_verdict(perm_error=0.0, pooled_gap=0.0, position_gaps={})


def test_c12_verdict():
    falling = [318, 240, 180, 20, 3, 0]
    assert c12_verdict(falling, max_rel_error=0.01) == "reproduced"
    assert c12_verdict(falling, max_rel_error=0.2) == "partly"  # ordered, formula off
    assert c12_verdict([318, 240, 250, 20, 3, 0], max_rel_error=0.01) == "not reproduced"
    assert c12_verdict([30, 30, 30], max_rel_error=0.01) == "not reproduced"  # one scale
    with pytest.raises(ValueError, match="two channels"):
        c12_verdict([5], max_rel_error=0.0)


def test_c13_verdict():
    assert c13_verdict(shift_error=1e-15, fit_gap=1e-11) == "reproduced"
    assert c13_verdict(shift_error=1e-15, fit_gap=0.5) == "partly"  # the fit finds another M
    assert c13_verdict(shift_error=0.1, fit_gap=1e-11) == "not reproduced"


def test_learned_pe_verdict():
    linear = {128: 768 * 128, 512: 768 * 512}
    kw = dict(d_model=768, refuses_past_table=True, in_range=[1.0, 1.0], past_trained=[0.1, 0.2])
    assert learned_pe_verdict(params=linear, **kw) == "reproduced"
    # A bigger table that also works past the trained lengths: not locked.
    assert learned_pe_verdict(params=linear, **(kw | {"past_trained": [0.95, 0.9]})) == "partly"
    assert learned_pe_verdict(params=linear, **(kw | {"refuses_past_table": False})) == "partly"
    quadratic = {128: 768 * 128, 512: 768 * 512 * 4}
    assert learned_pe_verdict(params=quadratic, **kw) == "partly"
    assert (
        learned_pe_verdict(params=quadratic, **(kw | {"refuses_past_table": False}))
        == "not reproduced"
    )
    with pytest.raises(ValueError, match="params"):
        learned_pe_verdict(params={}, **kw)


DROPS = {32: [1.0, 0.99, 1.0], 48: [0.4, 0.5, 0.3], 64: [0.1, 0.2, 0.1], 128: [0.06] * 3}


def test_c14_assert_passes_when_a_learned_model_drops_past_the_training_length():
    assert_c14_quality_drops_past_training_length(DROPS, train_max=32, learned=0.9, drop=0.3)


def test_c14_assert_fails_when_quality_holds_past_the_training_length():
    acc = {32: [1.0, 1.0, 1.0], 64: [0.95, 0.9, 0.97], 128: [0.9, 0.8, 0.85]}
    with pytest.raises(AssertionError, match="does not drop"):
        assert_c14_quality_drops_past_training_length(acc, train_max=32, learned=0.9, drop=0.3)


def test_c14_assert_fails_when_a_seed_never_learned_the_task():
    acc = {32: [1.0, 0.3, 1.0], 64: [0.1, 0.1, 0.1]}  # a drop, but one seed never learned
    with pytest.raises(AssertionError, match="did not learn"):
        assert_c14_quality_drops_past_training_length(acc, train_max=32, learned=0.9, drop=0.3)


def test_c14_assert_refuses_a_table_without_long_lengths():
    with pytest.raises(ValueError, match="2 \\* train_max"):
        assert_c14_quality_drops_past_training_length(
            {32: [1.0], 48: [0.2]}, train_max=32, learned=0.9, drop=0.3
        )


def test_c14_verdict():
    assert c14_verdict(DROPS, train_max=32, params=0) == "reproduced"
    holds_at_64 = DROPS | {64: [0.9, 0.95, 0.9]}  # drops at 128 only
    assert c14_verdict(holds_at_64, train_max=32, params=0) == "partly"
    holds = {32: [1.0] * 3, 64: [0.95] * 3, 128: [0.9] * 3}
    assert c14_verdict(holds, train_max=32, params=0) == "not reproduced"
    assert c14_verdict(DROPS, train_max=32, params=64) == "not reproduced"  # has parameters
    never_learned = DROPS | {32: [1.0, 0.3, 1.0]}
    assert c14_verdict(never_learned, train_max=32, params=0) == "not reproduced"
    with pytest.raises(ValueError, match="train_max"):
        c14_verdict({64: [0.1]}, train_max=32, params=0)


def test_c15_assert_passes_when_rope_is_better_and_fails_when_it_is_not():
    rope = {48: [0.9, 0.8, 0.85], 64: [0.5, 0.6, 0.4]}
    sinusoidal = {48: [0.3, 0.2, 0.25], 64: [0.1, 0.1, 0.1]}
    assert_c15_rope_extrapolates_better(rope, sinusoidal, lengths=[48, 64], margin=0.1)
    with pytest.raises(AssertionError, match="not better"):
        assert_c15_rope_extrapolates_better(sinusoidal, rope, lengths=[48, 64], margin=0.1)
    close = {48: [0.85, 0.8, 0.85], 64: [0.5, 0.6, 0.4]}  # better by less than the margin
    with pytest.raises(AssertionError, match="not better"):
        assert_c15_rope_extrapolates_better(rope, close, lengths=[48], margin=0.1)
    with pytest.raises(ValueError, match="length 96"):
        assert_c15_rope_extrapolates_better(rope, sinusoidal, lengths=[96], margin=0.1)


def test_c15_verdict():
    sinusoidal = {32: [1.0] * 3, 48: [0.1] * 3, 64: [0.1] * 3, 128: [0.06] * 3}
    falls_far = {32: [1.0] * 3, 48: [0.8] * 3, 64: [0.6] * 3, 128: [0.2] * 3}  # the chapter's
    keeps_far = {32: [1.0] * 3, 48: [0.95] * 3, 64: [0.95] * 3, 128: [0.9] * 3}
    kw = dict(params=0, other=sinusoidal, near=[48, 64], far=128, train_max=32)
    assert c15_verdict(diagonal_spread=1e-14, rope=keeps_far, **kw) == "reproduced"
    assert c15_verdict(diagonal_spread=1e-14, rope=falls_far, **kw) == "partly"
    # Not better than the sinusoidal model, but exact: partly; neither: not reproduced.
    assert c15_verdict(diagonal_spread=1e-14, rope=sinusoidal, **kw) == "partly"
    assert c15_verdict(diagonal_spread=0.5, rope=sinusoidal, **kw) == "not reproduced"
    assert c15_verdict(diagonal_spread=1e-14, rope=sinusoidal, **(kw | {"params": 8})) == (
        "not reproduced"
    )


def test_every_verdict_function_returns_a_verdict():
    outcomes = {c13_verdict(shift_error=s, fit_gap=g) for s in (0.0, 1.0) for g in (0.0, 1.0)}
    assert outcomes == set(VERDICTS)


def test_lookback_accuracy_over_seeds_runs_in_order_and_reuses_done_seeds():
    calls = []

    def run(seed):
        calls.append(seed)
        return [seed / 10, seed / 100]

    got = lookback_accuracy_over_seeds(run, [16, 32], seeds=(0, 1, 2), done={0: [0.9, 0.8]})
    assert got == {16: [0.9, 0.1, 0.2], 32: [0.8, 0.01, 0.02]}
    assert calls == [1, 2]
    with pytest.raises(ValueError, match="one per length"):
        lookback_accuracy_over_seeds(lambda seed: [0.5], [16, 32], seeds=(3,))


def test_sweep_runners_run_and_judge_a_tiny_budget():
    from book.claims.ch04 import SCEPTIC_SWEEPS, c14_sweep_run, c15_sweep_run

    setting = {"seeds": [0], "steps": 2, "num_layers": 1, "d_model": 32}
    c14, c15 = c14_sweep_run(**setting), c15_sweep_run(**setting)
    # Two steps learn nothing: C14 has no trained model to extrapolate from.
    assert c14.verdict == "not reproduced"
    assert c15.verdict in VERDICTS
    assert "d_model 32" in c14.numbers["model"] and "2 steps" in c15.numbers["model"]
    by_claim = {s.claim_id: s for s in SCEPTIC_SWEEPS}
    assert set(by_claim) == {"C11", "C12", "C13", "C14", "C15", "§4 learned PE"}
    for cid in ("C14", "C15", "§4 learned PE"):  # seeds, a 3x budget and the model size
        sweep = by_claim[cid]
        assert sweep.baseline == {"seeds": [0, 1, 2], "steps": 400, "num_layers": 1, "d_model": 32}
        changes = [dict(p.kwargs) for p in sweep.perturbations]
        assert {"seeds": [3, 4, 5]} in changes and {"steps": 1200} in changes
        assert {"num_layers": 2, "d_model": 64} in changes


def test_learned_pe_sweep_run_at_a_tiny_budget():
    from book.claims.ch04 import learned_pe_sweep_run

    out = learned_pe_sweep_run(seeds=[0], steps=2, num_layers=1, d_model=32)
    # The count is linear and the table refuses; two steps learn nothing in range: "partly".
    assert out.numbers["table of 32 refuses a 33rd position"] is True
    assert out.verdict == "partly"


def test_c11_sweep_run_reproduces_the_chapter_and_judges_other_settings():
    from book.claims.ch04 import c11_sweep_run

    base = c11_sweep_run(seeds=[0], length=10, d_model=8, num_heads=2, permutations=100)
    assert base.verdict == "reproduced"
    assert base.numbers["max |attn(Px) - P attn(x)|"] == "9e-08"  # as section 4.1 prints
    assert base.numbers["smallest position gap, sentence (sin / RoPE)"] == "0.19 / 0.15"
    small = c11_sweep_run(seeds=[1, 2], length=3, d_model=8, num_heads=2, permutations=5)
    assert small.verdict in ("reproduced", "partly")  # equivariant on every seed


def test_c12_and_c13_sweep_runs_judge_their_knobs():
    from book.claims.ch04 import c12_sweep_run, c13_sweep_run

    assert c12_sweep_run(d_model=64, length=1000, base=10000.0).verdict == "reproduced"
    # Base 10: the slowest pair still crosses zero 34 times in 1,000 positions, no span.
    narrow = c12_sweep_run(d_model=64, length=1000, base=10.0)
    assert (
        narrow.verdict == "not reproduced"
        and narrow.numbers["crossings, first / last pair"] == "317 / 34"
    )
    exact = c13_sweep_run(d_model=16, length=1000, base=10000.0, offsets=[1, 5], fit_offset=5)
    assert exact.verdict == "reproduced"
    wide = c13_sweep_run(d_model=64, length=1000, base=10000.0, offsets=[5], fit_offset=5)
    assert wide.verdict == "partly" and wide.numbers["|M_fit - M_5|"] == "0.99"
