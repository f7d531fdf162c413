"""Chapter 10's page (book.pages.ch10): the capstone classifier against independent
references (torch's encoder, the package's masks, hand counts), its task sizes as arguments,
the batches, seeded training through the book's loop, and the FLOP formula."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention.efficient.block_sparse import bigbird_layout
from attention.masks import block_layout_to_mask, sliding_window_mask
from attention.positional import alibi_bias
from book.data import digits
from book.experiments.training import train_classifier
from book.pages.ch10 import (
    ATTENTIONS,
    BLOCK,
    D_FF,
    D_MODEL,
    NUM_HEADS,
    POSITIONALS,
    SEQ_LEN,
    TRAINING,
    WINDOW,
    EncoderFlops,
    PatchClassifier,
    allowed_pairs,
    attention_kernel,
    cancer_records,
    crossover_length,
    draw_batches,
    encoder_flops_formula,
    pixel_baseline,
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
                PatchClassifier(positional=positional, attention=attention, dense=dense)
            continue
        torch.manual_seed(0)
        model = PatchClassifier(positional=positional, attention=attention, dense=dense)
        out = model(images())
        assert out.shape == (6, 10) and torch.isfinite(out).all()
        assert model(images()[:, 0]).shape == (6, 10)  # (B, 8, 8) is accepted too


@pytest.mark.parametrize("positional", ("learned", "rope", "none"))
@pytest.mark.parametrize("attention", ("window", "block-sparse"))
def test_the_masked_dense_model_is_the_kernel_model(positional, attention):
    torch.manual_seed(1)
    dense = PatchClassifier(positional=positional, attention=attention)
    kernel = PatchClassifier(positional=positional, attention=attention, dense=False)
    kernel.load_state_dict(dense.state_dict())
    torch.testing.assert_close(kernel(images()), dense(images()), rtol=1e-5, atol=1e-5)


def test_the_full_model_equals_torch_transformer_encoder_with_the_same_weights():
    """The capstone with full attention and no positions is patch embedding → torch's own
    pre-LN nn.TransformerEncoder → mean → head."""
    torch.manual_seed(2)
    model = PatchClassifier(positional="none", attention="full").eval()
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
    model = PatchClassifier(positional="none")
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
        model = PatchClassifier(positional=positional).eval()
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
    model = PatchClassifier(positional="alibi")
    torch.testing.assert_close(model.mask, alibi_bias(NUM_HEADS, SEQ_LEN))
    window = PatchClassifier(attention="window")
    assert torch.equal(window.mask, sliding_window_mask(SEQ_LEN, left=WINDOW, right=WINDOW))
    both = PatchClassifier(positional="alibi", attention="window")
    expected = alibi_bias(NUM_HEADS, SEQ_LEN).masked_fill(~window.mask, float("-inf"))
    torch.testing.assert_close(both.mask, expected)
    assert PatchClassifier().mask is None
    # weights swap between variants
    assert "mask" not in PatchClassifier(positional="alibi").state_dict()


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
        table = PatchClassifier(learned_std=std).pos.weight.detach()
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
        PatchClassifier(**kwargs)


# --- the task's sizes are arguments -------------------------------------------------------


def test_the_defaults_are_the_digits_sizes():
    """The defaults build the same model, parameter for parameter, as the digits' sizes given
    explicitly (so the chapter's numbers did not move)."""
    torch.manual_seed(3)
    default = PatchClassifier()
    torch.manual_seed(3)
    explicit = PatchClassifier(10, 8, 2, 1, positional="learned", attention="full")
    for (name, a), (_, b) in zip(default.state_dict().items(), explicit.state_dict().items(),
                                 strict=True):  # fmt: skip
        assert torch.equal(a, b), name
    assert default.patches.num_patches == SEQ_LEN == 16


@pytest.mark.parametrize(
    ("num_classes", "image_size", "patch_size", "channels", "tokens"),
    [(3, 12, 4, 3, 9), (2, (1, 30), 1, 1, 30), (5, (6, 4), 2, 2, 6)],
)
def test_other_sizes_give_other_token_counts_and_classes(
    num_classes, image_size, patch_size, channels, tokens
):
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    for positional, attention in (("learned", "window"), ("sinusoidal", "block-sparse"),
                                  ("rope", "linear"), ("alibi", "full")):  # fmt: skip
        if attention == "block-sparse" and tokens % BLOCK:
            continue
        torch.manual_seed(0)
        model = PatchClassifier(num_classes, image_size, patch_size, channels,
                                positional=positional, attention=attention)  # fmt: skip
        x = torch.rand(4, channels, h, w, generator=torch.Generator().manual_seed(1))
        assert model.patches(x).shape == (4, tokens, D_MODEL)
        assert model(x).shape == (4, num_classes)
    # the window reaches one row of the patch grid each way
    model = PatchClassifier(num_classes, image_size, patch_size, channels, attention="window")
    row = w // patch_size
    assert torch.equal(model.mask, sliding_window_mask(tokens, left=row, right=row))
    with pytest.raises(ValueError, match="channels"):
        model(torch.rand(1, channels + 1, h, w))


def test_a_patch_token_is_one_linear_map_of_its_pixels_across_channels():
    """Against an independent computation: token (r, c) = W · flatten(patch (r, c)) + b."""
    torch.manual_seed(0)
    model = PatchClassifier(4, (4, 6), 2, 3)
    x = torch.rand(2, 3, 4, 6, generator=torch.Generator().manual_seed(2))
    weight = model.patches.proj.weight.reshape(D_MODEL, -1)  # (D, C·p·p)
    expected = torch.stack([
        x[:, :, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(2, -1) @ weight.T
        + model.patches.proj.bias
        for r in range(2) for c in range(3)
    ], dim=1)  # fmt: skip
    torch.testing.assert_close(model.patches(x), expected, rtol=1e-5, atol=1e-5)


def test_bad_task_sizes_are_refused():
    with pytest.raises(ValueError, match="num_classes"):
        PatchClassifier(0)
    with pytest.raises(ValueError, match="image_size"):
        PatchClassifier(10, 9, 2)


# --- data and training ------------------------------------------------------------------------


def test_batches_come_from_the_given_tensors_and_repeat_with_the_seed(data):
    inputs, labels = data.train_images.unsqueeze(1), data.train_labels
    make = draw_batches(inputs, labels)
    a = make(5, torch.Generator().manual_seed(3))
    b = make(5, torch.Generator().manual_seed(3))
    assert a[0].shape == (5, 1, 8, 8) and a[1].shape == (5,)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    train = data.train_images.flatten(1)
    for image, label in zip(a[0], a[1], strict=True):
        match = (train == image.flatten()).all(dim=1).nonzero().squeeze(1)
        assert len(match) and bool((data.train_labels[match] == label).any())
    # drawn with replacement: torch.randint over the rows, nothing else
    idx = torch.randint(len(labels), (5,), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], inputs[idx]) and torch.equal(a[1], labels[idx])
    with pytest.raises(ValueError, match="one length"):
        draw_batches(inputs, labels[:3])


def test_training_is_seeded_and_comparable(data):
    batches = draw_batches(data.train_images.unsqueeze(1), data.train_labels)
    test = (data.test_images.unsqueeze(1), data.test_labels)
    kwargs = TRAINING | {"steps": 6}
    a = train_classifier(PatchClassifier, batches, seed=4, test=test, **kwargs)
    b = train_classifier(PatchClassifier, batches, seed=4, test=test, **kwargs)
    c = train_classifier(PatchClassifier, batches, seed=5, test=test, **kwargs)
    assert a.losses == b.losses and a.accuracy == b.accuracy
    assert a.losses != c.losses
    torch.manual_seed(4)
    fresh = PatchClassifier()
    # the parameters came from the seed: the untrained copy has the same first loss
    batch = batches(32, torch.Generator().manual_seed(5))
    first = nn.functional.cross_entropy(fresh(batch[0]), batch[1]).item()
    assert first == pytest.approx(a.losses[0], rel=1e-6)
    assert 0.0 <= a.accuracy <= 1.0 and a.n_params == sum(p.numel() for p in fresh.parameters())
    with torch.no_grad():  # the accuracy is on the whole test split
        expected = (a.model(test[0]).argmax(-1) == test[1]).float().mean().item()
    assert a.accuracy == pytest.approx(expected)


def test_training_constants_are_the_chapters():
    assert TRAINING == {"steps": 200, "batch_size": 32, "lr": 5e-3, "clip": 1.0, "threads": 1}


def test_kernels_and_baselines():
    assert attention_kernel("window").left == WINDOW
    assert attention_kernel("window", window=2).right == 2
    assert attention_kernel("block-sparse").block_size == BLOCK
    with pytest.raises(ValueError, match="attention"):
        attention_kernel("dense")
    linear, mlp = pixel_baseline("linear"), pixel_baseline("mlp", hidden=8)
    assert sum(p.numel() for p in linear.parameters()) == 64 * 10 + 10
    assert sum(p.numel() for p in mlp.parameters()) == 64 * 8 + 8 + 8 * 10 + 10
    assert linear(images()).shape == (6, 10) and mlp(images()[:, 0]).shape == (6, 10)
    assert pixel_baseline("mlp", 2, 30)(torch.rand(4, 1, 1, 30)).shape == (4, 2)
    with pytest.raises(ValueError, match="kind"):
        pixel_baseline("cnn")


# --- the FLOP formula ---------------------------------------------------------------------------


def test_the_formula_against_a_hand_count():
    # one layer, n = 2, d = 1, d_ff = 1: projections 4·(2·2·1·1), ff 2·(2·2·1·1), QKᵀ and AV
    # 2·(2·2·2·1) FLOPs (two per multiply-add)
    f = encoder_flops_formula(2, d_model=1, d_ff=1, num_layers=1)
    assert (f.total, f.quadratic) == (16 + 8 + 16, 16)
    star = crossover_length(d_model=32, d_ff=64)
    assert star == 128 and encoder_flops_formula(star).share == 0.5
    assert encoder_flops_formula(star - 1).share < 0.5 < encoder_flops_formula(star + 1).share
    assert crossover_length(d_model=768, d_ff=3072) == 4608
    assert EncoderFlops(4, 10, 5).share == 0.5
    with pytest.raises(ValueError, match="seq_len"):
        encoder_flops_formula(0)


# --- a second data set: records read as sequences --------------------------------------------


def test_cancer_records_are_the_bundled_records_standardised_and_split_per_class():
    from sklearn.datasets import load_breast_cancer

    (x_train, y_train), (x_test, y_test) = cancer_records()
    raw = load_breast_cancer()
    data = torch.tensor(raw.data, dtype=torch.float64)  # (N, 30)
    labels = torch.tensor(raw.target)
    assert x_train.shape[1:] == x_test.shape[1:] == (3, 1, 10) and x_train.dtype == torch.float32
    assert len(x_train) + len(x_test) == len(labels)
    for c in (0, 1):  # per class, a quarter in the test split
        n = int((labels == c).sum())
        assert int((y_test == c).sum()) == round(n * 0.25)
        assert int((y_train == c).sum()) == n - round(n * 0.25)
    # channel = statistic, position = measurement: the layout of scikit-learn's 30 columns
    names = raw.feature_names.reshape(3, 10)
    assert (names[0, 0], names[1, 1], names[2, 3]) == ("mean radius", "texture error", "worst area")
    # Each feature is an increasing affine map of the raw column: recover it from the sorted
    # values, undo it, and find every record among the bundled ones, with its label.
    mine = torch.cat([x_train, x_test]).reshape(-1, 30).double()  # (N, 30)
    z, r = mine.sort(dim=0).values, data.sort(dim=0).values
    scale = (r[-1] - r[0]) / (z[-1] - z[0])  # (30,)
    shift = r[0] - z[0] * scale
    torch.testing.assert_close(z * scale + shift, r, atol=1e-3 * r.abs().max(), rtol=1e-4)
    undone = mine * scale + shift  # (N, 30): raw values again
    distance = torch.cdist(undone / data.std(dim=0), data / data.std(dim=0))  # (N, N)
    row = distance.argmin(dim=1)
    assert distance.min(dim=1).values.max() < 1e-3 and len(set(row.tolist())) == len(row)
    assert torch.equal(labels[row], torch.cat([y_train, y_test]))
    # the map is the training split's standardisation: its mean and standard deviation
    train_rows = data[row[: len(x_train)]]
    torch.testing.assert_close(shift, train_rows.mean(dim=0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scale, train_rows.std(dim=0), rtol=1e-4, atol=1e-6)
    # seeded: the same seed, the same split; another seed, another
    assert torch.equal(x_train, cancer_records(seed=0)[0][0])
    assert not torch.equal(x_train, cancer_records(seed=1)[0][0])
    with pytest.raises(ValueError, match="test_fraction"):
        cancer_records(test_fraction=1.0)


def test_the_classifier_reads_a_record_as_ten_tokens_of_three_channels():
    (x_train, y_train), _ = cancer_records()
    torch.manual_seed(0)
    model = PatchClassifier(2, (1, 10), 1, 3)
    assert model.patches(x_train[:4]).shape == (4, 10, D_MODEL)
    assert model(x_train[:4]).shape == (4, 2)
    # token m is one linear map of the three statistics of measurement m
    weight = model.patches.proj.weight[:, :, 0, 0]  # (D, 3)
    expected = x_train[:4, :, 0, :].transpose(1, 2) @ weight.T + model.patches.proj.bias
    torch.testing.assert_close(model.patches(x_train[:4]), expected, rtol=1e-5, atol=1e-5)


def test_record_sizes_read_a_record_as_ten_tokens():
    from book.pages.ch10 import RECORD_SIZES

    (x, y), _ = cancer_records()
    model = PatchClassifier(*RECORD_SIZES)
    assert model.patches.num_patches == 10
    assert model(x[:5]).shape == (5, 2)


def test_long_kernels_are_chapter_5s_settings():
    from attention.dispatch import torch_sdpa
    from attention.efficient.adapters import BigBirdAttnFn, LinearAttnFn, SlidingWindowAttnFn
    from book.pages.ch10 import LONG_KINDS, LONG_LEN, LONG_TRAINING, long_kernel

    assert LONG_KINDS == ("full", "window ±8", "block-sparse", "linear")
    assert long_kernel("full") is torch_sdpa and long_kernel("full", written_out=True) is None
    window = long_kernel("window ±8")
    assert isinstance(window, SlidingWindowAttnFn)
    assert torch.equal(window.allowed(40), sliding_window_mask(40, left=8, right=8))
    assert isinstance(long_kernel("block-sparse"), BigBirdAttnFn)
    assert isinstance(long_kernel("linear"), LinearAttnFn)
    assert LONG_LEN == 512 and (LONG_TRAINING["steps"], LONG_TRAINING["batch_size"]) == (200, 32)
    with pytest.raises(ValueError, match="kind"):
        long_kernel("sparse")


@pytest.mark.parametrize("kind", ["window ±8", "block-sparse"])
def test_a_masked_kind_computes_its_kernels_function(kind):
    from book.pages.ch10 import MaskedAttnFn, long_kernel

    kernel, masked = long_kernel(kind), long_kernel(kind, dense=True)
    assert isinstance(masked, MaskedAttnFn) and type(masked.kernel) is type(kernel)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 48, 16, generator=g) for _ in range(3))  # (B, H, L, E)
    torch.testing.assert_close(masked(q, k, v), kernel(q, k, v), rtol=1e-5, atol=1e-5)
    keep = torch.ones(2, 1, 1, 48, dtype=torch.bool)  # what SequenceClassifier passes
    torch.testing.assert_close(masked(q, k, v, mask=keep), masked(q, k, v))
    keep[0, ..., -1] = False
    with pytest.raises(ValueError, match="all-True"):
        masked(q, k, v, mask=keep)
    assert long_kernel("linear", dense=True) is not None
    assert long_kernel("full", dense=True) is long_kernel("full")
