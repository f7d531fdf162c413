"""book.pages.ch07 (the definitions chapter 7 exports) against independent references:
explicit loops over pixels, windows and series, finite perturbations for the receptive fields,
a hand-written training loop, a regular simplex for the contrastive floor, torch's own
losses."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.multimodal import clip_contrastive_loss
from attention.timeseries import DLinear, LastValueNormalization
from book.data import digits
from book.experiments.training import train_classifier
from book.pages import ch07 as pages

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
    got = pages.patchify(images, p)
    assert got.shape == (2, gh * gw, c * p * p)
    for b in range(2):
        for n in range(gh * gw):
            r, col = divmod(n, gw)  # row-major patch numbering
            patch = images[b, :, r * p : (r + 1) * p, col * p : (col + 1) * p]  # (C, p, p)
            assert torch.equal(got[b, n], patch.reshape(-1))


def test_patchify_refuses_bad_images():
    with pytest.raises(ValueError, match="cannot be cut into 3x3 patches"):
        pages.patchify(torch.randn(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="images must have 4 dimensions"):
        pages.patchify(torch.randn(8, 8), 2)


def test_small_cnn_maps_digits_to_logits():
    model = pages.SmallCNN()
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    conv = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32)
    assert sum(p.numel() for p in model.parameters()) == conv + (128 * 64 + 64) + (64 * 10 + 10)


def _tiny_digits():
    g = _gen(0)
    images, labels = torch.rand(40, 8, 8, generator=g), torch.randint(0, 10, (40,), generator=g)
    return images[:30], labels[:30], images[30:], labels[30:]


def test_digit_batches_draw_from_a_seeded_subset_and_train_like_a_loop_by_hand():
    tr_x, tr_y, te_x, te_y = _tiny_digits()
    make_batch = pages.digit_batches(tr_x, tr_y, 20, seed=1)
    subset = torch.randperm(30, generator=_gen(2))[:20]  # the subset comes from seed + 1
    g1, g2 = _gen(7), _gen(7)
    x, y = make_batch(8, g1)
    idx = torch.randint(0, 20, (8,), generator=g2)
    assert x.shape == (8, 1, 8, 8) and torch.equal(x[:, 0], tr_x[subset[idx]])
    assert torch.equal(y, tr_y[subset[idx]])
    runs = [
        train_classifier(pages.SmallCNN, pages.digit_batches(tr_x, tr_y, 20, seed=1), steps=3,
                         seed=1, batch_size=8, clip=None, test=(te_x.unsqueeze(1), te_y))
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0].losses == runs[1].losses and runs[0].accuracy == runs[1].accuracy
    assert 0.0 <= runs[0].accuracy <= 1.0 and len(runs[0].losses) == 3
    # the loop by hand: parameters from the seed, batches from seed + 1, plain Adam
    torch.manual_seed(1)
    model = pages.SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    make_batch, g = pages.digit_batches(tr_x, tr_y, 20, seed=1), _gen(2)
    losses = []
    for _ in range(3):
        xb, yb = make_batch(8, g)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses == pytest.approx(runs[0].losses, rel=1e-6)
    with pytest.raises(ValueError, match="n_train must be at most 30"):
        pages.digit_batches(tr_x, tr_y, 31, seed=0)


# ------------------------------------------------------------------------------------------
# Swin
# ------------------------------------------------------------------------------------------


def test_swin_stack_alternates_the_shift():
    stack = pages.swin_stack(4, shifted=True, grid=8, window_size=4)
    assert [b.shift for b in stack] == [0, 2, 0, 2]
    assert [b.shift for b in pages.swin_stack(3, shifted=False, grid=8, window_size=4)] == [0, 0, 0]


def _field_by_perturbation(model, grid, d_model, token):
    """Which input tokens change the output token when perturbed (float64, finite). The
    perturbation is a random vector: a constant one would vanish in the LayerNorms."""
    model = copy.deepcopy(model).double().eval()
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
    stack = pages.swin_stack(depth, shifted=shifted, grid=8, window_size=4, d_model=8)
    got = pages.receptive_field(stack, 8, 8, token)
    assert torch.equal(got, _field_by_perturbation(stack, 8, 8, token))


def test_receptive_field_of_one_block_is_the_window():
    torch.manual_seed(0)
    stack = pages.swin_stack(1, shifted=True, grid=8, window_size=4, d_model=8)
    window = pages.window_of((5, 2), 8, 4)
    assert int(window.sum()) == 16 and bool(window[4:, :4].all())
    assert torch.equal(pages.receptive_field(stack, 8, 8, (5, 2)), window)
    with pytest.raises(ValueError, match="token must lie on the 8x8 grid"):
        pages.receptive_field(stack, 8, 8, (8, 0))


def test_neighbour_copy_targets_are_the_right_neighbours():
    colours, targets = pages.neighbour_copy_batch(3, 5, 4, _gen(1))
    assert colours.shape == (3, 5, 5) and targets.shape == (3, 5, 4)
    for b in range(3):
        for r in range(5):
            for c in range(4):
                assert targets[b, r, c] == colours[b, r, c + 1]
    model = pages.SwinTokenClassifier(shifted=True)
    assert model(pages.neighbour_copy_batch(2, 8, 4, _gen(2))[0]).shape == (2, 8, 8, 4)


def test_train_neighbour_copy_reports_border_and_interior_columns():
    run = pages.train_neighbour_copy(shifted=True, seed=0, steps=2, eval_size=16)
    again = pages.train_neighbour_copy(shifted=True, seed=0, steps=2, eval_size=16)
    assert run["losses"] == again["losses"] and len(run["per_column"]) == 7
    # column 3 is the border of the 4-wide windows; the interior is the other six
    assert run["border"] == pytest.approx(run["per_column"][3])
    others = [v for i, v in enumerate(run["per_column"]) if i != 3]
    assert run["interior"] == pytest.approx(sum(others) / 6)


# ------------------------------------------------------------------------------------------
# Forecasting
# ------------------------------------------------------------------------------------------


def test_synthetic_series_is_its_formula_plus_seeded_noise():
    values, phase = pages.synthetic_series(30, period=6, slope=0.5, noise=0.0)
    t = torch.arange(30, dtype=torch.float64)
    a = 2 * math.pi * t / 6
    torch.testing.assert_close(values, 0.5 * t + torch.sin(a) + 0.5 * torch.sin(2 * a + 1.0))
    assert torch.equal(phase, torch.arange(30) % 6)
    noisy, _ = pages.synthetic_series(30, period=6, slope=0.5, noise=0.1, seed=3)
    again, _ = pages.synthetic_series(30, period=6, slope=0.5, noise=0.1, seed=3)
    assert torch.equal(noisy, again) and not torch.equal(noisy, values)


def test_forecast_split_is_chronological_and_standardised_by_the_past_only():
    values = torch.arange(100, dtype=torch.float64) ** 1.5
    phase = torch.arange(100) % 12
    split = pages.forecast_split(values, phase, lookback=10, horizon=5)
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
    assert pages.forecast_split(changed, phase, lookback=10, horizon=5).mean == split.mean
    with pytest.raises(ValueError, match="empty part"):
        pages.forecast_split(values[:20], phase[:20], lookback=10, horizon=5)
    with pytest.raises(ValueError, match="fractions"):
        pages.forecast_split(values, phase, lookback=10, horizon=5, fractions=(0.9, 0.2))


def test_forecast_mse_and_training_are_reproducible():
    values, phase = pages.synthetic_series(200)
    split = pages.forecast_split(values, phase, lookback=24, horizon=6)
    zero = pages.forecast_mse(lambda h, p: torch.zeros(len(h), 6), split.test)
    assert zero == pytest.approx(float(split.test.target.pow(2).mean()))

    def build():
        return LastValueNormalization(DLinear(24, 6, kernel_size=5))

    a = pages.train_forecaster(build, split, steps=3, lr=1e-2, seed=0)
    b = pages.train_forecaster(build, split, steps=3, lr=1e-2, seed=0)
    assert a["losses"] == b["losses"] and a["test_mse"] == b["test_mse"]
    assert a["n_params"] == 2 * (24 * 6 + 6)
    assert a["test_mse"] == pytest.approx(pages.forecast_mse(a["model"], split.test))
    assert a["val_mse"] == pytest.approx(pages.forecast_mse(a["model"], split.val))


def _copy_into(target, source_state):
    missing, unexpected = target.load_state_dict(source_state, strict=False)
    assert not unexpected, unexpected
    return missing


def test_forecaster_last_read_out_equals_the_librarys_lstm_and_tcn():
    from attention.timeseries import LSTMForecaster, TCNForecaster

    history = torch.randn(3, 36, generator=_gen(1))
    ref = LSTMForecaster(36, 12, 8)
    ours = pages.Forecaster(pages.LSTMBody(8), 8, 36, 12, "last")
    ours.body.lstm.load_state_dict(ref.lstm.state_dict())
    ours.head.load_state_dict(ref.head.state_dict())
    torch.testing.assert_close(ours(history), ref(history))
    ref = TCNForecaster(36, 12, 6)
    ours = pages.Forecaster(pages.TCNBody(36, 6), 6, 36, 12, "last")
    assert ours.body.dilations == ref.dilations
    ours.body.load_state_dict({k: v for k, v in ref.state_dict().items() if "head" not in k})
    ours.head.load_state_dict(ref.head.state_dict())
    torch.testing.assert_close(ours(history), ref(history))


def test_forecaster_flat_read_out_equals_the_librarys_transformer():
    from attention.timeseries import TransformerForecaster

    history, phase = torch.randn(3, 36, generator=_gen(2)), torch.arange(36).repeat(3, 1) % 12
    ref = TransformerForecaster(36, 12, d_model=8, num_heads=2, num_layers=1, d_ff=16, period=12)
    ours = pages.Forecaster(pages.TransformerBody(36, 8, 2, 16, period=12), 8, 36, 12, "flat")
    ours.body.load_state_dict({k: v for k, v in ref.state_dict().items() if "head" not in k})
    ours.head.load_state_dict(ref.head.state_dict())
    torch.testing.assert_close(ours(history, phase), ref(history, phase))
    with pytest.raises(ValueError, match="read_out must be"):
        pages.Forecaster(pages.LSTMBody(4), 4, 36, 12, "mean")


def test_no_attention_keeps_every_month_to_itself_and_dense_does_not():
    history = torch.randn(1, 12, generator=_gen(3))
    changed = history.clone()
    changed[0, 3] += 1.0
    for attn_fn, only_month_3 in ((pages.no_attention, True), (None, False)):
        torch.manual_seed(0)
        body = pages.TransformerBody(12, 8, 2, 16, attn_fn=attn_fn)
        moved = (body(changed) - body(history)).abs().sum(-1)[0] > 0  # (12,)
        assert moved[3] and bool(moved.sum() == 1) == only_month_3


def test_tcn_body_is_causal():
    body = pages.TCNBody(36, 4)
    history = torch.randn(1, 36, generator=_gen(4))
    changed = history.clone()
    changed[0, 20] += 1.0
    moved = (body(changed) - body(history)).abs().sum(-1)[0] > 0  # (36,)
    assert not moved[:20].any() and moved[20]


def test_tune_and_train_widens_the_grid_until_the_choice_is_inside():
    values, phase = pages.synthetic_series(200)
    split = pages.forecast_split(values, phase, lookback=24, horizon=6)

    def build():
        return LastValueNormalization(DLinear(24, 6, kernel_size=5))

    out = pages.tune_and_train(build, split, grid=(1e-4, 3e-4), seeds=[0, 1], steps=5)
    grid = out["grid"]
    assert set(out["val"]) == set(grid) and out["lr"] == min(grid, key=out["val"].get)
    assert out["lr"] != grid[-1] or grid[-1] * grid[-1] / grid[-2] > 0.3  # inside, or at the cap
    assert len(grid) > 2  # 3e-4 for 5 steps is too small: the grid grew upwards
    assert len(out["runs"]) == 2
    assert (
        out["runs"][1]["test_mse"]
        == pages.train_forecaster(build, split, steps=5, lr=out["lr"], seed=1, batch_size=16)[
            "test_mse"
        ]
    )


# ------------------------------------------------------------------------------------------
# Multimodal
# ------------------------------------------------------------------------------------------


def test_quadrant_batch_tiles_four_digits_in_reading_order():
    images = torch.rand(20, 8, 8, generator=_gen(0))
    labels = torch.arange(20) % 10
    g1, g2 = _gen(3), _gen(3)
    pictures, digits = pages.quadrant_batch(5, images, labels, g1)
    idx = torch.randint(0, 20, (5, 4), generator=g2)
    assert pictures.shape == (5, 1, 16, 16) and torch.equal(digits, labels[idx])
    for b in range(5):
        for q, (r, c) in enumerate(((0, 0), (0, 8), (8, 0), (8, 8))):
            assert torch.equal(pictures[b, 0, r : r + 8, c : c + 8], images[idx[b, q]])


def test_quadrant_patch_mask_partitions_the_patches():
    mask = pages.quadrant_patch_mask()
    assert mask.shape == (4, 16) and mask.sum(1).tolist() == [4, 4, 4, 4]
    assert bool((mask.sum(0) == 1).all())
    assert mask[0].nonzero().squeeze(1).tolist() == [0, 1, 4, 5]  # top-left, row-major
    assert mask[3].nonzero().squeeze(1).tolist() == [10, 11, 14, 15]


def test_quadrant_reader_returns_one_distribution_over_patches_per_word():
    torch.manual_seed(0)
    reader = pages.QuadrantReader()
    x, _ = pages.quadrant_batch(3, torch.rand(10, 8, 8), torch.arange(10), _gen(1))
    logits, weights = reader(x, need_weights=True)
    assert logits.shape == (3, 4, 10) and weights.shape == (3, 2, 4, 16)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 4))
    torch.testing.assert_close(reader(x), logits)


def test_digit_pair_batch_has_distinct_captions_and_matching_halves():
    images = torch.rand(50, 8, 8, generator=_gen(0))
    labels = torch.arange(50) % 10
    pictures, captions = pages.digit_pair_batch(40, images, labels, _gen(2))
    assert pictures.shape == (40, 1, 8, 16) and captions.shape == (40, 2)
    assert len({tuple(c) for c in captions.tolist()}) == 40
    for b in range(40):
        for half, digit in zip((pictures[b, 0, :, :8], pictures[b, 0, :, 8:]), captions[b],
                               strict=True):  # fmt: skip
            matches = [i for i in range(50) if torch.equal(images[i], half)]
            assert matches and all(int(labels[i]) == int(digit) for i in matches)
    with pytest.raises(ValueError, match="batch_size must be <= 100"):
        pages.digit_pair_batch(101, images, labels, _gen(0))


def test_tiny_clip_forward_is_the_package_loss_and_a_fixed_scale_stays_fixed():
    torch.manual_seed(0)
    model = pages.TinyCLIP()
    pictures, captions = pages.digit_pair_batch(6, torch.rand(20, 8, 8), torch.arange(20) % 10,
                                               _gen(1))  # fmt: skip
    image_emb = model.head.image_projection(model.image_encoder(pictures))
    text_emb = model.head.text_projection(model.text_encoder(captions))
    expected = clip_contrastive_loss(image_emb, text_emb, model.head.logit_scale())
    torch.testing.assert_close(model(pictures, captions), expected)
    assert model.logits(pictures, captions).shape == (6, 6)
    fixed = pages.TinyCLIP(logit_scale=1.0)
    assert fixed.scale() == 1.0 and not fixed.head.log_logit_scale.requires_grad
    with pytest.raises(ValueError, match="logit_scale must be > 0"):
        pages.TinyCLIP(logit_scale=0.0)


def test_caption_encoder_uses_word_order():
    torch.manual_seed(0)
    enc = pages.CaptionEncoder()
    a, b = enc(torch.tensor([[3, 7]])), enc(torch.tensor([[7, 3]]))
    assert not torch.allclose(a, b)


def test_retrieval_accuracy_equals_a_loop():
    logits = torch.randn(7, 7, generator=_gen(4))
    logits[2, 2] = logits[5, 5] = 10.0
    i2t, t2i = pages.retrieval_accuracy(logits)
    assert i2t == pytest.approx(sum(int(logits[i].argmax()) == i for i in range(7)) / 7)
    assert t2i == pytest.approx(sum(int(logits[:, j].argmax()) == j for j in range(7)) / 7)
    with pytest.raises(ValueError, match="square"):
        pages.retrieval_accuracy(torch.randn(3, 4))


@pytest.mark.parametrize(("b", "scale"), [(4, 1.0), (32, 1.0), (10, 14.3)])
def test_contrastive_floor_is_the_loss_of_a_regular_simplex(b, scale):
    simplex = torch.eye(b, dtype=torch.float64) - 1.0 / b  # (B, B): centred unit vectors
    simplex = F.normalize(simplex, dim=-1)  # pairwise cosine −1/(B−1)
    loss = float(clip_contrastive_loss(simplex, simplex, scale))
    assert loss == pytest.approx(pages.contrastive_loss_floor(b, scale), rel=1e-9)
    for seed in range(3):  # random unit vectors never do better
        e = torch.randn(b, b, generator=_gen(seed), dtype=torch.float64)
        assert float(clip_contrastive_loss(e, e, scale)) >= loss - 1e-9
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        pages.contrastive_loss_floor(1, 1.0)


def test_train_clip_is_reproducible():
    images, labels = torch.rand(60, 8, 8, generator=_gen(0)), torch.arange(60) % 10
    a = pages.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8)
    b = pages.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8)
    assert a["losses"] == b["losses"] and a["image_to_text"] == b["image_to_text"]
    assert a["final_scale"] == pytest.approx(1 / 0.07, rel=0.01)
    fixed = pages.train_clip((images, labels), (images, labels), seed=0, steps=2, batch_size=8,
                            logit_scale=1.0)  # fmt: skip
    assert fixed["final_scale"] == 1.0


def test_by_class_lists_each_class_indices_in_order():
    labels = torch.tensor([3, 0, 3, 1, 0, 3])
    got = pages.by_class(labels, num_classes=4)
    assert [g.tolist() for g in got] == [[1, 4], [3], [], [0, 2, 5]]


def test_swin_pyramid_halves_the_side_and_doubles_the_width_per_stage():
    torch.manual_seed(0)
    x = torch.randn(2, 16 * 16, 8)  # (B, H·W, C)
    out, pyramid = pages.swin_pyramid(x, 16, 8, stages=3, window_size=4)
    assert pyramid == [(16, 8), (8, 16), (4, 32)]
    assert out.shape == (2, 4 * 4, 32)
    _, one = pages.swin_pyramid(x, 16, 8, stages=1, window_size=4)
    assert one == [(16, 8)]  # no merging after the last stage
    with pytest.raises(ValueError, match="stages"):
        pages.swin_pyramid(x, 16, 8, stages=0)


def test_train_quadrant_reader_reports_mass_on_each_quadrant_and_accuracy():
    data = digits()
    run = pages.train_quadrant_reader(
        (data.train_images, data.train_labels), (data.test_images, data.test_labels),
        seed=0, steps=3,
    )  # fmt: skip
    assert run["mass"].shape == (4,) and run["weights"].shape == (500, 4, 16)
    # the mass is the weight on the quadrant's 4 patches: recompute it from the weights
    expected = (run["weights"] * pages.quadrant_patch_mask()).sum(-1).mean(0)
    assert torch.allclose(run["mass"], expected)
    assert 0.0 <= run["accuracy"] <= 1.0


def test_tune_and_train_tunes_at_tune_steps_and_trains_every_seed_at_steps():
    values, phase = pages.synthetic_series(200)
    split = pages.forecast_split(values, phase, lookback=24, horizon=6)

    def build():
        return LastValueNormalization(DLinear(24, 6, kernel_size=5))

    out = pages.tune_and_train(
        build, split, grid=(1e-3, 3e-3, 1e-2), seeds=[0, 1], steps=6, tune_steps=3
    )
    lr = out["lr"]
    tuned = pages.train_forecaster(build, split, steps=3, lr=lr, seed=0, batch_size=16)
    assert out["val"][lr] == tuned["val_mse"]  # the choice was made after 3 steps
    for seed, run in zip([0, 1], out["runs"], strict=True):  # every seed trained for 6
        full = pages.train_forecaster(build, split, steps=6, lr=lr, seed=seed, batch_size=16)
        assert run["test_mse"] == full["test_mse"] and len(run["losses"]) == 6
