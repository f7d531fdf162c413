"""Chapter 10's experiments: the capstone model against independent references (torch's
encoder, the package's masks, hand counts), the training and cost helpers, the decision guide,
and every asserting function fed a case where its claim is false."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention.efficient.block_sparse import bigbird_layout
from attention.masks import block_layout_to_mask, sliding_window_mask
from attention.positional import alibi_bias
from book.data import digits
from book.experiments.ch10 import (
    ATTENTIONS,
    BLOCK,
    D_FF,
    D_MODEL,
    GUIDE,
    NUM_HEADS,
    POSITIONALS,
    SEQ_LEN,
    WINDOW,
    DigitsEncoder,
    EncoderFlops,
    Evidence,
    GuideRow,
    accuracies,
    allowed_pairs,
    assert_as_good_as_best,
    assert_depends_on_task,
    assert_full_attention_not_costlier,
    assert_guide_backed,
    assert_no_loss_beyond,
    assert_quadratic_part_small,
    assert_working_classifier,
    assert_worse_by,
    attention_kernel,
    crossover_length,
    decision_guide,
    digit_accuracy,
    digits_batches,
    encoder_cost,
    encoder_flops,
    encoder_flops_formula,
    guide_markdown,
    model_flops,
    pixel_baseline,
    sweep_encoder,
    train_digits,
    train_grid,
    training_step_cost,
)


@pytest.fixture(scope="module")
def data():
    return digits()


def images(n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


# --- the model ---------------------------------------------------------------------------------


def legal(positional: str, attention: str, dense: bool) -> bool:
    masked = dense and attention in ("window", "block-sparse")
    return not (positional == "alibi" and attention != "full" and not masked)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("positional", POSITIONALS)
def test_every_configuration_maps_images_to_ten_logits(positional, attention):
    for dense in (True, False):
        if not legal(positional, attention, dense):
            with pytest.raises(ValueError, match="positional='alibi' adds a bias"):
                DigitsEncoder(positional, attention, dense=dense)
            continue
        torch.manual_seed(0)
        model = DigitsEncoder(positional, attention, dense=dense)
        out = model(images())
        assert out.shape == (6, 10) and torch.isfinite(out).all()
        assert model(images()[:, 0]).shape == (6, 10)  # (B, 8, 8) is accepted too


@pytest.mark.parametrize("positional", ("learned", "rope", "none"))
@pytest.mark.parametrize("attention", ("window", "block-sparse"))
def test_the_masked_dense_model_is_the_kernel_model(positional, attention):
    torch.manual_seed(1)
    dense = DigitsEncoder(positional, attention)
    kernel = DigitsEncoder(positional, attention, dense=False)
    kernel.load_state_dict(dense.state_dict())
    torch.testing.assert_close(kernel(images()), dense(images()), rtol=1e-5, atol=1e-5)


def test_the_full_model_equals_torch_transformer_encoder_with_the_same_weights():
    """The capstone with full attention and no positions is patch embedding → torch's own
    pre-LN nn.TransformerEncoder → mean → head."""
    torch.manual_seed(2)
    model = DigitsEncoder("none", "full").eval()
    layer = nn.TransformerEncoderLayer(D_MODEL, NUM_HEADS, D_FF, dropout=0.0, batch_first=True,
                                       norm_first=True)  # fmt: skip
    reference = nn.TransformerEncoder(
        layer, 2, norm=nn.LayerNorm(D_MODEL), enable_nested_tensor=False
    ).eval()
    with torch.no_grad():
        for mine, theirs in zip(model.encoder.layers, reference.layers, strict=True):
            attn = mine.self_attn
            theirs.self_attn.in_proj_weight.copy_(
                torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            )
            theirs.self_attn.in_proj_bias.copy_(
                torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
            )
            theirs.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
            theirs.linear1.load_state_dict(mine.ff.linear1.state_dict())
            theirs.linear2.load_state_dict(mine.ff.linear2.state_dict())
            theirs.norm1.load_state_dict(mine.norm1.state_dict())
            theirs.norm2.load_state_dict(mine.norm2.state_dict())
        reference.norm.load_state_dict(model.encoder.norm.state_dict())
        x = images()
        tokens = model.patches(x)  # (B, 16, D)
        expected = model.head(reference(tokens).mean(dim=1))
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_patches_are_read_in_reading_order():
    model = DigitsEncoder("none")
    with torch.no_grad():
        model.patches.proj.weight.zero_()
        model.patches.proj.bias.zero_()
        model.patches.proj.weight[0, 0, 0, 0] = 1.0  # channel 0 = the patch's top-left pixel
    x = torch.arange(64.0).reshape(1, 1, 8, 8)
    top_left = model.patches(x)[0, :, 0]  # (16,)
    expected = torch.tensor([r * 16 + c * 2 for r in range(4) for c in range(4)], dtype=x.dtype)
    torch.testing.assert_close(top_left, expected)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_without_positions_the_model_cannot_see_where_a_patch_is(seed):
    """No positions + full attention + mean pooling: permuting the patch tokens changes
    nothing; a learned table breaks the symmetry."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(SEQ_LEN, generator=g)
    x = images(3, seed)
    for positional, invariant in (("none", True), ("learned", False)):
        torch.manual_seed(0)
        model = DigitsEncoder(positional).eval()
        tokens = model.patches(x)  # (B, 16, D)

        def rest(t, model=model):
            if model.pos is not None:
                t = model.pos(t)
            return model.head(model.encoder(t).mean(dim=1))

        same = torch.allclose(rest(tokens), rest(tokens[:, perm]), atol=1e-5)
        if invariant or bool((perm == torch.arange(SEQ_LEN)).all()):
            assert same
        else:
            assert not same


