"""Building blocks shared by the chapters' check modules (``book/checks/chNN.py``).

A check recognises a learner's *known* mistakes to give a hint that helps, so most helpers
here answer "does this answer match that (wrong) formula exactly?" rather than only "is it
right?". Every failure is a :class:`~book.checks.CheckFailed` with a message that names
the function called and what was expected.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence

import torch

from . import CheckFailed

Tensor = torch.Tensor

__all__ = [
    "check_formula",
    "check_prediction",
    "expect_int",
    "expect_number",
    "expect_tensor",
    "matches",
    "show_number",
]


def matches(got: object, expected: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape, finite, and close to ``expected``: used to recognise a known mistake."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    g, e = got.detach().double(), expected.detach().double()
    return bool(torch.isfinite(g).all() and torch.allclose(g, e, atol=atol, rtol=rtol))


def expect_tensor(name: str, got: object, *, floating: bool = False) -> Tensor:
    """``got`` must be a tensor (a floating-point one with ``floating=True``)."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{name} should return a torch.Tensor, got {type(got).__name__}")
    if floating and not got.is_floating_point():
        raise CheckFailed(f"{name} should be a floating-point tensor, got dtype {got.dtype}")
    return got


def expect_number(name: str, got: object) -> float:
    """``got`` must be a real number (a one-element tensor is accepted); returns it as float."""
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise CheckFailed(f"{name} should be a number, got {type(got).__name__} ({got!r})")
    return float(got)


def expect_int(name: str, got: object) -> int:
    """``got`` must be an integer (a one-element integer tensor is accepted)."""
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        raise CheckFailed(f"{name} should be an int, got {type(got).__name__} ({got!r})")
    return int(got)


def show_number(x: float) -> str:
    """``12`` for integral values, six significant digits otherwise."""
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.6g}"


def check_formula(
    candidate: Callable[..., object],
    name: str,
    cases: Sequence[Mapping[str, float]],
    expected_fn: Callable[..., float],
    mistakes: Sequence[tuple[Callable[..., float], str]],
    explain: str,
    *,
    rel_tol: float = 1e-6,
) -> None:
    """``candidate(**case)`` must equal ``expected_fn(**case)`` on every case.

    When it does not, a known mistake (a formula in ``mistakes``, with its hint) is named only
    if it reproduces the candidate's answers on *every* case, so that one coincidence cannot
    mislead; otherwise the message ends with ``explain``. Arguments are passed positionally in
    the order of each case's keys.
    """
    answers = []
    for case in cases:
        call = f"{name}({', '.join(f'{k}={show_number(v)}' for k, v in case.items())})"
        answers.append((call, expect_number(call, candidate(*case.values())), case))
    wrong = [
        (c, got, case)
        for c, got, case in answers
        if not math.isclose(got, expected_fn(*case.values()), rel_tol=rel_tol)
    ]
    if not wrong:
        return
    call, got, case = wrong[0]
    message = f"{call} is {show_number(got)}, expected {show_number(expected_fn(*case.values()))}"
    for formula, hint in mistakes:
        if all(math.isclose(g, formula(*c.values()), rel_tol=rel_tol) for _, g, c in answers):
            raise CheckFailed(f"{message}: {hint}")
    raise CheckFailed(f"{message}: {explain}")


def check_prediction(
    predict: Callable[[], str],
    outcome: object,
    *,
    setting: str,
    why: Mapping[str, str],
) -> None:
    """An experiment exercise: the learner predicted a claim's verdict under a changed
    ``setting`` (``predict() -> "reproduced" | "partly" | "not reproduced"``), then ran it
    (``outcome``: the :class:`book.sceptic.Outcome` of the claim's sweep runner with that
    setting). Passes when the prediction is the run's verdict; otherwise says what the run
    gave and ``why[verdict]``, the reason the numbers give that verdict."""
    from book.claims import VERDICTS
    from book.sceptic import Outcome

    prediction = predict()
    if prediction not in VERDICTS:
        raise CheckFailed(
            f"your prediction should be one of {', '.join(map(repr, VERDICTS))}, got {prediction!r}"
        )
    if not isinstance(outcome, Outcome):
        raise CheckFailed(
            f"outcome should be the Outcome the experiment cell returns (run that cell first), "
            f"got {type(outcome).__name__}"
        )
    if prediction != outcome.verdict:
        numbers = ", ".join(f"{k} {v}" for k, v in outcome.numbers.items())
        raise CheckFailed(
            f"you predicted {prediction!r}; with {setting} the run gives {outcome.verdict!r} "
            f"({numbers}). {why.get(outcome.verdict, '')}".rstrip()
        )
