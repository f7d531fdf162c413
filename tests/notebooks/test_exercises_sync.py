"""Exercises are generated from the solutions (`make exercises`) and committed in sync.

Static tests: nothing is executed here (tests/test_exercise_errors.py runs notebooks).
"""

from __future__ import annotations

import re

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from book.notebooks import exercises as make_exercises
from book.notebooks.common import (
    CHECK_CALL,
    META_KEY,
    REPO,
    content_hash,
    notebook_files,
    py_text,
    read_ipynb,
    read_py,
)
from book.notebooks.exercises import (
    BEGIN,
    END,
    ExerciseError,
    learner_edits,
    make_exercise,
    write_exercise,
)

SOLUTION = '''\
# %% [markdown]
# # Chapter 42: toy

# %%
from book.checks import check

# %% [markdown]
# ## Exercise 42.1 — Double

# %%
def double(x: int) -> int:
    """Twice x."""
    ### BEGIN SOLUTION
    y = 2 * x
    return y
    ### END SOLUTION


# %%
check("42.1", double)

# %% tags=["solution_only"]
print(double(21))

# %% [markdown]
# ## Exercise 42.2 — Count the parameters

# %%
def n_params() -> int:
    if True:
        ### BEGIN SOLUTION
        return 4 * 512 * 512
        ### END SOLUTION


def helper():
    ### BEGIN SOLUTION
    return 1
    ### END SOLUTION


# %%
check("42.2", n_params)
'''


# --- the committed book -------------------------------------------------------------------


def test_committed_exercises_are_what_the_solutions_generate():
    problems = []
    solutions = sorted((REPO / "solutions").glob("*.py"))
    for solution in solutions:
        exercise_py = REPO / "exercises" / solution.name
        expected = make_exercise(solution)
        name = f"exercises/{solution.stem}"
        if not exercise_py.exists() or not exercise_py.with_suffix(".ipynb").exists():
            problems.append(f"{name}: missing .py or .ipynb")
            continue
        if exercise_py.read_text(encoding="utf-8") != py_text(expected):
            problems.append(f"{name}.py differs from what solutions/{solution.name} generates")
        committed = read_ipynb(exercise_py.with_suffix(".ipynb"))
        if [(c.cell_type, c.source) for c in committed.cells] != [
            (c.cell_type, c.source) for c in expected.cells
        ]:
            problems.append(
                f"{name}.ipynb cells differ from what solutions/{solution.name} generates"
            )
        if committed.metadata.get(META_KEY) != expected.metadata[META_KEY]:
            problems.append(f"{name}.ipynb: generation record differs")
    stray = {p.stem for p in notebook_files(("exercises",), suffix=".py")} - {
        s.stem for s in solutions
    }
    problems += [f"exercises/{stem}: no solutions/{stem}.py" for stem in sorted(stray)]
    if problems:
        problems.append("run `make exercises` (FORCE=1 to overwrite edited exercises)")
    assert not problems, "\n".join(problems)


def test_solutions_pass_their_own_checks():
    """The stored output of every check(...) cell of a solution is a ✓ line."""
    problems = []
    for path in notebook_files(("solutions",)):
        nb = read_ipynb(path)
        for i, cell in enumerate(nb.cells):
            ids = CHECK_CALL.findall(cell.source) if cell.cell_type == "code" else []
            if not ids:
                continue
            text = "".join(
                o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream"
            )
            for exercise_id in ids:
                if f"✓ Exercise {exercise_id} — " not in text:
                    problems.append(f"{path.relative_to(REPO)}, cell {i}: no ✓ for {exercise_id}")
            problems += [
                f"{path.relative_to(REPO)}, cell {i}: {line}"
                for line in text.splitlines()
                if line.startswith("✗")
            ]
    assert not problems, "solutions that fail their checks:\n" + "\n".join(problems)


# --- the generator, on a toy solution -------------------------------------------------------


@pytest.fixture
def solution(tmp_path):
    path = tmp_path / "solutions" / "42_toy.py"
    path.parent.mkdir()
    path.write_text(SOLUTION)
    return path


