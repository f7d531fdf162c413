"""Chapter 9's page (``book.pages.ch09``): the models, tasks and training steps its claims rest
on compute what they say, each against an independent reference where there is one. The
thresholds, verdicts and asserting functions are tested in ``test_claims_ch09.py``."""

from __future__ import annotations

import math

import pytest
import torch

from book.pages import ch09
from tests.reference import naive_attention_float64

# ------------------------------------------------------------------------------------------
# 9.1 why softmax
# ------------------------------------------------------------------------------------------


def test_retrieval_model_is_chapter_2s_model_with_the_variants_normaliser():
    from book.pages.ch02 import RetrievalModel

    for variant, (normalizer, bias) in ch09.VARIANTS.items():
        model = ch09.retrieval_model(variant)
        assert isinstance(model, RetrievalModel) and model.scaled
        assert (model.normalizer, model.score_bias) == (normalizer, bias)
        assert model.d_model == model.d_k == ch09.D_MODEL
    with pytest.raises(ValueError, match="variant"):
        ch09.retrieval_model("tanh")


def test_the_softmax_variant_is_the_reference_attention():
    torch.manual_seed(0)
    model = ch09.retrieval_model("softmax")
    batch = ch09.retrieval_batch(4, 8, 64, 64, generator=torch.Generator().manual_seed(1))
    logits, weights = model(batch.keys, batch.values, batch.query, need_weights=True)
    q, k, v = model.project(batch.keys, batch.values, batch.query)
    want = naive_attention_float64(q, k, v)  # scale 1/sqrt(d_k), d_k = 32
    torch.testing.assert_close(logits.double(), model.readout(want[:, 0, 0].float()).double())
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))


def test_a_short_training_run_trains_the_named_normaliser_on_chapter_2s_loss():
    from book.experiments.training import fit
    from book.pages.ch02 import retrieval_loss

    model, log = ch09.train_normaliser("sigmoid", seed=0, steps=3)
    assert len(log.losses) == 3 and model.normalizer == "sigmoid" and model.score_bias == 0.0
    # the same run written out: parameters from the seed, batches from seed + 1, clipping at 1
    torch.manual_seed(0)
    again = ch09.retrieval_model("sigmoid")
    want = fit(again, lambda g: ch09.retrieval_batch(64, 8, 64, 64, generator=g),
               retrieval_loss, steps=3, lr=3e-3, data_seed=1, clip=1.0)  # fmt: skip
    assert log.losses == pytest.approx(want.losses)


def test_retrieval_accuracy_counts_the_right_answers():
    class Oracle(torch.nn.Module):  # answers the value of the query's key, or always 0
        def __init__(self, right):
            super().__init__()
            self.right = right

        def forward(self, keys, values, query):
            target = values[keys == query[:, None]]  # (B,)
            guess = target if self.right else torch.zeros_like(target)
            return torch.nn.functional.one_hot(guess, ch09.N_SYMBOLS).float()

    assert ch09.retrieval_accuracy(Oracle(True), n_pairs=8, seed=0, size=200) == 1.0
    batch = ch09.retrieval_batch(200, 8, 64, 64, generator=torch.Generator().manual_seed(0))
    zeros = float((batch.target == 0).float().mean())
    assert ch09.retrieval_accuracy(Oracle(False), n_pairs=8, seed=0, size=200) == zeros


def test_init_gradients_of_relu_normalisation_count_rows_without_a_positive_score():
    grads = ch09.init_gradients("relu-normalised")
    assert 0 < grads["dead_rows"] < 1 and grads["grad_norm_q"] >= 0
    assert grads["row_sum_mean"] <= 1 + 1e-6 and grads["max_abs_weight"] <= 1 + 1e-6
    # from the scores directly: a row with no positive score outputs zero, and one with a
    # single positive score puts weight s/s = 1 on it whatever s; neither has a gradient in
    # exact arithmetic (in float32 some single-positive rows keep a round-off gradient)
    torch.manual_seed(0)
    model = ch09.retrieval_model("relu-normalised")
    batch = ch09.retrieval_batch(512, 8, 64, 64, generator=torch.Generator().manual_seed(1))
    q, k, _ = model.project(batch.keys, batch.values, batch.query)
    scores = (q @ k.transpose(-2, -1))[:, 0, 0]  # (B, n): the sign is the scale's
    positive = (scores > 0).sum(-1)
    none, at_most_one = (float((positive <= m).float().mean()) for m in (0, 1))
    assert 0 < none <= grads["dead_rows"] <= at_most_one
    softmax = ch09.init_gradients("softmax")
    assert softmax["dead_rows"] == 0 and softmax["row_sum_mean"] == pytest.approx(1.0)


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


