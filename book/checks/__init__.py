"""Exercise checks: ``check("03.1", my_function)`` tells a learner whether an answer is right.

A notebook cell calls ``check(exercise_id, candidate)``. The check for exercise ``"NN.k"``
lives in ``book/checks/chNN.py`` (imported lazily, on the first check of that chapter) and
is registered with :func:`register`::

    @register("03.1", title="Split the heads")
    def _(candidate):
        x = randn(2, 5, 16)  # (B, L, D)
        got = candidate(x, 4)
        expect_shape("split_heads(x, 4)", got, (2, 4, 5, 4), hint="(B, H, L, D/H)")
        expect_close("split_heads(x, 4)", got, reference(x, 4))

A check function takes the learner's candidate (a function, a class, ...) and raises
:class:`CheckFailed` with a helpful message when the answer is wrong. :func:`check` never
raises: it prints one line, ``✓ Exercise 03.1 — title`` or ``✗ Exercise 03.1 — title:
message``, and records the result. A stub that still raises ``NotImplementedError`` reads
"not implemented yet"; any other exception raised by the candidate is reported by type and
message (a shape error, say) with the line of the learner's code that raised it.

When the environment variable ``ATTENTION_CHECK_RESULTS`` names a file, each result is also
appended to it as one JSON line; ``make check CH=NN`` (``python -m book.notebooks.check``) uses this
to print a table of every exercise of a chapter.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import attention
import book

__all__ = [
    "RESULTS_ENV",
    "CheckFailed",
    "CheckResult",
    "Exercise",
    "check",
    "exercises_for_chapter",
    "expect_close",
    "expect_equal",
    "expect_shape",
    "expect_true",
    "generator",
    "rand_qkv",
    "randn",
    "register",
    "results",
]

RESULTS_ENV = "ATTENTION_CHECK_RESULTS"
EXERCISE_ID = re.compile(r"^(\d{2})\.(\d+)$")
DEFAULT_SEED = 0


class CheckFailed(Exception):
    """Raised by a check function when the candidate's answer is wrong (message: why)."""


@dataclass(frozen=True)
class Exercise:
    """A registered exercise: its id ``"NN.k"``, title and check function."""

    id: str
    title: str
    check: Callable[[object], None]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one :func:`check` call."""

    id: str
    title: str
    passed: bool
    message: str

    def line(self) -> str:
        if self.passed:
            return f"✓ Exercise {self.id} — {self.title}"
        return f"✗ Exercise {self.id} — {self.title}: {self.message}"


_REGISTRY: dict[str, Exercise] = {}
_RESULTS: list[CheckResult] = []


def _parse_id(exercise_id: object) -> str:
    """Return the chapter ``NN`` of an id ``"NN.k"``; raise on anything else."""
    if not isinstance(exercise_id, str):
        raise TypeError(
            f"exercise_id must be a str like '03.1', got {type(exercise_id).__name__} "
            f"({exercise_id!r})"
        )
    match = EXERCISE_ID.match(exercise_id)
    if match is None:
        raise ValueError(
            f"exercise_id must look like 'NN.k' (two-digit chapter, exercise number), "
            f"got {exercise_id!r}"
        )
    return match.group(1)


def register(exercise_id: str, title: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(candidate) -> None`` as the check of exercise ``exercise_id``.

    Registering an id twice replaces the check (re-running a notebook cell is harmless).
    """
    _parse_id(exercise_id)
    if not isinstance(title, str) or not title.strip():
        raise ValueError(f"title must be a non-empty str, got {title!r}")

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register({exercise_id!r}) must decorate a function, got {fn!r}")
        _REGISTRY[exercise_id] = Exercise(exercise_id, title.strip(), fn)
        return fn

    return decorator


def exercises_for_chapter(chapter: str) -> list[Exercise]:
    """The registered exercises of chapter ``"NN"``, in id order (imports ``chNN`` lazily)."""
    _load_chapter(chapter)
    found = [ex for ex in _REGISTRY.values() if ex.id.split(".")[0] == chapter]
    return sorted(found, key=lambda ex: int(ex.id.split(".")[1]))


