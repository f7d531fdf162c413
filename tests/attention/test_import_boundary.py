"""The library stays torch-only: nothing under ``attention/`` imports the book's machinery
(``book``, ``measure``, ``bench``, ``tests``) or the book's third-party tools (matplotlib,
numpy, tqdm, IPython), statically or at run time."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.imports import import_every_module_without, imported_modules, imported_names

LIBRARY = Path(__file__).resolve().parents[2] / "attention"
FORBIDDEN = ("book", "measure", "bench", "tests", "matplotlib", "numpy", "tqdm", "IPython")
# Besides the standard library, the library may import torch, and triton in its GPU path.
ALLOWED_THIRD_PARTY = ("torch", "triton")


def test_the_static_scan_sees_every_kind_of_import():
    source = (
        "import numpy as np\nfrom book.claims import x\nfrom . import masks\n"
        "import importlib\nimportlib.import_module('matplotlib.pyplot')\n"
    )
    assert imported_modules(source) == {"numpy", "book", "importlib", "matplotlib"}


@pytest.mark.parametrize(
    "path", sorted(LIBRARY.rglob("*.py")), ids=lambda p: str(p.relative_to(LIBRARY))
)
def test_no_library_file_imports_outside_torch_and_the_standard_library(path):
    names = imported_modules(path.read_text(encoding="utf-8"))
    outside = {
        name
        for name in names
        if name not in sys.stdlib_module_names
        and name not in ALLOWED_THIRD_PARTY
        and name != "attention"
    }
    assert not outside, f"{path.relative_to(LIBRARY.parent)} imports {sorted(outside)}"
    assert not names & set(FORBIDDEN)


@pytest.mark.slow
def test_every_library_module_imports_with_the_book_and_its_tools_absent():
    modules = import_every_module_without("attention", FORBIDDEN)
    assert "attention.efficient.flash" in modules and "attention.gpu.flex" in modules


def library_imports(path: Path) -> set[str]:
    """Every ``attention.*`` module ``path`` imports, relative imports resolved (``from ..x
    import y`` in ``attention/gpu/flex.py`` is ``attention.x``), lazy imports included."""
    package = path.relative_to(LIBRARY.parent).with_suffix("").parts[:-1]  # ("attention", ...)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "attention")
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, node.module) if node.module else base)
            if module.split(".")[0] == "attention":
                names.add(module)
    return names


def test_library_imports_resolves_relative_imports():
    flex = LIBRARY / "gpu" / "flex.py"
    assert "attention._checks" in library_imports(flex)
    assert "attention.gpu.triton_flash" in library_imports(LIBRARY / "dispatch.py")


@pytest.mark.parametrize("path", sorted((LIBRARY / "gpu").glob("*.py")), ids=lambda p: p.name)
def test_gpu_backends_do_not_import_the_dispatcher_that_picks_them(path):
    # One direction: attention.dispatch imports the GPU backends, never the other way round.
    assert "attention.dispatch" not in library_imports(path)


REPO = LIBRARY.parent
# The library's own tests test its private helpers; nothing else may import them.
OUTSIDE = sorted(
    path
    for pattern in (
        "book/**/*.py",
        "measure/**/*.py",
        "bench/**/*.py",
        "tests/**/*.py",
        "chapters/*.py",
        "solutions/*.py",
        "exercises/*.py",
        "docs/**/*.py",
        "conftest.py",
    )
    for path in REPO.glob(pattern)
    if not path.is_relative_to(REPO / "tests" / "attention")
)


def private_library_imports(source: str) -> set[str]:
    """Every private part of ``attention`` that ``source`` imports: a module with a component
    starting with ``_`` (``attention._checks``, ``attention.efficient._threads``), or a
    ``_name`` imported from ``attention`` or one of its modules."""
    return {
        name
        for name in imported_names(source)
        if name.split(".")[0] == "attention" and any(p.startswith("_") for p in name.split(".")[1:])
    }


def test_the_private_scan_sees_private_modules_and_names():
    source = (
        "from attention._checks import check_tensor\nimport attention.efficient._threads\n"
        "from attention import _checks\nfrom attention.heads import _split\n"
        "from attention.checks import check_rank\nfrom book.pages.ch08 import _test_input\n"
    )
    assert private_library_imports(source) == {
        "attention._checks",
        "attention._checks.check_tensor",
        "attention.efficient._threads",
        "attention.heads._split",
    }


def test_the_private_scan_covers_the_book_the_benchmark_and_the_notebooks():
    folders = {path.relative_to(REPO).parts[0] for path in OUTSIDE}
    assert {"book", "measure", "bench", "tests", "chapters", "solutions"} <= folders


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_outside_the_library_imports_its_private_modules(path):
    private = private_library_imports(path.read_text(encoding="utf-8"))
    assert not private, (
        f"{path.relative_to(REPO)} imports {sorted(private)}: use the public name "
        "(attention.checks for the argument checks)"
    )
