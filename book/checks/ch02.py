"""Checks of chapter 2's exercises: scaled dot-product attention, score variance, a stable
softmax, the FLOPs of QKᵀ, and the softmax Jacobian.

Each check compares the learner's answer with an independent reference (the package's
attention, torch's softmax and flop counter, autograd) and, when it is wrong, tries the usual
mistakes one by one so that the message can name the likely cause.
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from attention.functional import scaled_dot_product_attention
from attention.masks import causal_mask, combine_masks, padding_mask

from . import CheckFailed, expect_close, expect_shape, expect_true, rand_qkv, randn, register
from .helpers import check_formula, expect_tensor, matches

Tensor = torch.Tensor


# ------------------------------------------------------------------------------------------
# 02.1 scaled dot-product attention with a mask
# ------------------------------------------------------------------------------------------


def _attention_variants(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> dict:
    """Outputs of the usual wrong implementations, keyed by the hint that explains them."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)

    def softmax_attention(s: Tensor, allowed: Tensor | None, dim: int = -1) -> Tensor:
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
        return torch.softmax(s, dim=dim).nan_to_num(0.0) @ v

    variants = {
        "it matches attention without the scale: divide the scores by sqrt(d_k), "
        "d_k = q.shape[-1]": softmax_attention(scores, mask),
        "it matches scores divided by d_k: the scale is 1/sqrt(d_k), not 1/d_k": softmax_attention(
            scores / d_k, mask
        ),
        "it matches a softmax over the queries (dim=-2): each query's weights must sum to 1 "
        "over the keys, i.e. softmax(..., dim=-1)": softmax_attention(
            scores / math.sqrt(d_k), mask, dim=-2
        ),
    }
    if mask is not None:
        # The article's recipe: a large negative number instead of -inf. It agrees with -inf
        # wherever a query may attend some key; a query that may attend none gets the mean of
        # all values instead of zeros.
        big_negative = (scores / math.sqrt(d_k)).masked_fill(mask == 0, -1e9)
        variants[
            "it matches masked_fill(mask == 0, -1e9), the recipe of many tutorials: with a "
            "large finite number a query that may attend no key gets uniform weights over all "
            "keys (the mean of the values) instead of zeros; fill with -inf and turn the rows "
            "with no allowed key into zeros (exercise 02.3)"
        ] = torch.softmax(big_negative, dim=-1) @ v
        weights_unmasked = torch.softmax(scores / math.sqrt(d_k), dim=-1)  # (B, H, Lq, Lk)
        variants[
            "it matches softmax first, mask after: zeroing the weights of forbidden keys after "
            "the softmax leaves rows that no longer sum to 1; mask the scores (fill with -inf) "
            "before the softmax"
        ] = (weights_unmasked * mask) @ v
        variants[
            "it matches attention with the mask inverted: in this book True means *may "
            "attend*; fill the scores where mask is False with -inf"
        ] = softmax_attention(scores / math.sqrt(d_k), ~mask)
        variants[
            "it matches attention without the mask: set the scores where mask is False to "
            "-inf before the softmax"
        ] = softmax_attention(scores / math.sqrt(d_k), None)
    return variants


def _check_attention_case(candidate, q, k, v, mask, label: str) -> None:
    got = candidate(q, k, v) if mask is None else candidate(q, k, v, mask)
    got = expect_tensor("attention(q, k, v, mask)", got)
    b, h, lq, _ = q.shape
    expect_shape(
        f"attention(q, k, v{', mask' if mask is not None else ''}) ({label})",
        got,
        (b, h, lq, v.shape[-1]),
        hint="(B, H, Lq, Ev): one row per query, the width of the values",
    )
    expected = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Lq, Ev)
    if matches(got, expected):
        return
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        no_key = mask is not None and not bool(mask.any(-1).all())
        if no_key:
            raise CheckFailed(
                f"({label}) the output has NaN where a query may attend no key at all: such a "
                f"row must give zeros (softmax of a row of -inf is 0/0; see exercise 02.3)"
            )
        raise CheckFailed(f"({label}) the output contains NaN")
    for hint, wrong in _attention_variants(q, k, v, mask).items():
        if matches(got, wrong):
            raise CheckFailed(f"({label}) {hint}")
    expect_close(f"attention(q, k, v) ({label})", got, expected, atol=1e-5, rtol=1e-4)


