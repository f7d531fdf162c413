"""Exercise notebooks run, and the only errors they raise are their stubs' NotImplementedError;
``make check`` (python -m book.notebooks.check) reports every exercise, on a copy of the notebook.

The toy tests execute a small solution, the exercise generated from it, and a learner's
half-done copy of that exercise (three kernels). The last test executes every committed
exercise notebook of the book (slow: as long as the exercises take to run).
"""

from __future__ import annotations

import os
import shutil
import time

import nbformat
import pytest

from book.notebooks import check as check_exercises
from book.notebooks import workbook
from book.notebooks.check import check_notebook, find_exercise, format_report
from book.notebooks.common import REPO, notebook_files, read_py, write_ipynb
from book.notebooks.exercises import main as exercises_main
from book.notebooks.exercises import write_exercise

pytestmark = pytest.mark.slow  # executes notebooks

SOLUTION = """\
# %% [markdown]
# # Chapter 94: toy

# %%
from book.checks import CheckFailed, check, expect_equal, register


@register("94.1", title="Double a number")
def _(candidate):
    expect_equal("double(3)", candidate(3), 6, hint="twice the input")


@register("94.2", title="Count heads")
def _(candidate):
    if candidate() != 8:
        raise CheckFailed(f"n_heads() is {candidate()}, expected 8")


# %% [markdown]
# ## Exercise 94.1 — Double a number

# %%
def double(x: int) -> int:
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION


# %%
check("94.1", double)

# %% [markdown]
# ## Exercise 94.2 — Count heads

# %%
def n_heads() -> int:
    ### BEGIN SOLUTION
    return 8
    ### END SOLUTION


# %%
check("94.2", n_heads)

# %%
double(5)  # calling a stub outside check(): the exercise raises NotImplementedError here
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("book")
    solution = root / "solutions" / "94_toy.py"
    solution.parent.mkdir()
    solution.write_text(SOLUTION)
    exercise = write_exercise(solution, root / "exercises")
    return solution, exercise


def errors_other_than_stubs(report) -> list[str]:
    return [str(e) for e in report.errors if e.ename != "NotImplementedError"]


def test_solution_passes_every_check(toy):
    solution, _ = toy
    report = check_notebook(solution)
    assert [(r.id, r.title, r.passed) for r in report.rows] == [
        ("94.1", "Double a number", True),
        ("94.2", "Count heads", True),
    ]
    assert report.errors == [] and report.passed


def test_fresh_exercise_fails_every_check_and_raises_only_stub_errors(toy):
    _, exercise = toy
    ipynb = exercise.with_suffix(".ipynb")
    before = ipynb.read_bytes(), ipynb.stat().st_mtime_ns
    report = check_notebook(ipynb)
    assert [(r.id, r.passed, r.message) for r in report.rows] == [
        ("94.1", False, "not implemented yet"),
        ("94.2", False, "not implemented yet"),
    ]
    nb = nbformat.read(ipynb, as_version=4)
    [direct_call] = [i for i, c in enumerate(nb.cells) if c.source.startswith("double(5)")]
    assert [(e.cell, e.ename, e.evalue) for e in report.errors] == [
        (direct_call, "NotImplementedError", "Exercise 94.1")
    ]
    assert errors_other_than_stubs(report) == []
    assert (ipynb.read_bytes(), ipynb.stat().st_mtime_ns) == before  # ran on a copy
    assert not report.passed


def test_learner_progress_is_tabulated_and_other_errors_are_reported(toy, tmp_path, capsys):
    _, exercise = toy
    nb = nbformat.read(exercise.with_suffix(".ipynb"), as_version=4)
    [cell] = [c for c in nb.cells if c.source.startswith("def double")]
    cell.source = "def double(x: int) -> int:\n    return x + x"
    [cell] = [c for c in nb.cells if c.source.startswith("def n_heads")]
    cell.source = "def n_heads() -> int:\n    return heads  # a NameError, only when called"
    nb.cells.append(nbformat.v4.new_code_cell("print(undefined_name)"))
    learner = tmp_path / "94_toy.ipynb"
    nbformat.write(nb, learner)

    assert check_exercises.main(["--notebook", str(learner)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.split()[:2] == ["94.1", "Double"] and "✓" in line for line in lines)
    [row] = [line for line in lines if line.startswith("94.2")]
    assert "✗" in row and "your code raised NameError: name 'heads' is not defined" in row
    assert "1/2 exercises pass" in out
    last = len(nb.cells) - 1
    assert f"cell {last}: NameError: name 'undefined_name' is not defined" in out


def test_a_deleted_check_cell_still_counts_as_a_failure(toy):
    solution, _ = toy
    report = check_exercises.Report(solution, [], [])
    assert not report.passed  # no exercise found is not a pass
    row = check_exercises.Row("94.3", "?", False, "its check(...) cell did not run")
    text = format_report(check_exercises.Report(solution, [row], []))
    assert "94.3" in text and "✗" in text and "0/1 exercises pass" in text


def test_find_exercise_checks_an_agreeing_pair_by_its_ipynb_else_the_file_saved_last(tmp_path):
    folder = tmp_path / "my-exercises"
    folder.mkdir()
    py, ipynb = folder / "03_multi_head.py", folder / "03_multi_head.ipynb"
    py.write_text("# %%\nx = 1\n")
    assert find_exercise("3", folder) == (py, "")  # only the .py
    write_ipynb(read_py(py), ipynb)  # what JupyterLab's pairing saves: the same cells
    assert find_exercise("03", folder) == (ipynb, "its .py twin holds the same cells")
    now = time.time()
    py.write_text("# %%\nx = 2\n")  # edited outside JupyterLab
    os.utime(py, (now + 10, now + 10))
    path, note = find_exercise("03", folder)
    assert path == py and note.startswith("saved after 03_multi_head.ipynb, whose cells differ")
    os.utime(ipynb, (now + 20, now + 20))
    assert find_exercise("03", folder)[0] == ipynb
    with pytest.raises(SystemExit, match="expected one my-exercises/04_"):
        find_exercise("04", folder)
    with pytest.raises(SystemExit, match="CH must be a chapter number"):
        find_exercise("three", folder)


def test_make_check_exits_zero_with_the_table_and_names_the_file(toy, tmp_path, capsys):
    _, exercise = toy
    assert workbook.prepare(exercise.parent.parent) == [
        exercise.parent.parent / workbook.WORK_DIR / exercise.name
    ]
    args = ["--root", str(exercise.parent.parent), "94"]
    assert check_exercises.main(args) == 1  # nothing solved yet
    assert check_exercises.main(["--exit-zero", *args]) == 0  # make check: the table is the result
    out = capsys.readouterr().out
    copy = "my-exercises/94_toy.ipynb (a copy; your file is unchanged; its .py twin holds"
    assert copy in out


def test_the_workbook_copies_new_chapters_and_never_overwrites_a_copy(toy, tmp_path):
    _, exercise = toy
    root = tmp_path / "book"
    shutil.copytree(exercise.parent, root / "exercises")
    [copy] = workbook.prepare(root)
    assert copy == root / "my-exercises" / "94_toy.py"
    assert copy.read_bytes() == exercise.read_bytes()
    assert copy.with_suffix(".ipynb").read_bytes() == exercise.with_suffix(".ipynb").read_bytes()
    copy.with_suffix(".ipynb").write_text("my work")
    copy.unlink()  # one file of the pair left: still the learner's
    assert workbook.prepare(root) == []
    assert copy.with_suffix(".ipynb").read_text() == "my work"


@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook",
    notebook_files(("exercises",))
    or [pytest.param(None, marks=pytest.mark.skip("no exercises yet"))],
    ids=lambda p: p.stem if p else "none",
)
def test_book_exercises_raise_only_stub_errors_and_fail_every_check(notebook):
    report = check_notebook(notebook)
    name = notebook.relative_to(REPO)
    assert errors_other_than_stubs(report) == [], f"{name}: unexpected errors"
    assert report.rows, f"{name}: no check(...) calls"
    passing = [r.id for r in report.rows if r.passed]
    assert passing == [], f"{name}: exercises pass before they are solved: {passing}"


# ---- bad paths: one line on stderr and an exit code, never a traceback ---------------------


def _bad_paths(tmp_path):
    """A truncated .ipynb, a non-notebook file, a folder and a missing file."""
    truncated = tmp_path / "05_truncated.ipynb"
    truncated.write_text('{"cells": [{"cell_type": "code", "sou')
    text = tmp_path / "notes.txt"
    text.write_text("not a notebook\n")
    folder = tmp_path / "a_folder"
    folder.mkdir()
    return {
        "truncated": (truncated, "cannot read"),
        "not a notebook": (text, "is not a notebook"),
        "folder": (folder, "is a folder"),
        "missing": (tmp_path / "07_missing.ipynb", "no such notebook"),
    }


@pytest.mark.parametrize("kind", ["truncated", "not a notebook", "folder", "missing"])
def test_learner_check_reports_a_bad_notebook_path_in_one_line(kind, tmp_path, capsys):
    path, words = _bad_paths(tmp_path)[kind]
    assert check_exercises.main(["--notebook", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and words in err and str(path.name) in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_learner_check_reports_a_truncated_twin_met_while_choosing(tmp_path, capsys):
    folder = tmp_path / "my-exercises"
    folder.mkdir()
    (folder / "05_x.py").write_text("# %%\nx = 1\n")
    (folder / "05_x.ipynb").write_text('{"cells": [')
    assert check_exercises.main(["05", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot read") and len(err.splitlines()) == 1


@pytest.mark.parametrize("kind", ["truncated", "not a notebook", "folder", "missing"])
def test_exercise_generator_reports_a_bad_solution_path_in_one_line(kind, tmp_path, capsys):
    path, words = _bad_paths(tmp_path)[kind]
    if kind == "truncated":  # the generator reads the .py twin: make that one broken
        path = path.with_suffix(".py")
        path.write_bytes(b"\xff\xfe\x00 not utf-8")
        words = "cannot read"
    elif kind == "missing":
        words = "no such notebook"
    assert exercises_main([str(path), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and words in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_exercise_generator_reports_a_truncated_exercise_ipynb_in_one_line(toy, tmp_path, capsys):
    solution, _ = toy
    out = tmp_path / "out"
    out.mkdir()
    (out / "94_toy.ipynb").write_text('{"cells": [')  # a broken earlier output
    assert exercises_main([str(solution), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "94_toy" in err and len(err.splitlines()) == 1
