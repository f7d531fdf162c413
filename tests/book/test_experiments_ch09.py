"""Chapter 9's experiments: each asserting function fails when its claim is false, and the
pieces the chapter relies on compute what they say."""

from __future__ import annotations

import math

import pytest
import torch

from book.experiments import ch09
from tests.reference import naive_attention_float64

# ------------------------------------------------------------------------------------------
# 9.1 why softmax
# ------------------------------------------------------------------------------------------


def test_retrieval_batch_targets_are_the_values_of_the_matching_keys():
    keys, values, query, target = ch09.retrieval_batch(50, torch.Generator().manual_seed(0))
    assert keys.shape == values.shape == (50, 8)
    for b in range(50):
        assert len(set(keys[b].tolist())) == 8  # distinct keys
        (j,) = (keys[b] == query[b]).nonzero()[0].tolist()
        assert values[b, j] == target[b]
    with pytest.raises(ValueError, match="n_pairs"):
        ch09.retrieval_batch(2, torch.Generator(), n_pairs=100)


def test_retrieval_model_with_softmax_is_the_reference_attention():
    torch.manual_seed(0)
    model = ch09.RetrievalModel("softmax")
    keys, values, query, _ = ch09.retrieval_batch(4, torch.Generator().manual_seed(1))
    logits, weights = model(keys, values, query)
    x = model.key_emb(keys) + model.value_emb(values)
    q = model.q_proj(model.key_emb(query))[:, None, None]
    want = naive_attention_float64(q, model.k_proj(x)[:, None], model.v_proj(x)[:, None])
    torch.testing.assert_close(logits.double(), model.out(want[:, 0, 0].float()).double())
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))


def test_a_short_retrieval_run_records_what_it_needs():
    run = ch09.train_retrieval("plain-normalised", seed=0, steps=3)
    assert len(run.losses) == 3 and 0 <= run.accuracy <= 1 and isinstance(run.diverged, bool)
    grads = ch09.init_gradients("relu-normalised")
    assert 0 <= grads["dead_rows"] <= 1 and grads["grad_norm_q"] >= 0


def test_assert_softmax_not_beaten_and_breaks():
    acc = {"softmax": [0.9, 0.92, 0.91], "sigmoid": [0.9, 0.91, 0.9], "plain": [0.1, 0.2, 0.1]}
    ch09.assert_softmax_not_beaten(acc, margin=0.02)
    ch09.assert_breaks(acc, ["plain"], gap=0.3)
    with pytest.raises(AssertionError, match="beats softmax"):
        ch09.assert_softmax_not_beaten({**acc, "relu": [0.99, 0.99, 0.99]}, margin=0.02)
    with pytest.raises(AssertionError, match="does not break"):
        ch09.assert_breaks(acc, ["sigmoid"], gap=0.3)
    assert ch09.softmax_verdict(acc, margin=0.02) == "partly"
    assert ch09.softmax_verdict({"softmax": [0.9], "b": [0.5]}, margin=0.02) == "reproduced"
    assert ch09.softmax_verdict({"softmax": [0.5], "b": [0.9]}, margin=0.02) == "not reproduced"


# ------------------------------------------------------------------------------------------
# 9.2 C29
# ------------------------------------------------------------------------------------------


def test_written_out_last_layer_equals_the_package_layer():
    torch.manual_seed(0)
    model = ch09.DigitsAttention()
    images = torch.rand(3, 8, 8)
    x = model.tokens(images)
    layer = model.layers[-1]
    want, want_w = layer(x, need_weights=True)
    got, got_w, _ = model.last_layer(layer, x, None)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_w, want_w)
    # replacing the [CLS] row by the model's own leaves everything unchanged
    out = model.run(images)
    again = model.run(images, cls_weights=out["weights"][-1][:, :, 0])
    torch.testing.assert_close(again["logits"], out["logits"])
    other = torch.rand(3, 2, 9).softmax(-1)
    full = model.from_last_input(out["inputs"][-1], other)
    torch.testing.assert_close(model.cls_logits(out["inputs"][-1], out["values"], other), full)


