"""The checks of chapter 2's exercises: a correct answer passes, and each typical mistake fails
with the message that names it."""

from __future__ import annotations

import math

import pytest
import torch

from book.checks import CheckFailed, exercises_for_chapter
from book.sceptic import Outcome
from tests.book.check_outcomes import fails_with, outcome, passes

# ------------------------------------------------------------------------------------------
# 02.1 attention with a mask
# ------------------------------------------------------------------------------------------


def make_attention(*, scale="sqrt", dim=-1, invert=False, use_mask=True, zero_nan=True):
    def attention(q, k, v, mask=None):
        d_k = q.shape[-1]
        divisor = {"sqrt": math.sqrt(d_k), "none": 1.0, "d": float(d_k)}[scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if mask is not None and use_mask:
            scores = scores.masked_fill(mask if invert else ~mask, float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        if zero_nan:
            weights = weights.nan_to_num(0.0)
        return weights @ v

    return attention


def test_attention_correct_passes():
    passes("02.1", make_attention())


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (dict(scale="none"), "without the scale"),
        (dict(scale="d"), "not 1/d_k"),
        (dict(dim=-2), "softmax over the queries"),
        (dict(invert=True), "mask inverted"),
        (dict(use_mask=False), "without the mask"),
        (dict(zero_nan=False), "must give zeros"),
    ],
)
def test_attention_typical_mistakes_fail_with_a_hint(wrong, fragment):
    fails_with("02.1", make_attention(**wrong), fragment)


def test_attention_with_the_articles_minus_1e9_recipe_is_named():
    def big_negative(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return torch.softmax(scores, dim=-1) @ v

    fails_with("02.1", big_negative, "masked_fill(mask == 0, -1e9)", "instead of zeros")


def test_attention_masking_after_the_softmax_is_named():
    def mask_after(q, k, v, mask=None):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        if mask is not None:
            weights = weights * mask
        return weights @ v

    fails_with("02.1", mask_after, "softmax first, mask after")


def test_attention_returning_the_weights_fails_on_shape():
    def weights_only(q, k, v, mask=None):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)

    fails_with("02.1", weights_only, "has shape (2, 3, 5, 7), expected (2, 3, 5, 6)")


def test_stub_reads_not_implemented():
    def stub(q, k, v, mask=None):
        raise NotImplementedError("Exercise 02.1")

    fails_with("02.1", stub, "not implemented yet")


# ------------------------------------------------------------------------------------------
# 02.2 the variance of a score
# ------------------------------------------------------------------------------------------


def test_variance_correct_passes():
    passes("02.2", lambda d_k, var_q, var_k, scale: d_k * var_q * var_k * scale**2)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda d, a, b, c: d * a * b * c, "multiplied by the scale once"),
        (lambda d, a, b, c: math.sqrt(d * a * b * c**2), "standard deviation"),
        (lambda d, a, b, c: d * c**2, "var_q·var_k"),
        (lambda d, a, b, c: d * d * a * b * c**2, "not d_k²"),
        (lambda d, a, b, c: "64", "should be a number"),
    ],
)
def test_variance_typical_mistakes_fail_with_a_hint(wrong, fragment):
    fails_with("02.2", wrong, fragment)


# ------------------------------------------------------------------------------------------
# 02.3 stable softmax
# ------------------------------------------------------------------------------------------


