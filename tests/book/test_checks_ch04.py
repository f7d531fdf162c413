"""The checks of chapter 4's exercises: a correct answer passes, and each typical mistake fails
with the message that names it."""

from __future__ import annotations

import math

import pytest
import torch

from tests.book.check_outcomes import fails_with, passes

# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# 04.1 the sinusoidal table (written independently of attention.positional)
# ------------------------------------------------------------------------------------------


def make_table(*, layout="interleaved", swap=False, exponent="2i", multiply=False, transpose=False):
    def sinusoidal_table(max_len, d_model, base=10000.0):
        rows = []
        for pos in range(max_len):
            row = [0.0] * d_model
            for i in range(d_model // 2):
                e_sin = {"2i": 2 * i, "i": i, "channel": 2 * i}[exponent]
                e_cos = {"2i": 2 * i, "i": i, "channel": 2 * i + 1}[exponent]
                div_s, div_c = base ** (e_sin / d_model), base ** (e_cos / d_model)
                a_s = pos * div_s if multiply else pos / div_s
                a_c = pos * div_c if multiply else pos / div_c
                s, c = math.sin(a_s), math.cos(a_c)
                if swap:
                    s, c = math.cos(a_s), math.sin(a_c)
                if layout == "interleaved":
                    row[2 * i], row[2 * i + 1] = s, c
                else:
                    row[i], row[d_model // 2 + i] = s, c
            rows.append(row)
        table = torch.tensor(rows)
        return table.T if transpose else table

    return sinusoidal_table


def test_table_correct_passes():
    passes("04.1", make_table())


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (dict(swap=True), "swapped"),
        (dict(layout="concat"), "all sines first"),
        (dict(exponent="channel"), "share the exponent 2i/d_model"),
        (dict(exponent="i"), "not i/d_model"),
        (dict(multiply=True), "multiplied by base^(2i/d)"),
        (dict(transpose=True), "rows are positions"),
    ],
)
def test_table_typical_mistakes_are_named(wrong, fragment):
    fails_with("04.1", make_table(**wrong), fragment)


def test_table_ignoring_base_and_other_errors():
    correct = make_table()
    fails_with("04.1", lambda max_len, d_model, base=10000.0: correct(max_len, d_model), "base")
    fails_with("04.1", lambda max_len, d_model, base=10000.0: [[0.0]], "torch.Tensor")
    fails_with(
        "04.1", lambda max_len, d_model, base=10000.0: correct(max_len, d_model + 2), "shape"
    )
    noisy = lambda max_len, d_model, base=10000.0: correct(max_len, d_model, base) + 0.01  # noqa: E731
    fails_with("04.1", noisy, "off by")


# ------------------------------------------------------------------------------------------
# 04.2 the wavelength
# ------------------------------------------------------------------------------------------


def test_wavelength_correct_passes():
    passes("04.2", lambda i, d_model, base=10000.0: 2 * math.pi * base ** (2 * i / d_model))


@pytest.mark.parametrize(
    ("formula", "fragment"),
    [
        (lambda i, d, b=10000.0: b ** (2 * i / d), "multiply by 2π"),
        (lambda i, d, b=10000.0: b ** (-2 * i / d), "angular frequency"),
        (lambda i, d, b=10000.0: 2 * math.pi * b ** (i / d), "exponent is 2i/d_model"),
        (lambda i, d, b=10000.0: 2 * math.pi * b ** ((2 * i + 1) / d), "cos channel"),
        (lambda i, d, b=10000.0: math.pi * b ** (2 * i / d), "not π"),
        (lambda i, d, b=10000.0: 2 * math.pi * 10000.0 ** (2 * i / d), "expected"),
    ],
)
def test_wavelength_typical_mistakes_are_named(formula, fragment):
    fails_with("04.2", formula, fragment)


def test_wavelength_must_be_a_number():
    fails_with("04.2", lambda i, d, b=10000.0: "6.28", "should be a number")


# ------------------------------------------------------------------------------------------
# 04.3 the shift matrix
# ------------------------------------------------------------------------------------------


def reference_shift(k, d_model):
    """Built entry by entry from the angle-addition formulas (a loop, not the package)."""
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 10000.0 ** (-2 * i / d_model)
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = c, s
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -s, c
    return m


def test_shift_correct_passes():
    passes("04.3", reference_shift)
    passes("04.3", lambda k, d: reference_shift(k, d).float())  # float32 is fine