def test_alibi_and_masks_are_the_packages():
    model = DigitsEncoder("alibi")
    torch.testing.assert_close(model.mask, alibi_bias(NUM_HEADS, SEQ_LEN))
    window = DigitsEncoder("learned", "window")
    assert torch.equal(window.mask, sliding_window_mask(SEQ_LEN, left=WINDOW, right=WINDOW))
    both = DigitsEncoder("alibi", "window")
    expected = alibi_bias(NUM_HEADS, SEQ_LEN).masked_fill(~window.mask, float("-inf"))
    torch.testing.assert_close(both.mask, expected)
    assert DigitsEncoder("learned").mask is None
    assert "mask" not in DigitsEncoder("alibi").state_dict()  # weights swap between variants


def test_allowed_pairs_against_the_package_masks():
    assert allowed_pairs("full").all() and allowed_pairs("linear").all()
    assert torch.equal(allowed_pairs("window", 20), sliding_window_mask(20, left=4, right=4))
    layout = bigbird_layout(SEQ_LEN // BLOCK, n_window=1, n_global=1, n_random=1,
                            generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert torch.equal(allowed_pairs("block-sparse"), block_layout_to_mask(layout, BLOCK, 16, 16))
    assert 0 < allowed_pairs("block-sparse").float().mean() < 1


def test_learned_table_starts_at_the_scale_asked():
    torch.manual_seed(0)
    for std in (1.0, 0.02):
        table = DigitsEncoder("learned", learned_std=std).pos.weight.detach()
        assert abs(float(table.std()) - std) < 0.2 * std


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"positional": "relative"}, ValueError, "positional"),
        ({"attention": "sparse"}, ValueError, "attention"),
        ({"learned_std": 0.0}, ValueError, "learned_std must be > 0"),
        ({"positional": "alibi", "attention": "linear"}, ValueError, "cannot take"),
    ],
)
def test_bad_configurations_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        DigitsEncoder(**kwargs)


