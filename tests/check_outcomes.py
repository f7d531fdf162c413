"""Assertions shared by the tests of the chapters' exercise checks (tests/test_checks_chNN.py):
a correct answer passes, and each typical mistake fails with the message that names it."""

from __future__ import annotations

from attention.checks import CheckResult, check, results


def outcome(exercise_id: str, candidate) -> CheckResult:
    check(exercise_id, candidate)
    return results()[-1]


def passes(exercise_id: str, candidate) -> None:
    result = outcome(exercise_id, candidate)
    assert result.passed, result.message


def fails_with(exercise_id: str, candidate, *fragments: str) -> None:
    result = outcome(exercise_id, candidate)
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message
