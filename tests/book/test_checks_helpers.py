"""The shared building blocks of the exercise checks (book/checks/helpers.py)."""

from __future__ import annotations

import pytest
import torch

from book.checks import CheckFailed
from book.checks.helpers import (
    check_formula,
    expect_int,
    expect_number,
    expect_tensor,
    matches,
    show_number,
)


def test_matches_needs_same_shape_finite_and_close():
    x = torch.randn(3, 4)
    assert matches(x + 1e-7, x)
    assert not matches(x.T, x)
    assert not matches(x + 1e-2, x)
    assert not matches(x.tolist(), x)
    nan = x.clone()
    nan[0, 0] = float("nan")
    assert not matches(nan, x)


def test_expect_tensor_number_int():
    assert expect_tensor("f()", torch.ones(2)).shape == (2,)
    with pytest.raises(CheckFailed, match=r"f\(\) should return a torch.Tensor, got list"):
        expect_tensor("f()", [1.0])
    with pytest.raises(CheckFailed, match="floating-point tensor, got dtype torch.int64"):
        expect_tensor("f()", torch.ones(2, dtype=torch.long), floating=True)
    assert expect_number("n", torch.tensor(2.5)) == 2.5
    with pytest.raises(CheckFailed, match="n should be a number, got bool"):
        expect_number("n", True)
    assert expect_int("k", torch.tensor(7)) == 7
    with pytest.raises(CheckFailed, match=r"k should be an int, got float \(7.0\)"):
        expect_int("k", 7.0)


def test_show_number():
    assert show_number(12.0) == "12"
    assert show_number(1 / 3) == "0.333333"


CASES = [dict(n=n, d=d) for n, d in ((4, 8), (16, 64), (3, 5))]
MISTAKES = [(lambda n, d: n * d, "you forgot the factor 2"), (lambda n, d: 2 * n, "d is missing")]


def test_check_formula_passes_a_right_answer():
    check_formula(lambda n, d: 2 * n * d, "flops", CASES, lambda n, d: 2 * n * d, MISTAKES, "x")


def test_check_formula_names_a_mistake_only_when_it_explains_every_case():
    with pytest.raises(CheckFailed, match=r"flops\(n=4, d=8\) is 32, expected 64: you forgot"):
        check_formula(lambda n, d: n * d, "flops", CASES, lambda n, d: 2 * n * d, MISTAKES, "x")

    # Agrees with the "factor 2" mistake on the first case only: no hint, the general advice.
    def coincidence(n, d):
        return 32 if n == 4 else 0

    with pytest.raises(CheckFailed, match=r"is 32, expected 64: count 2 FLOPs per MAC$"):
        check_formula(
            coincidence, "flops", CASES, lambda n, d: 2 * n * d, MISTAKES, "count 2 FLOPs per MAC"
        )
