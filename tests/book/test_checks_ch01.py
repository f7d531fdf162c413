"""The checks of chapter 1's exercises: a correct answer passes, and each typical mistake fails
with the message that names it."""

from __future__ import annotations

import math

import pytest
import torch

from book.checks import CheckResult, check, results
from tests.book.check_outcomes import fails_with, passes


def test_stub_reads_not_implemented():
    def stub(*args):
        raise NotImplementedError("Exercise 01.1")

    for exercise_id in ("01.1", "01.2", "01.3", "01.4", "01.5"):
        fails_with(exercise_id, stub, "not implemented yet")


# ------------------------------------------------------------------------------------------
# 01.1 path lengths
# ------------------------------------------------------------------------------------------


def test_path_lengths_correct_passes():
    passes("01.1", lambda source, target: (target - source, 1))


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda s, t: (t - s + 1, 1), "off by one"),
        (lambda s, t: (t, 1), "not from the start"),
        (lambda s, t: (1, 1), "that is attention's answer"),
        (lambda s, t: (t - s, t - s), "one step whatever the distance"),
        (lambda s, t: [t - s, 1], "should return a tuple"),
        (lambda s, t: (float(t - s), 1), "should be an int"),
    ],
)
def test_path_lengths_mistakes_are_named(wrong, fragment):
    fails_with("01.1", wrong, fragment)


# ------------------------------------------------------------------------------------------
# 01.2 an RNN unrolled by hand
# ------------------------------------------------------------------------------------------


def make_rnn(*, tanh=True, carry=True, t_ih=False, t_hh=False, recur=True, use_h0=True,
             last_only=False):  # fmt: skip
    def rnn_forward(x, w_ih, w_hh, b, h0=None):
        batch, length, _ = x.shape
        h = torch.zeros(batch, w_hh.shape[0]) if h0 is None or not use_h0 else h0
        h_first, out = h, []
        for t in range(length):
            pre = x[:, t] @ (w_ih if t_ih else w_ih.T) + b
            if recur:
                pre = pre + (h if carry else h_first) @ (w_hh if t_hh else w_hh.T)
            h = torch.tanh(pre) if tanh else pre
            out.append(h)
        return out[-1] if last_only else torch.stack(out, 1)

    return rnn_forward


def test_rnn_forward_correct_passes():
    passes("01.2", make_rnn())


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (dict(tanh=False), "without the tanh"),
        (dict(carry=False), "the previous step's new state"),
        (dict(t_hh=True), "W_hh transposed"),
        (dict(t_ih=True), "W_ih transposed"),  # square case; otherwise a shape error
        (dict(recur=False), "without the recurrent term"),
        (dict(use_h0=False), "start from h0"),
        (dict(last_only=True), "only the last state"),
    ],
)
def test_rnn_forward_mistakes_are_named(wrong, fragment):
    fails_with("01.2", make_rnn(**wrong), fragment)


def test_rnn_forward_crash_is_reported_with_the_line():
    def rnn_forward(x, w_ih, w_hh, b, h0=None):
        return torch.cat([x, w_ih])  # 3-D with 2-D: torch refuses

    fails_with("01.2", rnn_forward, "your code raised RuntimeError")


# ------------------------------------------------------------------------------------------
# 01.3 gradient through a linear recurrence
# ------------------------------------------------------------------------------------------


def test_linear_rnn_gradient_correct_passes():
    passes("01.3", lambda lam, d: lam**d)
    passes("01.3", lambda lam, d: torch.tensor(lam, dtype=torch.float64) ** d)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda lam, d: lam * d, "multiplies once per step"),
        (lambda lam, d: lam ** (d + 1), "at distance 0 the gradient is 1"),
        (lambda lam, d: abs(lam) ** d, "the sign"),
        (lambda lam, d: math.exp(-d), "unroll"),
        (lambda lam, d: "small", "should be a number"),
    ],
)
def test_linear_rnn_gradient_mistakes_are_named(wrong, fragment):
    fails_with("01.3", wrong, fragment)


# ------------------------------------------------------------------------------------------
# 01.4 how far a gradient survives
# ------------------------------------------------------------------------------------------


def _multiply_without_abs(lam, threshold):
    d, factor = 0, 1.0
    while factor >= threshold:
        factor *= lam
        d += 1
    return d