def test_kernels_and_baselines():
    assert attention_kernel("window").left == WINDOW
    assert attention_kernel("block-sparse").block_size == BLOCK
    with pytest.raises(ValueError, match="attention"):
        attention_kernel("dense")
    linear, mlp = pixel_baseline("linear"), pixel_baseline("mlp", hidden=8)
    assert sum(p.numel() for p in linear.parameters()) == 64 * 10 + 10
    assert sum(p.numel() for p in mlp.parameters()) == 64 * 8 + 8 + 8 * 10 + 10
    assert linear(images()).shape == (6, 10) and mlp(images()[:, 0]).shape == (6, 10)
    with pytest.raises(ValueError, match="kind"):
        pixel_baseline("cnn")


# --- data and training ------------------------------------------------------------------------


def test_batches_come_from_the_training_split_and_repeat_with_the_seed(data):
    make = digits_batches(data, 5)
    a = make(torch.Generator().manual_seed(3))
    b = make(torch.Generator().manual_seed(3))
    assert a[0].shape == (5, 1, 8, 8) and a[1].shape == (5,)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    train = data.train_images.flatten(1)
    for image, label in zip(a[0], a[1], strict=True):
        match = (train == image.flatten()).all(dim=1).nonzero().squeeze(1)
        assert len(match) and bool((data.train_labels[match] == label).any())
    with pytest.raises(ValueError, match="batch_size"):
        digits_batches(data, 0)


class Oracle(nn.Module):
    """Knows every test label, or always says 3."""

    def __init__(self, data, right: bool):
        super().__init__()
        pairs = zip(data.test_images, data.test_labels, strict=True)
        self.lookup = {tuple(img.flatten().tolist()): int(y) for img, y in pairs}
        self.right = right

    def forward(self, x):
        labels = [self.lookup[tuple(img.flatten().tolist())] if self.right else 3 for img in x]
        return nn.functional.one_hot(torch.tensor(labels), 10).float()


def test_digit_accuracy_against_known_answers(data):
    assert digit_accuracy(Oracle(data, True), data) == 1.0
    share = float((data.test_labels == 3).float().mean())
    assert digit_accuracy(Oracle(data, False), data) == pytest.approx(share)


def test_training_is_seeded_and_comparable(data):
    def build():
        return DigitsEncoder("learned")

    a = train_digits(build, data, seed=4, steps=6)
    b = train_digits(build, data, seed=4, steps=6)
    c = train_digits(build, data, seed=5, steps=6)
    assert a.losses == b.losses and a.accuracy == b.accuracy
    assert a.losses != c.losses
    torch.manual_seed(4)
    fresh = build()
    # the parameters came from the seed: the untrained copy has the same first loss
    batch = digits_batches(data, 32)(torch.Generator().manual_seed(5))
    first = nn.functional.cross_entropy(fresh(batch[0]), batch[1]).item()
    assert first == pytest.approx(a.losses[0], rel=1e-6)
    assert 0.0 <= a.accuracy <= 1.0 and a.n_params == sum(p.numel() for p in fresh.parameters())
    with pytest.raises(TypeError, match="build must be a function"):
        train_digits(fresh, data, seed=0)


def test_train_grid_runs_every_label_and_seed(data):
    runs = train_grid({"a": lambda: pixel_baseline("linear"), "b": lambda: pixel_baseline("mlp")},
                      data, (0, 1), steps=3)  # fmt: skip
    assert list(runs) == ["a", "b"] and [r.seed for r in runs["b"]] == [0, 1]
    assert {k: len(v) for k, v in accuracies(runs).items()} == {"a": 2, "b": 2}
    again = train_grid({"a": lambda: pixel_baseline("linear")}, data, (1,), steps=3)
    assert again["a"][0].losses == runs["a"][1].losses  # a label's run depends only on its seed


# --- costs ---------------------------------------------------------------------------------