def test_sampler_draws_the_examples_train_classifier_would_see():
    inputs, labels = torch.arange(10.0)[:, None] * 10, torch.arange(10)
    make = ch09.sampler(inputs, labels)
    x, y = make(6, torch.Generator().manual_seed(3))
    idx = torch.randint(10, (6,), generator=torch.Generator().manual_seed(3))
    assert torch.equal(y, idx) and torch.equal(x[:, 0], idx * 10.0)
    with pytest.raises(ValueError, match="one length"):
        ch09.sampler(inputs, labels[:3])


def test_importances_match_a_loop_over_rows_and_heads():
    torch.manual_seed(0)
    model = ch09.DigitsAttention().eval()
    images = torch.rand(3, 8, 8)
    imp = ch09.importances(model, images)
    with torch.no_grad():
        out = model.run(images)
        pred = out["logits"].argmax(-1)
        p = out["logits"].softmax(-1)[torch.arange(3), pred]
        attn = model.layers[-1].self_attn
        dh = attn.d_model // attn.num_heads
        for b in range(3):
            for r in range(8):
                blank = images[b : b + 1].clone()
                blank[0, r] = 0.0
                drop = p[b] - model(blank).softmax(-1)[0, pred[b]]
                assert imp["leave-one-out"][b, r] == pytest.approx(float(drop), abs=1e-6)
                # norm score: Σ_h α_h,r · W_O[:, head h] v_h,r, by hand
                total = torch.zeros(attn.d_model)
                for h in range(attn.num_heads):
                    alpha = out["weights"][-1][b, h, 0, r + 1]
                    v = out["values"][b, h, r + 1]
                    total += alpha * (attn.out_proj.weight[:, h * dh : (h + 1) * dh] @ v)
                assert imp["norm ‖α·f(x)‖"][b, r] == pytest.approx(float(total.norm()), rel=1e-5)
        torch.testing.assert_close(imp["attention"], out["weights"][-1][:, :, 0, 1:].mean(1))


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


def test_trivial_adversaries_are_uniform_and_permuted_weights_put_through_the_model():
    torch.manual_seed(0)
    model = ch09.DigitsAttention()
    images = torch.rand(4, 8, 8)
    controls = ch09.trivial_adversaries(model, images, seed=3)
    with torch.no_grad():
        own = model.run(images)
    w0 = own["weights"][-1][:, :, 0]  # (4, H, 9)
    torch.testing.assert_close(controls["uniform"].weights, torch.full_like(w0, 1 / 9))
    # permuted: each image's weights are a permutation of its own, the same one for each head
    for b in range(4):
        perm = controls["permuted"].weights[b]  # (H, 9)
        torch.testing.assert_close(perm.sort(-1).values, w0[b].sort(-1).values)
    for name, adv in controls.items():
        # the reference: the full model run with these [CLS] weights
        with torch.no_grad():
            p = model.run(images, cls_weights=adv.weights)["logits"].softmax(-1)
        p0 = own["logits"].softmax(-1)
        torch.testing.assert_close(adv.output_change, 0.5 * (p - p0).abs().sum(-1))
        assert torch.equal(adv.same_prediction, p.argmax(-1) == p0.argmax(-1)), name
        torch.testing.assert_close(adv.jsd, ch09.jensen_shannon(adv.weights, w0).mean(1))


def test_meets_criterion_needs_far_weights_a_small_change_and_the_same_class():
    adv = ch09.Adversary(
        jsd=torch.tensor([0.5, 0.5, 0.1, 0.5]),
        output_change=torch.tensor([0.005, 0.02, 0.005, 0.005]),
        same_prediction=torch.tensor([True, True, True, False]),
        weights=torch.zeros(4, 2, 9),
    )
    got = ch09.meets_criterion(adv, far=0.3, tol=0.01)
    assert got.tolist() == [True, False, False, False]


# ------------------------------------------------------------------------------------------
# 9.3 C30
# ------------------------------------------------------------------------------------------


def test_layer_gradient_norms_one_per_layer():
    norms = ch09.layer_gradient_norms(3, pre_ln=True)
    assert len(norms) == 3 and all(n > 0 for n in norms)


def test_shift_batch_targets_the_previous_token():
    tokens, target = ch09.shift_batch(5, torch.Generator().manual_seed(0))
    assert torch.equal(target[:, 1:], tokens[:, :-1]) and torch.equal(target[:, 0], tokens[:, 0])


def test_final_loss_is_the_mean_of_the_last_steps_or_inf():
    assert ch09.final_loss([5.0] * 10 + [3.0] * 20) == 3.0
    assert ch09.final_loss([1.0, 2.0, 3.0], last=2) == 2.5
    assert ch09.final_loss([3.0, float("nan"), 1.0]) == math.inf
    assert ch09.final_loss([3.0, float("inf"), 1.0]) == math.inf


