"""Checked outputs within a tolerance (book.notebooks.tolerance) and the instruction-set
cross-check (book.notebooks.isa): what passes between CPUs, and that a real regression fails."""

from __future__ import annotations

import nbformat
import pytest

from book.notebooks.common import REPO
from book.notebooks.isa import FORCE_AVX2, choose_cross_check
from book.notebooks.tolerance import (
    TOLERANCES,
    apply_regression,
    compare_text,
    numbers,
    tolerance_of,
)

TRAINED = TOLERANCES["trained"]
STORED_NOTEBOOKS = sorted((REPO / "chapters").glob("*.ipynb")) + sorted(
    (REPO / "solutions").glob("*.ipynb")
)


def test_numbers_are_found_outside_names_and_ranges():
    words, found = numbers("C19 fp16 L=128: 0.620 (0.617-0.623), error -1.5e-07, ×14.2")
    assert found == ["128", "0.620", "0.617", "0.623", "-1.5e-07", "14.2"]
    assert words == "C19 fp16 L={}: {} ({}-{}), error {}, ×{}"


def test_capstone_accuracy_between_cpus_passes_and_an_edit_of_005_fails():
    stored = "test accuracy 0.918 (min 0.904, max 0.929) over 3 seeds"
    # What an AVX-512 machine and the forced-AVX2 settings gave for the same code.
    assert (
        compare_text(stored, "test accuracy 0.905 (min 0.887, max 0.933) over 3 seeds", TRAINED)
        is None
    )
    assert (
        compare_text(stored, "test accuracy 0.899 (min 0.871, max 0.931) over 3 seeds", TRAINED)
        is None
    )
    edited = "test accuracy 0.968 (min 0.904, max 0.929) over 3 seeds"
    assert "out of tolerance" in compare_text(edited, stored, TRAINED)


def test_a_sign_is_part_of_the_number():
    assert compare_text("gain -0.010", "gain +0.010", TRAINED) is None
    assert compare_text("gain -0.010", "gain +0.060", TRAINED) is not None


def test_words_and_integers_are_compared_exactly():
    assert compare_text("partly: 2 of 3 seeds", "partly: 1 of 3 seeds", TRAINED).startswith(
        "integer"
    )
    assert compare_text("verdict: partly 0.71", "verdict: reproduced 0.71", TRAINED) is not None
    assert compare_text("0.5 0.5", "0.5", TRAINED) is not None


def test_round_off_class_allows_a_factor_not_a_hundredfold_growth():
    error = TOLERANCES["round-off"]
    assert compare_text("difference 7.2e-07", "difference 4.8e-07", error) is None
    assert compare_text("difference 7.2e-07", "difference 7.2e-05", error) is not None
    assert compare_text("difference 2.4e-07", "difference 0.0e+00", error) is None
    assert compare_text("difference 0.0", "difference 0.0", error) is None


@pytest.mark.parametrize("name", sorted(TOLERANCES))
def test_every_class_catches_its_declared_regression(name):
    tolerance = TOLERANCES[name]
    for value in ["0.918", "0.26", "7.2e-07", "1.000", "-0.35"]:
        assert not tolerance.allows(float(apply_regression(value, tolerance)), float(value))
        assert tolerance.allows(float(value), float(value))


def _tolerant_cells():
    for path in STORED_NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and tolerance_of(cell) is not None:
                yield path, index, cell


def _stored_texts(cell) -> list[str]:
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output["text"])
        for mime in ("text/plain", "text/markdown"):
            if mime in output.get("data", {}):
                texts.append(output["data"][mime])
    return texts


def test_every_stored_number_under_a_tolerance_fails_when_edited_as_a_regression():
    """The tolerance is tight enough: editing any stored decimal of a tolerant cell (by 0.05
    for a trained number, a hundredfold for a round-off error) makes the check fail."""
    checked = 0
    for path, index, cell in _tolerant_cells():
        tolerance = tolerance_of(cell)
        for text in _stored_texts(cell):
            _, found = numbers(text)
            for position, value in enumerate(found):
                if "." not in value and "e" not in value.lower():
                    continue  # integers are compared exactly
                edited = _replace_nth(text, position, apply_regression(value, tolerance))
                assert compare_text(text, edited, tolerance), (path.name, index, value)
                checked += 1
    assert checked > 0, "no cell declares a tolerance"