def test_rank_correlations_match_their_definitions():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(20, 7, generator=g), torch.randn(20, 7, generator=g)
    for i in range(20):
        x, y = a[i].tolist(), b[i].tolist()
        pairs = [(p, q) for p in range(7) for q in range(p + 1, 7)]
        tau = sum(math.copysign(1, (x[p] - x[q]) * (y[p] - y[q])) for p, q in pairs) / len(pairs)
        assert ch09.kendall(a[i : i + 1], b[i : i + 1]).item() == pytest.approx(tau)
        rx = sorted(range(7), key=lambda k: x[k])
        ry = sorted(range(7), key=lambda k: y[k])
        rank_x = [rx.index(k) for k in range(7)]
        rank_y = [ry.index(k) for k in range(7)]
        rho = 1 - 6 * sum((p - q) ** 2 for p, q in zip(rank_x, rank_y, strict=True)) / (7 * 48)
        assert ch09.spearman(a[i : i + 1], b[i : i + 1]).item() == pytest.approx(rho)
    assert ch09.mean_rank_correlation(a, a) == pytest.approx(1.0)
    assert ch09.mean_rank_correlation(a, -a, kind="spearman") == pytest.approx(-1.0)


def test_rollout_of_one_layer_is_half_attention_half_identity():
    w = torch.rand(2, 3, 4, 4).softmax(-1)
    torch.testing.assert_close(ch09.rollout([w]), 0.5 * w.mean(1) + 0.5 * torch.eye(4))
    two = ch09.rollout([w, w.flip(-1)])
    a1, a2 = (0.5 * m.mean(1) + 0.5 * torch.eye(4) for m in (w, w.flip(-1)))
    torch.testing.assert_close(two, a2 @ a1)


def test_jensen_shannon_is_zero_for_equal_and_one_for_disjoint():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    assert ch09.jensen_shannon(p, p).item() == pytest.approx(0.0, abs=1e-9)
    assert ch09.jensen_shannon(p, q).item() == pytest.approx(1.0)


def test_importances_and_adversary_shapes():
    torch.manual_seed(0)
    model = ch09.DigitsAttention()
    images = torch.rand(5, 8, 8)
    imp = ch09.importances(model, images)
    assert set(imp) == set(ch09.IMPORTANCES)
    assert all(v.shape == (5, 8) for v in imp.values())
    adv = ch09.adversarial_attention(model, images, steps=5)
    assert adv.jsd.shape == (5,) and bool((adv.output_change <= 0.01 + 1e-6).all())
    torch.testing.assert_close(adv.weights.sum(-1), torch.ones(5, 2))


def test_assert_c29_not_faithful():
    ch09.assert_c29_not_faithful(0.2, 0.9, max_agreement=0.5, min_fraction=0.5)
    with pytest.raises(AssertionError, match="agrees with leave-one-out"):
        ch09.assert_c29_not_faithful(0.7, 0.9, max_agreement=0.5, min_fraction=0.5)
    with pytest.raises(AssertionError, match="not interchangeable"):
        ch09.assert_c29_not_faithful(0.2, 0.1, max_agreement=0.5, min_fraction=0.5)


# ------------------------------------------------------------------------------------------
# 9.3 C30
# ------------------------------------------------------------------------------------------


def test_layer_gradient_norms_one_per_layer():
    norms = ch09.layer_gradient_norms(3, pre_ln=True)
    assert len(norms) == 3 and all(n > 0 for n in norms)


def test_shift_batch_targets_the_previous_token():
    tokens, target = ch09.shift_batch(5, torch.Generator().manual_seed(0))
    assert torch.equal(target[:, 1:], tokens[:, :-1]) and torch.equal(target[:, 0], tokens[:, 0])


def test_depth_run_final_and_divergence():
    run = ch09.DepthRun(False, 6, 1e-3, 0, 0, [3.0] * 30)
    assert run.final == 3.0 and ch09.diverged(run, start_loss=2.77)
    barely = ch09.DepthRun(False, 6, 1e-3, 0, 0, [2.7] * 30)  # under ln 16, not 5 % under
    assert ch09.diverged(barely, start_loss=2.77)
    nan = ch09.DepthRun(False, 6, 1e-3, 0, 0, [3.0, float("nan"), 1.0])
    assert nan.final == math.inf and ch09.diverged(nan, start_loss=2.77)
    ok = ch09.DepthRun(True, 6, 1e-3, 0, 0, [1.0] * 30)
    assert not ch09.diverged(ok, start_loss=2.77)
    short = ch09.train_depth(2, pre_ln=False, lrs=(1e-3,), warmup=2, seeds=(0, 1), steps=3)
    assert [len(r.losses) for r in short] == [3, 3] and [r.seed for r in short] == [0, 1]


@pytest.mark.parametrize("pre_ln", [False, True])
def test_stacked_runs_compute_each_runs_token_stack(pre_ln):
    model = ch09.StackedRuns([0, 1, 2], [1.0, 0.5, 0.1], 3, pre_ln=pre_ln)
    tokens = torch.randint(16, (3, 4, 12), generator=torch.Generator().manual_seed(0))
    out = model(tokens)
    for r in range(3):
        torch.manual_seed(r)
        alone = ch09.TokenStack(3, pre_ln=pre_ln)
        torch.testing.assert_close(out[r], alone(tokens[r]), atol=1e-5, rtol=1e-4)