def test_a_training_step_holds_at_least_its_gradients_and_is_counted_exactly(data):
    x, y = data.train_images[:8].unsqueeze(1), data.train_labels[:8]
    torch.manual_seed(0)
    model = DigitsEncoder("learned")
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    a = training_step_cost(model, x, y, timed=False)
    b = training_step_cost(model, x, y, repeats=1)
    assert a.peak_bytes == b.peak_bytes >= grads
    assert math.isnan(a.seconds) and b.seconds > 0
    assert all(p.grad is None for p in model.parameters()) and not model.training


def test_the_written_out_attention_holds_the_table_the_fused_kernel_does_not():
    n = 256
    written, fused = encoder_cost(None, n, timed=False), encoder_cost("full", n, timed=False)
    table = 2 * NUM_HEADS * n * n * 4  # one float32 weight table per head and layer
    assert written.peak_bytes > table > fused.peak_bytes
    assert written.peak_bytes > 5 * fused.peak_bytes
    assert encoder_cost("full", n, timed=False) == fused  # exact, not sampled
    with pytest.raises(ValueError, match="seq_len"):
        encoder_cost("full", 0)
    assert sweep_encoder("window").layers[0].self_attn.attn_fn.left == WINDOW


@pytest.mark.parametrize("n", (1, 16, 40))
def test_counted_flops_equal_the_formula(n):
    assert encoder_flops(n) == encoder_flops_formula(n)


def test_the_formula_against_a_hand_count():
    # one layer, n = 2, d = 1, d_ff = 1: projections 4·(2·2·1·1), ff 2·(2·2·1·1), QKᵀ and AV
    # 2·(2·2·2·1) FLOPs (two per multiply-add)
    f = encoder_flops_formula(2, d_model=1, d_ff=1, num_layers=1)
    assert (f.total, f.quadratic) == (16 + 8 + 16, 16)
    star = crossover_length(d_model=32, d_ff=64)
    assert star == 128 and encoder_flops_formula(star).share == 0.5
    assert encoder_flops_formula(star - 1).share < 0.5 < encoder_flops_formula(star + 1).share
    assert crossover_length(d_model=768, d_ff=3072) == 4608


def test_model_flops_of_a_linear_model():
    assert model_flops(pixel_baseline("linear"), images(3)) == 3 * 2 * 64 * 10


# --- asserting functions: each passes when its claim holds and fails when it does not ----------


def test_assert_working_classifier():
    assert_working_classifier([0.9, 0.86, 0.95], threshold=0.85)
    with pytest.raises(AssertionError, match="worst seed reaches 0.840"):
        assert_working_classifier([0.9, 0.84, 0.95], threshold=0.85)
    with pytest.raises(ValueError, match="finite"):
        assert_working_classifier([], threshold=0.85)


def test_assert_as_good_as_best():
    acc = {"learned": [0.90, 0.91], "sinusoidal": [0.91, 0.92], "none": [0.4, 0.5]}
    assert_as_good_as_best("learned", acc, tolerance=0.02)
    with pytest.raises(AssertionError, match="more than 0.005 below the best, sinusoidal"):
        assert_as_good_as_best("learned", acc, tolerance=0.005)
    with pytest.raises(KeyError):
        assert_as_good_as_best("rope", acc, tolerance=0.02)


def test_assert_worse_by_and_no_loss_beyond():
    acc = {"rope": [0.70, 0.72], "learned": [0.90, 0.92], "window": [0.90, 0.905]}
    assert_worse_by("rope", "learned", acc, margin=0.05)
    with pytest.raises(AssertionError, match="only -0.200 below rope"):
        assert_worse_by("learned", "rope", acc, margin=0.05)
    assert_no_loss_beyond("window", "learned", acc, tolerance=0.02)
    with pytest.raises(AssertionError, match="rope loses 0.200"):
        assert_no_loss_beyond("rope", "learned", acc, tolerance=0.02)
    with pytest.raises(KeyError):
        assert_worse_by("alibi", "learned", acc, margin=0.05)


