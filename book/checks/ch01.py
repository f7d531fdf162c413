"""Checks of chapter 1's exercises: path lengths, an RNN unrolled by hand, how a gradient decays
through a linear recurrence, cross-attention, and a predicted verdict (01.6: C1 with the
forget-gate bias raised by 5, graded against the learner's own run).

Each check compares the learner's answer with an independent reference (torch's ``nn.RNN``,
autograd through an unrolled recurrence, the package's attention) and, when it is wrong, tries
the usual mistakes one by one so that the message can name the likely cause.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attention.functional import scaled_dot_product_attention

from . import CheckFailed, expect_close, expect_shape, generator, randn, register
from .helpers import check_prediction, expect_int, expect_number, expect_tensor, matches

Tensor = torch.Tensor


# ------------------------------------------------------------------------------------------
# 01.1 path lengths
# ------------------------------------------------------------------------------------------

PATH_CASES = ((0, 99), (0, 1), (3, 10), (17, 500), (250, 251), (0, 499))


@register("01.1", title="Path length in an RNN and in attention")
def _check_path_lengths(candidate) -> None:
    for source, target in PATH_CASES:
        got = candidate(source, target)
        call = f"path_lengths({source}, {target})"
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailed(
                f"{call} should return a tuple (rnn_steps, attention_steps), got {got!r}"
            )
        rnn, attn = expect_int(f"{call}[0]", got[0]), expect_int(f"{call}[1]", got[1])
        distance = target - source
        if rnn != distance:
            if rnn == distance + 1:
                hint = (
                    "off by one: count the state updates after token `source` has been read "
                    "(token 0 reaches position 99 after 99 updates)"
                )
            elif rnn == target:
                hint = "count from the source token, not from the start of the sequence"
            elif rnn == 1:
                hint = "that is attention's answer; an RNN passes the state on one step at a time"
            else:
                hint = "one update per position between source and target"
            raise CheckFailed(f"{call}[0] (RNN) is {rnn}, expected {distance}: {hint}")
        if attn != 1:
            hint = (
                "attention connects every pair of positions directly, so the path is one step "
                "whatever the distance"
            )
            raise CheckFailed(f"{call}[1] (attention) is {attn}, expected 1: {hint}")


# ------------------------------------------------------------------------------------------
# 01.2 an RNN unrolled by hand
# ------------------------------------------------------------------------------------------


def _rnn_reference(x: Tensor, w_ih: Tensor, w_hh: Tensor, b: Tensor, h0: Tensor | None) -> Tensor:
    """torch's own ``nn.RNN`` (tanh) with these weights: ``(B, L, H)``."""
    hidden, d = w_ih.shape
    rnn = nn.RNN(d, hidden, batch_first=True).to(x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(w_ih)
        rnn.weight_hh_l0.copy_(w_hh)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
        out, _ = rnn(x, None if h0 is None else h0.unsqueeze(0))
    return out


def _rnn_variants(x, w_ih, w_hh, b, h0) -> dict[str, Tensor]:
    """Outputs of the usual wrong RNNs, keyed by the hint that explains them."""
    batch, length, _ = x.shape
    h_init = torch.zeros(batch, w_hh.shape[0], dtype=x.dtype) if h0 is None else h0

    def run(step, h_first=h_init, carry=True):
        h, out = h_first, []
        for t in range(length):
            new = step(x[:, t], h)
            out.append(new)
            if carry:
                h = new
        return torch.stack(out, 1)

    # With a zero initial state, "no recurrent term" and "never updates h" give the same
    # numbers; the first hint covers both.
    return {
        "it matches an RNN without the recurrent term: add h_{t-1} W_hhᵀ, where h_{t-1} is "
        "the previous step's new state": run(lambda xt, h: torch.tanh(xt @ w_ih.T + b)),
        "it matches an RNN without the tanh: h_t = tanh(x_t W_ihᵀ + h_{t-1} W_hhᵀ + b)": run(
            lambda xt, h: xt @ w_ih.T + h @ w_hh.T + b
        ),
        "it matches an RNN with W_hh transposed: h_{t-1} is multiplied by W_hhᵀ "
        "(h @ w_hh.T), like an nn.Linear": run(
            lambda xt, h: torch.tanh(xt @ w_ih.T + h @ w_hh + b)
        ),
        "it matches an RNN with W_ih transposed: x_t is multiplied by W_ihᵀ (x_t @ w_ih.T), "
        "like an nn.Linear": run(lambda xt, h: torch.tanh(xt @ w_ih + h @ w_hh.T + b)),
        "it matches an RNN that keeps using its initial state: feed each step's new h into "
        "the next step": run(lambda xt, h: torch.tanh(xt @ w_ih.T + h @ w_hh.T + b), carry=False),
    }


def _check_rnn_case(candidate, batch, length, d, hidden, with_h0, seed) -> None:
    g = generator(seed)
    x = torch.randn(batch, length, d, generator=g)  # (B, L, D)
    w_ih = torch.randn(hidden, d, generator=g) * 0.5  # (H, D)
    w_hh = torch.randn(hidden, hidden, generator=g) * 0.5  # (H, H)
    b = torch.randn(hidden, generator=g) * 0.5  # (H,)
    h0 = torch.randn(batch, hidden, generator=g) if with_h0 else None  # (B, H)
    label = f"B={batch}, L={length}, D={d}, H={hidden}{', with h0' if with_h0 else ''}"
    args = (x, w_ih, w_hh, b) if h0 is None else (x, w_ih, w_hh, b, h0)
    got = expect_tensor("rnn_forward(...)", candidate(*args))
    if tuple(got.shape) == (batch, hidden):
        raise CheckFailed(
            f"({label}) rnn_forward returned only the last state {tuple(got.shape)}: return "
            f"every step's state, shape (B, L, H) = {(batch, length, hidden)}"
        )
    expect_shape(f"rnn_forward(...) ({label})", got, (batch, length, hidden), hint="(B, L, H)")
    expected = _rnn_reference(x, w_ih, w_hh, b, h0)  # (B, L, H)
    if matches(got, expected):
        return
    if h0 is not None and matches(got, _rnn_reference(x, w_ih, w_hh, b, None)):
        raise CheckFailed(f"({label}) it matches an RNN started from zeros: start from h0")
    for hint, wrong in _rnn_variants(x, w_ih, w_hh, b, h0).items():
        if matches(got, wrong):
            raise CheckFailed(f"({label}) {hint}")
    expect_close(f"rnn_forward(...) ({label})", got, expected, atol=1e-5, rtol=1e-4)


@register("01.2", title="An RNN unrolled by hand")
def _check_rnn_forward(candidate) -> None:
    # Square weights first: a transposed matrix then gives wrong numbers (which can be named)
    # rather than a shape error.
    _check_rnn_case(candidate, 3, 4, 4, 4, with_h0=False, seed=2)
    _check_rnn_case(candidate, 2, 7, 3, 5, with_h0=False, seed=1)
    _check_rnn_case(candidate, 2, 5, 3, 6, with_h0=True, seed=3)


# ------------------------------------------------------------------------------------------
# 01.3 gradient through a linear recurrence
# ------------------------------------------------------------------------------------------

GRADIENT_CASES = ((0.5, 3), (0.9, 10), (1.1, 7), (-0.8, 5), (0.7, 0), (0.95, 40))


def _linear_rnn_gradient_autograd(lam: float, distance: int) -> float:
    """∂h_T / ∂x_{T-distance} for h_t = lam h_{t-1} + x_t, by autograd through the loop."""
    length = distance + 3
    x = torch.randn(length, dtype=torch.float64, generator=generator(distance)).requires_grad_()
    h = torch.zeros((), dtype=torch.float64)
    for t in range(length):
        h = lam * h + x[t]
    (grad,) = torch.autograd.grad(h, x)
    return float(grad[length - 1 - distance])


@register("01.3", title="How a gradient decays through a linear recurrence")
def _check_linear_rnn_gradient(candidate) -> None:
    for lam, distance in GRADIENT_CASES:
        call = f"linear_rnn_gradient({lam}, {distance})"
        got = expect_number(call, candidate(lam, distance))
        expected = _linear_rnn_gradient_autograd(lam, distance)
        if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-12):
            continue
        guesses = {
            "the factor multiplies once per step (λ·λ·…·λ), it does not add up": lam * distance,
            "off by one: at distance 0 the gradient is 1 (x_t enters h_t directly), so the "
            "exponent is the distance itself": lam ** (distance + 1),
            "off by one: the exponent is the distance (one factor λ per step)": lam
            ** max(distance - 1, 0),
            "the sign: a negative λ flips the sign of the gradient at every step": abs(lam)
            ** distance,
        }
        for hint, wrong in guesses.items():
            if math.isclose(got, wrong, rel_tol=1e-6, abs_tol=1e-12):
                raise CheckFailed(f"{call} is {got:.6g}, expected {expected:.6g}: {hint}")
        raise CheckFailed(
            f"{call} is {got:.6g}, expected {expected:.6g}: unroll h_t = λ h_(t-1) + x_t for a "
            f"few steps and differentiate h_t by x_(t-d)"
        )