def test_stacked_runs_train_like_separate_runs_at_their_own_learning_rates():
    together = ch09.train_depth(2, pre_ln=True, lrs=(1e-2, 1e-3), warmup=3, seeds=(0,), steps=6)
    for run in together:
        (alone,) = ch09.train_depth(2, pre_ln=True, lrs=(run.lr,), warmup=3, seeds=(0,), steps=6)
        assert run.losses == pytest.approx(alone.losses, rel=1e-4, abs=1e-5)
    assert together[0].losses[-1] != pytest.approx(together[1].losses[-1], rel=1e-3)


def test_assert_gradient_predictions():
    post, pre, width = {6: 0.10, 24: 0.11}, {6: 0.09, 24: 0.06}, {16: 0.1, 64: 0.18}
    ch09.assert_gradient_predictions(post, pre, width, flat=1.5, shrink=0.85, grow=1.2)
    with pytest.raises(AssertionError, match="changes with depth"):
        ch09.assert_gradient_predictions({6: 0.1, 24: 0.3}, pre, width, flat=1.5, shrink=0.85,
                                         grow=1.2)  # fmt: skip
    with pytest.raises(AssertionError, match="does not shrink"):
        ch09.assert_gradient_predictions(post, {6: 0.09, 24: 0.09}, width, flat=1.5,
                                         shrink=0.85, grow=1.2)  # fmt: skip
    with pytest.raises(AssertionError, match="does not grow"):
        ch09.assert_gradient_predictions(post, pre, {16: 0.1, 64: 0.1}, flat=1.5, shrink=0.85,
                                         grow=1.2)  # fmt: skip


def test_assert_c30_stability():
    good = {("Post-LN", 0): 8, ("Post-LN", 30): 1, ("Pre-LN", 0): 0, ("Pre-LN", 30): 0}
    ch09.assert_c30_stability(good, total=9, min_gap=3)
    with pytest.raises(AssertionError, match="not more stable"):
        ch09.assert_c30_stability({**good, ("Pre-LN", 0): 8}, total=9, min_gap=3)
    with pytest.raises(AssertionError, match="does not rescue"):
        ch09.assert_c30_stability({**good, ("Post-LN", 30): 8}, total=9, min_gap=3)


# ------------------------------------------------------------------------------------------
# 9.4 attention vs convolution vs recurrence
# ------------------------------------------------------------------------------------------


def test_layer_costs_flops_and_path_lengths():
    costs = ch09.layer_costs(length=16, d_model=8)
    att, conv, rnn = (costs[n] for n in ch09.MIXERS)
    assert att["layers_to_connect"] == 1 and rnn["layers_to_connect"] == 1
    assert conv["layers_to_connect"] == 15  # kernel 3 reaches one more position per layer
    assert (att["reach"], conv["reach"], rnn["reach"]) == (15, 1, 15)
    assert (att["path_steps"], conv["path_steps"], rnn["path_steps"]) == (1, 15, 15)
    assert conv["flops"] == 2 * 16 * 3 * 8 * 8
    assert rnn["flops"] == 2 * (2 * 16 * 8 * 8)
    assert att["flops"] == 4 * 2 * 16 * 8 * 8 + 4 * 16 * 16 * 8
    assert conv["flops_2x"] == 2 * conv["flops"] and rnn["sequential_steps"] == 16


def test_motif_and_ends_batches_are_labelled_right():
    tokens, labels = ch09.motif_batch(200, torch.Generator().manual_seed(0))
    has = ((tokens[:, :-1] == 0) & (tokens[:, 1:] == 1)).any(1)
    assert torch.equal(has.long(), labels)
    tokens, labels = ch09.ends_batch(200, torch.Generator().manual_seed(0))
    assert torch.equal((tokens[:, 0] == tokens[:, -1]).long(), labels)
    assert 0.3 < labels.float().mean() < 0.7


def test_assert_prior_wins():
    ch09.assert_prior_wins([0.9, 0.95, 0.92], [0.6, 0.7, 0.65], gap=0.1, what="t")
    with pytest.raises(AssertionError, match="is not"):
        ch09.assert_prior_wins([0.7, 0.72, 0.71], [0.6, 0.7, 0.65], gap=0.1, what="t")
    with pytest.raises(AssertionError, match="worst seed"):
        ch09.assert_prior_wins([0.99, 0.99, 0.6], [0.5, 0.5, 0.65], gap=0.1, what="t")