def test_train_depth_returns_each_runs_losses():
    short = ch09.train_depth(2, pre_ln=False, lrs=(1e-3,), warmup=2, seeds=(0, 1), steps=3)
    assert list(short) == [(1e-3, 0), (1e-3, 1)] and all(len(v) == 3 for v in short.values())


@pytest.mark.parametrize("pre_ln", [False, True])
def test_stacked_runs_compute_each_runs_token_stack(pre_ln):
    model = ch09.StackedRuns([0, 1, 2], [1.0, 0.5, 0.1], 3, pre_ln=pre_ln)
    tokens = torch.randint(16, (3, 4, 12), generator=torch.Generator().manual_seed(0))
    out = model(tokens)
    for r in range(3):
        torch.manual_seed(r)
        alone = ch09.TokenStack(3, pre_ln=pre_ln)
        torch.testing.assert_close(out[r], alone(tokens[r]), atol=1e-5, rtol=1e-4)


def test_stacked_runs_with_xavier_init_are_token_stacks_with_xavier_weight_matrices():
    model = ch09.StackedRuns([0, 1], [1.0, 0.5], 2, pre_ln=False, init="xavier")
    tokens = torch.randint(16, (2, 4, 12), generator=torch.Generator().manual_seed(0))
    out = model(tokens)
    for r in range(2):
        torch.manual_seed(r)
        alone = ch09.TokenStack(2, pre_ln=False)
        default = alone(tokens[r])
        for m in alone.modules():
            if isinstance(m, torch.nn.Linear):
                bound = math.sqrt(6 / (m.in_features + m.out_features))
                torch.nn.init.uniform_(m.weight, -bound, bound)  # Xavier-uniform, written out
        torch.testing.assert_close(out[r], alone(tokens[r]), atol=1e-5, rtol=1e-4)
        assert not torch.allclose(out[r], default, atol=1e-3)
    with pytest.raises(ValueError, match="init"):
        ch09.StackedRuns([0], [1.0], 1, pre_ln=True, init="kaiming")


def test_stacked_runs_train_like_separate_runs_at_their_own_learning_rates():
    together = ch09.train_depth(2, pre_ln=True, lrs=(1e-2, 1e-3), warmup=3, seeds=(0,), steps=6)
    for (lr, seed), losses in together.items():
        alone = ch09.train_depth(2, pre_ln=True, lrs=(lr,), warmup=3, seeds=(seed,), steps=6)
        assert losses == pytest.approx(alone[(lr, seed)], rel=1e-4, abs=1e-5)
    fast, slow = together.values()
    assert fast[-1] != pytest.approx(slow[-1], rel=1e-3)


def test_a_stacked_run_trains_like_its_token_stack_alone_under_fit():
    # independent reference: the plain TokenStack, trained by fit with the book's token loss
    from book.experiments.training import fit

    together = ch09.train_depth(2, pre_ln=False, lrs=(3e-3,), warmup=0, seeds=(1,), steps=5,
                                batch_size=4, length=6)  # fmt: skip
    torch.manual_seed(1)
    alone = ch09.TokenStack(2, pre_ln=False, length=6)
    log = fit(alone, lambda g: ch09.shift_batch(4, g, length=6), ch09.token_loss, steps=5,
              lr=3e-3, data_seed=2)  # fmt: skip
    assert together[(3e-3, 1)] == pytest.approx(log.losses, rel=1e-4, abs=1e-5)


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


def test_layer_reach_of_a_convolution_grows_by_one_position_per_side():
    assert ch09.layer_reach(ch09.ConvLayer(4, kernel=5), 12, 4) == 2
    assert ch09.layer_reach(ch09.AttentionLayer(4), 12, 4) == 11


def test_the_convolution_classifier_cannot_see_the_first_token_from_the_last_position():
    torch.manual_seed(0)
    tokens = torch.randint(4, (2, 32), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 0] = (changed[:, 0] + 1) % 4
    for mixer, sees in (("convolution", False), ("attention", True)):
        model = ch09.MixerClassifier(mixer, vocab=4, length=32, readout="last").eval()
        with torch.no_grad():
            moved = not torch.allclose(model(tokens), model(changed))
        assert moved == sees, mixer
    with pytest.raises(ValueError, match="mixer"):
        ch09.MixerClassifier("lstm", vocab=4, length=8)


def test_mixer_accuracy_scores_fresh_examples_and_uses_the_fixed_set():
    few = ch09.mixer_accuracy("motif", "convolution", seed=0, n_train=8, steps=2)
    fresh = ch09.mixer_accuracy("motif", "convolution", seed=0, n_train=None, steps=2)
    assert 0 <= few <= 1 and 0 <= fresh <= 1
    assert few == ch09.mixer_accuracy("motif", "convolution", seed=0, n_train=8, steps=2)
    with pytest.raises(ValueError, match="task"):
        ch09.mixer_accuracy("copy", "attention", seed=0, n_train=None, steps=1)
