"""Stored outputs are fresh: every chapter and solution was executed top to bottom, by
``make execute``, from the sources it holds now, without errors.

The toy tests execute a small notebook once and then corrupt copies of the result, so that
each way of going stale is seen to be caught.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from book.notebooks import execute as execute_notebooks
from book.notebooks.common import (
    KERNELSPEC,
    META_KEY,
    REPO,
    WIDGET_MIME,
    notebook_files,
    read_py,
    set_stable_ids,
    stale_problems,
)

MAX_NOTEBOOK_BYTES = 2_000_000

TOY = """\
# %% [markdown]
# # A toy chapter

# %% tags=["nbval-check-output"]
import os

print(os.getcwd())

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(2, 2), dpi=50)
ax.plot([0, 1], [1, 0])
ax.set_title("a line")
plt.show()

# %%

# %%
from book.progress import progress

total = sum(i for i in progress(range(3), desc="toy loop"))
total

# %% tags=["raises-exception"]
raise ValueError("shown on purpose")
"""


def test_every_chapter_and_solution_is_freshly_executed():
    problems = [p for nb in notebook_files(("chapters", "solutions")) for p in stale_problems(nb)]
    assert not problems, "stale notebook outputs:\n" + "\n".join(problems)


def test_notebooks_stay_small_and_exercises_have_no_outputs():
    too_big = [
        f"{p.relative_to(REPO)}: {p.stat().st_size / 1e6:.1f} MB"
        for p in notebook_files()
        if p.stat().st_size > MAX_NOTEBOOK_BYTES
    ]
    assert not too_big, "notebooks over 2 MB (lower the figures' dpi):\n" + "\n".join(too_big)
    with_outputs = [
        f"{p.relative_to(REPO)}, cell {i}"
        for p in notebook_files(("exercises",))
        for i, cell in enumerate(nbformat.read(p, as_version=4).cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not with_outputs, "exercise cells with outputs (run `make exercises`):\n" + "\n".join(
        with_outputs
    )


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """A toy chapter executed by the real tool: (folder, .py, .ipynb)."""
    folder = tmp_path_factory.mktemp("chapters")
    py = folder / "01_toy.py"
    py.write_text(TOY)
    seconds = execute_notebooks.execute_one(py, timeout=60)
    assert seconds > 0
    return folder, py, py.with_suffix(".ipynb")


@pytest.fixture
def copy(executed, tmp_path):
    """A fresh copy of the executed toy notebook, to corrupt."""
    _, py, ipynb = executed
    shutil.copy(py, tmp_path / py.name)
    shutil.copy(ipynb, tmp_path / ipynb.name)
    return tmp_path / ipynb.name


@pytest.mark.slow  # executes a toy notebook
def test_execution_writes_outputs_records_and_leaves_the_source_alone(executed):
    folder, py, ipynb = executed
    assert py.read_text() == TOY
    nb = nbformat.read(ipynb, as_version=4)
    assert stale_problems(ipynb) == []
    assert nb.metadata["kernelspec"] == KERNELSPEC
    assert nb.metadata[META_KEY]["executed_from"] == "01_toy.py"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, None, 3, 4]  # the empty cell is skipped
    assert code[0].outputs[0]["text"].strip() == str(folder)  # cwd = the notebook's folder
    assert "image/png" in code[1].outputs[0]["data"]  # figures are stored (inline backend)
    assert all(WIDGET_MIME not in out.get("data", {}) for c in code for out in c.outputs)
    bar, result = code[3].outputs  # the bar's last state, without timings, then the value
    assert bar["output_type"] == "display_data" and bar["data"] == {"text/plain": "toy loop: 3/3"}
    assert result["data"]["text/plain"] == "3"
    assert code[4].outputs[0]["ename"] == "ValueError"  # allowed: tagged raises-exception


def test_cell_ids_depend_only_on_content():
    nb = read_py_text(TOY)
    again = read_py_text(TOY)
    set_stable_ids(nb)
    set_stable_ids(again)
    assert [c.id for c in nb.cells] == [c.id for c in again.cells]
    assert len({c.id for c in nb.cells}) == len(nb.cells)


def read_py_text(text: str) -> nbformat.NotebookNode:
    return jupytext.reads(text, fmt="py:percent")


def edit(path: Path, change) -> None:
    nb = nbformat.read(path, as_version=4)
    change(nb)
    nbformat.write(nb, path)


@pytest.mark.slow  # executes a toy notebook
def test_an_edited_source_is_stale(copy):
    edit(copy, lambda nb: setattr(nb.cells[2], "source", nb.cells[2].source + "\nplt.close()"))
    problems = stale_problems(copy)
    assert problems[0].startswith(f"{copy}, cell 2: source changed since it was executed")
    assert problems[-1].endswith("run `make execute NB=" + str(copy.with_suffix(".py")) + "`")


@pytest.mark.slow  # executes a toy notebook
def test_a_cell_without_a_record_is_stale(copy):
    edit(copy, lambda nb: nb.cells[1].metadata.pop(META_KEY))
    assert stale_problems(copy)[0] == (
        f"{copy}, cell 1: never executed by `make execute` (no source hash)"
    )


@pytest.mark.slow  # executes a toy notebook
def test_out_of_order_execution_is_stale(copy):
    def rerun_first_cell(nb):
        nb.cells[1].execution_count = 5

    edit(copy, rerun_first_cell)
    assert stale_problems(copy)[0] == (
        f"{copy}, cell 1: execution count 5, expected 1 (not one top-to-bottom run)"
    )


@pytest.mark.slow  # executes a toy notebook
def test_a_stored_error_is_stale_unless_tagged(copy):
    edit(copy, lambda nb: nb.cells[-1].metadata.update(tags=[]))
    assert stale_problems(copy)[0] == (f"{copy}, cell 5: stored error ValueError: shown on purpose")


@pytest.mark.slow  # executes a toy notebook
def test_a_stored_widget_view_is_stale(copy):
    widget = nbformat.v4.new_output("display_data", data={WIDGET_MIME: {"model_id": "abc"}})
    edit(copy, lambda nb: nb.cells[4].outputs.append(widget))
    [problem, _] = stale_problems(copy)
    assert problem.startswith(f"{copy}, cell 4: stores a widget view")
    assert "book.progress.progress" in problem


@pytest.mark.slow  # executes a toy notebook
def test_a_failing_notebook_is_not_written_and_names_the_cell(tmp_path):
    py = tmp_path / "02_broken.py"
    py.write_text("# %%\nx = 1\n\n# %%\n1 / 0\n")
    with pytest.raises(CellExecutionError, match=r"02_broken.py, cell 1:[\s\S]*ZeroDivisionError"):
        execute_notebooks.execute_one(py, timeout=60)
    assert not py.with_suffix(".ipynb").exists()


def test_paths_resolve_to_py_sources_and_exercises_are_refused(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "exercises").mkdir()
    a = tmp_path / "chapters" / "01_a.py"
    b = tmp_path / "chapters" / "02_b.py"
    for p in (a, b):
        p.write_text("# %%\n")
    assert execute_notebooks.resolve([str(b.with_suffix(".ipynb")), str(a)]) == [b, a]
    assert execute_notebooks.resolve([str(tmp_path / "chapters")]) == [a, b]
    with pytest.raises(SystemExit, match="no py:percent source"):
        execute_notebooks.resolve([str(tmp_path / "chapters" / "03_c.py")])
    ex = tmp_path / "exercises" / "01_a.py"
    ex.write_text("# %%\n")
    with pytest.raises(SystemExit, match="is an exercise notebook"):
        execute_notebooks.resolve([str(ex)])
    assert read_py(a).cells[0].source == ""