# ------------------------------------------------------------------------------------------
# 01.4 how far a gradient survives
# ------------------------------------------------------------------------------------------

# Two cases where log(threshold) / log(|λ|) is a whole number (0.5³ = 0.125 exactly: the
# smallest d with |λ|^d < threshold is 4, and math.ceil gives 3), and negative factors.
SURVIVAL_CASES = ((0.9, 1e-3), (0.5, 1e-3), (0.99, 1e-2), (0.62, 1e-6), (0.964, 1e-3), (0.3, 0.5),
                  (0.5, 0.125), (0.25, 0.0625), (-0.5, 0.125), (-0.9, 1e-3))  # fmt: skip


def _steps_until_below_reference(lam: float, threshold: float) -> int:
    """Smallest d >= 0 with |lam|^d < threshold, by repeated multiplication."""
    d, factor = 0, 1.0
    while factor >= threshold:
        factor *= abs(lam)
        d += 1
    return d


@register("01.4", title="How far a gradient survives")
def _check_steps_until_below(candidate) -> None:
    for lam, threshold in SURVIVAL_CASES:
        call = f"steps_until_below({lam}, {threshold})"
        got = expect_int(call, candidate(lam, threshold))
        expected = _steps_until_below_reference(lam, threshold)
        if got == expected:
            continue
        exact = math.log(threshold) / math.log(abs(lam))
        if lam < 0 and got != _steps_until_below_reference(-lam, threshold):
            hint = "λ may be negative: the size of the gradient shrinks by |λ| per step"
        elif got == expected - 1:
            hint = (
                f"one step short: |λ|^{got} = {abs(lam) ** got:.3g} is not yet below "
                f"{threshold}. d must be strictly greater than log(threshold) / log(|λ|) = "
                f"{exact:.3f}: the smallest such integer is floor of it + 1 (math.ceil is one "
                "short when the ratio is a whole number)"
            )
        else:
            hint = "find the smallest d with |λ|^d < threshold: d > log(threshold) / log(|λ|)"
        raise CheckFailed(f"{call} is {got}, expected {expected}: {hint}")