@register("02.1", title="Scaled dot-product attention with a mask")
def _check_attention(candidate) -> None:
    q, k, v = rand_qkv(2, 3, 5, 7, dim=8, value_dim=6, seed=1)
    _check_attention_case(candidate, q, k, v, None, "no mask, Lq=5, Lk=7")

    q, k, v = rand_qkv(2, 2, 6, 6, dim=4, value_dim=4, seed=2)
    _check_attention_case(candidate, q, k, v, causal_mask(6), "causal mask (6, 6)")

    # Padding (B, 1, 1, Lk) combined with a causal mask; the second sequence is empty, so
    # its queries may attend nothing at all.
    pad = padding_mask(torch.tensor([4, 0]), 6)  # (B, 1, 1, Lk)
    both = combine_masks(causal_mask(6), pad)  # (B, 1, Lq, Lk)
    _check_attention_case(candidate, q, k, v, both, "causal + padding, one empty sequence")


# ------------------------------------------------------------------------------------------
# 02.2 the variance of a score, and 02.4 the FLOPs of QKᵀ: numbers
# ------------------------------------------------------------------------------------------


@register("02.2", title="The variance of a score")
def _check_variance(candidate) -> None:
    cases = [
        dict(d_k=d, var_q=a, var_k=b, scale=c)
        for d, a, b, c in ((64, 1.0, 1.0, 1.0), (64, 1.0, 1.0, 1 / 8), (512, 1 / 3, 1 / 3, 1.0),
                           (100, 2.0, 0.5, 0.1), (7, 3.0, 2.0, 0.5))
    ]  # fmt: skip
    mistakes = [
        (lambda d, a, b, c: d * a * b * c, "you multiplied by the scale once; scaling a random "
         "variable by c multiplies its variance by c²"),
        (lambda d, a, b, c: math.sqrt(d * a * b) * c, "that is the standard deviation; the "
         "variance is its square"),
        (lambda d, a, b, c: d * c**2, "each term q_i·k_i has variance var_q·var_k, not 1"),
        (lambda d, a, b, c: d * d * a * b * c**2, "the variances of d_k independent terms add "
         "up to d_k times one term's, not d_k²"),
        (lambda d, a, b, c: a * b * c**2, "q·k is a sum of d_k terms: their variances add"),
    ]  # fmt: skip
    check_formula(
        candidate, "score_variance", cases, lambda d, a, b, c: d * a * b * c**2, mistakes,
        "Var(q·k) = d_k·var_q·var_k for independent zero-mean components, times scale²",
        rel_tol=1e-9,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------
# 02.3 a stable softmax
# ------------------------------------------------------------------------------------------


@register("02.3", title="A stable softmax with zeros for fully masked rows")
def _check_softmax(candidate) -> None:
    def run(name: str, scores: Tensor, dim: int = -1) -> Tensor:
        got = expect_tensor(name, candidate(scores.clone(), dim=dim))
        expect_shape(name, got, scores.shape, hint="softmax keeps the shape of its input")
        return got

    scores = randn(3, 4, 5, seed=3)  # (…, n)
    got = run("stable_softmax(scores)", scores)
    if not matches(got, torch.softmax(scores, -1)):
        if matches(got, torch.softmax(scores, 1)):
            raise CheckFailed("stable_softmax(scores) normalised the wrong dimension: use dim")
        expect_close("stable_softmax(scores)", got, torch.softmax(scores, -1))

    got = run("stable_softmax(scores, dim=1)", scores, dim=1)
    if matches(got, torch.softmax(scores, -1)):
        raise CheckFailed("stable_softmax(scores, dim=1) ignored dim: it normalised the last dim")
    expect_close("stable_softmax(scores, dim=1)", got, torch.softmax(scores, 1))

    big = torch.tensor([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1002.0]])  # (2, 3)
    got = run("stable_softmax(large scores)", big)
    expect_true(
        bool(torch.isfinite(got).all()),
        f"stable_softmax of [[1000, 999, 998], [-1000, -1001, -1002]] gives {got.tolist()}: "
        f"exp(1000) overflows and exp(-1000) underflows to 0; subtract each row's max first "
        f"(softmax(s) = softmax(s - max s))",
    )
    expect_close("stable_softmax(large scores)", got, torch.softmax(big, -1))

    masked = torch.tensor([[0.5, float("-inf"), 1.5], [float("-inf")] * 3])  # (2, 3)
    got = run("stable_softmax(masked scores)", masked)
    if torch.isnan(got[0]).any():
        raise CheckFailed(
            "a row with some -inf entries gives NaN: exp(-inf) = 0 is fine, so the NaN comes "
            "from elsewhere (is the row max subtracted correctly?)"
        )
    expect_close("stable_softmax(partly masked row)", got[0], torch.softmax(masked[0], -1))
    expect_true(
        bool(torch.isfinite(got[1]).all()),
        f"a fully masked row (all -inf) gives {got[1].tolist()}: its max is -inf and "
        f"(-inf) - (-inf) = NaN; use 0 instead of a non-finite row max, and divide by 1 where "
        f"the sum is 0",
    )
    expect_close(
        "stable_softmax(fully masked row)",
        got[1],
        torch.zeros(3),
        hint="a query with no allowed key attends to nothing: all weights 0",
    )

    # Differentiable: attention is trained through its softmax.
    leaf = randn(2, 5, seed=4).requires_grad_(True)  # (2, n)
    reference = randn(2, 5, seed=4).requires_grad_(True)
    upstream = randn(2, 5, seed=5)  # an arbitrary gradient from the layers above
    out = expect_tensor("stable_softmax(scores)", candidate(leaf * 1.0, dim=-1))
    expect_true(out.requires_grad, "no gradient reaches the scores: is the output detached?")
    try:
        (out * upstream).sum().backward()
    except RuntimeError as err:
        raise CheckFailed(
            f"backward through stable_softmax fails ({str(err).splitlines()[0]}): an in-place "
            "operation (exp_, div_, masked_fill_, x[...] = ...) overwrote a tensor autograd "
            "needs; use the out-of-place forms"
        ) from None
    (torch.softmax(reference, -1) * upstream).sum().backward()
    expect_close("the gradient of stable_softmax with respect to scores", leaf.grad,
                 reference.grad)  # fmt: skip