def test_assert_quadratic_part_small():
    assert_quadratic_part_small(encoder_flops_formula(16), below=0.5)
    with pytest.raises(AssertionError, match="n = 256 the n² products are 66.7%"):
        assert_quadratic_part_small(encoder_flops_formula(256), below=0.5)
    assert EncoderFlops(4, 10, 5).share == 0.5


def test_assert_full_attention_not_costlier():
    assert_full_attention_not_costlier({"full": 100, "window": 120, "linear": 100})
    with pytest.raises(AssertionError, match=r"more than window \(90\)"):
        assert_full_attention_not_costlier({"full": 100, "window": 90, "linear": 130})
    assert_full_attention_not_costlier({"full": 100, "window": 90}, tolerance=0.2)
    with pytest.raises(KeyError):
        assert_full_attention_not_costlier({"window": 1})


# --- the decision guide ---------------------------------------------------------------------


def evidence(claim_id: str, verdict: str = "reproduced", measured: str = "0.93 vs 0.92"):
    return Evidence(claim_id, 5, verdict, measured)


def test_a_claim_number_cites_its_sub_claims_and_nothing_else():
    rows = (GuideRow("s", "c", ("C19",)), GuideRow("t", "d", ("C1", "§10 window")))
    recorded = [evidence("C19 window"), evidence("C19a"), evidence("C1"), evidence("C10")]
    a, b = decision_guide(recorded, rows)
    assert [e.claim_id for e in a.evidence] == ["C19 window", "C19a"] and a.missing == ()
    assert [e.claim_id for e in b.evidence] == ["C1"] and b.missing == ("§10 window",)


def test_every_guide_row_cites_something_and_the_markdown_separates_waiting_rows():
    assert all(row.cites for row in GUIDE)
    rows = (GuideRow("a | b", "c", ("C19",)), GuideRow("later", "d", ("C29",)))
    text = guide_markdown(decision_guide([evidence("C19 window")], rows))
    assert "| a \\| b | c | C19 window (ch. 5, reproduced): 0.93 vs 0.92 |" in text
    assert "Rows waiting" in text and "later → d (cites C29: not yet recorded)" in text


def test_assert_guide_backed():
    rows = (GuideRow("s", "c", ("C19",)), GuideRow("t", "d", ("C29",)))
    good = decision_guide([evidence("C19 window")], rows)
    assert_guide_backed(good, required=("C19 window",))
    with pytest.raises(AssertionError, match=r"lacks evidence from \['C29'\]"):
        assert_guide_backed(good, required=("C29",))
    with pytest.raises(AssertionError, match="quotes no number"):
        assert_guide_backed(decision_guide([evidence("C19 x", measured="better")], rows))
    with pytest.raises(AssertionError, match="no row of the guide"):
        assert_guide_backed(decision_guide([], rows))


def test_assert_depends_on_task():
    here = {"window ±4": [0.93, 0.92], "full": [0.92, 0.92]}
    failed = "L=128, 1 layer: accuracy 0.50 (reach 0%) vs 1.00 full; window ±12, 3 layers: 0.49"
    assert_depends_on_task(here, evidence("C19 window", "partly", failed), tolerance=0.02)
    # The window nearly matched full attention on the other task too: the claim is false.
    held = "L=128, 1 layer: accuracy 0.90 (reach 0%) vs 1.00 full"
    with pytest.raises(AssertionError, match="less than 0.25 below"):
        assert_depends_on_task(here, evidence("C19 window", "reproduced", held), tolerance=0.02)
    with pytest.raises(AssertionError, match="records no"):
        assert_depends_on_task(here, evidence("C19 window"), tolerance=0.02)
    worse = {"window ±4": [0.80, 0.81], "full": [0.92, 0.92]}
    with pytest.raises(AssertionError, match="window ±4 loses"):
        assert_depends_on_task(worse, evidence("C19 window", "partly", failed), tolerance=0.02)