# ------------------------------------------------------------------------------------------
# 01.5 cross-attention
# ------------------------------------------------------------------------------------------


def _cross_variants(dec, enc, w_q, w_k, w_v) -> dict[str, Tensor]:
    """Outputs of the usual wrong cross-attentions, keyed by the hint that explains them."""
    d_k = w_q.shape[1]

    def cross(q_src, kv_src, scale, dim=-1):
        scores = (q_src @ w_q) @ (kv_src @ w_k).transpose(-2, -1) * scale  # (B, Lq, Lk)
        return torch.softmax(scores, dim=dim) @ (kv_src @ w_v)

    return {
        "it matches self-attention on the decoder: the keys and values must come from the "
        "encoder (k = encoder_x @ w_k, v = encoder_x @ w_v)": cross(dec, dec, d_k**-0.5),
        "it matches attention without the scale: divide the scores by sqrt(d_k), "
        "d_k = w_q.shape[1]": cross(dec, enc, 1.0),
        "it matches a softmax over the decoder positions (dim=-2): each decoder position's "
        "weights must sum to 1 over the encoder positions (softmax over the last dim)": cross(
            dec, enc, d_k**-0.5, dim=-2
        ),
    }


def _check_cross_case(candidate, batch, lq, lk, d, d_k, d_v, seed) -> None:
    dec = randn(batch, lq, d, seed=seed)  # (B, Lq, D)
    enc = randn(batch, lk, d, seed=seed + 1)  # (B, Lk, D)
    w_q = randn(d, d_k, seed=seed + 2) / math.sqrt(d)  # (D, d_k)
    w_k = randn(d, d_k, seed=seed + 3) / math.sqrt(d)  # (D, d_k)
    w_v = randn(d, d_v, seed=seed + 4)  # (D, d_v)
    label = f"decoder length {lq}, encoder length {lk}"
    got = expect_tensor("cross_attention(...)", candidate(dec, enc, w_q, w_k, w_v))
    if tuple(got.shape) == (batch, lk, d_v) and lk != lq:
        raise CheckFailed(
            f"({label}) the output has one row per encoder position {tuple(got.shape)}: the "
            f"queries come from the decoder, so expect (B, Lq, d_v) = {(batch, lq, d_v)}"
        )
    expect_shape(f"cross_attention(...) ({label})", got, (batch, lq, d_v), hint="(B, Lq, d_v)")
    q = (dec @ w_q).unsqueeze(1)  # (B, 1, Lq, d_k): one head
    k = (enc @ w_k).unsqueeze(1)  # (B, 1, Lk, d_k)
    v = (enc @ w_v).unsqueeze(1)  # (B, 1, Lk, d_v)
    expected = scaled_dot_product_attention(q, k, v).squeeze(1)  # (B, Lq, d_v)
    if matches(got, expected):
        return
    for hint, wrong in _cross_variants(dec, enc, w_q, w_k, w_v).items():
        if matches(got, wrong):
            raise CheckFailed(f"({label}) {hint}")
    expect_close(f"cross_attention(...) ({label})", got, expected, atol=1e-5, rtol=1e-4)