def _load_chapter(chapter: str) -> bool:
    """Import ``book.checks.chNN``; return False if there is no such module."""
    name = f"{__name__}.ch{chapter}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:  # the module exists but one of its imports failed: a real bug
            raise
        return False
    return True


# Frames in these folders are the book's and the library's, never the learner's.
_OWN_DIRS = tuple(
    str(Path(module.__file__).resolve().parent) + os.sep for module in (attention, book)
)


def _learner_line(err: BaseException) -> str:
    """Where the learner's code raised: the innermost frame outside this package and torch."""
    frames = traceback.extract_tb(err.__traceback__)
    for frame in reversed(frames):
        filename = str(frame.filename)
        if filename.startswith(_OWN_DIRS) or f"{os.sep}site-packages{os.sep}" in filename:
            continue
        if frame.line:
            return f" (raised at `{frame.line.strip()}`)"
        return ""
    return ""


def _run(exercise_id: str, candidate: object, evidence: dict[str, object]) -> CheckResult:
    chapter = _parse_id(exercise_id)
    if exercise_id not in _REGISTRY:
        has_module = _load_chapter(chapter)
        if exercise_id not in _REGISTRY:
            message = f"no check is registered for exercise {exercise_id}"
            if not has_module:
                message += f" (book/checks/ch{chapter}.py is missing)"
            return CheckResult(exercise_id, "(unknown exercise)", False, message)
    exercise = _REGISTRY[exercise_id]
    if not callable(candidate):
        message = f"expected a function (or class), got {type(candidate).__name__}"
        return CheckResult(exercise_id, exercise.title, False, message)
    try:
        exercise.check(candidate, **evidence)
    except NotImplementedError:
        return CheckResult(exercise_id, exercise.title, False, "not implemented yet")
    except CheckFailed as err:
        return CheckResult(exercise_id, exercise.title, False, str(err))
    except Exception as err:  # the learner's code crashed: say how, and where
        message = f"your code raised {type(err).__name__}: {err}{_learner_line(err)}"
        return CheckResult(exercise_id, exercise.title, False, message)
    return CheckResult(exercise_id, exercise.title, True, "")


def check(exercise_id: str, candidate: object, **evidence: object) -> None:
    """Check a learner's answer to exercise ``exercise_id`` (``"NN.k"``); never raises.

    ``evidence``: what the exercise's notebook computed in view of the learner and the check
    needs besides the answer, passed on by keyword (an experiment exercise passes the run it
    predicted: ``check("01.6", my_prediction, outcome=outcome)``).

    Prints ``✓ Exercise NN.k — title`` or ``✗ Exercise NN.k — title: why``, appends the
    result to :func:`results` and, when ``$ATTENTION_CHECK_RESULTS`` is set, to that file (one
    JSON object per line).
    """
    try:
        result = _run(exercise_id, candidate, evidence)
    except Exception as err:  # a malformed id or a broken check module: still never raise
        result = CheckResult(
            str(exercise_id), "(check error)", False, f"{type(err).__name__}: {err}"
        )
    _RESULTS.append(result)
    print(result.line())
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")


def results() -> list[CheckResult]:
    """Every result recorded in this process, oldest first."""
    return list(_RESULTS)


# --- helpers for check authors ------------------------------------------------------------


def _with_hint(message: str, hint: str | None) -> str:
    return f"{message}: {hint}" if hint else message


def _shape_of(x: object) -> tuple[int, ...] | None:
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, torch.Size | tuple | list) and all(isinstance(s, int) for s in x):
        return tuple(x)
    return None