# ------------------------------------------------------------------------------------------
# 02.4 FLOPs of QKᵀ
# ------------------------------------------------------------------------------------------


def _flops_of_qk(batch: int, heads: int, n_queries: int, n_keys: int, d_k: int) -> int:
    """torch's own flop counter on ``q @ kᵀ`` (meta tensors: nothing is computed)."""
    q = torch.empty(batch, heads, n_queries, d_k, device="meta")  # (B, H, Lq, d_k)
    k = torch.empty(batch, heads, n_keys, d_k, device="meta")  # (B, H, Lk, d_k)
    with FlopCounterMode(display=False) as counter:
        q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    return int(counter.get_total_flops())


@register("02.4", title="The FLOPs of QKᵀ")
def _check_flops(candidate) -> None:
    cases = [
        dict(batch=b, heads=h, n_queries=lq, n_keys=lk, d_k=d)
        for b, h, lq, lk, d in ((1, 1, 4, 4, 3), (2, 3, 5, 7, 8), (8, 12, 512, 512, 64),
                                (1, 16, 1, 4096, 128))
    ]  # fmt: skip
    mistakes = [
        (lambda b, h, lq, lk, d: b * h * lq * lk * d, "you counted multiply-adds; a "
         "multiply-add is 2 FLOPs"),
        (lambda b, h, lq, lk, d: 2 * lq * lk * d, "every (batch, head) pair computes its own "
         "QKᵀ: multiply by batch × heads"),
        (lambda b, h, lq, lk, d: 2 * h * lq * lk * d, "multiply by the batch size too"),
        (lambda b, h, lq, lk, d: 2 * b * lq * lk * d, "multiply by the number of heads too"),
        (lambda b, h, lq, lk, d: 2 * b * h * lq * lq * d, "QKᵀ has shape (Lq, Lk): use n_keys "
         "for its columns"),
        (lambda b, h, lq, lk, d: b * h * lq * lk * (2 * d - 1), "close, but the convention "
         "here counts 2·d_k FLOPs per score (d_k multiplies and d_k adds)"),
    ]  # fmt: skip
    check_formula(
        candidate, "qk_flops", cases, _flops_of_qk, mistakes,
        "each of the B·H·Lq·Lk scores is a dot product of length d_k, i.e. 2·d_k FLOPs",
        rel_tol=1e-9,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------
# 02.5 the softmax Jacobian
# ------------------------------------------------------------------------------------------


@register("02.5", title="The softmax Jacobian")
def _check_jacobian(candidate) -> None:
    scores = randn(2, 3, 5, seed=5, dtype=torch.float64)  # (2, 3, n)
    p = torch.softmax(scores, -1)  # (2, 3, n)
    got = expect_tensor("softmax_jacobian(p)", candidate(p.clone()))
    expect_shape(
        "softmax_jacobian(p) for p of shape (2, 3, 5)",
        got,
        (2, 3, 5, 5),
        hint="(..., n, n): one n × n Jacobian per row of p",
    )
    expected = torch.stack(
        [
            torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), row)
            for row in scores.reshape(-1, 5)
        ]
    ).reshape(2, 3, 5, 5)  # (2, 3, n, n)
    if matches(got, expected, atol=1e-10, rtol=1e-8):
        return
    outer = p.unsqueeze(-1) * p.unsqueeze(-2)  # (2, 3, n, n)
    hints = {
        "only the diagonal p_i(1 - p_i) is filled; off the diagonal ∂p_i/∂s_j = -p_i·p_j": (
            torch.diag_embed(p * (1 - p))
        ),
        "the sign is flipped: J = diag(p) - p pᵀ": outer - torch.diag_embed(p),
        "-p pᵀ alone misses the diagonal term diag(p)": -outer,
        "diag(p) alone misses the -p pᵀ term": torch.diag_embed(p),
    }
    for hint, wrong in hints.items():
        if matches(got, wrong, atol=1e-10, rtol=1e-8):
            raise CheckFailed(f"softmax_jacobian(p) is wrong: {hint}")
    expect_close("softmax_jacobian(p)", got, expected, atol=1e-10, rtol=1e-8)