def good_softmax(scores, dim=-1):
    row_max = scores.amax(dim=dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(scores - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / torch.where(total == 0, torch.ones_like(total), total)


def test_softmax_correct_passes():
    passes("02.3", good_softmax)


def test_softmax_without_max_subtraction_fails_on_overflow():
    def naive(scores, dim=-1):
        exp = torch.exp(scores)
        return exp / exp.sum(dim=dim, keepdim=True)

    fails_with("02.3", naive, "overflows", "subtract each row's max")


def test_softmax_with_nan_on_fully_masked_rows_fails():
    def unguarded(scores, dim=-1):
        exp = torch.exp(scores - scores.amax(dim=dim, keepdim=True))
        return exp / exp.sum(dim=dim, keepdim=True)

    fails_with("02.3", unguarded, "fully masked row", "(-inf) - (-inf) = NaN")


def test_softmax_that_breaks_backward_fails():
    def in_place(scores, dim=-1):
        row_max = scores.amax(dim=dim, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        exp = torch.exp(scores - row_max)
        total = exp.sum(dim=dim, keepdim=True)
        return exp.div_(torch.where(total == 0, torch.ones_like(total), total))  # in place

    fails_with("02.3", in_place, "backward through stable_softmax fails", "in-place")


def test_softmax_that_detaches_fails():
    fails_with("02.3", lambda scores, dim=-1: good_softmax(scores.detach(), dim),
               "no gradient reaches the scores")  # fmt: skip


def test_softmax_ignoring_dim_fails():
    fails_with("02.3", lambda scores, dim=-1: good_softmax(scores, -1), "ignored dim")


def test_softmax_crash_is_reported_with_the_line():
    def crashes(scores, dim=-1):
        return scores.amax(dim=dim, keepdim=True).exp() @ scores  # shape error

    result = outcome("02.3", crashes)
    assert not result.passed and "your code raised RuntimeError" in result.message


# ------------------------------------------------------------------------------------------
# 02.4 FLOPs of QKᵀ
# ------------------------------------------------------------------------------------------


def test_flops_correct_passes():
    passes("02.4", lambda b, h, lq, lk, d: 2 * b * h * lq * lk * d)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda b, h, lq, lk, d: b * h * lq * lk * d, "multiply-adds"),
        (lambda b, h, lq, lk, d: 2 * lq * lk * d, "batch × heads"),
        (lambda b, h, lq, lk, d: 2 * b * h * lq * lq * d, "use n_keys"),
        (lambda b, h, lq, lk, d: b * h * lq * lk * (2 * d - 1), "2·d_k FLOPs"),
        (lambda b, h, lq, lk, d: 2 * b * h * lq * lk, "dot product of length d_k"),
    ],
)
def test_flops_typical_mistakes_fail_with_a_hint(wrong, fragment):
    fails_with("02.4", wrong, fragment)


# ------------------------------------------------------------------------------------------
# 02.5 softmax Jacobian
# ------------------------------------------------------------------------------------------


def test_jacobian_correct_passes():
    passes("02.5", lambda p: torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2))


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (lambda p: torch.diag_embed(p * (1 - p)), "only the diagonal"),
        (lambda p: p.unsqueeze(-1) * p.unsqueeze(-2) - torch.diag_embed(p), "sign is flipped"),
        (lambda p: -p.unsqueeze(-1) * p.unsqueeze(-2), "misses the diagonal term"),
        (lambda p: torch.diag_embed(p), "misses the -p pᵀ term"),
        (lambda p: p.unsqueeze(-1) * p.unsqueeze(-2), "off by up to"),
    ],
)
def test_jacobian_typical_mistakes_fail_with_a_hint(wrong, fragment):
    fails_with("02.5", wrong, fragment)


def test_jacobian_for_one_row_only_fails_on_shape():
    def one_row(p):
        flat = p.reshape(-1, p.shape[-1])[0]
        return torch.diag(flat) - torch.outer(flat, flat)

    fails_with("02.5", one_row, "one n × n Jacobian per row")


# ------------------------------------------------------------------------------------------
# 02.6 predict, then run: C7 with torch's default initialisation
# ------------------------------------------------------------------------------------------


def _check(predicted: str, outcome: Outcome) -> None:
    (exercise,) = [ex for ex in exercises_for_chapter("02") if ex.id == "02.6"]
    exercise.check(lambda: predicted, outcome=outcome)


def _outcome(verdict: str, qk_init: str = "torch") -> Outcome:
    return Outcome(verdict, {"qk_init": qk_init, "d_k": 512, "steps": 120, "seed": 0})


def test_the_right_prediction_passes():
    _check("not reproduced", _outcome("not reproduced"))


@pytest.mark.parametrize("wrong", ["partly", "reproduced"])
def test_a_wrong_prediction_fails_with_the_explanation(wrong):
    with pytest.raises(CheckFailed, match=r"you predicted .*narrower"):
        _check(wrong, _outcome("not reproduced"))


def test_a_run_of_the_chapters_initialisation_fails():
    with pytest.raises(CheckFailed, match="the chapter's setting"):
        _check("partly", _outcome("partly", qk_init="normal"))


def test_the_real_run_gives_a_verdict_the_check_explains():
    from book.claims.ch02 import c7_prediction_run

    outcome = c7_prediction_run(seed=0, steps=120, qk_init="torch")
    assert outcome.numbers["qk_init"] == "torch"
    _check(outcome.verdict, outcome)
    assert outcome.verdict == "not reproduced"  # what the solution predicts
