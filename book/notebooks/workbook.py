"""The learner's workbook: copies of the exercise notebooks in ``my-exercises/`` (git-ignored).

``exercises/`` holds the exercise notebooks exactly as ``make exercises`` generates them from
``solutions/``, and the book's tests check that they still are. A learner therefore never
edits them: ``make lab`` (and ``make check``) copy each ``exercises/NN_slug.py`` and
``.ipynb`` into ``my-exercises/`` when that chapter has no copy there yet. A copy is never
overwritten, so work is never lost; to start a chapter over, delete its two files there and
run ``make lab`` again. ``git`` ignores the folder, and JupyterLab hides ``exercises/``.

It also marks the book's notebooks as trusted on this machine (:func:`trust`): the committed
``chapters/``, ``solutions/`` and ``exercises/`` notebooks and the copies it has just made,
so that JupyterLab shows their stored outputs as they are and its server does not log
"Notebook … is not trusted" for each one opened.

Usage: python -m book.notebooks.workbook [--root DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from book.notebooks.common import REPO, notebook_files

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


def trust(paths: list[Path], data_dir: str | None = None) -> int:
    """Sign each notebook in Jupyter's store of trusted notebooks (``jupyter trust`` does the
    same), in ``data_dir`` or the user's Jupyter data folder, where the server looks; return
    how many were signed. A notebook whose content later changes is no longer trusted until
    JupyterLab saves it."""
    import nbformat
    from jupyter_core.paths import jupyter_data_dir
    from nbformat.sign import NotebookNotary

    data_dir = data_dir or jupyter_data_dir()
    Path(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # a fresh machine has none
    with NotebookNotary(data_dir=data_dir) as notary:
        for path in paths:
            notary.sign(nbformat.read(str(path), as_version=4))
    return len(paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the book's folder")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    copied = prepare(args.root)
    copies = [path.with_suffix(".ipynb") for path in copied]
    trust(notebook_files(root=args.root) + [path for path in copies if path.exists()])
    if copied and not args.quiet:
        names = ", ".join(path.stem for path in copied)
        print(f"{WORK_DIR}/: your copies of the exercises, new: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
