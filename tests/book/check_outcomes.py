"""Assertions shared by the tests of the chapters' exercise checks (tests/test_checks_chNN.py):
a correct answer passes, and each typical mistake fails with the message that names it."""

from __future__ import annotations

import pytest

from book.checks import CheckFailed, CheckResult, check, exercises_for_chapter, results


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


def run_check(exercise_id: str, candidate) -> None:
    """Run the registered check directly: raises ``CheckFailed`` on a wrong answer."""
    chapter = exercise_id.split(".")[0]
    (exercise,) = [ex for ex in exercises_for_chapter(chapter) if ex.id == exercise_id]
    exercise.check(candidate)


def fails(exercise_id: str, candidate, message: str) -> None:
    """The check rejects ``candidate`` with a message matching the regex ``message``."""
    with pytest.raises(CheckFailed, match=message):
        run_check(exercise_id, candidate)