def test_shift_typical_mistakes_are_named():
    fails_with("04.3", lambda k, d: reference_shift(k, d).T, "shifts by -1", "transpose")
    fails_with("04.3", lambda k, d: torch.eye(d), "diagonal should hold cos")
    fails_with("04.3", lambda k, d: reference_shift(k, d)[:, : d // 2], "shape")

    def wrong_sign(k, d):  # rotation by +kω on both rows: an off-diagonal sign error
        m = reference_shift(k, d)
        return m.abs() * torch.sign(torch.eye(d) + 1)

    fails_with("04.3", wrong_sign, "2x2 rotation")


# ------------------------------------------------------------------------------------------
# 04.4 RoPE, rotate-half (written independently, with complex numbers)
# ------------------------------------------------------------------------------------------


def make_rope(*, pairing="half", sign=1.0, start=0, exponent="2i", scale=1.0):
    def rope_rotate_half(x):
        seq, dh = x.shape[-2], x.shape[-1]
        half = dh // 2
        e = torch.arange(half, dtype=torch.float64) * (2 if exponent == "2i" else 1)
        theta = 10000.0 ** (-e / dh)  # (Dh/2,)
        pos = torch.arange(start, start + seq, dtype=torch.float64)
        turn = torch.polar(torch.ones(seq, half, dtype=torch.float64), sign * pos[:, None] * theta)
        xd = x.double()
        if pairing == "half":
            z = torch.complex(xd[..., :half], xd[..., half:]) * turn
            out = torch.cat((z.real, z.imag), dim=-1)
        else:
            z = torch.complex(xd[..., 0::2], xd[..., 1::2]) * turn
            out = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
        return (scale * out).to(x.dtype)

    return rope_rotate_half


def test_rope_correct_passes():
    passes("04.4", make_rope())


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (dict(pairing="interleaved"), "interleaved convention"),
        (dict(sign=-1.0), "rotates the wrong way"),
        (dict(start=1), "positions start at 1"),
        (dict(exponent="i"), "frequencies are off"),
        (dict(scale=1.5), "changes the length"),
    ],
)
def test_rope_typical_mistakes_are_named(wrong, fragment):
    fails_with("04.4", make_rope(**wrong), fragment)


def test_rope_shape_and_crash_are_reported():
    fails_with("04.4", lambda x: x[..., :4], "shape")
    fails_with("04.4", lambda x: x.int(), "floating-point")

    def crashes(x):
        return x @ torch.ones(3, 3)

    fails_with("04.4", crashes, "RuntimeError")


# ------------------------------------------------------------------------------------------
# 04.5 BERT's position parameters
# ------------------------------------------------------------------------------------------


def test_bert_correct_passes():
    passes("04.5", lambda: 512 * 768)
    passes("04.5", lambda: 393216.0)  # a whole float is accepted


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (512, "number of positions"),
        (768, "one position's vector"),
        (512 * 768 * 12, "not once per layer"),
        (0, "learns"),
        (514 * 768, "segment"),
        (512 * 64, "not one head's 64"),
        (12345, "one vector of d_model = 768"),
        ("393216", "should return an int"),
    ],
)
def test_bert_typical_mistakes_are_named(answer, fragment):
    fails_with("04.5", lambda: answer, fragment)


def test_not_implemented_reads_as_such():
    def stub(*args):
        raise NotImplementedError("Exercise 04.1")

    for exercise_id in ("04.1", "04.2", "04.3", "04.4", "04.5"):
        fails_with(exercise_id, stub, "not implemented yet")


# ------------------------------------------------------------------------------------------
# 04.6 predict, then run: C14 with a bigger model
# ------------------------------------------------------------------------------------------


def _check_prediction(predicted: str, outcome) -> None:
    from book.checks import exercises_for_chapter

    (exercise,) = [ex for ex in exercises_for_chapter("04") if ex.id == "04.6"]
    exercise.check(lambda: predicted, outcome=outcome)


def _c14_outcome(verdict: str, model: str = "2 layer(s), d_model 64, 400 steps, seeds [0]"):
    from book.sceptic import Outcome

    return Outcome(verdict, {"model": model, "mean accuracy at 32/48/64/96/128 tokens": "…"})


def test_prediction_right_passes():
    _check_prediction("reproduced", _c14_outcome("reproduced"))


@pytest.mark.parametrize("wrong", ["partly", "not reproduced"])
def test_prediction_wrong_fails_with_the_explanation(wrong):
    from book.checks import CheckFailed

    with pytest.raises(CheckFailed, match=r"you predicted .*absolute positions"):
        _check_prediction(wrong, _c14_outcome("reproduced"))


def test_prediction_on_the_chapters_small_model_fails():
    from book.checks import CheckFailed

    small = _c14_outcome("reproduced", model="1 layer(s), d_model 32, 400 steps, seeds [0]")
    with pytest.raises(CheckFailed, match="changes the model"):
        _check_prediction("reproduced", small)
