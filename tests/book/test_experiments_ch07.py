"""book.experiments.ch07 against independent references: explicit loops over pixels, windows
and series, finite perturbations for the receptive fields, a regular simplex for the
contrastive floor, torch's own losses; and every asserting function fed a case where its claim
is false."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.multimodal import clip_contrastive_loss
from attention.timeseries import DLinear, LastValueNormalization
from attention.vision import SwinBlock
from book.experiments import ch07

FAST = settings(max_examples=20, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# ViT
# ------------------------------------------------------------------------------------------


@FAST
@given(c=st.integers(1, 3), gh=st.integers(1, 3), gw=st.integers(1, 3), p=st.integers(1, 3))
def test_patchify_equals_a_loop_over_patches(c, gh, gw, p):
    images = torch.randn(2, c, gh * p, gw * p, generator=_gen(c + gh + gw + p))
    got = ch07.patchify(images, p)
    assert got.shape == (2, gh * gw, c * p * p)
    for b in range(2):
        for n in range(gh * gw):
            r, col = divmod(n, gw)  # row-major patch numbering
            patch = images[b, :, r * p : (r + 1) * p, col * p : (col + 1) * p]  # (C, p, p)
            assert torch.equal(got[b, n], patch.reshape(-1))


def test_patchify_refuses_bad_images():
    with pytest.raises(ValueError, match="cannot be cut into 3x3 patches"):
        ch07.patchify(torch.randn(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="images must have 4 dimensions"):
        ch07.patchify(torch.randn(8, 8), 2)


def test_vit_cost_counts_tokens_and_is_reproducible():
    a, b = ch07.vit_cost(8, 2, timed=False), ch07.vit_cost(8, 2, timed=False)
    assert a.tokens == 17 and a.flops == b.flops > 0 and a.peak_bytes == b.peak_bytes > 0
    assert math.isnan(a.seconds)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        ch07.forward_cost(lambda x: x, torch.ones(1), 1)


def test_quadratic_fit_recovers_exact_coefficients_and_sees_a_cubic():
    ns = [17, 65, 257, 1025]
    fit = ch07.quadratic_fit(ns, [384 + 33024 * n + 256 * n * n for n in ns])
    assert fit.c0 == pytest.approx(384, abs=1e-3) and fit.c1 == pytest.approx(33024)
    assert fit.c2 == pytest.approx(256) and fit.max_residual < 1e-6
    cubic = ch07.quadratic_fit(ns, [n**3 for n in ns])
    assert cubic.max_residual > 1e3
    with pytest.raises(ValueError, match="at least 3"):
        ch07.quadratic_fit([1, 2], [1, 2])


def test_assert_vit_cost_quadratic_passes_on_dense_attention_and_fails_otherwise():
    ns = [17, 65, 257, 1025]
    ch07.assert_vit_cost_quadratic(ns, [100 + 7 * n + 256 * n * n for n in ns], d_model=32,
                                   num_layers=2)  # fmt: skip
    real = ch07.vit_cost(8, 2, timed=False), ch07.vit_cost(16, 2, timed=False)
    real += ch07.vit_cost(24, 2, timed=False), ch07.vit_cost(32, 2, timed=False)
    ch07.assert_vit_cost_quadratic(
        [c.tokens for c in real], [c.flops for c in real], d_model=32, num_layers=2
    )
    with pytest.raises(AssertionError, match="N² coefficient"):  # linear: a windowed model
        ch07.assert_vit_cost_quadratic(ns, [5000 * n for n in ns], d_model=32, num_layers=2)
    with pytest.raises(AssertionError, match="N² coefficient"):  # one layer's worth only
        ch07.assert_vit_cost_quadratic(ns, [128 * n * n for n in ns], d_model=32, num_layers=2)
    with pytest.raises(AssertionError, match="not a quadratic"):
        ch07.assert_vit_cost_quadratic(ns, [n**3 for n in ns], d_model=32, num_layers=2)
    with pytest.raises(ValueError, match="at least 4"):
        ch07.assert_vit_cost_quadratic(ns[:3], [1, 2, 3], d_model=32, num_layers=2)


def test_small_cnn_maps_digits_to_logits():
    model = ch07.SmallCNN()
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    assert ch07.n_params(model) == sum(p.numel() for p in model.parameters())


def _tiny_digits():
    g = _gen(0)
    images, labels = torch.rand(40, 8, 8, generator=g), torch.randint(0, 10, (40,), generator=g)
    return images[:30], labels[:30], images[30:], labels[30:]


def test_train_digit_classifier_is_reproducible_and_checks_the_subset_size():
    tr_x, tr_y, te_x, te_y = _tiny_digits()
    runs = [
        ch07.train_digit_classifier(
            ch07.SmallCNN, tr_x, tr_y, te_x, te_y, n_train=20, steps=3, seed=1, batch_size=8
        )  # fmt: skip
        for _ in range(2)
    ]
    assert runs[0].losses == runs[1].losses and runs[0].accuracy == runs[1].accuracy
    assert 0.0 <= runs[0].accuracy <= 1.0 and len(runs[0].losses) == 3
    with pytest.raises(ValueError, match="n_train must be at most 30"):
        ch07.train_digit_classifier(ch07.SmallCNN, tr_x, tr_y, te_x, te_y, n_train=31, steps=1,
                                    seed=0)  # fmt: skip


def test_assert_vit_needs_more_data():
    gaps = ch07.assert_vit_needs_more_data(
        vit_small=[0.80, 0.78], cnn_small=[0.92, 0.93], vit_full=[0.95], cnn_full=[0.97],
        margin=0.03,
    )  # fmt: skip
    assert gaps == pytest.approx((0.135, 0.02))
    with pytest.raises(AssertionError, match="leads by only"):  # the ViT is as good
        ch07.assert_vit_needs_more_data(vit_small=[0.9], cnn_small=[0.91], vit_full=[0.9],
                                        cnn_full=[0.9], margin=0.03)  # fmt: skip
    with pytest.raises(AssertionError, match="does not shrink"):
        ch07.assert_vit_needs_more_data(vit_small=[0.8], cnn_small=[0.9], vit_full=[0.8],
                                        cnn_full=[0.95], margin=0.03)  # fmt: skip


# ------------------------------------------------------------------------------------------
# Swin
# ------------------------------------------------------------------------------------------


def test_swin_stack_alternates_the_shift():
    stack = ch07.swin_stack(4, shifted=True, grid=8, window_size=4)
    assert [b.shift for b in stack] == [0, 2, 0, 2]
    assert [b.shift for b in ch07.swin_stack(3, shifted=False, grid=8, window_size=4)] == [0, 0, 0]


def _field_by_perturbation(model, grid, d_model, token):
    """Which input tokens change the output token when perturbed (float64, finite). The
    perturbation is a random vector: a constant one would vanish in the LayerNorms."""
    model = ch07._float64_copy(model)
    x = torch.randn(1, grid * grid, d_model, generator=_gen(5), dtype=torch.float64)
    with torch.no_grad():
        base = model(x)[0, token[0] * grid + token[1]]
        field = torch.zeros(grid * grid, dtype=torch.bool)
        kick = torch.randn(d_model, generator=_gen(6), dtype=torch.float64)
        for j in range(grid * grid):
            x2 = x.clone()
            x2[0, j] += kick
            field[j] = not torch.equal(model(x2)[0, token[0] * grid + token[1]], base)
    return field.view(grid, grid)


@pytest.mark.parametrize(("shifted", "depth", "token"), [(False, 2, (1, 2)), (True, 2, (3, 3)),
                                                         (True, 3, (4, 1))])  # fmt: skip
def test_receptive_field_equals_a_perturbation_reference(shifted, depth, token):
    torch.manual_seed(0)
    stack = ch07.swin_stack(depth, shifted=shifted, grid=8, window_size=4, d_model=8)
    got = ch07.receptive_field(stack, 8, 8, token)
    assert torch.equal(got, _field_by_perturbation(stack, 8, 8, token))


def test_receptive_field_of_one_block_is_the_window():
    torch.manual_seed(0)
    stack = ch07.swin_stack(1, shifted=True, grid=8, window_size=4, d_model=8)
    window = ch07.window_of((5, 2), 8, 4)
    assert int(window.sum()) == 16 and bool(window[4:, :4].all())
    assert torch.equal(ch07.receptive_field(stack, 8, 8, (5, 2)), window)
    with pytest.raises(ValueError, match="token must lie on the 8x8 grid"):
        ch07.receptive_field(stack, 8, 8, (8, 0))


def test_layer_cost_of_a_window_block_is_linear_in_the_tokens():
    costs = [ch07.layer_cost(SwinBlock(8, s, 1, 4, shift=2), s, 8, timed=False) for s in (4, 8, 16)]
    assert [c.tokens for c in costs] == [16, 64, 256]
    assert ch07.growth([c.flops for c in costs]) == [4.0, 4.0]
    assert ch07.growth([1, 3, 6]) == [3.0, 2.0]


def test_assert_c25_window_cost_linear():
    tokens = [64, 256, 1024]
    window = [(10 * n, 3 * n) for n in tokens]
    dense = [(n * n, n * n) for n in tokens]
    ch07.assert_c25_window_cost_linear(tokens=tokens, window=window, dense=dense)
    with pytest.raises(AssertionError, match="FLOPs per token change"):
        ch07.assert_c25_window_cost_linear(tokens=tokens, window=dense, dense=dense)
    with pytest.raises(AssertionError, match="peak bytes per token change"):
        bad = [(10 * n, n * n) for n in tokens]
        ch07.assert_c25_window_cost_linear(tokens=tokens, window=bad, dense=dense)
    with pytest.raises(AssertionError, match="grow no faster"):
        ch07.assert_c25_window_cost_linear(tokens=tokens, window=window, dense=window)


def _fields(grow: bool):
    own = ch07.window_of((5, 6), 16, 4)
    fields = {(False, d): own.clone() for d in (1, 2, 4)}
    for i, d in enumerate((1, 2, 4)):
        f = own.clone()
        if grow and i:
            f[max(0, 3 - 2 * i) : 9 + 2 * i, max(0, 3 - 2 * i) : 9 + 2 * i] = True
        fields[True, d] = f
    return fields, own


def test_assert_c25_shift_crosses_windows():
    fields, own = _fields(grow=True)
    ch07.assert_c25_shift_crosses_windows(fields, own)
    stuck, own = _fields(grow=False)  # the shift made no difference
    with pytest.raises(AssertionError, match="never leaves"):
        ch07.assert_c25_shift_crosses_windows(stuck, own)
    leaky, own = _fields(grow=True)
    leaky[False, 4] = leaky[True, 4]  # regular windows leaking: impossible, so it must fail
    with pytest.raises(AssertionError, match="regular windows only"):
        ch07.assert_c25_shift_crosses_windows(leaky, own)
    flat, own = _fields(grow=True)
    flat[True, 4] = flat[True, 2]
    with pytest.raises(AssertionError, match="does not grow"):
        ch07.assert_c25_shift_crosses_windows(flat, own)


def test_assert_c25_pyramid():
    ch07.assert_c25_pyramid([(16, 16), (8, 32), (4, 64)])
    with pytest.raises(AssertionError, match="expected 8×8×32"):
        ch07.assert_c25_pyramid([(16, 16), (8, 16)])


def test_neighbour_copy_targets_are_the_right_neighbours():
    colours, targets = ch07.neighbour_copy_batch(3, 5, 4, _gen(1))
    assert colours.shape == (3, 5, 5) and targets.shape == (3, 5, 4)
    for b in range(3):
        for r in range(5):
            for c in range(4):
                assert targets[b, r, c] == colours[b, r, c + 1]
    model = ch07.SwinTokenClassifier(shifted=True)
    assert model(ch07.neighbour_copy_batch(2, 8, 4, _gen(2))[0]).shape == (2, 8, 8, 4)


def test_train_neighbour_copy_reports_border_and_interior_columns():
    run = ch07.train_neighbour_copy(shifted=True, seed=0, steps=2, eval_size=16)
    again = ch07.train_neighbour_copy(shifted=True, seed=0, steps=2, eval_size=16)
    assert run.losses == again.losses and len(run.per_column) == 7
    # column 3 is the border of the 4-wide windows; the interior is the other six
    assert run.border == pytest.approx(run.per_column[3])
    others = [v for i, v in enumerate(run.per_column) if i != 3]
    assert run.interior == pytest.approx(sum(others) / 6)


def test_assert_c25_shift_decides():
    good = dict(border_shifted=[0.95, 0.97], border_regular=[0.26, 0.25],
                inside_shifted=[0.99], inside_regular=[1.0], chance=0.25, solved=0.9)  # fmt: skip
    ch07.assert_c25_shift_decides(**good)
    with pytest.raises(AssertionError, match="without the shift"):
        ch07.assert_c25_shift_decides(**(good | {"border_regular": [0.5, 0.25]}))
    with pytest.raises(AssertionError, match="did not carry"):
        ch07.assert_c25_shift_decides(**(good | {"border_shifted": [0.95, 0.6]}))
    with pytest.raises(AssertionError, match="not learned at all"):
        ch07.assert_c25_shift_decides(**(good | {"inside_regular": [0.4]}))


# ------------------------------------------------------------------------------------------
# Forecasting
# ------------------------------------------------------------------------------------------


def test_synthetic_series_is_its_formula_plus_seeded_noise():
    values, phase = ch07.synthetic_series(30, period=6, slope=0.5, noise=0.0)
    t = torch.arange(30, dtype=torch.float64)
    a = 2 * math.pi * t / 6
    torch.testing.assert_close(values, 0.5 * t + torch.sin(a) + 0.5 * torch.sin(2 * a + 1.0))
    assert torch.equal(phase, torch.arange(30) % 6)
    noisy, _ = ch07.synthetic_series(30, period=6, slope=0.5, noise=0.1, seed=3)
    again, _ = ch07.synthetic_series(30, period=6, slope=0.5, noise=0.1, seed=3)
    assert torch.equal(noisy, again) and not torch.equal(noisy, values)


def test_forecast_split_is_chronological_and_standardised_by_the_past_only():
    values = torch.arange(100, dtype=torch.float64) ** 1.5
    phase = torch.arange(100) % 12
    split = ch07.forecast_split(values, phase, lookback=10, horizon=5)
    assert split.mean == pytest.approx(float(values[:70].mean()))
    assert split.std == pytest.approx(float(values[:70].std()))
    z = (values - split.mean) / split.std

    def start_times(w):  # recover each window's start from its first standardised value
        return [int(torch.argmin((z.float() - h[0]).abs())) for h in w.history]

    for part, lo, hi in ((split.train, 0, 70), (split.val, 70, 80), (split.test, 80, 100)):
        for s in start_times(part):
            assert lo <= s + 10 and s + 10 + 5 <= hi  # every target inside its part
    assert len(split.train) == 70 - 15 + 1 and len(split.val) == 10 - 5 + 1
    assert len(split.test) == 20 - 5 + 1
    torch.testing.assert_close(split.test.target[0], z[80:85].float())
    assert torch.equal(split.test.phase[0], phase[70:80])
    # the future does not leak into the statistics
    changed = values.clone()
    changed[80:] *= 10
    assert ch07.forecast_split(changed, phase, lookback=10, horizon=5).mean == split.mean
    with pytest.raises(ValueError, match="empty part"):
        ch07.forecast_split(values[:20], phase[:20], lookback=10, horizon=5)
    with pytest.raises(ValueError, match="fractions"):
        ch07.forecast_split(values, phase, lookback=10, horizon=5, fractions=(0.9, 0.2))


def test_forecast_mse_and_training_are_reproducible():
    values, phase = ch07.synthetic_series(200)
    split = ch07.forecast_split(values, phase, lookback=24, horizon=6)
    zero = ch07.forecast_mse(lambda h, p: torch.zeros(len(h), 6), split.test)
    assert zero == pytest.approx(float(split.test.target.pow(2).mean()))

    def build():
        return LastValueNormalization(DLinear(24, 6, kernel_size=5))

    a = ch07.train_forecaster(build, split, steps=3, lr=1e-2, seed=0)
    b = ch07.train_forecaster(build, split, steps=3, lr=1e-2, seed=0)
    assert a.losses == b.losses and a.test_mse == b.test_mse and a.n_params == 2 * (24 * 6 + 6)
    assert a.test_mse == pytest.approx(ch07.forecast_mse(a.model, split.test))


def _mse(**by_model):
    base = {
        "DLinear": [1.0, 1.0],
        "LSTM": [1.0, 1.02],
        "TCN": [1.2, 1.4],
        "Transformer": [0.9, 1.1],
        "+ time": [1.2, 1.3],
        "Informer-style": [1.3, 1.4],
    }
    return {"a": base | by_model, "b": dict(base)}


def test_c26_claim_holds_when_lstm_or_tcn_is_as_good_or_steadier():
    data = _mse()["a"]
    assert ch07.c26_claim_holds(data, tol=0.1)  # LSTM as good and steadier
    worse_but_steady = data | {"LSTM": [1.5, 1.52], "TCN": [2.0, 3.0]}
    assert ch07.c26_claim_holds(worse_but_steady, tol=0.1)  # steadier is enough
    tcn_only = data | {"LSTM": [2.0, 3.0], "TCN": [1.0, 1.05]}
    assert ch07.c26_claim_holds(tcn_only, tol=0.1)
    neither = data | {"LSTM": [1.5, 2.0], "TCN": [2.0, 3.0], "Transformer": [0.9, 1.0]}
    assert not ch07.c26_claim_holds(neither, tol=0.1)


def test_assert_c26_recurrent_vs_attention():
    mse = _mse()
    ch07.assert_c26_recurrent_vs_attention(mse, tol=0.1, holds={"a": True, "b": True})
    with pytest.raises(AssertionError, match="a: the claim holds .* the verdict says it fails"):
        ch07.assert_c26_recurrent_vs_attention(mse, tol=0.1, holds={"a": False, "b": True})
    bad = _mse(LSTM=[1.5, 2.0], TCN=[2.0, 3.0], Transformer=[0.9, 1.0])
    with pytest.raises(AssertionError, match="a: the claim fails"):
        ch07.assert_c26_recurrent_vs_attention(bad, tol=0.1, holds={"a": True, "b": True})


def test_assert_c26_additions_do_not_help():
    ch07.assert_c26_additions_do_not_help(_mse())
    with pytest.raises(AssertionError, match="'\\+ time' lowers"):
        ch07.assert_c26_additions_do_not_help(_mse(**{"+ time": [0.8, 0.9]}))
    with pytest.raises(AssertionError, match="'Informer-style' lowers"):
        ch07.assert_c26_additions_do_not_help(_mse(**{"Informer-style": [0.8, 0.9]}))


def test_assert_c26_linear_anchor():
    naive = {"a": 3.0, "b": 3.0}
    mse = _mse(Transformer=[1.1, 1.2])  # DLinear (1.0) below every variant on "a"
    ch07.assert_c26_linear_anchor(mse, naive, beats_all={"a": True, "b": False})
    with pytest.raises(AssertionError, match="a: DLinear .* beats every Transformer"):
        ch07.assert_c26_linear_anchor(mse, naive, beats_all={"a": False, "b": False})
    with pytest.raises(AssertionError, match="does not beat the Informer-style"):
        ch07.assert_c26_linear_anchor(_mse(DLinear=[1.5, 1.5]), naive,
                                      beats_all={"a": False, "b": False})  # fmt: skip
    with pytest.raises(AssertionError, match="seasonal naive"):
        ch07.assert_c26_linear_anchor(mse, {"a": 0.5, "b": 3.0},
                                      beats_all={"a": True, "b": False})  # fmt: skip


# ------------------------------------------------------------------------------------------
# Multimodal
# ------------------------------------------------------------------------------------------


def test_quadrant_batch_tiles_four_digits_in_reading_order():
    images = torch.rand(20, 8, 8, generator=_gen(0))
    labels = torch.arange(20) % 10
    g1, g2 = _gen(3), _gen(3)
    pictures, digits = ch07.quadrant_batch(5, images, labels, g1)
    idx = torch.randint(0, 20, (5, 4), generator=g2)
    assert pictures.shape == (5, 1, 16, 16) and torch.equal(digits, labels[idx])
    for b in range(5):
        for q, (r, c) in enumerate(((0, 0), (0, 8), (8, 0), (8, 8))):
            assert torch.equal(pictures[b, 0, r : r + 8, c : c + 8], images[idx[b, q]])


def test_quadrant_patch_mask_partitions_the_patches():
    mask = ch07.quadrant_patch_mask()
    assert mask.shape == (4, 16) and mask.sum(1).tolist() == [4, 4, 4, 4]
    assert bool((mask.sum(0) == 1).all())
    assert mask[0].nonzero().squeeze(1).tolist() == [0, 1, 4, 5]  # top-left, row-major
    assert mask[3].nonzero().squeeze(1).tolist() == [10, 11, 14, 15]


def test_quadrant_reader_returns_one_distribution_over_patches_per_word():
    torch.manual_seed(0)
    reader = ch07.QuadrantReader()
    x, _ = ch07.quadrant_batch(3, torch.rand(10, 8, 8), torch.arange(10), _gen(1))
    logits, weights = reader(x, need_weights=True)
    assert logits.shape == (3, 4, 10) and weights.shape == (3, 2, 4, 16)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 4))
    torch.testing.assert_close(reader(x), logits)


def test_digit_pair_batch_has_distinct_captions_and_matching_halves():
    images = torch.rand(50, 8, 8, generator=_gen(0))
    labels = torch.arange(50) % 10
    pictures, captions = ch07.digit_pair_batch(40, images, labels, _gen(2))
    assert pictures.shape == (40, 1, 8, 16) and captions.shape == (40, 2)
    assert len({tuple(c) for c in captions.tolist()}) == 40
    for b in range(40):
        for half, digit in zip((pictures[b, 0, :, :8], pictures[b, 0, :, 8:]), captions[b],
                               strict=True):  # fmt: skip
            matches = [i for i in range(50) if torch.equal(images[i], half)]
            assert matches and all(int(labels[i]) == int(digit) for i in matches)
    with pytest.raises(ValueError, match="batch_size must be <= 100"):
        ch07.digit_pair_batch(101, images, labels, _gen(0))


def test_tiny_clip_forward_is_the_package_loss_and_a_fixed_scale_stays_fixed():
    torch.manual_seed(0)
    model = ch07.TinyCLIP()
    pictures, captions = ch07.digit_pair_batch(6, torch.rand(20, 8, 8), torch.arange(20) % 10,
                                               _gen(1))  # fmt: skip
    image_emb = model.head.image_projection(model.image_encoder(pictures))
    text_emb = model.head.text_projection(model.text_encoder(captions))
    expected = clip_contrastive_loss(image_emb, text_emb, model.head.logit_scale())
    torch.testing.assert_close(model(pictures, captions), expected)
    assert model.logits(pictures, captions).shape == (6, 6)
    fixed = ch07.TinyCLIP(logit_scale=1.0)
    assert fixed.scale() == 1.0 and not fixed.head.log_logit_scale.requires_grad
    with pytest.raises(ValueError, match="logit_scale must be > 0"):
        ch07.TinyCLIP(logit_scale=0.0)


def test_caption_encoder_uses_word_order():
    torch.manual_seed(0)
    enc = ch07.CaptionEncoder()
    a, b = enc(torch.tensor([[3, 7]])), enc(torch.tensor([[7, 3]]))
    assert not torch.allclose(a, b)


def test_retrieval_accuracy_equals_a_loop():
    logits = torch.randn(7, 7, generator=_gen(4))
    logits[2, 2] = logits[5, 5] = 10.0
    i2t, t2i = ch07.retrieval_accuracy(logits)
    assert i2t == pytest.approx(sum(int(logits[i].argmax()) == i for i in range(7)) / 7)
    assert t2i == pytest.approx(sum(int(logits[:, j].argmax()) == j for j in range(7)) / 7)
    with pytest.raises(ValueError, match="square"):
        ch07.retrieval_accuracy(torch.randn(3, 4))


@pytest.mark.parametrize(("b", "scale"), [(4, 1.0), (32, 1.0), (10, 14.3)])
def test_contrastive_floor_is_the_loss_of_a_regular_simplex(b, scale):
    simplex = torch.eye(b, dtype=torch.float64) - 1.0 / b  # (B, B): centred unit vectors
    simplex = F.normalize(simplex, dim=-1)  # pairwise cosine −1/(B−1)
    loss = float(clip_contrastive_loss(simplex, simplex, scale))
    assert loss == pytest.approx(ch07.contrastive_loss_floor(b, scale), rel=1e-9)
    for seed in range(3):  # random unit vectors never do better
        e = torch.randn(b, b, generator=_gen(seed), dtype=torch.float64)
        assert float(clip_contrastive_loss(e, e, scale)) >= loss - 1e-9
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        ch07.contrastive_loss_floor(1, 1.0)


def test_train_clip_is_reproducible():
    images, labels = torch.rand(60, 8, 8, generator=_gen(0)), torch.arange(60) % 10
    a = ch07.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8)
    b = ch07.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8)
    assert a.losses == b.losses and a.image_to_text == b.image_to_text
    assert a.final_scale == pytest.approx(1 / 0.07, rel=0.01)
    fixed = ch07.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8,
                            logit_scale=1.0)  # fmt: skip
    assert fixed.final_scale == 1.0


def test_assert_c27_words_find_their_patches():
    ch07.assert_c27_words_find_their_patches(
        mass=[[0.9, 0.8, 0.95, 0.7]], accuracy=[0.9], min_mass=0.5, min_accuracy=0.8
    )
    with pytest.raises(AssertionError, match="'bottom-left' puts only 0.250"):  # uniform
        ch07.assert_c27_words_find_their_patches(
            mass=[[0.9, 0.8, 0.25, 0.7]], accuracy=[0.9], min_mass=0.5, min_accuracy=0.8
        )
    with pytest.raises(AssertionError, match="reads the digits"):
        ch07.assert_c27_words_find_their_patches(
            mass=[[0.9] * 4], accuracy=[0.9, 0.3], min_mass=0.5, min_accuracy=0.8
        )


def test_assert_clip_uniform_loss():
    ch07.assert_clip_uniform_loss(math.log(32), 32)
    with pytest.raises(AssertionError, match="expected ln 32"):
        ch07.assert_clip_uniform_loss(math.log(31), 32)


def test_assert_c27_clip_aligns_and_temperature_matters():
    ch07.assert_c27_clip_aligns(image_to_text=[0.3, 0.4], text_to_image=[0.2, 0.5],
                                min_retrieval=0.1)  # fmt: skip
    with pytest.raises(AssertionError, match="text → image retrieval falls to 0.010"):
        ch07.assert_c27_clip_aligns(image_to_text=[0.3], text_to_image=[0.2, 0.01],
                                    min_retrieval=0.1)  # fmt: skip
    good = dict(learned=([0.4, 0.5], [0.4, 0.5]), fixed=([0.2, 0.3], [0.2, 0.3]),
                fixed_losses=[2.7], floor=2.49)  # fmt: skip
    ch07.assert_c27_temperature_matters(**good)
    with pytest.raises(AssertionError, match="not worse"):
        ch07.assert_c27_temperature_matters(**(good | {"fixed": ([0.5, 0.6], [0.2, 0.3])}))
    with pytest.raises(AssertionError, match="below the floor"):
        ch07.assert_c27_temperature_matters(**(good | {"fixed_losses": [2.0]}))