def _replace_nth(text: str, n: int, replacement: str) -> str:
    from book.notebooks.tolerance import NUMBER

    matches = list(NUMBER.finditer(text))
    m = matches[n]
    return text[: m.start()] + replacement + text[m.end() :]


def test_a_tolerance_needs_a_known_class_on_a_checked_cell():
    good = nbformat.v4.new_code_cell("", metadata={"tags": ["nbval-check-output"]})
    good.metadata["tolerance"] = "trained"
    assert tolerance_of(good) is TRAINED
    unknown = nbformat.v4.new_code_cell("", metadata={"tags": ["nbval-check-output"]})
    unknown.metadata["tolerance"] = "loose"
    with pytest.raises(ValueError, match="'loose' is not a tolerance class"):
        tolerance_of(unknown)
    unchecked = nbformat.v4.new_code_cell("", metadata={"tolerance": "trained"})
    with pytest.raises(ValueError, match="without the nbval-check-output tag"):
        tolerance_of(unchecked)


def test_cross_check_forces_avx2_for_notebooks_executed_with_avx512():
    env, sentence = choose_cross_check("AVX512", {"a.ipynb": "AVX512", "b.ipynb": "AVX512"})
    assert env == FORCE_AVX2
    assert "with AVX2 kernels" in sentence and "not a cross-check" not in sentence


def test_cross_check_runs_native_avx512_for_notebooks_executed_with_avx2():
    env, sentence = choose_cross_check("AVX512", {"a.ipynb": "AVX2"})
    assert env == {}
    assert "with AVX512 kernels (native kernels)" in sentence


def test_cross_check_says_so_where_the_cpu_offers_no_other_level():
    env, sentence = choose_cross_check("AVX2", {"a.ipynb": "AVX2", "b.ipynb": "AVX512"})
    assert env == {}
    assert "not a cross-check for 1 notebook(s) executed under AVX2" in sentence
    assert "a.ipynb" in sentence and "b.ipynb" not in sentence


def test_every_stored_notebook_records_its_instruction_set():
    from book.notebooks.common import META_KEY

    for path in STORED_NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        assert nb.metadata.get(META_KEY, {}).get("cpu_capability") in {"AVX512", "AVX2"}, (
            f"{path.name}: no recorded cpu_capability; re-execute it with `make execute`"
        )


def test_every_tolerance_in_the_book_names_a_class_on_a_checked_cell():
    from book.notebooks.common import read_py

    for folder in ("chapters", "solutions", "exercises"):
        for path in sorted((REPO / folder).glob("[0-9][0-9]_*.py")):
            for cell in read_py(path).cells:
                tolerance_of(cell)  # raises, naming the problem


def test_progress_bars_and_the_claims_cell_counts_are_not_compared():
    from book.claims import CLAIMS_MIME
    from book.notebooks.tolerance import _flatten

    class Cell:  # what _flatten reads of an nbval cell: its sanitizer
        def sanitize(self, s):
            return "TQDM-BAR" if isinstance(s, str) and s.startswith("training: ") else s

    record = {"version": 1, "claims": [{"id": "C1", "verdict": "partly", "cell": 8}]}
    stored = [
        {"output_type": "display_data", "data": {"text/plain": "training: 3/3", "text/html": "x"}},
        {"output_type": "display_data", "data": {CLAIMS_MIME: record}},
    ]
    fresh = [{"output_type": "display_data", "data": {CLAIMS_MIME: {**record, "claims": [
        {"id": "C1", "verdict": "partly", "cell": 1}]}}}]  # fmt: skip
    assert _flatten(Cell(), stored, ()) == _flatten(Cell(), fresh, ())
    changed = [{"output_type": "display_data", "data": {CLAIMS_MIME: {**record, "claims": [
        {"id": "C1", "verdict": "reproduced", "cell": 8}]}}}]  # fmt: skip
    assert _flatten(Cell(), stored, ()) != _flatten(Cell(), changed, ())
