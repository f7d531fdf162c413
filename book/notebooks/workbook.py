"""The learner's workbook: copies of the exercise notebooks in ``my-exercises/`` (git-ignored).

``exercises/`` holds the exercise notebooks exactly as ``make exercises`` generates them from
``solutions/``, and the book's tests check that they still are. A learner therefore never
edits them: ``make lab`` (and ``make check``) copy each ``exercises/NN_slug.py`` and
``.ipynb`` into ``my-exercises/`` when that chapter has no copy there yet. A copy is never
overwritten, so work is never lost; to start a chapter over, delete its two files there and
run ``make lab`` again. ``git`` ignores the folder, and JupyterLab hides ``exercises/``.

Usage: python -m book.notebooks.workbook [--root DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from book.notebooks.common import REPO

WORK_DIR = "my-exercises"
SUFFIXES = (".py", ".ipynb")


def prepare(root: Path = REPO) -> list[Path]:
    """Copy every exercise pair that has no copy yet into ``root/my-exercises``; return the
    copied ``.py`` paths. A chapter with either file of its pair in the folder is left alone."""
    root = Path(root)
    work = root / WORK_DIR
    copied = []
    for source in sorted((root / "exercises").glob("[0-9][0-9]_*.py")):
        targets = [work / (source.stem + suffix) for suffix in SUFFIXES]
        if any(target.exists() for target in targets):
            continue
        work.mkdir(exist_ok=True)
        for suffix, target in zip(SUFFIXES, targets, strict=True):
            if source.with_suffix(suffix).exists():
                shutil.copyfile(source.with_suffix(suffix), target)
        copied.append(targets[0])
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the book's folder")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    copied = prepare(args.root)
    if copied and not args.quiet:
        names = ", ".join(path.stem for path in copied)
        print(f"{WORK_DIR}/: your copies of the exercises, new: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
