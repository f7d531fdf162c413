"""Chapter 4's page (book.pages.ch04) against independent references: the package's sinusoidal table
(for the wavelengths and the shift matrix), per-element loops (zero crossings, look-back
labels), a synthetic linear map (least squares), models run one sequence at a time, and a
float64 attention computed by hand from the model's weights."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.positional import apply_rope, sinusoidal_encoding
from book.pages.ch04 import (
    build_lookback_model,
    fit_shift_matrix,
    last_query_attention,
    lookback_accuracy,
    lookback_batch,
    lookback_loss,
    sinusoidal_shift_matrix,
    sinusoidal_wavelengths,
    train_lookback,
    zero_crossings,
)
from tests.reference import naive_attention_float64

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# C12: wavelengths and zero crossings
# ------------------------------------------------------------------------------------------


@FAST
@given(half=st.integers(1, 16), base=st.sampled_from([100.0, 10000.0]))
def test_wavelengths_describe_the_package_table(half, base):
    d_model = 2 * half
    lam = sinusoidal_wavelengths(d_model, base)  # (D/2,)
    assert lam.shape == (half,) and lam.dtype == torch.float64
    pe = sinusoidal_encoding(50, d_model, base=base, dtype=torch.float64)  # (50, D)
    pos = torch.arange(50, dtype=torch.float64).unsqueeze(1)  # (50, 1)
    torch.testing.assert_close(pe[:, 0::2], torch.sin(2 * math.pi * pos / lam))
    torch.testing.assert_close(pe[:, 1::2], torch.cos(2 * math.pi * pos / lam))
    assert torch.all(lam[1:] > lam[:-1])  # longer and longer waves
    assert math.isclose(float(lam[0]), 2 * math.pi)


def test_wavelengths_reject_odd_width_and_bad_base():
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_wavelengths(7)
    with pytest.raises(ValueError, match="base"):
        sinusoidal_wavelengths(8, base=1.0)
    with pytest.raises(TypeError, match="base"):
        sinusoidal_wavelengths(8, base="10000")


@FAST
@given(
    length=st.integers(2, 30),
    channels=st.integers(1, 4),
    seed=st.integers(0, 10_000),
)
def test_zero_crossings_match_a_loop(length, channels, seed):
    g = _gen(seed)
    # Values in {-1, 0, 1} (exact zeros included) and ordinary floats.
    signal = torch.randint(-1, 2, (length, channels), generator=g).float()  # (L, C)
    signal[:, 0] = torch.randn(length, generator=g)
    expected = []
    for c in range(channels):
        col = signal[:, c].tolist()
        expected.append(sum(1 for a, b in zip(col, col[1:], strict=False) if a * b < 0))
    assert zero_crossings(signal).tolist() == expected


def test_zero_crossings_of_a_pure_wave_give_its_wavelength():
    pos = torch.arange(1000, dtype=torch.float64).unsqueeze(1)  # (1000, 1)
    wave = torch.sin(2 * math.pi * pos / 50.0 + 0.3)  # wavelength 50: two crossings per 50
    assert zero_crossings(wave).item() == 40


def test_zero_crossings_rejects_bad_input():
    with pytest.raises(ValueError, match="signal"):
        zero_crossings(torch.zeros(5))
    with pytest.raises(TypeError, match="signal"):
        zero_crossings(torch.zeros(5, 2, dtype=torch.long))


# ------------------------------------------------------------------------------------------
# C13: the shift is a rotation
# ------------------------------------------------------------------------------------------


@FAST
@given(half=st.integers(1, 12), k=st.integers(-40, 40))
def test_shift_matrix_moves_every_position_by_k(half, k):
    d_model = 2 * half
    m = sinusoidal_shift_matrix(k, d_model)  # (D, D)
    # Negative positions are fine in the formula; use a table wide enough for both signs.
    pe = sinusoidal_encoding(160, d_model, dtype=torch.float64)  # (160, D)
    p = torch.arange(40, 100)  # positions p and p + k both inside the table
    torch.testing.assert_close(pe[p + k], pe[p] @ m.T, atol=1e-12, rtol=0)


@FAST
@given(half=st.integers(1, 12), k=st.integers(-40, 40))
def test_shift_matrix_is_an_orthogonal_rotation(half, k):
    d_model = 2 * half
    m = sinusoidal_shift_matrix(k, d_model)
    eye = torch.eye(d_model, dtype=torch.float64)
    torch.testing.assert_close(m @ m.T, eye)
    torch.testing.assert_close(sinusoidal_shift_matrix(-k, d_model), m.T)
    assert math.isclose(float(torch.linalg.det(m)), 1.0, rel_tol=1e-9)


def test_shift_by_zero_is_the_identity_and_bad_k_raises():
    torch.testing.assert_close(sinusoidal_shift_matrix(0, 6), torch.eye(6, dtype=torch.float64))
    with pytest.raises(TypeError, match="k"):
        sinusoidal_shift_matrix(1.5, 6)
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_shift_matrix(1, 5)


def test_fit_shift_matrix_recovers_a_known_linear_map():
    # A trajectory x[p + 1] = Q x[p] of a random orthogonal Q: then x[p + k] = Q^k x[p].
    g = _gen(1)
    q_mat, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))  # (D, D)
    rows = [torch.randn(6, generator=g, dtype=torch.float64)]
    for _ in range(59):
        rows.append(q_mat @ rows[-1])
    table = torch.stack(rows)  # (60, D)
    for k in (1, 2, 5):
        expected = torch.linalg.matrix_power(q_mat, k)  # (D, D)
        torch.testing.assert_close(fit_shift_matrix(table, k), expected, atol=1e-8, rtol=0)


def test_fit_shift_matrix_solves_the_normal_equations_on_arbitrary_data():
    table = torch.randn(40, 6, generator=_gen(2), dtype=torch.float64)  # (L, D): no exact map
    k = 3
    fitted = fit_shift_matrix(table, k)  # (D, D)
    x, y = table[:-k], table[k:]  # (L-k, D) each
    residual = y - x @ fitted.T  # (L-k, D)
    zeros = torch.zeros(6, 6, dtype=torch.float64)
    torch.testing.assert_close(x.T @ residual, zeros, atol=1e-9, rtol=0)  # residual ⟂ data


def test_fit_shift_matrix_finds_the_rotation_on_a_well_conditioned_table():
    pe = sinusoidal_encoding(1000, 16, dtype=torch.float64)  # (1000, 16)
    for k in (1, 7, 50):
        torch.testing.assert_close(
            fit_shift_matrix(pe, k), sinusoidal_shift_matrix(k, 16), atol=1e-8, rtol=0
        )


def test_fit_shift_matrix_rejects_too_few_rows():
    with pytest.raises(ValueError, match="rows"):
        fit_shift_matrix(torch.zeros(10, 8), 4)
    with pytest.raises(ValueError, match="k"):
        fit_shift_matrix(torch.zeros(30, 8), 0)


# ------------------------------------------------------------------------------------------
# C14 / C15: the look-back task
# ------------------------------------------------------------------------------------------


@FAST
@given(
    batch=st.integers(1, 6),
    min_len=st.integers(4, 10),
    extra=st.integers(0, 6),
    offset=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_lookback_batch_labels_match_a_loop(batch, min_len, extra, offset, seed):
    tokens, lengths, labels = lookback_batch(
        batch, min_len, min_len + extra, offset=offset, vocab_size=5, generator=_gen(seed)
    )
    assert tokens.shape == (batch, int(lengths.max())) and tokens.dtype == torch.int64
    assert lengths.shape == labels.shape == (batch,)
    for b in range(batch):
        n = int(lengths[b])
        assert min_len <= n <= min_len + extra
        assert int(labels[b]) == int(tokens[b, n - 1 - offset])
        assert tokens[b, n:].eq(0).all()  # padding
        assert 0 <= int(tokens[b].min()) and int(tokens[b].max()) < 5


def test_lookback_batch_is_reproducible_and_uniform():
    a = lookback_batch(4000, 20, 20, generator=_gen(3))
    b = lookback_batch(4000, 20, 20, generator=_gen(3))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    counts = torch.bincount(a[2], minlength=16).double()  # (16,)
    assert counts.min() > 0.8 * 250 and counts.max() < 1.2 * 250  # 4000 / 16 per class


def test_lookback_batch_rejects_impossible_settings():
    with pytest.raises(ValueError, match="min_len"):
        lookback_batch(2, 3, 8, offset=3)  # the answer would be before position 0
    with pytest.raises(ValueError, match="max_len"):
        lookback_batch(2, 8, 6)
    with pytest.raises(TypeError, match="batch_size"):
        lookback_batch(2.0, 8, 9)


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "learned", "rope"])
def test_build_lookback_model(positional):
    model = build_lookback_model(positional, 24, d_model=16, seed=0)
    assert model.positional == positional and model.pooling == "last" and model.max_len == 24
    assert model.head.out_features == model.vocab_size == 16
    if positional == "learned":
        assert model.pos.weight.shape == (24, 16)
        # Same scale as the token embeddings (std 1), not the package default 0.02.
        assert 0.7 < float(model.pos.weight.detach().std()) < 1.3
    again = build_lookback_model(positional, 24, d_model=16, seed=0)
    for p, q in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="positional"):
        build_lookback_model("alibi", 24)


def test_train_lookback_is_deterministic_and_updates_the_model():
    runs = []
    for _ in range(2):
        model = build_lookback_model("rope", 16, d_model=16, seed=1)
        before = [p.detach().clone() for p in model.parameters()]
        losses = train_lookback(model, steps=6, batch_size=8, min_len=5, max_len=9, seed=1).losses
        assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
        assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
        assert not model.training
        runs.append(losses)
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_train_lookback_learns_the_task_with_positions():
    model = build_lookback_model("rope", 12, d_model=16, seed=0)
    losses = train_lookback(
        model, steps=150, batch_size=32, min_len=6, max_len=10, offset=1, lr=1e-2, seed=0
    ).losses
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    assert lookback_accuracy(model, 10, n=256, offset=1) > 0.5  # chance is 1/16


def _loop_accuracy(model, length, n, offset, seed, window=None):
    """One sequence at a time, without any mask: an independent path through the model."""
    tokens, _, labels = lookback_batch(
        n, length, length, offset=offset, vocab_size=model.vocab_size, generator=_gen(seed)
    )
    start = 0 if window is None else length - window
    correct = 0
    with torch.no_grad():
        for b in range(n):
            logits = model(tokens[b : b + 1, start:])  # (1, vocab)
            correct += int(logits.argmax(-1).item() == labels[b].item())
    return correct / n


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
def test_lookback_accuracy_matches_a_per_sequence_loop(positional):
    model = build_lookback_model(positional, 20, d_model=16, seed=2)
    train_lookback(model, steps=5, batch_size=8, min_len=6, max_len=12, seed=2)
    for length in (8, 20):
        got = lookback_accuracy(model, length, n=40, offset=2, seed=5)
        assert got == pytest.approx(_loop_accuracy(model, length, 40, 2, 5))


@pytest.mark.slow
def test_lookback_accuracy_is_none_past_a_learned_table_and_windows_shift_rope():
    learned = build_lookback_model("learned", 16, d_model=16, seed=0)
    assert lookback_accuracy(learned, 16, n=8) is not None
    assert lookback_accuracy(learned, 17, n=8) is None
    with pytest.raises(ValueError, match="max_len"):  # the model itself refuses
        learned(torch.zeros(1, 17, dtype=torch.long))
    # RoPE (and no positions) depend on distances only: a window at the end of a long sequence
    # scores like the window alone.
    for positional in ("rope", "none"):
        model = build_lookback_model(positional, 40, d_model=16, seed=3)
        train_lookback(model, steps=5, batch_size=8, min_len=6, max_len=12, seed=3)
        got = lookback_accuracy(model, 40, n=40, offset=2, seed=6, window=10)
        assert got == pytest.approx(_loop_accuracy(model, 40, 40, 2, 6, window=10))
    with pytest.raises(ValueError, match="window"):
        lookback_accuracy(model, 40, n=4, offset=2, window=2)


@pytest.mark.parametrize("positional", ["none", "rope"])
def test_last_query_attention_matches_a_float64_computation(positional):
    model = build_lookback_model(positional, 12, d_model=16, num_heads=2, seed=4)
    train_lookback(model, steps=3, batch_size=8, min_len=6, max_len=12, seed=4)
    tokens = torch.randint(0, 16, (3, 12), generator=_gen(7))  # (B, L)
    got = last_query_attention(model, tokens)  # (B, H, L)
    assert got.shape == (3, 2, 12)

    layer = model.encoder.layers[0]
    attn = layer.self_attn
    with torch.no_grad():
        h = layer.norm1(model.embed(tokens)).double()  # (B, L, D): pre-LN input of attention

        def heads(proj):
            y = h @ proj.weight.double().T + proj.bias.double()  # (B, L, D)
            return y.view(3, 12, 2, 8).transpose(1, 2)  # (B, H, L, Dh)

        q, k = heads(attn.q_proj), heads(attn.k_proj)
        if positional == "rope":
            q, k = apply_rope(q), apply_rope(k)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)  # (B, H, L, L)
    expected = weights[:, :, -1, :].flip(-1)  # (B, H, L): by distance from the last token
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-4)
    # Sanity of the reference path itself: the same weights give the model's attention output.
    v = heads(attn.v_proj)
    ref_out = naive_attention_float64(q, k, v)  # (B, H, L, Dh)
    torch.testing.assert_close((weights @ v), ref_out)


def test_last_query_attention_rejects_other_models():
    model = build_lookback_model("rope", 12, d_model=16)
    with pytest.raises(ValueError, match="max_len"):
        last_query_attention(model, torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        last_query_attention(model, torch.zeros(13, dtype=torch.long))


def test_lookback_loss_is_the_cross_entropy_of_each_sequence_run_alone():
    model = build_lookback_model("sinusoidal", 16, d_model=16, seed=5)
    batch = lookback_batch(6, 5, 12, offset=2, generator=_gen(8))
    tokens, lengths, labels = batch
    with torch.no_grad():
        got = lookback_loss(model.eval(), batch)
        per_sequence = [
            -torch.log_softmax(model(tokens[b : b + 1, : int(lengths[b])])[0], -1)[labels[b]]
            for b in range(6)
        ]  # one unpadded sequence at a time: no mask needed
    torch.testing.assert_close(got, torch.stack(per_sequence).mean(), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# ALiBiClassifier: ALiBi's bias in every layer, no position vectors
# ------------------------------------------------------------------------------------------


def test_alibi_classifier_adds_the_bias_to_every_layers_scores():
    """Against an independent reference: the encoder run on the embeddings with the bias
    -slope_h * |i - j| written out by hand, plus -inf on padded keys, read at the last token."""
    from book.pages.ch04 import build_alibi_lookback_model

    model = build_alibi_lookback_model(16, num_layers=2, seed=3).eval()
    tokens = torch.randint(0, 16, (3, 7), generator=_gen(1))  # (B, L)
    lengths = torch.tensor([7, 5, 4])  # (B,)
    slopes = torch.tensor([2.0**-4, 2.0**-8])  # (H,): ALiBi's slopes for two heads
    i = torch.arange(7)
    bias = -slopes[:, None, None] * (i[:, None] - i[None, :]).abs()  # (H, L, L)
    padded = i[None, :] >= lengths[:, None]  # (B, L): True = padding
    mask = bias[None] + torch.where(padded, float("-inf"), 0.0)[:, None, None, :]  # (B, H, L, L)
    with torch.no_grad():
        x = model.encoder(model.embed(tokens), mask=mask)  # (B, L, D)
        expected = model.head(x[torch.arange(3), lengths - 1])  # (B, vocab)
        got = model(tokens, lengths=lengths)  # (B, vocab)
    torch.testing.assert_close(got, expected)
    assert model.positional == "alibi" and model.pos is None


def test_alibi_classifier_sees_distances_only():
    """Masking the first tokens out (keep) gives the same answer as removing them: ALiBi's bias
    depends on |i - j| alone, so a window at far positions is the same as a short sequence."""
    from book.pages.ch04 import build_alibi_lookback_model

    model = build_alibi_lookback_model(32, seed=0).eval()
    tokens = torch.randint(0, 16, (4, 20), generator=_gen(2))  # (B, L)
    keep = torch.ones(4, 20, dtype=torch.bool)  # (B, L)
    keep[:, :12] = False
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, keep=keep), model(tokens[:, 12:]))
