"""book.claims.ch02: each verdict and asserting function fed the cases that give every verdict
it can return, a false case among them, and the claim runners against the page's definitions
(book.pages.ch02) called directly."""

from __future__ import annotations

import math

import pytest
import torch

from book.claims.ch02 import (
    SCEPTIC_SWEEPS,
    C6Evidence,
    SharedQKEvidence,
    assert_c7_plateau,
    c5_holds,
    c5_verdict,
    c6_evidence,
    c6_verdict,
    c7_evidence,
    c7_verdict,
    s21_verdict,
    saturation_by_width,
    shared_qk_evidence,
    variance_table,
)
from book.pages.ch02 import (
    DotProductStats,
    GradientSnapshot,
    RetrievalRun,
    Saturation,
    dot_product_stats,
    shared_qk_scores,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_the_sweeps_cover_every_claim_of_the_chapter():
    assert [s.claim_id for s in SCEPTIC_SWEEPS] == ["§2.1 shared Q/K", "C5", "C6", "C7"]


# ------------------------------------------------------------------------------------------
# C7
# ------------------------------------------------------------------------------------------


def _run(scaled: bool, losses: list[float], accuracy: float = 1.0) -> RetrievalRun:
    snapshot = GradientSnapshot(1.0, 1.0, 0.5, 1.0)
    return RetrievalRun(scaled, 512, losses, 1.0, 0.5, snapshot, accuracy)


def _curve(start: float, flat_until: int, fall_to: float = 0.1, steps: int = 400) -> list[float]:
    """A loss that stays at ``start`` until ``flat_until`` and then falls linearly in 50 steps."""
    return [
        start if t < flat_until else max(fall_to, start - (start - fall_to) * (t - flat_until) / 50)
        for t in range(steps)
    ]


def test_c7_assert_passes_a_plateau_and_fails_each_way_the_claim_can_be_false():
    scaled, plateau = _curve(4.2, 0), _curve(4.2, 200)
    ratios = assert_c7_plateau({0: (_run(True, scaled), _run(False, plateau))})
    assert ratios[0] > 1.4
    # No plateau: the unscaled model learns as fast as the scaled one.
    with pytest.raises(AssertionError, match="not 1.4x slower"):
        assert_c7_plateau({0: (_run(True, scaled), _run(False, scaled))})
    # Slower, but its loss had already dropped by step 100: no plateau there.
    early_drop = [4.2] + _curve(3.0, 150)[1:]
    with pytest.raises(AssertionError, match="no plateau"):
        assert_c7_plateau({0: (_run(True, scaled), _run(False, early_drop))})
    # The scaled model does not fall "normally" either.
    with pytest.raises(AssertionError, match="scaled loss only fell"):
        assert_c7_plateau({0: (_run(True, _curve(4.2, 90)), _run(False, _curve(4.2, 300)))})
    # The unscaled model never learns within the budget.
    with pytest.raises(AssertionError, match="unscaled model never"):
        assert_c7_plateau({0: (_run(True, scaled), _run(False, [4.2] * 400))})
    # One seed of three fails: the claim must hold on every seed.
    good = (_run(True, scaled), _run(False, plateau))
    with pytest.raises(AssertionError, match="seed 2: a run ended at accuracy 0.50"):
        assert_c7_plateau({0: good, 1: good, 2: (_run(True, scaled), _run(False, plateau, 0.5))})
    with pytest.raises(ValueError, match="in that order"):
        assert_c7_plateau({0: (_run(False, plateau), _run(True, scaled))})
    with pytest.raises(ValueError, match="at least one seed"):
        assert_c7_plateau({})


def test_c7_verdict_says_reproduced_partly_or_not_from_the_runs():
    scaled = _curve(4.2, 0)
    # The whole claim: a plateau of a few hundred steps (here to the end of the budget, which
    # assert_c7_plateau would refuse as "never learned"), while the scaled loss falls.
    assert c7_verdict({0: (_run(True, scaled), _run(False, [4.2] * 400))}) == "reproduced"
    three = {s: (_run(True, scaled), _run(False, _curve(4.2, 250))) for s in (0, 1, 2)}
    assert c7_verdict(three) == "reproduced"
    # The chapter's case: a plateau past step 100, but not a few hundred steps long.
    assert c7_verdict({0: (_run(True, scaled), _run(False, _curve(4.2, 150)))}) == "partly"
    # One seed in full, one in part: partly. One seed in full, one without a plateau: the
    # claim must hold on every seed, so not reproduced.
    full, part = _curve(4.2, 300), _curve(4.2, 150)
    assert c7_verdict({0: (_run(True, scaled), _run(False, full)),
                       1: (_run(True, scaled), _run(False, part))}) == "partly"  # fmt: skip
    mixed = {0: (_run(True, scaled), _run(False, full)),
             1: (_run(True, scaled), _run(False, scaled))}  # fmt: skip
    assert c7_verdict(mixed) == "not reproduced"
    # False: no plateau at all, or one that ends before step 100 ...
    assert c7_verdict({0: (_run(True, scaled), _run(False, scaled))}) == "not reproduced"
    assert c7_verdict({0: (_run(True, scaled), _run(False, _curve(4.2, 60)))}) == "not reproduced"
    # ... or a scaled model that does not fall normally either (both flat for 300 steps).
    flat = {0: (_run(True, _curve(4.2, 300)), _run(False, _curve(4.2, 300)))}
    assert c7_verdict(flat) == "not reproduced"
    with pytest.raises(ValueError, match="in that order"):
        c7_verdict({0: (_run(False, scaled), _run(True, scaled))})
    with pytest.raises(ValueError, match="longer than C7_STEP"):
        c7_verdict({0: (_run(True, scaled[:50]), _run(False, scaled[:50]))})


def test_c7_evidence_reads_the_plateau_and_the_delay():
    (e,) = c7_evidence({3: (_run(True, _curve(4.2, 0)), _run(False, _curve(4.2, 150)))})
    assert e.seed == 3 and e.holds == "in part" and not e.plateau_to_end
    assert 150 <= e.plateau <= 170 and e.unscaled_ratio == pytest.approx(1.0)
    assert e.delay > 1.4 and e.scaled_ratio < 0.65
    (e,) = c7_evidence({0: (_run(True, _curve(4.2, 0)), _run(False, [4.2] * 400))})
    assert e.plateau == 400 and e.plateau_to_end and e.delay is None and e.holds == "in full"


# ------------------------------------------------------------------------------------------
# The verdicts of §2.1, C5 and C6: a true, a partly true and a false case each
# ------------------------------------------------------------------------------------------


def _shared(rate_shared, rate_separate=0.1, asym_shared=0.0, asym_separate=1.0, seed=0):
    return SharedQKEvidence(seed, 10, rate_shared, rate_separate, asym_shared, asym_separate)


def test_s21_verdict_says_reproduced_partly_or_not():
    assert s21_verdict([_shared(0.83)]) == "reproduced"
    # Symmetric, and the token itself favoured, but not in most rows.
    assert s21_verdict([_shared(0.4)]) == "partly"
    # Separate projections that still favour the token itself: only part of the claim.
    assert s21_verdict([_shared(0.83, rate_separate=0.5)]) == "partly"
    # Shared scores that are not symmetric, or a self-match rate near chance: false.
    assert s21_verdict([_shared(0.83, asym_shared=0.3)]) == "not reproduced"
    assert s21_verdict([_shared(0.15)]) == "not reproduced"
    # Over seeds: every seed must hold.
    assert s21_verdict([_shared(0.83), _shared(0.4, seed=1)]) == "partly"
    assert s21_verdict([_shared(0.83), _shared(0.15, seed=1)]) == "not reproduced"
    with pytest.raises(ValueError, match="at least one"):
        s21_verdict([])


def test_shared_qk_evidence_measures_what_the_chapter_derives():
    shared = shared_qk_scores(50, shared=True, seed=3)  # (S, L, L)
    torch.testing.assert_close(shared, shared.transpose(-2, -1))  # symmetric, as derived
    separate = shared_qk_scores(50, shared=False, seed=3)
    assert not torch.allclose(separate, separate.transpose(-2, -1), atol=1e-2)
    e = shared_qk_evidence(500, seed=1)
    assert e.chance == pytest.approx(0.1)
    assert e.rate_shared > 0.6 and e.rate_separate < 0.2 and e.holds == "in full"
    # With a one-wide projection a token is its own top match only when its score is largest.
    assert shared_qk_evidence(500, d_k=1, seed=1).holds == "no"


def _dot(d_k: int, mean: float, var: float, n: int = 20_000) -> DotProductStats:
    return DotProductStats(d_k, n, mean, var, var / d_k)


def test_c5_verdict_says_reproduced_partly_or_not():
    assert c5_verdict([_dot(64, 0.01, 64.5), _dot(16, -0.02, 15.9)]) == "reproduced"
    # The variance is d_k but the mean is off by far more than 4 standard errors (0.23).
    assert c5_holds(_dot(64, 1.0, 64.5)) == "in part"
    assert c5_verdict([_dot(64, 0.01, 64.5), _dot(64, 1.0, 64.5)]) == "partly"
    # Correlated q, k (q = k for normal components: Var = 3 d_k) and a biased mean: false.
    assert c5_verdict([_dot(64, 0.01, 64.5), _dot(64, 64.0, 192.0)]) == "not reproduced"
    # A real false case: q = k, measured.
    g = _gen(0)
    q = torch.randn(20_000, 64, generator=g).double()  # (n, d_k)
    s = (q * q).sum(-1)  # (n,)
    stats = DotProductStats(64, 20_000, float(s.mean()), float(s.var()), float(s.var()) / 64)
    assert c5_verdict([stats]) == "not reproduced"


def test_variance_table_reproduces_the_chapter_s_generators():
    table = variance_table([4, 8], ["normal", "rademacher"], 500)
    assert list(table) == [("normal", 4), ("normal", 8), ("rademacher", 4), ("rademacher", 8)]
    direct = dot_product_stats(8, 500, distribution="rademacher", generator=_gen(8))
    assert table["rademacher", 8] == direct
    other = variance_table([8], ["rademacher"], 500, seed=1)["rademacher", 8]
    assert other == dot_product_stats(8, 500, distribution="rademacher", generator=_gen(10_008))


def _sat(std: float, max_weight: float, entropy: float, mean: float, median: float) -> Saturation:
    return Saturation(std, max_weight, entropy, mean, median)


def _table(wide_mean: float, wide_median: float = 1e-5, wide_max: float = 0.95):
    ln64 = math.log(64)
    return {
        (16, False): _sat(4.0, 0.5, 1.5, 0.5, 0.4),
        (16, True): _sat(1.0, 0.1, 0.9 * ln64, 0.3, 0.3),
        (1024, False): _sat(32.0, wide_max, 0.02 * ln64, wide_mean, wide_median),
        (1024, True): _sat(1.0, 0.11, 0.9 * ln64, 0.3, 0.3),
    }


def test_c6_verdict_says_reproduced_partly_or_not():
    full = c6_evidence(_table(wide_mean=0.1), n_keys=64, seed=0)
    assert full.d_k == 1024 and full.median_ratio == pytest.approx(1e-5 / 0.3)
    assert full.narrowest_median_ratio == pytest.approx(0.4 / 0.3)
    assert c6_verdict([full]) == "reproduced"
    # The typical row's gradient vanishes, but the mean over rows does not shrink (many keys).
    part = c6_evidence(_table(wide_mean=0.4), n_keys=64, seed=1)
    assert part.holds == "in part" and c6_verdict([full, part]) == "partly"
    # No saturation (a largest weight of 0.6), or a typical gradient that survives: false.
    flat = c6_evidence(_table(wide_mean=0.1, wide_max=0.6), n_keys=64, seed=2)
    alive = c6_evidence(_table(wide_mean=0.1, wide_median=0.1), n_keys=64, seed=3)
    assert c6_verdict([full, flat]) == c6_verdict([alive]) == "not reproduced"
    with pytest.raises(ValueError, match="every width"):
        c6_evidence({(16, False): _sat(4.0, 0.5, 1.5, 0.5, 0.4)}, n_keys=64, seed=0)


def test_c6_evidence_from_real_scores():
    found = c6_evidence(saturation_by_width(128, 64, [16, 1024], seed=6), n_keys=64, seed=6)
    assert isinstance(found, C6Evidence) and found.holds in ("in full", "in part")
    assert found.median_ratio < 0.01 and found.max_weight > 0.9
