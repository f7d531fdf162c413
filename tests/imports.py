"""What a source file imports, read statically, and whether a package imports with some modules
absent: the helpers of the import-boundary tests (tests/attention/, tests/measure/,
tests/bench/, tests/book/test_chapter_modules.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def imported_names(source: str) -> set[str]:
    """Every dotted name ``source`` imports: ``import a.b`` gives ``a.b``; ``from a.b import c``
    gives ``a.b`` and ``a.b.c`` (``c`` may be a module or a name in it);
    ``importlib.import_module("a.b")`` with a literal name gives ``a.b``. Relative imports are
    skipped."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            names.add(node.args[0].value)
    return names


def imported_modules(source: str) -> set[str]:
    """Top-level names of every module ``source`` imports (see :func:`imported_names`)."""
    return {name.split(".")[0] for name in imported_names(source)}


CHILD = """
import importlib, json, pkgutil, sys
for name in {absent!r}:
    sys.modules[name] = None  # any import of it now raises ImportError
package = importlib.import_module({package!r})
modules = [
    m.name for m in pkgutil.walk_packages(package.__path__, {package!r} + ".")
    if not m.name.endswith(".__main__")  # importing it would run the program
]
for name in modules:
    importlib.import_module(name)
print(json.dumps(modules))
"""


def import_every_module_without(package: str, absent: Sequence[str]) -> list[str]:
    """Import ``package`` and every module under it (but ``__main__``) in a fresh interpreter in
    which each of ``absent`` raises ``ImportError``; returns the modules imported, or fails the
    test with the child's error."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD.format(absent=tuple(absent), package=package)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