def code(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_blocks_become_stubs_at_their_indentation_with_the_next_check_id(solution):
    nb = make_exercise(solution)
    sources = code(nb)
    assert sources[1] == (
        "def double(x: int) -> int:\n"
        '    """Twice x."""\n'
        '    raise NotImplementedError("Exercise 42.1")'
    )
    assert sources[3] == (
        "def n_params() -> int:\n"
        "    if True:\n"
        '        raise NotImplementedError("Exercise 42.2")\n'
        "\n\n"
        "def helper():\n"
        '    raise NotImplementedError("Exercise 42.2")'
    )
    text = "\n".join(c.source for c in nb.cells)
    assert BEGIN not in text and END not in text and "2 * x" not in text
    assert "print(double(21))" not in text  # solution_only cells are dropped
    assert sources[2] == 'check("42.1", double)'


def test_header_follows_the_title_and_says_how_to_check(solution):
    nb = make_exercise(solution)
    assert nb.cells[0].source == "# Chapter 42: toy"
    header = nb.cells[1].source
    assert nb.cells[1].cell_type == "markdown"
    assert "make check CH=42" in header
    # The worked answers as JupyterLab lists them: the .py twin (the .ipynb is hidden).
    assert "Worked answers: `solutions/42_toy.py`" in header


def test_generated_lines_fit_the_line_length_with_a_long_slug(tmp_path):
    path = tmp_path / "05_a_rather_long_chapter_slug_name.py"
    path.write_text(SOLUTION.replace("42", "05"))
    too_long = [line for line in py_text(make_exercise(path)).splitlines() if len(line) > 100]
    assert too_long == []


def test_exercise_has_no_outputs_and_records_its_hash(solution):
    nb = make_exercise(solution)
    assert all(
        c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code"
    )
    assert nb.metadata[META_KEY] == {
        "generated_from": "solutions/42_toy.py",
        "generated_sha256": content_hash(nb),
    }


def test_blocks_without_a_later_check_are_numbered(tmp_path):
    path = tmp_path / "07_numbered.py"
    path.write_text("# %%\ndef a():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
    assert 'raise NotImplementedError("Exercise 07.1")' in code(make_exercise(path))[0]


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (f"# %%\n{BEGIN}\nx = 1\n", rf"cell 0, line 1: {BEGIN} without {END}"),
        (f"# %%\nx = 1\n{END}\n", rf"cell 0, line 2: {END} without {BEGIN}"),
        (f"# %%\n{BEGIN}\n{BEGIN}\n{END}\n", rf"cell 0, line 2: {BEGIN} inside another block"),
        ("# %%\nx = 1\n", "no ### BEGIN SOLUTION / ### END SOLUTION block"),
        (
            f'# %%\n{BEGIN}\n{END}\n\n# %%\ncheck("08.1", f)\n',
            r"cell 1: check\('08.1', ...\) is not an exercise of chapter 07",
        ),
    ],
)
def test_malformed_solutions_are_refused_with_file_and_cell(tmp_path, source, match):
    path = tmp_path / "07_bad.py"
    path.write_text(source)
    with pytest.raises(ExerciseError, match=match):
        make_exercise(path)


def test_solution_names_must_carry_the_chapter(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(SOLUTION)
    with pytest.raises(ExerciseError, match="named NN_slug.py"):
        make_exercise(path)


def test_written_pair_round_trips_and_regenerating_is_idempotent(solution, tmp_path):
    out = tmp_path / "exercises"
    py = write_exercise(solution, out)
    nb = read_ipynb(py.with_suffix(".ipynb"))
    assert (
        content_hash(read_py(py)) == content_hash(nb) == nb.metadata[META_KEY]["generated_sha256"]
    )
    assert learner_edits(py) is None
    first = py.read_text(), py.with_suffix(".ipynb").read_text()
    write_exercise(solution, out)
    assert (py.read_text(), py.with_suffix(".ipynb").read_text()) == first


@pytest.mark.parametrize("edited", [".ipynb", ".py"])
def test_learner_edits_are_not_overwritten_without_force(solution, tmp_path, edited, capsys):
    out = tmp_path / "exercises"
    py = write_exercise(solution, out)
    answer = "def double(x: int) -> int:\n    return x + x"
    if edited == ".ipynb":
        nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
        nb.cells[4].source = answer  # the cell of Exercise 42.1
        nbformat.write(nb, py.with_suffix(".ipynb"))
    else:
        py.write_text(
            py.read_text().replace(
                '    raise NotImplementedError("Exercise 42.1")', "    return x + x", 1
            )
        )
    assert learner_edits(py) == f"{py.with_suffix(edited)} was edited since it was generated"
    before = py.read_bytes(), py.with_suffix(".ipynb").read_bytes()
    with pytest.raises(FileExistsError, match="make exercises FORCE=1"):
        write_exercise(solution, out)
    assert (py.read_bytes(), py.with_suffix(".ipynb").read_bytes()) == before
    assert make_exercises.main([str(solution), "--out", str(out)]) == 1
    assert "not overwriting" in capsys.readouterr().err
    assert make_exercises.main([str(solution), "--out", str(out), "--force"]) == 0
    assert learner_edits(py) is None


def test_an_exercise_not_made_by_the_generator_is_not_overwritten(solution, tmp_path):
    out = tmp_path / "exercises"
    out.mkdir()
    (out / "42_toy.py").write_text("# %%\nmy_work = 1\n")
    with pytest.raises(FileExistsError, match="exists without its .ipynb"):
        write_exercise(solution, out)


# --- block replacement, for any block layout --------------------------------------------------


block = st.tuples(
    st.integers(0, 3),  # indentation level
    st.lists(st.sampled_from(["x = 1", "return x", "pass", "# note"]), max_size=3),  # body
)
plain = st.lists(st.sampled_from(["a = 0", "def f():", "    y = 1", "", "# text"]), max_size=3)


@settings(max_examples=40, deadline=None)
@given(layout=st.lists(st.tuples(plain, block), min_size=1, max_size=4), tail=plain)
def test_any_layout_keeps_every_other_line_and_stubs_every_block(tmp_path_factory, layout, tail):
    lines, expected = [], []
    for before, (level, body) in layout:
        indent = "    " * level
        lines += before + [indent + BEGIN] + [indent + b for b in body] + [indent + END]
        expected += before + [f'{indent}raise NotImplementedError("Exercise 05.1")']
    lines += tail + ['check("05.1", f)']
    expected += tail + ['check("05.1", f)']
    path = tmp_path_factory.mktemp("sol") / "05_any.py"
    path.write_text("# %%\n" + "\n".join(lines) + "\n")
    got = code(make_exercise(path))[0]
    # jupytext drops leading/trailing blank lines of a cell: compare the stripped text
    assert got.strip("\n") == "\n".join(expected).strip("\n")
    assert len(re.findall("NotImplementedError", got)) == len(layout)
