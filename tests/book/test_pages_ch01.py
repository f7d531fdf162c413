"""The definitions on chapter 1's page (book.pages.ch01) against independent references:
per-row loops over the task's batches, torch's fused nn.LSTM for the unrolled loop and the
classifier, torch's own modules for the section 1.2 models, a hand-made geometric profile for
the decay summary, and an explicit loop for the identity-initialised RNN."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from book.experiments.gradients import GradientProfile, sequential_depth
from book.pages.ch01 import (
    LSTMClassifier,
    identity_rnn,
    linear_scan_rounds,
    outputs_of,
    rate_and_ratio,
    recurrent_models,
    signal_batch,
    unrolled_lstm,
)

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# signal_batch
# ------------------------------------------------------------------------------------------


@FAST
@given(
    batch=st.integers(1, 6),
    seq_len=st.integers(1, 40),
    n_classes=st.integers(1, 5),
    n_distractors=st.integers(1, 6),
    data=st.data(),
)
def test_signal_batch_places_the_label_token_in_the_window(
    batch, seq_len, n_classes, n_distractors, data
):
    start = data.draw(st.integers(-seq_len, seq_len - 1))
    first = start % seq_len
    stop = data.draw(st.integers(first + 1, seq_len))
    n_copies = data.draw(st.integers(1, stop - first))
    tokens, labels = signal_batch(
        batch,
        seq_len,
        n_classes=n_classes,
        n_distractors=n_distractors,
        signal_positions=(start, stop),
        n_copies=n_copies,
        generator=_gen(seq_len),
    )
    assert tokens.shape == (batch, seq_len) and labels.shape == (batch,)
    assert tokens.dtype == labels.dtype == torch.int64
    for row, label in zip(tokens.tolist(), labels.tolist(), strict=True):
        assert 0 <= label < n_classes
        signal_at = [j for j, tok in enumerate(row) if tok < n_classes]
        assert len(signal_at) == n_copies  # distinct positions, nothing outside the window
        assert all(first <= j < stop for j in signal_at)
        assert all(row[j] == label for j in signal_at)
        assert all(n_classes <= tok < n_classes + n_distractors for tok in row if tok >= n_classes)


def test_signal_batch_is_reproducible_and_covers_every_class_and_position():
    a = signal_batch(2000, 30, signal_positions=(-5, 30), generator=_gen(1))
    b = signal_batch(2000, 30, signal_positions=(-5, 30), generator=_gen(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    tokens, labels = a
    assert set(labels.tolist()) == {0, 1, 2, 3}
    where = (tokens < 4).float().argmax(1)  # one copy: its position
    assert set(where.tolist()) == {25, 26, 27, 28, 29}


def test_signal_batch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="signal_positions"):
        signal_batch(2, 10, signal_positions=(5, 5))
    with pytest.raises(ValueError, match="signal_positions"):
        signal_batch(2, 10, signal_positions=(0, 11))
    with pytest.raises(TypeError, match="signal_positions"):
        signal_batch(2, 10, signal_positions=[0, 5])
    with pytest.raises(ValueError, match="n_copies must be <="):
        signal_batch(2, 10, signal_positions=(0, 3), n_copies=4)
    with pytest.raises(ValueError, match="batch_size"):
        signal_batch(0, 10)
    with pytest.raises(TypeError, match="seq_len"):
        signal_batch(2, 10.0)


# ------------------------------------------------------------------------------------------
# unrolled_lstm and LSTMClassifier
# ------------------------------------------------------------------------------------------


def _lstm_with_cell_weights(cell: nn.LSTMCell) -> nn.LSTM:
    lstm = nn.LSTM(cell.input_size, cell.hidden_size, batch_first=True).to(cell.weight_ih.dtype)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(cell.weight_ih)
        lstm.weight_hh_l0.copy_(cell.weight_hh)
        lstm.bias_ih_l0.copy_(cell.bias_ih)
        lstm.bias_hh_l0.copy_(cell.bias_hh)
    return lstm


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), length=st.integers(1, 8), dim=st.integers(1, 4))
def test_unrolled_lstm_equals_torch_lstm(batch, length, dim):
    torch.manual_seed(length)
    cell = nn.LSTMCell(dim, 6).double()
    lstm = _lstm_with_cell_weights(cell)
    x = torch.randn(batch, length, dim, dtype=torch.float64, generator=_gen(dim))
    want, _ = lstm(x)  # (B, L, 6)
    torch.testing.assert_close(unrolled_lstm(cell, x), want, rtol=1e-12, atol=1e-12)
    # One leaf per step gives the same numbers.
    torch.testing.assert_close(unrolled_lstm(cell, list(x.unbind(1))), want, rtol=1e-12, atol=1e-12)
    # An initial state is used.
    h0 = torch.randn(batch, 6, dtype=torch.float64, generator=_gen(1))
    c0 = torch.randn(batch, 6, dtype=torch.float64, generator=_gen(2))
    want, (h_n, c_n) = lstm(x, (h0[None], c0[None]))
    torch.testing.assert_close(unrolled_lstm(cell, x, (h0, c0)), want, rtol=1e-12, atol=1e-12)
    got, (h, c) = unrolled_lstm(cell, x, (h0, c0), return_state=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close((h, c), (h_n[0], c_n[0]), rtol=1e-12, atol=1e-12)


def test_unrolled_lstm_output_depends_on_the_past_only():
    """Output t of the loop has a non-zero gradient from every input j <= t, none from j > t."""
    from book.experiments.gradients import gradient_vs_distance

    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 4).double()
    x = torch.randn(1, 6, 3, dtype=torch.float64, generator=_gen())
    profile = gradient_vs_distance(lambda z: unrolled_lstm(cell, z), x, position=3)
    assert (profile.norms[:4] > 0).all() and (profile.norms[4:] == 0).all()


def test_unrolled_lstm_rejects_bad_inputs():
    cell = nn.LSTMCell(3, 4)
    with pytest.raises(TypeError, match="cell must be a torch.nn.LSTMCell"):
        unrolled_lstm(nn.LSTM(3, 4), torch.randn(1, 2, 3))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        unrolled_lstm(cell, torch.randn(2, 3))
    with pytest.raises(ValueError, match="empty"):
        unrolled_lstm(cell, [])
    with pytest.raises(ValueError, match=r"x\[1\] must have 2 dimensions"):
        unrolled_lstm(cell, [torch.randn(1, 3), torch.randn(1, 1, 3)])


@pytest.mark.parametrize("num_layers", [1, 2])
def test_lstm_classifier_reads_the_last_state_of_the_top_layer(num_layers):
    torch.manual_seed(0)
    model = LSTMClassifier(10, 3, 4, 5, num_layers).double()
    tokens = torch.randint(0, 10, (2, 7), generator=_gen())
    outputs, _ = model.lstm(model.embed(tokens))  # (B, L, hidden): the top layer, every step
    want = model.head(outputs[:, -1])  # (B, 3)
    torch.testing.assert_close(model(tokens), want, rtol=1e-12, atol=1e-12)


def test_lstm_classifier_rejects_bad_tokens():
    model = LSTMClassifier(10, 3, 4, 5)
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.randn(2, 7))
    with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
        model(torch.zeros(7, dtype=torch.long))


def test_forget_bias_raises_the_forget_gate_in_every_layer_only():
    torch.manual_seed(0)
    plain = LSTMClassifier(10, 4, 5, 6, num_layers=2)
    torch.manual_seed(0)
    raised = LSTMClassifier(10, 4, 5, 6, num_layers=2, forget_bias=5.0)
    for layer in range(2):
        diff = getattr(raised.lstm, f"bias_ih_l{layer}") - getattr(plain.lstm, f"bias_ih_l{layer}")
        want = torch.zeros(24)
        want[6:12] = 5.0  # gates (input, forget, cell, output): the second block
        torch.testing.assert_close(diff.detach(), want)
    with pytest.raises(TypeError, match="forget_bias must be a number"):
        LSTMClassifier(10, 4, 5, 6, forget_bias="5")


# ------------------------------------------------------------------------------------------
# Section 1.2's models and the decay summary
# ------------------------------------------------------------------------------------------


def test_recurrent_models_are_torchs_modules_drawn_in_order_with_one_gate_opened():
    torch.manual_seed(3)
    models = recurrent_models(5, forget_bias=3.0)
    torch.manual_seed(3)  # the same draws, written out
    want = [nn.RNN(5, 5, batch_first=True), nn.GRU(5, 5, batch_first=True)]
    want += [nn.LSTM(5, 5, batch_first=True), nn.LSTM(5, 5, batch_first=True)]
    assert list(models) == ["RNN (tanh)", "GRU", "LSTM", "LSTM, forget bias +3"]
    for (name, got), ref in zip(models.items(), want, strict=True):
        assert type(got) is type(ref) and got.batch_first
        for (key, a), b in zip(got.state_dict().items(), ref.state_dict().values(), strict=True):
            delta = torch.zeros_like(b)
            if name.startswith("LSTM, forget") and key == "bias_ih_l0":
                delta[5:10] = 3.0  # gates (input, forget, cell, output): the second block
            torch.testing.assert_close(a, b + delta)
    assert "LSTM, forget bias +5" in recurrent_models(5, forget_bias=5.0)
    with pytest.raises(ValueError, match="width"):
        recurrent_models(0, forget_bias=3.0)


def test_outputs_of_drops_the_final_state():
    torch.manual_seed(0)
    rnn = nn.GRU(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3, generator=_gen())
    torch.testing.assert_close(outputs_of(rnn)(x), rnn(x)[0])


def test_identity_rnn_carries_its_state_unchanged():
    torch.manual_seed(0)
    rnn = identity_rnn(4).double()
    x = torch.randn(2, 6, 4, dtype=torch.float64, generator=_gen())
    w = rnn.weight_ih_l0.detach()  # (H, D): the only drawn weight
    h = torch.zeros(2, 4, dtype=torch.float64)
    want = []
    for t in range(6):  # h_t = relu(x_t W_ihᵀ + h_(t-1)): identity recurrence, no bias
        h = torch.relu(x[:, t] @ w.T + h)
        want.append(h)
    torch.testing.assert_close(rnn(x)[0], torch.stack(want, 1))


def _profile(norms: list[float]) -> GradientProfile:
    """A profile read out at the last of len(norms) positions; norms indexed by distance."""
    by_position = torch.tensor(norms[::-1], dtype=torch.float64)  # position j = L - 1 - d
    n = len(norms)
    return GradientProfile(n - 1, n - 1 - torch.arange(n), by_position, by_position[None])


def test_rate_and_ratio_of_a_geometric_decay():
    r, n = 0.9, 40
    profile = _profile([r**d for d in range(n)])
    rate, ratio = rate_and_ratio(profile, near=(1, 4), far=10, fit=(1, 20))
    assert rate == pytest.approx(r, rel=1e-9)
    near = sum(r**d for d in range(1, 5)) / 4
    far = sum(r**d for d in range(30, 40)) / 10  # the last 10 distances
    assert ratio == pytest.approx(far / near, rel=1e-9)
    # A flat profile: factor 1, ratio 1.
    assert rate_and_ratio(_profile([2.0] * n), near=(1, 4), far=10, fit=(1, 20)) == (
        pytest.approx(1.0),
        pytest.approx(1.0),
    )


# ------------------------------------------------------------------------------------------
# The linear recurrence by parallel scan (section 1.3)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seq_len", [1, 2, 5, 8, 13])
def test_linear_scan_equals_the_sequential_loop(seq_len):
    decay = torch.linspace(0.5, 1.0, 3, dtype=torch.float64)  # (D,)
    x = torch.randn(2, seq_len, 3, dtype=torch.float64, generator=_gen(seq_len))
    h, want = torch.zeros(2, 3, dtype=torch.float64), []
    for t in range(seq_len):  # h_t = a ⊙ h_(t-1) + x_t
        h = decay * h + x[:, t]
        want.append(h)
    rounds = linear_scan_rounds(decay, seq_len)(x)
    assert len(rounds) == max(1, math.ceil(math.log2(seq_len)))
    torch.testing.assert_close(rounds[-1], torch.stack(want, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("n", "depth"), [(8, 3), (16, 4), (32, 5), (64, 6)])
def test_linear_scan_depth_is_log2_n(n, depth):
    decay = torch.full((4,), 0.9, dtype=torch.float64)
    x = torch.randn(1, n, 4, dtype=torch.float64, generator=_gen(n))
    assert sequential_depth(linear_scan_rounds(decay, n), x, generator=_gen()) == depth


def test_linear_scan_rejects_a_bad_length():
    with pytest.raises(ValueError, match="seq_len"):
        linear_scan_rounds(torch.ones(2), 0)
