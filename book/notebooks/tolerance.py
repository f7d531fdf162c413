"""Checked outputs that hold on every CPU: stored numbers compared within a tolerance.

A cell tagged ``nbval-check-output`` has its stored output compared with a fresh run's, by
:func:`install` (which the repository's ``conftest.py`` applies to every checked cell) instead
of nbval's exact text match. Words and integers (counts, shapes, verdict words) are compared
exactly. A decimal that depends on rounding is not: torch, oneDNN and MKL choose different
vectorised kernels on an AVX2 and an AVX-512 CPU, so a trained accuracy moves in its second
decimal and a round-off error by a factor of two. Such a cell names a tolerance class in its
metadata::

    # %% tags=["nbval-check-output"] tolerance="trained"

and its decimals are compared within that class (a cell that names none: ``"exact"``, equal
in value). Each class is tight enough that a real regression fails
(``tests/notebooks/test_tolerance.py`` edits stored numbers and sees it).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """How far a fresh decimal number may be from the stored one.

    A fresh number passes when it is within ``max(abs, rel * |stored|)`` of the stored one,
    or when ``factor`` is set and both have the same sign with neither more than ``factor``
    times the other. ``regression`` is an edit of a stored number that the class must catch:
    ``"+0.05"`` adds ``max(0.05, 0.05 * |stored|)``, ``"*1000"`` multiplies by 1000 (and
    turns a stored 0 into 1e-3); the tests apply it to every stored number of every cell that
    names the class."""

    abs: float
    rel: float
    factor: float | None
    regression: str
    why: str

    def allows(self, fresh: float, stored: float) -> bool:
        if math.isnan(fresh) or math.isnan(stored):
            return math.isnan(fresh) and math.isnan(stored)
        if abs(fresh - stored) <= max(self.abs, self.rel * abs(stored)):
            return True
        if self.factor is None or fresh * stored <= 0:
            return False
        ratio = abs(fresh / stored)
        return 1 / self.factor <= ratio <= self.factor


TOLERANCES: dict[str, Tolerance] = {
    # Decimals equal in value: a checked cell that names no class.
    "exact": Tolerance(
        abs=0.0,
        rel=0.0,
        factor=None,
        regression="+0.05",
        why="a number that is the same on every CPU (a count, a size, a threshold)",
    ),
    "trained": Tolerance(
        abs=0.045,
        rel=0.045,
        factor=None,
        regression="+0.05",
        why="an accuracy, probability or loss after training moves by up to ~0.04 (4.5 % above "
        "1) between instruction sets (chapter 10's capstone: mean 0.899-0.918, minimum over "
        "seeds 0.871-0.904; chapter 3's one-head model, seed 2: 0.75 and 0.71); an edit of "
        "0.05 (5 % above 1) must fail. Print such numbers with two decimals or more: the "
        "tolerance is on the value, and rounding to one decimal can use it up",
    ),
    "trained-ratio": Tolerance(
        abs=0.0,
        rel=0.0,
        factor=1.5,
        regression="*2",
        why="a small positive number after training (a forecast's mean squared error of "
        "order 0.005) moves by up to ~30 % between instruction sets; a doubling must fail",
    ),
    "round-off": Tolerance(
        abs=1e-5,
        rel=0.0,
        factor=None,
        regression="*1000",
        why="a computed number whose only drift between instruction sets is round-off (a "
        "difference from a reference of order 1e-7: 5.0e-08 on one CPU, 6.1e-09 on another); "
        "a thousandfold growth must fail",
    ),
}


# A decimal number standing on its own (not inside a name such as C19 or fp16): a sign counts
# only where it cannot be a dash ("0.617-0.623" is a range of two positive numbers).
NUMBER = re.compile(r"(?<![\w.])(?:(?<![\w.)\]])[-+−])?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def numbers(text: str) -> tuple[str, list[str]]:
    """``text`` with every number replaced by ``{}``, and the numbers in order."""
    found = NUMBER.findall(text)
    return NUMBER.sub("{}", text), found


def _is_integer(token: str) -> bool:
    return re.fullmatch(r"[-+−]?\d+", token) is not None


def compare_text(stored: str, fresh: str, tolerance: Tolerance) -> str | None:
    """``None`` when ``fresh`` matches ``stored`` within ``tolerance``, else why not.

    The text around the numbers and every integer must match exactly; decimal numbers (a
    point or an exponent) within ``tolerance``."""
    stored_words, stored_numbers = numbers(stored)
    fresh_words, fresh_numbers = numbers(fresh)
    if stored_words != fresh_words:
        return "the text around the numbers differs"
    for position, (s, f) in enumerate(zip(stored_numbers, fresh_numbers, strict=True)):
        if _is_integer(s) or _is_integer(f):
            if s != f:
                return f"integer {position + 1} differs: stored {s}, fresh {f} (compared exactly)"
        elif not tolerance.allows(_float(f), _float(s)):
            return (
                f"number {position + 1} is out of tolerance: stored {s}, fresh {f} "
                f"(abs {tolerance.abs:g}, rel {tolerance.rel:g}"
                + (f", factor {tolerance.factor:g}" if tolerance.factor else "")
                + ")"
            )
    return None


def apply_regression(value: str, tolerance: Tolerance) -> str:
    """``value`` edited as :attr:`Tolerance.regression` says (what the class must catch)."""
    op, amount = tolerance.regression[0], float(tolerance.regression[1:])
    number = _float(value)
    if op == "+":
        edited = number + max(amount, amount * abs(number))
    else:
        edited = number * amount if number != 0 else 1 / amount
    return repr(edited)


def _float(token: str) -> float:
    return float(token.replace("−", "-"))


def tolerance_of(cell) -> Tolerance | None:
    """The tolerance class a cell's metadata names (``None`` if it names none).

    Raises ``ValueError`` for a name that is not a class, or on a cell that is not checked."""
    name = cell.get("metadata", {}).get("tolerance")
    if name is None:
        return None
    if name not in TOLERANCES:
        raise ValueError(
            f"cell metadata tolerance={name!r} is not a tolerance class; expected one of "
            f"{sorted(TOLERANCES)} (book/notebooks/tolerance.py)"
        )
    if "nbval-check-output" not in cell.get("metadata", {}).get("tags", []):
        raise ValueError(
            f"cell metadata tolerance={name!r} on a cell without the nbval-check-output tag: "
            "a tolerance applies only to a checked output"
        )
    return TOLERANCES[name]


# A progress bar (book.progress) is a display that later messages update in place; nbval
# does not apply the updates, so a fresh run holds a different (or no) bar: not compared.
PROGRESS_BAR = "TQDM-BAR"  # what book/notebooks/nbval_sanitize.cfg makes of a finished bar


def _flatten(item, outputs, skip_compare) -> dict[str, list[str]]:
    """nbval's view of ``outputs``: MIME type (or key) -> sanitized values, in order; progress
    bars left out, and the claims records without the execution counts of their cells (a
    notebook run cell by cell under nbval counts differently from Run All)."""
    from book.claims import CLAIMS_MIME

    flat: dict[str, list[str]] = defaultdict(list)
    for output in outputs:
        data = output.get("data", {})
        if output.get("output_type") == "display_data" and "text/plain" in data:
            if item.sanitize(data["text/plain"]).strip() in (PROGRESS_BAR, ""):
                continue  # a finished bar, or one erased when it closed (leave=False)
        for key, value in output.items():
            if key in skip_compare:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime == CLAIMS_MIME:
                        data = _without_cells(data)
                    if mime not in skip_compare:  # JSON as text, so that it is sanitized too
                        flat[mime].append(item.sanitize(_as_text(data)))
            else:
                flat[key].append(item.sanitize(value))
    return flat


def _without_cells(record):
    if isinstance(record, dict) and isinstance(record.get("claims"), list):
        claims = [{k: v for k, v in c.items() if k != "cell"} for c in record["claims"]]
        return {**record, "claims": claims}
    return record


def _as_text(value) -> str:
    """An output value as text: JSON outputs (the claims records) in a canonical form."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def install(item, tolerance: Tolerance) -> None:
    """Make the nbval cell ``item`` compare its outputs within ``tolerance``."""
    from nbval.plugin import transform_streams_for_comparison

    def compare_outputs(test, ref, skip_compare=None):
        skip_compare = skip_compare or item.parent.skip_compare
        fresh = _flatten(item, transform_streams_for_comparison(test), skip_compare)
        stored = _flatten(item, transform_streams_for_comparison(ref), skip_compare)
        item.comparison_traceback = []
        if set(fresh) != set(stored):
            item.comparison_traceback.append(
                f"output fields differ: stored {sorted(stored)}, fresh {sorted(fresh)}"
            )
            return False
        for key, stored_values in stored.items():
            fresh_values = fresh[key]
            if len(fresh_values) != len(stored_values):
                item.comparison_traceback.append(
                    f'{len(stored_values)} stored and {len(fresh_values)} fresh outputs "{key}"'
                )
                return False
            for s, f in zip(stored_values, fresh_values, strict=True):
                why = compare_text(s, f, tolerance)
                if why is not None:
                    item.format_output_compare(key, s, f)
                    item.comparison_traceback.append(f"within tolerance: no, {why}")
                    return False
        return True

    item.compare_outputs = compare_outputs