def expect_true(condition: bool, message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` unless ``condition``."""
    if not condition:
        raise CheckFailed(message)


def expect_shape(name: str, got: object, expected: Sequence[int], hint: str | None = None) -> None:
    """``got`` (a tensor, or a shape) must have shape ``expected``.

    Message: ``"{name} has shape (2, 5, 16), expected (2, 5, 8): {hint}"``.
    """
    shape = _shape_of(got)
    expected = tuple(int(s) for s in expected)
    if shape is None:
        raise CheckFailed(
            _with_hint(
                f"{name} should be a tensor of shape {expected}, got {type(got).__name__}", hint
            )
        )
    if shape != expected:
        raise CheckFailed(_with_hint(f"{name} has shape {shape}, expected {expected}", hint))


def expect_equal(name: str, got: object, expected: object, hint: str | None = None) -> None:
    """``got`` must equal ``expected`` exactly (numbers, strings, tuples, or tensors)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(
                _with_hint(f"{name} should be a tensor, got {type(got).__name__}", hint)
            )
        expect_shape(name, got, expected.shape, hint)
        if got.dtype != expected.dtype:
            raise CheckFailed(
                _with_hint(f"{name} has dtype {got.dtype}, expected {expected.dtype}", hint)
            )
        if not torch.equal(got, expected):
            wrong = (got != expected).nonzero()
            first = tuple(wrong[0].tolist())
            raise CheckFailed(
                _with_hint(
                    f"{name} differs at {len(wrong)} position(s), first at {first}: got "
                    f"{got[first].item()}, expected {expected[first].item()}",
                    hint,
                )
            )
        return
    if isinstance(expected, bool) and not isinstance(got, bool | torch.Tensor):
        raise CheckFailed(_with_hint(f"{name} should be a bool, got {got!r}", hint))
    if isinstance(got, torch.Tensor) and got.numel() == 1 and not isinstance(expected, tuple):
        got = got.item()
    if got != expected:
        raise CheckFailed(_with_hint(f"{name} is {got!r}, expected {expected!r}", hint))


def expect_close(
    name: str,
    got: object,
    expected: object,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    hint: str | None = None,
) -> None:
    """``got`` must match ``expected`` within ``|got - expected| <= atol + rtol * |expected|``.

    Works for tensors (shape is checked first; dtypes are compared in float64) and for plain
    numbers. The message gives the largest error and where it is.
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(
                _with_hint(f"{name} should be a tensor, got {type(got).__name__}", hint)
            )
        expect_shape(name, got, expected.shape, hint)
        g = got.detach().to("cpu", torch.float64)
        e = expected.detach().to("cpu", torch.float64)
        if g.isnan().any() and not e.isnan().any():
            where = tuple(g.isnan().nonzero()[0].tolist())
            raise CheckFailed(_with_hint(f"{name} contains NaN (first at {where})", hint))
        if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
            return
        err = (g - e).abs().nan_to_num(nan=math.inf)
        flat = int(err.argmax())
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), err.shape))
        raise CheckFailed(
            _with_hint(
                f"{name} is off by up to {err.max().item():.3g} (at {where}: got "
                f"{g[where].item():.6g}, expected {e[where].item():.6g})",
                hint,
            )
        )
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, int | float):
        raise CheckFailed(_with_hint(f"{name} should be a number, got {got!r}", hint))
    expected = float(expected)
    if not math.isclose(float(got), expected, rel_tol=rtol, abs_tol=atol):
        raise CheckFailed(_with_hint(f"{name} is {got!r}, expected {expected:.6g}", hint))


def generator(seed: int = DEFAULT_SEED) -> torch.Generator:
    """A CPU generator with a fixed seed: checks never touch the global RNG."""
    return torch.Generator().manual_seed(seed)


def randn(
    *shape: int, seed: int = DEFAULT_SEED, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Standard normal tensor of ``shape``, reproducible from ``seed``."""
    return torch.randn(*shape, generator=generator(seed), dtype=dtype)


def rand_qkv(
    batch: int = 2,
    heads: int = 2,
    n_queries: int = 5,
    n_keys: int | None = None,
    dim: int = 8,
    value_dim: int | None = None,
    *,
    seed: int = DEFAULT_SEED,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``q (B, H, Lq, E)``, ``k (B, H, Lk, E)``, ``v (B, H, Lk, Ev)``, fixed seed."""
    n_keys = n_queries if n_keys is None else n_keys
    value_dim = dim if value_dim is None else value_dim
    g = generator(seed)
    q = torch.randn(batch, heads, n_queries, dim, generator=g, dtype=dtype)  # (B, H, Lq, E)
    k = torch.randn(batch, heads, n_keys, dim, generator=g, dtype=dtype)  # (B, H, Lk, E)
    v = torch.randn(batch, heads, n_keys, value_dim, generator=g, dtype=dtype)  # (B, H, Lk, Ev)
    return q, k, v
