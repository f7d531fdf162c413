"""Each chapter's modules stand alone: ``book/claims/chNN.py``, ``book/diagrams/chNN.py``
and ``book/checks/chNN.py`` may import their own chapter's modules, never another chapter's;
nor may the chapter's notebook and its solutions (the ``.py`` twins). What two chapters share
lives in a module named by its role (``book.experiments.tasks``, ``book.experiments.training``,
``measure``, the library), or on an earlier chapter's exported page (``book.pages.chNN``, the
one place STYLE.md gives definitions that other chapters reuse). ``book/experiments`` holds no
chapter's module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.imports import imported_names

BOOK = Path(__file__).resolve().parents[2] / "book"
ROLES = ("experiments", "claims", "diagrams", "checks")  # experiments: none may exist
CHAPTER_MODULE = re.compile(rf"^book\.({'|'.join(ROLES)})\.ch(\d+)$")
CHAPTER_FILES = sorted(p for role in ROLES for p in (BOOK / role).glob("ch[0-9]*.py"))
NOTEBOOK_TWINS = sorted(
    p
    for folder in ("chapters", "solutions")
    for p in (BOOK.parent / folder).glob("[0-9][0-9]_*.py")
)


def chapter_imports(source: str) -> set[tuple[str, str]]:
    """(role, chapter number) of every ``book.<role>.chNN`` module ``source`` imports: ``import
    book.experiments.ch05``, ``from book.experiments.ch05 import x``, ``from book.experiments
    import ch05`` and ``importlib.import_module("book.experiments.ch05")``."""
    return {m.groups() for m in map(CHAPTER_MODULE.match, imported_names(source)) if m}


def test_the_scan_sees_every_form_of_import():
    source = (
        "import book.experiments.ch05\nfrom book.diagrams.ch03 import x\n"
        "from book.checks import ch07\nimport importlib\n"
        "importlib.import_module('book.experiments.ch10')\n"
        "from book.experiments.tasks import pairs_batch\nfrom book.pages.ch08 import y\n"
    )
    assert chapter_imports(source) == {
        ("experiments", "05"),
        ("diagrams", "03"),
        ("checks", "07"),
        ("experiments", "10"),
    }


def test_every_chapter_module_and_notebook_twin_is_scanned():
    assert len(CHAPTER_FILES) >= 3 * 10
    assert len(NOTEBOOK_TWINS) >= 2 * 10


@pytest.mark.parametrize(
    "path",
    CHAPTER_FILES + NOTEBOOK_TWINS,
    ids=lambda p: str(p.relative_to(BOOK.parent)).replace("\\", "/"),
)
def test_no_chapter_module_imports_another_chapters_module(path):
    own = re.match(r"(?:ch)?(\d+)", path.stem).group(1)
    others = sorted(
        f"book.{role}.ch{n}"
        for role, n in chapter_imports(path.read_text(encoding="utf-8"))
        if n != own
    )
    assert not others, (
        f"{path.relative_to(BOOK.parent)} imports {others}: move what both chapters use to a "
        "module named by its role"
    )


def test_book_experiments_holds_role_modules_only():
    """Per chapter there are claims, diagrams, checks and the generated page; what
    ``book/experiments`` holds is shared by role (tasks, training, seeds, gradients)."""
    per_chapter = sorted(p.name for p in (BOOK / "experiments").glob("ch[0-9]*.py"))
    assert not per_chapter, f"book/experiments/{per_chapter}: a chapter's code belongs on its page"


PAGE_IMPORT = re.compile(r"^book\.pages\.ch(\d+)$")


@pytest.mark.parametrize(
    "path",
    CHAPTER_FILES + NOTEBOOK_TWINS + sorted((BOOK / "pages").glob("ch[0-9]*.py")),
    ids=lambda p: str(p.relative_to(BOOK.parent)).replace("\\", "/"),
)
def test_a_chapter_reuses_only_earlier_pages(path):
    """A chapter builds on the chapters before it (as d2l's do): its modules, notebooks and
    page import ``book.pages.chMM`` only for MM up to its own number."""
    own = int(re.match(r"(?:ch)?(\d+)", path.stem).group(1))
    later = sorted(
        name
        for name in imported_names(path.read_text(encoding="utf-8"))
        if (m := PAGE_IMPORT.match(name)) and int(m.group(1)) > own
    )
    assert not later, f"{path.relative_to(BOOK.parent)} imports later chapters' pages {later}"
