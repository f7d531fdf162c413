"""Every notebook has a py:percent twin with the same cells (types, sources, tags).

The ``.py`` is the source; the ``.ipynb`` is generated from it (``make execute``,
``make exercises``) or saved with it by JupyterLab's jupytext pairing. A pair whose cells differ
means one side was edited alone. The test never runs ``jupytext --sync``: it reads both sides.
"""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest
from jupytext.config import find_jupytext_configuration_file

from book.notebooks.common import (
    META_KEY,
    NOTEBOOK_DIRS,
    REPO,
    jupytext_config,
    notebook_files,
    pair_problems,
    py_text,
    read_py,
    write_ipynb,
)

TOY = """\
# %% [markdown]
# # A toy chapter

# %% tags=["nbval-check-output"]
x = 2
print(x)

# %%
def f(y):
    return y + 1
"""


def test_every_notebook_in_the_book_has_an_identical_twin():
    stems = {p.with_suffix("") for s in (".ipynb", ".py") for p in notebook_files(suffix=s)}
    problems = [
        problem
        for stem in sorted(stems)
        for problem in pair_problems(stem.with_suffix(".py"), stem.with_suffix(".ipynb"))
    ]
    assert not problems, "notebook pairs differ:\n" + "\n".join(problems)


# The cell tags the book uses: nbval's (in nbval's spelling; it ignores any other, so a
# mistyped "check output" tag would silently turn a checked cell into an unchecked one) and
# the exercise generator's.
KNOWN_TAGS = {"nbval-check-output", "nbval-ignore-output", "raises-exception", "solution_only"}


def test_every_cell_tag_is_one_the_tools_read():
    unknown = [
        f"{path.relative_to(REPO)}, cell {n}: {tag!r}"
        for path in notebook_files(suffix=".py")
        for n, cell in enumerate(read_py(path).cells)
        for tag in cell.metadata.get("tags", [])
        if tag not in KNOWN_TAGS
    ]
    assert not unknown, f"tags nothing reads (known: {sorted(KNOWN_TAGS)}):\n" + "\n".join(unknown)


def test_jupytext_config_pairs_with_py_percent_and_keeps_headers_stable():
    assert jupytext_config().formats in ("ipynb,py:percent", ["ipynb,py:percent"])
    for folder in NOTEBOOK_DIRS:  # what the CLI and JupyterLab find for a notebook there
        assert find_jupytext_configuration_file(str(REPO / folder)) == str(REPO / "jupytext.toml")
    nb = nbformat.v4.new_notebook()
    nb.metadata["jupytext"] = {"text_representation": {"jupytext_version": "9.9.9"}}
    nb.metadata[META_KEY] = {"execution_seconds": 1.0}
    nb.metadata["language_info"] = {"version": "3.11.7"}
    cell = nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["nbval-check-output"]})
    cell.metadata[META_KEY] = {"source_sha256": "abc"}
    nb.cells.append(cell)
    text = py_text(nb)
    assert "9.9.9" not in text and "jupytext_version:" not in text
    assert "execution_seconds" not in text  # execution records stay in the .ipynb
    assert "source_sha256" not in text
    assert "3.11.7" not in text
    assert '# %% tags=["nbval-check-output"]\nx = 1' in text


@pytest.fixture
def toy_pair(tmp_path):
    py = tmp_path / "01_toy.py"
    py.write_text(TOY)
    ipynb = py.with_suffix(".ipynb")
    write_ipynb(read_py(py), ipynb)
    return py, ipynb


def test_a_fresh_pair_has_no_problem(toy_pair):
    assert pair_problems(*toy_pair) == []


def edit_ipynb(path, edit):
    nb = nbformat.read(path, as_version=4)
    edit(nb)
    nbformat.write(nb, path)


def test_an_edited_source_is_reported_with_notebook_cell_and_line(toy_pair):
    py, ipynb = toy_pair
    edit_ipynb(ipynb, lambda nb: setattr(nb.cells[1], "source", "x = 3\nprint(x)"))
    [problem] = pair_problems(py, ipynb)
    assert problem.startswith(f"{ipynb}, cell 1: sources differ, line 1:")
    assert "'x = 2'" in problem and "'x = 3'" in problem


def test_different_tags_are_reported(toy_pair):
    py, ipynb = toy_pair
    edit_ipynb(ipynb, lambda nb: nb.cells[1].metadata.update(tags=[]))
    assert pair_problems(py, ipynb) == [
        f"{ipynb}, cell 1: tags differ, .py has ['nbval-check-output'], .ipynb has []"
    ]


def test_a_changed_cell_type_and_an_extra_cell_are_reported(toy_pair):
    py, ipynb = toy_pair
    edit_ipynb(ipynb, lambda nb: nb.cells.append(nbformat.v4.new_code_cell("y = 1")))
    assert pair_problems(py, ipynb) == [f"{ipynb}: the .py has 3 cells, the .ipynb has 4"]
    py.write_text(TOY.replace("# %%\ndef f", "# %% [markdown]\ndef f"))
    problems = pair_problems(py, ipynb)
    assert f"{ipynb}, cell 2: .py has a markdown cell, .ipynb a code cell" in problems


def test_a_pair_jupyterlab_would_refuse_to_open_is_reported(toy_pair):
    py, ipynb = toy_pair
    old_filter = "-jupytext.text_representation.jupytext_version,-attention_book"
    edit_ipynb(ipynb, lambda nb: nb.metadata.setdefault("jupytext", {}).update(
        notebook_metadata_filter=old_filter))  # fmt: skip
    [problem] = pair_problems(py, ipynb)
    assert "JupyterLab would refuse to open it" in problem and "notebook_metadata_filter" in problem


def test_a_missing_twin_is_reported(toy_pair):
    py, ipynb = toy_pair
    py.unlink()
    assert "no py:percent twin" in pair_problems(py, ipynb)[0]
    py.write_text(TOY)
    ipynb.unlink()
    assert "no .ipynb twin" in pair_problems(py, ipynb)[0]


def test_the_py_round_trips_through_the_ipynb_exactly(toy_pair):
    py, ipynb = toy_pair
    assert py_text(nbformat.read(ipynb, as_version=4)).endswith(TOY)


def test_saving_a_chapter_in_jupyterlab_leaves_its_py_twin_unchanged(tmp_path):
    """JupyterLab saves through jupytext's contents manager, which copies the metadata filters
    of jupytext.toml into the notebook: they must not reach the .py header."""
    import asyncio

    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

    shutil.copy(REPO / "jupytext.toml", tmp_path / "jupytext.toml")
    (tmp_path / "chapters").mkdir()
    chapters = sorted((REPO / "chapters").glob("[0-9][0-9]_*.py"))
    for py in chapters:
        shutil.copy(py, tmp_path / "chapters" / py.name)
        shutil.copy(py.with_suffix(".ipynb"), tmp_path / "chapters" / f"{py.stem}.ipynb")
    manager = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)(
        root_dir=str(tmp_path)
    )

    async def open_and_save(path: str) -> None:
        model = await manager.get(path, content=True, type="notebook")
        await manager.save(json.loads(json.dumps(model, default=str)), path)

    for py in chapters:
        asyncio.run(open_and_save(f"chapters/{py.name}"))
    changed = [
        p.name for p in chapters if (tmp_path / "chapters" / p.name).read_bytes() != p.read_bytes()
    ]
    assert changed == [], f"saving rewrote {changed}"
