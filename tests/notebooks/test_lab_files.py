"""What the learner's JupyterLab lists and how it opens the book's notebooks, checked with the
server's own contents manager (jupyter_server's ``FileContentsManager``) instead of a running
server: the file browser does not list the editable install's ``*.egg-info`` (nor the other
hidden names of :data:`book.notebooks.lab_settings.HIDE_GLOBS`), and the notebooks that
``make lab`` prepares (:mod:`book.notebooks.workbook`) open as trusted, so the server logs no
"Notebook … is not trusted" for them.
"""

from __future__ import annotations

import logging
import shutil

import nbformat
import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager
from nbformat.sign import NotebookNotary

from book.notebooks import workbook
from book.notebooks.common import REPO
from book.notebooks.lab_settings import HIDE_GLOBS, SERVER_CONFIG

# A notebook the book ships, with stored outputs (chapter 8 is the smallest).
SAMPLE = REPO / "chapters" / "08_attention_by_hand.ipynb"


def contents_manager(root, data_dir=None) -> FileContentsManager:
    """The server's contents manager with the book's settings (and a notary in data_dir)."""
    cm = FileContentsManager(root_dir=str(root), **SERVER_CONFIG["ContentsManager"])
    if data_dir is not None:
        cm.notary = NotebookNotary(data_dir=str(data_dir))
    return cm


def listing(cm, path: str = "") -> set[str]:
    return {entry["name"] for entry in cm.get(path, content=True)["content"]}


def test_the_server_config_hides_what_lab_settings_lists():
    assert SERVER_CONFIG["ContentsManager"]["hide_globs"] is HIDE_GLOBS


def test_the_root_of_the_file_browser_lists_no_egg_info(tmp_path):
    for folder in ("attention_book.egg-info", "chapters", "exercises", "my-exercises"):
        (tmp_path / folder).mkdir()
    (tmp_path / "README.md").write_text("# book\n")
    (tmp_path / "chapters" / "01_toy.py").write_text("# %%\nx = 1\n")
    nbformat.write(nbformat.v4.new_notebook(), str(tmp_path / "chapters" / "01_toy.ipynb"))
    cm = contents_manager(tmp_path)
    assert listing(cm) == {"chapters", "my-exercises", "README.md"}
    assert listing(cm, "chapters") == {"01_toy.py"}


def test_the_egg_info_check_can_fail(tmp_path):
    (tmp_path / "attention_book.egg-info").mkdir()
    cm = FileContentsManager(root_dir=str(tmp_path))  # jupyter_server's defaults
    assert listing(cm) == {"attention_book.egg-info"}


@pytest.fixture
def book(tmp_path):
    """A book folder with one shipped chapter notebook and its exercise pair."""
    root = tmp_path / "book"
    for folder in ("chapters", "exercises"):
        (root / folder).mkdir(parents=True)
    shutil.copy(SAMPLE, root / "chapters" / SAMPLE.name)
    shutil.copy(SAMPLE, root / "exercises" / SAMPLE.name)
    (root / "exercises" / SAMPLE.with_suffix(".py").name).write_text("# %%\nx = 1\n")
    return root


def opened(cm, path: str, caplog) -> tuple[bool, list[str]]:
    """Open ``path`` as the server does: (every code cell trusted, the warnings it logged)."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model = cm.get(path, content=True, type="notebook")
    cells = [c for c in model["content"]["cells"] if c["cell_type"] == "code"]
    assert cells
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return all(c["metadata"].get("trusted") for c in cells), warnings


def test_make_lab_trusts_the_notebooks_it_prepares(book, tmp_path, monkeypatch, caplog):
    data_dir = tmp_path / "jupyter-data"  # the learner's Jupyter data folder
    data_dir.mkdir()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data_dir))
    cm = contents_manager(book, data_dir)
    path = f"chapters/{SAMPLE.name}"
    trusted, warnings = opened(cm, path, caplog)
    assert not trusted and any("is not trusted" in w for w in warnings)  # the control

    assert workbook.main(["--root", str(book), "--quiet"]) == 0
    copy = f"{workbook.WORK_DIR}/{SAMPLE.name}"
    assert (book / copy).exists()
    for notebook in (path, f"exercises/{SAMPLE.name}", copy):
        trusted, warnings = opened(cm, notebook, caplog)
        assert trusted and not [w for w in warnings if "trusted" in w], (notebook, warnings)


def test_a_changed_notebook_is_no_longer_trusted(book, tmp_path, caplog):
    data_dir = tmp_path / "jupyter-data"
    notebook = book / "chapters" / SAMPLE.name
    assert workbook.trust([notebook], data_dir=str(data_dir)) == 1
    nb = nbformat.read(str(notebook), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print('added')"))
    nbformat.write(nb, str(notebook))
    trusted, _ = opened(contents_manager(book, data_dir), f"chapters/{SAMPLE.name}", caplog)
    assert not trusted