def test_steps_until_below_correct_passes():
    passes("01.4", lambda lam, th: math.floor(math.log(th) / math.log(abs(lam))) + 1)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda lam, th: math.floor(math.log(th) / math.log(abs(lam))), "one step short"),
        (lambda lam, th: 2 * math.ceil(math.log(th) / math.log(abs(lam))), "smallest d"),
        (lambda lam, th: math.log(th) / math.log(lam), "should be an int"),
        # math.ceil passes every case where the ratio is not a whole number (0.5³ = 0.125)
        (lambda lam, th: math.ceil(math.log(th) / math.log(abs(lam))), "math.ceil is one short"),
        # a factor that is negative: the sign flips every step, the size shrinks by |λ|
        (
            lambda lam, th: math.floor(math.log(th) / math.log(lam)) + 1 if lam > 0 else 0,
            "λ may be negative",
        ),
        (_multiply_without_abs, "λ may be negative"),
    ],
)
def test_steps_until_below_mistakes_are_named(wrong, fragment):
    fails_with("01.4", wrong, fragment)


# ------------------------------------------------------------------------------------------
# 01.5 cross-attention
# ------------------------------------------------------------------------------------------


def make_cross(*, kv_from="encoder", q_from="decoder", scale=True, dim=-1):
    def cross_attention(decoder_x, encoder_x, w_q, w_k, w_v):
        src = {"encoder": encoder_x, "decoder": decoder_x}
        q = src[q_from] @ w_q
        k, v = src[kv_from] @ w_k, src[kv_from] @ w_v
        scores = q @ k.transpose(-2, -1)
        if scale:
            scores = scores / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=dim) @ v

    return cross_attention


def test_cross_attention_correct_passes():
    passes("01.5", make_cross())


def test_cross_attention_with_the_package_passes():
    from attention.functional import scaled_dot_product_attention

    def cross_attention(decoder_x, encoder_x, w_q, w_k, w_v):
        q = (decoder_x @ w_q)[:, None]
        k, v = (encoder_x @ w_k)[:, None], (encoder_x @ w_v)[:, None]
        return scaled_dot_product_attention(q, k, v)[:, 0]

    passes("01.5", cross_attention)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (dict(kv_from="decoder"), "self-attention on the decoder"),
        (dict(q_from="encoder", kv_from="decoder"), "one row per encoder position"),
        (dict(scale=False), "without the scale"),
        (dict(dim=-2), "softmax over the decoder positions"),
    ],
)
def test_cross_attention_mistakes_are_named(wrong, fragment):
    fails_with("01.5", make_cross(**wrong), fragment)


# ------------------------------------------------------------------------------------------
# 01.6 predict, then run: C1 with forget-gate bias +5
# ------------------------------------------------------------------------------------------


def _c1_outcome(verdict: str, eased: str):
    from book.sceptic import Outcome

    return Outcome(verdict, {"eased": eased, "far/near (RNN, GRU, LSTM, eased, attention)": "…"})


def _graded(prediction: str, run) -> CheckResult:
    check("01.6", lambda: prediction, outcome=run)
    return results()[-1]


def test_forget_bias_prediction_right_passes():
    run = _c1_outcome("partly", "LSTM, forget bias +5")
    assert _graded("partly", run).passed


def test_forget_bias_prediction_wrong_fails_with_the_reason():
    result = _graded("reproduced", _c1_outcome("partly", "LSTM, forget bias +5"))
    assert not result.passed
    assert "the run gives 'partly'" in result.message
    assert "'does not cure' fails" in result.message


def test_forget_bias_prediction_on_the_unchanged_baseline_fails():
    result = _graded("reproduced", _c1_outcome("reproduced", "LSTM, forget bias +3"))
    assert not result.passed
    assert "not the LSTM with forget bias +5" in result.message


def test_forget_bias_exercise_on_a_real_run():
    from book.claims.ch01 import c1_sweep_run

    run = c1_sweep_run(seed=0, seq_len=200, forget_bias=5.0, eased="lstm")
    assert _graded(run.verdict, run).passed
    wrong = next(v for v in ("reproduced", "partly", "not reproduced") if v != run.verdict)
    assert not _graded(wrong, run).passed
