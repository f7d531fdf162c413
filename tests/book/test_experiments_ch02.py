"""book.experiments.ch02 against independent references: the closed-form variance of a
dot product, autograd's Jacobian of torch.softmax, torch.distributions' entropy, per-row loops
over the retrieval batches, and the float64 naive attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from book.experiments.ch02 import (
    C6Evidence,
    DotProductStats,
    GradientSnapshot,
    RetrievalModel,
    RetrievalRun,
    Saturation,
    SharedQKEvidence,
    assert_c7_plateau,
    c5_holds,
    c5_verdict,
    c6_evidence,
    c6_verdict,
    c7_evidence,
    c7_verdict,
    dot_product_scores,
    dot_product_stats,
    gradient_snapshot,
    retrieval_batch,
    s21_verdict,
    saturation_by_width,
    saturation_stats,
    shared_qk_evidence,
    shared_qk_scores,
    softmax_jacobian,
    train_retrieval,
    unit_variance_samples,
    variance_table,
)
from tests.reference import naive_attention_float64

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# C5: variance of q · k
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("distribution", ["normal", "uniform", "rademacher", "exponential"])
def test_unit_variance_samples_have_mean_0_and_variance_1(distribution):
    x = unit_variance_samples((200_000,), distribution, generator=_gen())
    assert x.dtype == torch.float32
    assert abs(float(x.mean())) < 0.01
    assert abs(float(x.var()) - 1.0) < 0.02


def test_unit_variance_samples_rejects_unknown_distribution():
    with pytest.raises(ValueError, match="distribution"):
        unit_variance_samples((3,), "cauchy")


@pytest.mark.parametrize("distribution", ["normal", "uniform", "rademacher", "exponential"])
@pytest.mark.parametrize("d_k", [1, 8, 64])
def test_dot_product_variance_matches_d_k(distribution, d_k):
    stats = dot_product_stats(d_k, 20_000, distribution=distribution, generator=_gen(d_k))
    # Theory: mean 0, variance d_k; 20k samples give a relative error of about 1-2 %.
    assert abs(stats.mean) < 4 * math.sqrt(d_k / 20_000)
    assert stats.var == pytest.approx(d_k, rel=0.06)
    assert stats.scaled_var == pytest.approx(1.0, rel=0.06)
    assert stats.scaled_var == pytest.approx(stats.var / d_k, rel=1e-9)


def test_dot_product_stats_equals_a_direct_computation():
    n, d_k = 1000, 12
    stats = dot_product_stats(d_k, n, generator=_gen(3), chunk=n)
    g = _gen(3)
    q, k = torch.randn(n, d_k, generator=g), torch.randn(n, d_k, generator=g)
    s = torch.einsum("nd,nd->n", q.double(), k.double())
    assert stats.mean == pytest.approx(float(s.mean()), abs=1e-9)
    assert stats.var == pytest.approx(float(s.var()), rel=1e-9)


def test_dot_product_stats_refuses_bad_arguments():
    with pytest.raises(ValueError, match="d_k"):
        dot_product_stats(0)
    with pytest.raises(ValueError, match="n_samples"):
        dot_product_stats(4, 1)
    with pytest.raises(TypeError, match="d_k"):
        dot_product_stats(4.0)


# ------------------------------------------------------------------------------------------
# C6: softmax saturation
# ------------------------------------------------------------------------------------------


@FAST
@given(n=st.integers(1, 7), rows=st.integers(1, 3), spread=st.floats(0.1, 20.0))
def test_softmax_jacobian_matches_autograd(n, rows, spread):
    s = torch.randn(rows, n, generator=_gen(n), dtype=torch.float64) * spread
    got = softmax_jacobian(torch.softmax(s, dim=-1))  # (rows, n, n)
    for r in range(rows):
        want = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), s[r])
        torch.testing.assert_close(got[r], want)


def test_softmax_jacobian_vanishes_at_one_hot():
    p = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(softmax_jacobian(p), torch.zeros(3, 3))


@pytest.mark.parametrize("n", [1, 2, 10, 64])
def test_saturation_of_equal_scores_is_the_uniform_case(n):
    sat = saturation_stats(torch.zeros(5, n))
    assert sat.max_weight == pytest.approx(1.0 / n)
    assert sat.entropy == pytest.approx(math.log(n), abs=1e-12)
    # |I/n - 11ᵀ/n²|_F = sqrt(n - 1) / n, worked out by hand.
    assert sat.jacobian_mean == pytest.approx(math.sqrt(n - 1) / n)
    assert sat.jacobian_median == pytest.approx(math.sqrt(n - 1) / n)


def test_saturation_stats_match_torch_references():
    s = torch.randn(50, 16, generator=_gen(1)) * 3.0
    sat = saturation_stats(s)
    entropy = torch.distributions.Categorical(logits=s.double()).entropy().mean()
    assert sat.entropy == pytest.approx(float(entropy), rel=1e-9)
    assert sat.max_weight == pytest.approx(float(torch.softmax(s.double(), -1).amax(-1).mean()))
    assert sat.score_std == pytest.approx(float(s.double().std()))
    norms = []
    for row in s.double():
        jac = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), row)
        norms.append(float(jac.norm()))
    assert sat.jacobian_mean == pytest.approx(sum(norms) / len(norms), rel=1e-9)


def test_saturation_grows_with_the_spread_of_the_scores():
    base = torch.randn(400, 32, generator=_gen(2))
    low, high = saturation_stats(base), saturation_stats(base * 30.0)
    assert high.max_weight > 0.8 > 0.3 > low.max_weight
    assert high.entropy < 0.2 * low.entropy
    assert high.jacobian_median < 0.1 * low.jacobian_median


def test_saturation_stats_refuses_wrong_rank():
    with pytest.raises(ValueError, match="scores"):
        saturation_stats(torch.zeros(2, 3, 4))


def test_dot_product_scores_scaled_is_unscaled_over_sqrt_d_k():
    raw = dot_product_scores(200, 16, 256, scaled=False, generator=_gen(4))
    scaled = dot_product_scores(200, 16, 256, scaled=True, generator=_gen(4))
    assert raw.shape == (200, 16)
    torch.testing.assert_close(scaled, raw / 16.0)
    assert float(raw.var()) == pytest.approx(256.0, rel=0.1)


# ------------------------------------------------------------------------------------------
# C7: the retrieval task and its model
# ------------------------------------------------------------------------------------------


@FAST
@given(
    batch_size=st.integers(1, 6),
    n_pairs=st.integers(1, 6),
    extra_keys=st.integers(0, 5),
    n_values=st.integers(1, 9),
    seed=st.integers(0, 1000),
)
def test_retrieval_batch_is_a_valid_lookup(batch_size, n_pairs, extra_keys, n_values, seed):
    n_keys = n_pairs + extra_keys
    b = retrieval_batch(batch_size, n_pairs, n_keys, n_values, generator=_gen(seed))
    assert b.keys.shape == b.values.shape == (batch_size, n_pairs)
    assert b.query.shape == b.target.shape == (batch_size,)
    for row in range(batch_size):
        keys = b.keys[row].tolist()
        assert len(set(keys)) == n_pairs and all(0 <= k < n_keys for k in keys)
        assert all(0 <= v < n_values for v in b.values[row].tolist())
        position = keys.index(int(b.query[row]))
        assert int(b.target[row]) == int(b.values[row, position])


def test_retrieval_batch_refuses_more_pairs_than_keys():
    with pytest.raises(ValueError, match="n_pairs"):
        retrieval_batch(2, 5, 4, 3)


@pytest.mark.parametrize("scaled", [True, False])
def test_retrieval_model_equals_naive_attention(scaled):
    torch.manual_seed(0)
    model = RetrievalModel(10, 7, 8, 16, scaled=scaled).double()
    b = retrieval_batch(5, 4, 10, 7, generator=_gen())
    logits, weights = model(b.keys, b.values, b.query, need_weights=True)
    q, k, v = model.project(b.keys, b.values, b.query)
    # The naive reference always divides by sqrt(d_k); undo it for the unscaled model.
    q_ref = q if scaled else q * math.sqrt(16)
    out = naive_attention_float64(q_ref, k, v)  # (B, 1, 1, D)
    torch.testing.assert_close(logits, model.readout(out[:, 0, 0]))
    assert logits.shape == (5, 7) and weights.shape == (5, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, dtype=torch.float64))


def test_scaled_and_unscaled_models_start_from_the_same_weights():
    torch.manual_seed(7)
    a = RetrievalModel(10, 7, 8, 16, scaled=True)
    torch.manual_seed(7)
    b = RetrievalModel(10, 7, 8, 16, scaled=False)
    for (name, p), (_, p2) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, p2), name
    assert a.scale == pytest.approx(0.25) and b.scale == 1.0


def test_initial_scores_have_the_spread_the_derivation_predicts():
    d_k = 256
    b = retrieval_batch(512, 8, 64, 64, generator=_gen())
    for scaled, want in ((False, math.sqrt(d_k)), (True, 1.0)):
        torch.manual_seed(0)
        model = RetrievalModel(64, 64, 32, d_k, scaled=scaled)
        with torch.no_grad():
            q, k, _ = model.project(b.keys, b.values, b.query)
            std = float((q @ k.transpose(-2, -1)).std()) * model.scale
        assert 0.8 * want < std < 1.25 * want


def test_retrieval_model_refuses_mismatched_inputs():
    model = RetrievalModel(10, 7, 8, 16)
    with pytest.raises(ValueError, match="keys"):
        model(
            torch.zeros(2, 3, dtype=torch.long),
            torch.zeros(2, 4, dtype=torch.long),
            torch.zeros(2, dtype=torch.long),
        )


def test_gradient_snapshot_agrees_with_the_model_forward():
    torch.manual_seed(0)
    model = RetrievalModel(16, 16, 8, 32, scaled=False)
    b = retrieval_batch(64, 6, 16, 16, generator=_gen(1))
    snap = gradient_snapshot(model, b)
    assert all(p.grad is None for p in model.parameters())
    F.cross_entropy(model(b.keys, b.values, b.query), b.target).backward()
    assert snap.w_q_grad_norm == pytest.approx(float(model.w_q.weight.grad.norm()), rel=1e-4)
    assert 0.1 <= snap.top_decile_share <= 1.0
    assert 0.0 <= snap.score_grad_median and snap.score_grad_mean > 0.0


def test_train_retrieval_is_deterministic_and_learns():
    kwargs = dict(
        d_k=16,
        steps=80,
        batch_size=32,
        n_pairs=4,
        n_keys=16,
        n_values=16,
        d_model=16,
        lr=3e-3,
        eval_size=256,
    )
    a = train_retrieval(scaled=True, **kwargs)
    b = train_retrieval(scaled=True, **kwargs)
    assert a.losses == b.losses and a.accuracy == b.accuracy
    assert len(a.losses) == 80
    assert sum(a.losses[-10:]) / 10 < 0.8 * sum(a.losses[:10]) / 10
    assert 0.0 <= a.accuracy <= 1.0
    c = train_retrieval(scaled=False, **{**kwargs, "steps": 1})
    assert c.init_score_std == pytest.approx(a.init_score_std * 4.0, rel=1e-4)


def test_train_retrieval_restores_the_thread_setting():
    before = torch.get_num_threads()
    run = train_retrieval(scaled=True, d_k=8, steps=2, batch_size=4, n_pairs=2, n_keys=4,
                          n_values=4, d_model=8, eval_size=8, num_threads=1)  # fmt: skip
    assert torch.get_num_threads() == before and len(run.losses) == 2
    with pytest.raises(ValueError, match="threads"):
        train_retrieval(scaled=True, steps=1, num_threads=0)


def test_chapter_2_shows_the_five_steps_before_any_training():
    """Issue 9, item 12: a newcomer meets the formula before any trained model."""
    from book.notebooks.common import REPO

    source = (REPO / "chapters" / "02_scaled_dot_product.py").read_text(encoding="utf-8")
    five_steps = source.index("## 2.3 The whole computation in five steps")
    first_training = source.index("train_retrieval(scaled=")
    assert five_steps < first_training
    assert source.index("print(retrieval_model)") < first_training  # the model, shown first


def _run(scaled: bool, losses: list[float], accuracy: float = 1.0) -> RetrievalRun:
    snapshot = GradientSnapshot(1.0, 1.0, 0.5, 1.0)
    return RetrievalRun(scaled, 512, losses, 1.0, 0.5, snapshot, accuracy, 0.9)


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


@pytest.mark.parametrize("qk_init", ["normal", "torch"])
def test_retrieval_model_initialises_w_q_and_w_k_as_asked(qk_init):
    torch.manual_seed(0)
    model = RetrievalModel(10, 7, 256, 16, qk_init=qk_init)
    std = float(model.w_q.weight.detach().std())
    expected = 1 / math.sqrt(256) if qk_init == "normal" else 1 / math.sqrt(3 * 256)
    assert std == pytest.approx(expected, rel=0.05)
    torch.manual_seed(0)
    other = RetrievalModel(10, 7, 256, 16, qk_init="torch" if qk_init == "normal" else "normal")
    torch.testing.assert_close(model.readout.weight, other.readout.weight)  # the rest: the same
    with pytest.raises(ValueError, match="qk_init must be one of"):
        RetrievalModel(10, 7, 8, 16, qk_init="xavier")


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


def test_saturation_stats_in_blocks_equals_one_block():
    scores = 5 * torch.randn(200, 9, generator=_gen(2))  # (R, n): over one block of 64 rows
    p = torch.softmax(scores.double(), -1)  # (R, n)
    norms = softmax_jacobian(p).flatten(-2).norm(dim=-1)  # (R,)
    stats = saturation_stats(scores)
    assert stats.jacobian_mean == pytest.approx(float(norms.mean()), rel=1e-12)
    assert stats.jacobian_median == pytest.approx(float(norms.median()), rel=1e-12)