@register(
    "01.5", title="Cross-attention: queries from the decoder, keys and values from the encoder"
)
def _check_cross_attention(candidate) -> None:
    _check_cross_case(candidate, 2, 3, 5, 8, 4, 6, seed=10)
    _check_cross_case(candidate, 2, 4, 4, 6, 6, 6, seed=20)  # equal lengths: roles can hide


# ------------------------------------------------------------------------------------------
# 01.6 predict, then run: C1 with the forget-gate bias raised by 5
# ------------------------------------------------------------------------------------------

C1_EXERCISE_BIAS = 5.0
C1_EXERCISE_WHY = {
    "partly": (
        "With f ≈ σ(5) ≈ 0.993 the cell keeps almost all of its memory at every step: the "
        "eased LSTM's far gradient is no longer an order of magnitude below its near one, so "
        "'eases' holds and 'does not cure' fails, while the default models still decay and "
        "attention stays flat."
    ),
    "reproduced": (
        "The eased LSTM still loses at least an order of magnitude between the near and the far "
        "band while decaying more slowly than the default LSTM: gating eases without curing."
    ),
    "not reproduced": (
        "A default recurrent model no longer loses dozens of orders of magnitude, or attention "
        "is not flat: the decay the claim is about is not there."
    ),
}


@register("01.6", title="Predict, then run: the forget-gate bias")
def _check_forget_bias_prediction(predict, *, outcome) -> None:
    from book.sceptic import Outcome

    # A wrong kind of outcome is check_prediction's to report; a baseline run is ours.
    eased = outcome.numbers.get("eased") if isinstance(outcome, Outcome) else None
    if isinstance(outcome, Outcome) and eased != f"LSTM, forget bias +{C1_EXERCISE_BIAS:g}":
        raise CheckFailed(
            f"the run's eased model is {eased!r}, not the LSTM with forget bias "
            f"+{C1_EXERCISE_BIAS:g}: run c1_sweep_run with forget_bias={C1_EXERCISE_BIAS:g} and "
            'eased="lstm" (the chapter\'s +3 is the setting you are asked to change)'
        )
    check_prediction(
        predict,
        outcome,
        setting=f"forget-gate bias +{C1_EXERCISE_BIAS:g}",
        why=C1_EXERCISE_WHY,
    )
