"""The notebooks send readers only to files their JupyterLab lists.

``make lab`` configures the file browser (:mod:`book.notebooks.lab_settings`) to hide, among
others, the ``.ipynb`` of every ``NN_slug`` pair (the ``.py`` twin opens the same notebook) and
the book's pristine ``exercises/`` folder (learners work in ``my-exercises/``). A chapter,
exercise or solution notebook whose prose names such a path sends the learner looking for a
file that is not there. The test reads the markdown cells of every ``.py`` twin and fails on a
path, in a code span, a link or plain text, that has a hidden part.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch

import pytest

from book.notebooks.common import notebook_files, read_py, rel
from book.notebooks.lab_settings import HIDE_GLOBS

SOURCES = notebook_files(suffix=".py")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
# Outside code spans and links: a word that names a notebook, or a folder followed by a slash.
BARE_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]*|[\w.-]+\.ipynb)(?![\w/])")
# What a code span holds when it is a path: no spaces, and a slash or a file extension.
PATH_LIKE = re.compile(r"^[\w.\-/]+$")
EXTENSIONS = (".ipynb", ".py", ".md")


def hidden_part(path: str) -> str | None:
    """The first part of ``path`` the file browser does not list (jupyter_server hides a name
    that matches one of its ``hide_globs``, and dot-files), or None."""
    for part in path.split("#")[0].split("/"):
        if part in ("", ".", ".."):
            continue
        if part.startswith(".") or any(fnmatch(part, glob) for glob in HIDE_GLOBS):
            return part
    return None


def paths_in(markdown: str) -> list[str]:
    """The paths a markdown text names: in code spans, as link targets, and bare."""
    found = []
    for span in CODE_SPAN.findall(markdown):
        if PATH_LIKE.match(span) and ("/" in span or span.endswith(EXTENSIONS)):
            found.append(span)
    found += [t for t in LINK_TARGET.findall(markdown) if not re.match(r"^[a-z]+:", t)]
    prose = LINK_TARGET.sub("", CODE_SPAN.sub("", markdown))
    found += [p for p in BARE_PATH.findall(prose) if "/" in p.rstrip("/") or p.endswith("/")
              or p.endswith(".ipynb")]  # fmt: skip
    return found


def hidden_paths(markdown: str) -> list[str]:
    return [p for p in paths_in(markdown) if hidden_part(p)]


def test_the_book_has_notebooks_to_check():
    folders = {p.parent.name for p in SOURCES}
    assert folders == {"chapters", "exercises", "solutions"}, folders


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: rel(p))
def test_a_notebook_names_only_files_the_lab_lists(source):
    problems = [
        f"cell {i}: {path!r}"
        for i, cell in enumerate(read_py(source).cells)
        if cell.cell_type == "markdown"
        for path in hidden_paths(cell.source)
    ]
    assert problems == [], (
        f"{rel(source)} names paths JupyterLab's file browser hides "
        f"(book/notebooks/lab_settings.py); name the .py twin, or my-exercises/:\n"
        + "\n".join(problems)
    )


def test_the_check_finds_hidden_paths_and_passes_visible_ones():
    text = (
        "Open `exercises/01_rnn_limits.ipynb` or [the answers](../solutions/02_x.ipynb#top);\n"
        "chapter 3's notebook, 03_multi_head.ipynb, has the figure. The book's `exercises/`\n"
        "folder, and chapters/04_positional_encoding.ipynb too.\n"
        "Fine: `my-exercises/01_rnn_limits.py`, `solutions/02_x.py`, [the index](README.md),\n"
        "[a site](https://example.org/a/01_x.ipynb), `nn.Linear`, `x / y`, and/or 1/sqrt(d)."
    )
    assert hidden_paths(text) == [
        "exercises/01_rnn_limits.ipynb",
        "exercises/",
        "../solutions/02_x.ipynb#top",
        "03_multi_head.ipynb",
        "chapters/04_positional_encoding.ipynb",
    ]
    assert hidden_paths("`my-exercises/01_rnn_limits.ipynb`") == [
        "my-exercises/01_rnn_limits.ipynb"
    ]
    assert hidden_part("my-exercises/01_rnn_limits.py") is None
    assert hidden_part("solutions/.ipynb_checkpoints/x.py") == ".ipynb_checkpoints"