# ------------------------------------------------------------------------------------------
# 02.6 predict, then run: C7 with torch's default initialisation of W_Q, W_K
# ------------------------------------------------------------------------------------------


@register("02.6", title="Predict, then run: C7 with torch's default initialisation")
def _check_c7_prediction(predict, *, outcome) -> None:
    from book.sceptic import Outcome

    from .helpers import check_prediction

    if isinstance(outcome, Outcome) and outcome.numbers.get("qk_init") != "torch":
        raise CheckFailed(
            f"the run used qk_init={outcome.numbers.get('qk_init')!r}, the chapter's setting: "
            'the exercise changes it to torch\'s default, c7_prediction_run(..., qk_init="torch")'
        )
    check_prediction(
        predict,
        outcome,
        setting="torch's default nn.Linear initialisation of W_Q and W_K",
        why={
            "not reproduced": "torch's default draws W_Q and W_K with std 1/√(3·d_model), so the "
            "unscaled scores start √3 times narrower and the softmax less saturated: the loss "
            "leaves its plateau (falls below 90 % of its start) by step 100, and a plateau that "
            "ends by step 100 is no plateau by C7's thresholds. The unscaled model is still the "
            "slower one, but slower is not what the claim says.",
            "partly": "the unscaled loss stayed above 90 % of its start past step 100 while the "
            "scaled one fell below 65 %: a plateau, but the run is too short (or the plateau "
            "too brief) for one of 'a few hundred' steps.",
            "reproduced": "the unscaled loss stayed on its plateau for 200 steps or more while "
            "the scaled one fell.",
        },
    )
