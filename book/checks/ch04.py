"""Checks of chapter 4's exercises: the sinusoidal table, the wavelength of a channel pair, the
shift matrix M_k, RoPE's rotate-half rotation, and the size of BERT's position table.

Each check compares the learner's answer with the package (``attention.positional``) or with a
property that any correct answer must have (``PE[p + k] = M_k @ PE[p]`` on a real table), and,
when it is wrong, tries the usual mistakes one by one so that the message can name the cause.
"""

from __future__ import annotations

import math
import numbers

import torch

from attention.positional import apply_rope, sinusoidal_encoding

from . import CheckFailed, expect_close, expect_shape, randn, register
from .helpers import check_formula, expect_tensor, matches

Tensor = torch.Tensor


def _pair_angles(n_pos: int, dim: int, base: float, *, exponent: str = "2i") -> Tensor:
    """``pos · base^(-e / dim)`` ``(n_pos, dim/2)``, float64, for the exponents learners use."""
    pos = torch.arange(n_pos, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    i = torch.arange(dim // 2, dtype=torch.float64)  # (dim/2,)
    e = {"2i": 2 * i, "i": i}[exponent]
    return pos * base ** (-e / dim)  # (L, dim/2)


# ------------------------------------------------------------------------------------------
# 04.1 the sinusoidal table
# ------------------------------------------------------------------------------------------


def _table_variants(max_len: int, d_model: int, base: float) -> dict[str, Tensor]:
    """Tables built with the usual mistakes, keyed by the hint that explains each."""
    angles = _pair_angles(max_len, d_model, base)  # (L, D/2)
    sin, cos = torch.sin(angles), torch.cos(angles)  # (L, D/2) each

    def interleave(even: Tensor, odd: Tensor) -> Tensor:
        return torch.stack((even, odd), dim=-1).flatten(-2)  # (L, D)

    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    channel = torch.arange(d_model, dtype=torch.float64)  # (D,)
    per_channel = pos * base ** (-channel / d_model)  # (L, D): exponent = channel index
    half = torch.sin(_pair_angles(max_len, d_model, base, exponent="i"))  # (L, D/2)
    half_cos = torch.cos(_pair_angles(max_len, d_model, base, exponent="i"))
    times = pos * base ** (2 * torch.arange(d_model // 2, dtype=torch.float64) / d_model)
    return {
        "the sines and cosines are swapped: channel 2i holds sin, channel 2i+1 cos": interleave(
            cos, sin
        ),
        "it matches all sines first, then all cosines: interleave them, channel 2i = sin and "
        "channel 2i+1 = cos of the same angle": torch.cat((sin, cos), dim=-1),
        "the cos channels have their own frequency: both channels of pair i share the "
        "exponent 2i/d_model (use the pair's 2i for channel 2i+1 too, not 2i+1)": torch.where(
            channel.long() % 2 == 0, torch.sin(per_channel), torch.cos(per_channel)
        ),
        "the frequencies fall too slowly: the exponent is 2i/d_model with i the pair index "
        "(i = channel // 2), not i/d_model": interleave(half, half_cos),
        "the positions are multiplied by base^(2i/d) instead of divided by it: the angle is "
        "pos / base^(2i/d_model)": interleave(torch.sin(times), torch.cos(times)),
    }


@register("04.1", title="The sinusoidal table")
def _check_table(candidate) -> None:
    for max_len, d_model, base in ((50, 16, None), (7, 6, None), (30, 8, 100.0)):
        call = f"sinusoidal_table({max_len}, {d_model}{'' if base is None else f', base={base}'})"
        got = candidate(max_len, d_model) if base is None else candidate(max_len, d_model, base)
        got = expect_tensor(call, got, floating=True)
        if got.shape == (d_model, max_len):
            raise CheckFailed(
                f"{call} has shape {tuple(got.shape)}: rows are positions and columns channels, "
                f"expected ({max_len}, {d_model})"
            )
        expect_shape(call, got, (max_len, d_model), hint="(max_len, d_model)")
        base = 10000.0 if base is None else base
        expected = sinusoidal_encoding(max_len, d_model, base=base, dtype=torch.float64)
        if matches(got, expected):
            continue
        for hint, wrong in _table_variants(max_len, d_model, base).items():
            if matches(got, wrong):
                raise CheckFailed(f"{call}: {hint}")
        if base != 10000.0 and matches(got, sinusoidal_encoding(max_len, d_model)):
            raise CheckFailed(f"{call}: it ignores base (it used 10000)")
        expect_close(
            call,
            got,
            expected,
            hint="PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(same angle)",
        )


# ------------------------------------------------------------------------------------------
# 04.2 and 04.5: numbers
# ------------------------------------------------------------------------------------------


@register("04.2", title="The wavelength of a channel pair")
def _check_wavelength(candidate) -> None:
    cases = [
        dict(i=i, d_model=d, base=b)
        for i, d, b in ((0, 64, 10000.0), (1, 64, 10000.0), (10, 64, 10000.0), (31, 64, 10000.0),
                        (3, 512, 10000.0), (2, 12, 64.0))
    ]  # fmt: skip
    tau = 2 * math.pi
    mistakes = [
        (lambda i, d, b: b ** (2 * i / d), "that is 1/ω, the positions per *radian*: a full turn "
         "is 2π radians, so multiply by 2π"),
        (lambda i, d, b: b ** (-2 * i / d), "that is the angular frequency ω_i, in radians per "
         "position; the wavelength is 2π / ω_i"),
        (lambda i, d, b: b ** (-2 * i / d) / tau, "that is the frequency in turns per position; "
         "the wavelength is its inverse"),
        (lambda i, d, b: tau * b ** (i / d), "the exponent is 2i/d_model: pair i holds channels "
         "2i and 2i+1"),
        (lambda i, d, b: tau * b ** ((2 * i + 1) / d), "pair i turns at base^(-2i/d); 2i+1 is the "
         "index of its cos channel, not of its frequency"),
        (lambda i, d, b: math.pi * b ** (2 * i / d), "a wave repeats after 2π radians, not π (π "
         "is the distance between two zero crossings)"),
    ]  # fmt: skip
    check_formula(
        candidate,
        "wavelength",
        cases,
        lambda i, d, b: tau * b ** (2 * i / d),
        mistakes,
        "pair i turns by ω_i = base^(-2i/d_model) radians per position; one full turn is 2π",
    )


@register("04.5", title="The position parameters of BERT-base")
def _check_bert(candidate) -> None:
    got = candidate()
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        if isinstance(got, numbers.Real) and float(got).is_integer():
            got = int(got)
        else:
            raise CheckFailed(
                f"bert_position_parameters() should return an int, got {type(got).__name__} "
                f"({got!r})"
            )
    expected = 512 * 768
    if got == expected:
        return
    hints = {
        512: "that is the number of positions; each one has its own vector of d_model = 768 "
        "numbers",
        768: "that is one position's vector; BERT-base has a row for each of its 512 positions",
        512 * 768 * 12: "the table is used once, added to the input embeddings, not once per layer",
        0: "BERT *learns* its position vectors (a sinusoidal table or RoPE would have 0)",
        (512 + 2) * 768: "count only the position table (max_len × d_model), not the two "
        "segment (token-type) vectors",
        512 * 64: "d_model is the full width, 768, not one head's 64",
    }
    hint = hints.get(got, "one vector of d_model = 768 numbers for each of max_len = 512 positions")
    raise CheckFailed(f"bert_position_parameters() is {got}, expected {expected}: {hint}")


# ------------------------------------------------------------------------------------------
# 04.3 the shift matrix M_k
# ------------------------------------------------------------------------------------------


@register("04.3", title="The shift matrix M_k")
def _check_shift(candidate) -> None:
    for k, d_model in ((1, 4), (3, 8), (10, 8)):
        call = f"shift_matrix({k}, {d_model})"
        got = expect_tensor(call, candidate(k, d_model), floating=True)
        expect_shape(call, got, (d_model, d_model), hint="(d_model, d_model)")
        m = got.detach().double()  # (D, D)
        pe = sinusoidal_encoding(300, d_model, dtype=torch.float64)  # (300, D): rows = positions
        shifted = pe[:-k] @ m.T  # (L-k, D): M @ PE[p] for every p
        error = float((shifted - pe[k:]).abs().max())
        if error < 1e-5:
            continue
        if float((pe[k:] @ m.T - pe[:-k]).abs().max()) < 1e-5:
            raise CheckFailed(
                f"{call} shifts by -{k}, not +{k}: it is the transpose (the inverse) of M_k. "
                f"With column vectors, PE[p+k] = M_k @ PE[p]; the sin row of block i is "
                f"[cos kω, sin kω] and the cos row [-sin kω, cos kω]"
            )
        if float((pe[:-k] @ m - pe[k:]).abs().max()) < 1e-5:
            raise CheckFailed(
                f"{call} works on row vectors (PE[p] @ M) but not as M @ PE[p]: return its "
                f"transpose, so that PE[p+k] = M_k @ PE[p]"
            )
        angles = _pair_angles(k + 1, d_model, 10000.0)[k]  # (D/2,): k·ω_i
        if float((torch.diagonal(m)[0::2] - torch.cos(angles)).abs().max()) > 1e-5:
            raise CheckFailed(
                f"{call} does not move PE[p] to PE[p+{k}] (largest error {error:.3g}); its "
                f"diagonal should hold cos(k·ω_i) with ω_i = 10000^(-2i/d_model) for pair i, "
                f"in both channels of the pair"
            )
        raise CheckFailed(
            f"{call} does not move PE[p] to PE[p+{k}] (largest error {error:.3g}): block i is "
            f"the 2x2 rotation [[cos kω_i, sin kω_i], [-sin kω_i, cos kω_i]] on channels "
            f"(2i, 2i+1), zeros elsewhere"
        )


# ------------------------------------------------------------------------------------------
# 04.4 RoPE, rotate-half
# ------------------------------------------------------------------------------------------


def _rope_variants(x: Tensor) -> dict[str, Tensor]:
    """RoPE with the usual mistakes, keyed by the hint that explains each."""
    seq, dh = x.shape[-2], x.shape[-1]
    return {
        "it matches the interleaved convention, pairs (2i, 2i+1); rotate-half pairs channel i "
        "with channel i + Dh/2": apply_rope(x, interleaved=True),
        "it rotates the wrong way: with x1 = x[..., :Dh/2] and x2 = x[..., Dh/2:], "
        "y1 = x1·cos − x2·sin and y2 = x1·sin + x2·cos": apply_rope(
            x, positions=-torch.arange(seq)
        ),
        "the positions start at 1; the first token is at position 0 (angle 0: unchanged)": (
            apply_rope(x, offset=1)
        ),
        "the frequencies are off: pair i turns by θ_i = base^(-2i/Dh) per position, "
        "with i = 0 .. Dh/2 - 1": _rope_with_angles(
            x, _pair_angles(seq, dh, 10000.0, exponent="i")
        ),
    }


def _rope_with_angles(x: Tensor, angles: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)  # (L, Dh/2)
    x1, x2 = x[..., :half], x[..., half:]  # (B, H, L, Dh/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, L, Dh)


@register("04.4", title="RoPE, rotate-half")
def _check_rope(candidate) -> None:
    for shape in ((2, 3, 7, 8), (1, 2, 12, 16)):
        x = randn(*shape, seed=sum(shape))  # (B, H, L, Dh)
        call = f"rope_rotate_half(x of shape {shape})"
        got = expect_tensor(call, candidate(x.clone()), floating=True)
        expect_shape(call, got, shape, hint="RoPE keeps the shape (B, H, L, Dh)")
        expected = apply_rope(x)
        if matches(got, expected):
            continue
        for hint, wrong in _rope_variants(x).items():
            if matches(got, wrong):
                raise CheckFailed(f"{call}: {hint}")
        norms_kept = torch.allclose(got.double().norm(dim=-1), x.double().norm(dim=-1), atol=1e-4)
        if not norms_kept:
            raise CheckFailed(
                f"{call} changes the length of the vectors; a rotation keeps it: each pair "
                f"(x1, x2) becomes (x1·cos − x2·sin, x1·sin + x2·cos)"
            )
        expect_close(
            call,
            got,
            expected,
            atol=1e-5,
            rtol=1e-4,
            hint="pair (i, i + Dh/2) of the token at position m turns by m·base^(-2i/Dh)",
        )


# ------------------------------------------------------------------------------------------
# 04.6 predict, then run: C14 with a deeper and wider model
# ------------------------------------------------------------------------------------------

_BIGGER = "2 layer(s), d_model 64"


@register("04.6", title="Predict, then run: C14 with a bigger model")
def _check_c14_prediction(predict, *, outcome) -> None:
    from book.sceptic import Outcome

    from .helpers import check_prediction

    if isinstance(outcome, Outcome) and not str(outcome.numbers.get("model", "")).startswith(
        _BIGGER
    ):
        raise CheckFailed(
            f"the run trained {outcome.numbers.get('model')!r}: the exercise changes the model "
            "to 2 layers with d_model 64, c14_sweep_run(..., num_layers=2, d_model=64)"
        )
    check_prediction(
        predict,
        outcome,
        setting="2 layers and d_model 64 instead of 1 layer and d_model 32",
        why={
            "reproduced": "the bigger model learns the task in range (0.9 or more at 32 "
            "tokens), yet its mean accuracy still falls by more than 0.3 at 64 tokens and "
            "beyond: past 32 tokens the sinusoidal model meets absolute positions it never "
            "saw, and a bigger model has learned them no better.",
            "partly": "the mean accuracy fell by 0.3 at some lengths of 64 tokens and more but "
            "not at all of them: the drop softened with size.",
            "not reproduced": "the model either did not learn the task at 32 tokens (below "
            "0.9) or kept its accuracy past the training length.",
        },
    )
