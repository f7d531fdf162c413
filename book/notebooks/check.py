"""Check a learner's exercises: ``make check CH=03``.

Runs a copy of your ``my-exercises/03_*`` notebook (see :mod:`book.notebooks.workbook`) in a
temporary folder, with every ``check(...)`` call recording its result, then prints one row per
exercise: id, title, ✓/✗, message. Your files are never modified. JupyterLab saves the
``.ipynb`` and its ``.py`` twin together; when the two hold different cells (one was edited
outside JupyterLab), the one saved last is checked, and the report says so. Exit code 0 iff
every exercise passes (``--exit-zero``: 0 once the table is printed, as ``make check`` does).

Usage:
    python -m book.notebooks.check 03
    python -m book.notebooks.check --notebook solutions/03_multi_head.ipynb
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from book.notebooks.common import (
    REPO,
    check_ids,
    content_hash,
    error_outputs,
    read_ipynb,
    read_py,
    rel,
)
from book.notebooks.common import execute as run_notebook
from book.notebooks.exercises import READ_ERRORS, notebook_problem
from book.notebooks.workbook import WORK_DIR

RESULTS_ENV = "ATTENTION_CHECK_RESULTS"  # book.checks.RESULTS_ENV (not imported: no torch)


@dataclass
class Row:
    id: str
    title: str
    passed: bool
    message: str


@dataclass
class CellError:
    cell: int | None  # index in the notebook; None if the run itself failed (timeout, crash)
    ename: str
    evalue: str

    def __str__(self) -> str:
        where = "the run" if self.cell is None else f"cell {self.cell}"
        return f"{where}: {self.ename}: {self.evalue}"


@dataclass
class Report:
    notebook: Path
    rows: list[Row]
    errors: list[CellError]  # errors raised outside check(), e.g. by calling a stub directly
    note: str = ""  # which file of a pair was checked, and why

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(row.passed for row in self.rows)


def find_exercise(chapter: str, folder: Path = REPO / WORK_DIR) -> tuple[Path, str]:
    """The notebook to check for chapter ``chapter`` in ``folder``, and a note on the choice.

    A pair whose two files hold the same cells is checked through its ``.ipynb`` (the note
    says the twin agrees); otherwise the file saved last, and the note says the other differs.
    """
    if not chapter.isdigit():
        raise SystemExit(f"error: CH must be a chapter number like 03, got {chapter!r}")
    chapter = f"{int(chapter):02d}"
    folder = Path(folder)
    stems = sorted({p.stem for p in folder.glob(f"{chapter}_*") if p.suffix in (".py", ".ipynb")})
    if len(stems) != 1:
        names = ", ".join(stems) or "none"
        raise SystemExit(f"error: expected one {folder.name}/{chapter}_* notebook, found {names}")
    nb_path, py_path = folder / f"{stems[0]}.ipynb", folder / f"{stems[0]}.py"
    if not nb_path.exists():
        return py_path, ""
    if not py_path.exists():
        return nb_path, ""
    if content_hash(read_py(py_path)) == content_hash(read_ipynb(nb_path)):
        return nb_path, "its .py twin holds the same cells"
    newer, older = (
        (py_path, nb_path)
        if py_path.stat().st_mtime > nb_path.stat().st_mtime
        else (nb_path, py_path)
    )
    return newer, f"saved after {older.name}, whose cells differ: that one was not checked"


def _load(path: Path) -> nbformat.NotebookNode:
    return read_py(path) if path.suffix == ".py" else read_ipynb(path)


def _expected(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Exercise id -> title for every exercise of the notebook's chapter(s).

    The ``check("NN.k", ...)`` calls in the notebook, plus everything registered in
    ``book.checks.chNN`` (a deleted check cell still shows as a failure)."""
    ids = {exercise_id: "" for exercise_id in check_ids(nb)}
    chapters = sorted({exercise_id.split(".")[0] for exercise_id in ids})
    try:
        from book.checks import exercises_for_chapter
    except ImportError:  # pragma: no cover - the package is installed with the tools
        return ids
    for chapter in chapters:
        for exercise in exercises_for_chapter(chapter):
            ids[exercise.id] = exercise.title
    return dict(sorted(ids.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))


def check_notebook(path: Path, *, timeout: int = 300) -> Report:
    """Execute a copy of the notebook at ``path`` and collect its check results."""
    path = Path(path)
    nb = _load(path)
    expected = _expected(nb)
    errors: list[CellError] = []
    results: dict[str, Row] = {}
    with tempfile.TemporaryDirectory(prefix="check_exercises_") as tmp:
        copy_path = Path(tmp) / (path.stem + ".ipynb")
        if path.suffix == ".ipynb":
            shutil.copyfile(path, copy_path)
        else:
            nbformat.write(nb, str(copy_path))
        copy = read_ipynb(copy_path)
        results_file = Path(tmp) / "results.jsonl"
        try:
            run_notebook(
                copy,
                cwd=Path(tmp),
                timeout=timeout,
                allow_errors=True,
                env={RESULTS_ENV: str(results_file)},
            )
        except (CellTimeoutError, DeadKernelError) as err:
            errors.append(
                CellError(None, type(err).__name__, f"the notebook did not finish: {err}")
            )
        for i, out in error_outputs(copy):
            errors.append(CellError(i, out.get("ename", "?"), out.get("evalue", "")))
        if results_file.exists():
            for line in results_file.read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                results[r["id"]] = Row(r["id"], r["title"], r["passed"], r["message"])  # last wins
    rows = [
        results.get(exercise_id)
        or Row(exercise_id, title or "?", False, "its check(...) cell did not run")
        for exercise_id, title in expected.items()
    ]
    rows += [row for exercise_id, row in results.items() if exercise_id not in expected]
    return Report(path, rows, errors)


def format_report(report: Report) -> str:
    table = [("exercise", "title", "ok", "message")]
    table += [(r.id, r.title, "✓" if r.passed else "✗", r.message) for r in report.rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    note = f"; {report.note}" if report.note else ""
    lines = [f"Checked {rel(report.notebook)} (a copy; your file is unchanged{note})", ""]
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(3)] + [row[3]]
        lines.append("  ".join(cells).rstrip())
    n_passed = sum(r.passed for r in report.rows)
    lines += ["", f"{n_passed}/{len(report.rows)} exercises pass"]
    if not report.rows:
        lines.append("no check(...) calls found in this notebook")
    if report.errors:
        lines += ["", "errors outside the checks:"] + [f"  {e}" for e in report.errors]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", nargs="?", help="chapter number, e.g. 03")
    parser.add_argument("--notebook", type=Path, help="check this notebook instead")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (300)")
    parser.add_argument("--root", type=Path, default=REPO, help=f"the book ({WORK_DIR}/ in it)")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 once the table is out")
    args = parser.parse_args(argv)
    if args.notebook is None and args.chapter is None:
        parser.error("give a chapter number (make check CH=03) or --notebook PATH")
    try:
        if args.notebook is not None:
            path, note = args.notebook, ""
        else:
            path, note = find_exercise(args.chapter, args.root / WORK_DIR)
    except READ_ERRORS as err:  # a twin that does not parse, met while choosing
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        print(f"error: cannot read the chapter's notebooks ({reason})", file=sys.stderr)
        return 2
    problem = notebook_problem(path)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    report = check_notebook(path, timeout=args.timeout)
    report.note = note
    print(format_report(report))
    return 0 if report.passed or args.exit_zero else 1


if __name__ == "__main__":
    sys.exit(main())
