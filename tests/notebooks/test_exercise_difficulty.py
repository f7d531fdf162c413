"""Every exercise heading ends with its difficulty on README's scale: ★, ★★ or ★★★.

``## Exercise 02.1 — Scaled dot-product attention with a mask (★★)``: the id and title as
before, then one to three stars in parentheses. Both the solutions and the generated exercises
are read, each as its ``.py`` and its ``.ipynb``.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from book.notebooks.common import REPO, read_ipynb, read_py

# Any markdown heading that starts with "Exercise" is an exercise heading.
EXERCISE_HEADING = re.compile(r"^#{1,6}\s+Exercise\b.*$", re.M)
MARKED = re.compile(r"^## Exercise \d+\.\d+ — \S.* \((★{1,3})\)$")

NOTEBOOKS = sorted(
    path
    for folder in ("solutions", "exercises")
    for path in (REPO / folder).glob("[0-9][0-9]_*")
    if path.suffix in (".py", ".ipynb")
)


def heading_problems(nb: nbformat.NotebookNode, where: str) -> list[str]:
    """One line per exercise heading of ``nb`` whose difficulty mark is missing or off-scale."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for heading in EXERCISE_HEADING.findall(cell.source):
            if not MARKED.match(heading):
                problems.append(
                    f"{where}, cell {index}: {heading!r} does not end with its difficulty, "
                    "(★), (★★) or (★★★)"
                )
    return problems


def exercise_headings(nb: nbformat.NotebookNode) -> list[str]:
    return [
        heading
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for heading in EXERCISE_HEADING.findall(cell.source)
    ]


def test_the_notebooks_are_found():
    assert {p.parent.name for p in NOTEBOOKS} == {"solutions", "exercises"}
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_exercise_heading_has_a_difficulty(path: Path):
    nb = read_py(path) if path.suffix == ".py" else read_ipynb(path)
    assert exercise_headings(nb), f"{path.name}: no exercise heading found"
    assert heading_problems(nb, f"{path.parent.name}/{path.name}") == []


TOY = """\
# %% [markdown]
# # Chapter 42: toy

# %% [markdown]
# ## Exercise 42.1 — Double (★)
#
# Write `double(x)`.

# %% [markdown]
# ## Exercise 42.2 — Count the parameters
#
# No mark.

# %% [markdown]
# ## Exercise 42.3 — Four stars (★★★★)

# %% [markdown]
# ## Exercise 42.4 — Asterisks (**)

# %% [markdown]
# ### Exercise 42.5 — Too deep (★★★)
"""


def test_a_missing_or_off_scale_mark_is_caught(tmp_path):
    path = tmp_path / "42_toy.py"
    path.write_text(TOY, encoding="utf-8")
    problems = heading_problems(read_py(path), "42_toy.py")
    assert [p.split(":", 1)[0] for p in problems] == [
        "42_toy.py, cell 2",
        "42_toy.py, cell 3",
        "42_toy.py, cell 4",
        "42_toy.py, cell 5",
    ]
    assert "Count the parameters" in problems[0]
    assert "(★), (★★) or (★★★)" in problems[0]


@pytest.mark.parametrize("mark", ["★", "★★", "★★★"])
def test_each_mark_of_the_scale_passes(tmp_path, mark):
    path = tmp_path / "42_toy.py"
    path.write_text(f"# %% [markdown]\n# ## Exercise 42.1 — Double ({mark})\n", encoding="utf-8")
    assert heading_problems(read_py(path), "42_toy.py") == []
