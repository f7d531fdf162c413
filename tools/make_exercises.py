"""Generate the exercise notebooks from the solutions: ``make exercises``.

``solutions/NN_slug.py`` is the source. Every block

        ### BEGIN SOLUTION
        ...answer...
        ### END SOLUTION

in a code cell becomes ``raise NotImplementedError("Exercise NN.k")`` at the indentation of the
``BEGIN`` line, where ``NN.k`` is the id of the next ``check("NN.k", ...)`` call (in the same
cell or a later one; blocks with no later check are numbered in order). Cells tagged
``solution_only`` are dropped. A header cell tells the learner how to check their work. The
result is written as ``exercises/NN_slug.py`` and ``exercises/NN_slug.ipynb`` (no outputs).

The exercise ``.ipynb`` records the hash of what was generated. If the committed exercise (its
``.ipynb`` or ``.py``) no longer matches that hash, a learner has edited it, and it is not
overwritten unless ``--force`` is given (``make exercises FORCE=1``).

Usage:
    python tools/make_exercises.py                    # every solutions/*.py
    python tools/make_exercises.py solutions/03_multi_head.py --force
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat
from nbtools import (
    CHECK_CALL,
    KERNELSPEC,
    META_KEY,
    REPO,
    content_hash,
    py_text,
    read_ipynb,
    read_py,
    rel,
    set_stable_ids,
    write_ipynb,
)

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
SOLUTION_ONLY_TAG = "solution_only"
NAME = re.compile(r"^(\d{2})_[a-z0-9_]+$")

HEADER = """\
> **Exercises, chapter {chapter}.** Generated from `solutions/{name}.py` by `make exercises`.
>
> Replace each `raise NotImplementedError(...)` with your answer and run the `check(...)` cell
> below it: it prints ✓, or ✗ with a hint. To check every exercise at once, run
> `make check CH={chapter}` in a terminal at the root of the repository (it runs a copy of
> this notebook; your file is not changed). Worked answers: `solutions/{name}.ipynb`."""


class ExerciseError(ValueError):
    """A solution notebook that cannot be turned into exercises (message: file and cell)."""


def chapter_of(path: Path) -> str:
    match = NAME.match(Path(path).stem)
    if match is None:
        raise ExerciseError(
            f"{rel(path)}: solution notebooks are named NN_slug.py (e.g. 03_multi_head.py)"
        )
    return match.group(1)


def _blocks(lines: list[str], where: str) -> list[tuple[int, int]]:
    """``(begin, end)`` line indices of each BEGIN/END SOLUTION block."""
    blocks, begin = [], None
    for n, line in enumerate(lines):
        marker = line.strip()
        if marker == BEGIN:
            if begin is not None:
                raise ExerciseError(f"{where}, line {n + 1}: {BEGIN} inside another block")
            begin = n
        elif marker == END:
            if begin is None:
                raise ExerciseError(f"{where}, line {n + 1}: {END} without {BEGIN}")
            blocks.append((begin, n))
            begin = None
    if begin is not None:
        raise ExerciseError(f"{where}, line {begin + 1}: {BEGIN} without {END}")
    return blocks


def _next_check_id(cells: list, cell_index: int, after: str) -> str | None:
    found = CHECK_CALL.search(after)
    if found:
        return found.group(1)
    for cell in cells[cell_index + 1 :]:
        if cell.cell_type == "code":
            found = CHECK_CALL.search(cell.source)
            if found:
                return found.group(1)
    return None


def make_exercise(solution_py: Path) -> nbformat.NotebookNode:
    """The exercise notebook generated from ``solution_py`` (nothing is written)."""
    solution_py = Path(solution_py)
    chapter = chapter_of(solution_py)
    nb = read_py(solution_py)
    cells = [c for c in nb.cells if SOLUTION_ONLY_TAG not in c.get("metadata", {}).get("tags", [])]
    n_blocks = 0
    out_cells = []
    for i, cell in enumerate(cells):
        cell = copy.deepcopy(cell)
        for exercise_id in CHECK_CALL.findall(cell.source) if cell.cell_type == "code" else []:
            if exercise_id.split(".")[0] != chapter:
                raise ExerciseError(
                    f"{rel(solution_py)}, cell {i}: check({exercise_id!r}, ...) is not an "
                    f"exercise of chapter {chapter}"
                )
        if cell.cell_type == "code" and (BEGIN in cell.source or END in cell.source):
            lines = cell.source.split("\n")
            new_lines, start = [], 0
            for begin, end in _blocks(lines, f"{rel(solution_py)}, cell {i}"):
                n_blocks += 1
                rest = "\n".join(lines[end + 1 :])
                exercise_id = _next_check_id(cells, i, rest) or f"{chapter}.{n_blocks}"
                indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
                new_lines += lines[start:begin]
                new_lines.append(f'{indent}raise NotImplementedError("Exercise {exercise_id}")')
                start = end + 1
            cell.source = "\n".join(new_lines + lines[start:])
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        out_cells.append(cell)
    if n_blocks == 0:
        raise ExerciseError(f"{rel(solution_py)}: no {BEGIN} / {END} block")

    header = nbformat.v4.new_markdown_cell(HEADER.format(chapter=chapter, name=solution_py.stem))
    # After the title cell, if the notebook opens with one.
    first_is_title = (
        out_cells and out_cells[0].cell_type == "markdown" and out_cells[0].source.startswith("#")
    )
    out_cells.insert(1 if first_is_title else 0, header)
    nb.cells = out_cells
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.pop("language_info", None)
    set_stable_ids(nb)
    nb.metadata[META_KEY] = {
        "generated_from": f"solutions/{solution_py.name}",
        "generated_sha256": content_hash(nb),
    }
    return nb


def learner_edits(exercise_py: Path) -> str | None:
    """Why the committed exercise (``.py`` and ``.ipynb``) must not be overwritten, or None."""
    exercise_py = Path(exercise_py)
    exercise_nb = exercise_py.with_suffix(".ipynb")
    if not exercise_nb.exists():
        if exercise_py.exists():
            return f"{rel(exercise_py)} exists without its .ipynb, so it cannot be verified"
        return None
    recorded = read_ipynb(exercise_nb).metadata.get(META_KEY, {}).get("generated_sha256")
    if recorded is None:
        return f"{rel(exercise_nb)} was not written by make_exercises.py (no generated_sha256)"
    if content_hash(read_ipynb(exercise_nb)) != recorded:
        return f"{rel(exercise_nb)} was edited since it was generated"
    if exercise_py.exists() and content_hash(read_py(exercise_py)) != recorded:
        return f"{rel(exercise_py)} was edited since it was generated"
    return None


def write_exercise(solution_py: Path, exercises_dir: Path, *, force: bool = False) -> Path:
    """Generate and write ``exercises_dir/NN_slug.py`` + ``.ipynb``; return the ``.py`` path.

    Raises ``FileExistsError`` when the learner edited the committed exercise and not ``force``.
    """
    nb = make_exercise(solution_py)
    exercise_py = Path(exercises_dir) / Path(solution_py).name
    reason = learner_edits(exercise_py)
    if reason and not force:
        raise FileExistsError(
            f"not overwriting: {reason}. Keep your work elsewhere, or regenerate with "
            f"`make exercises FORCE=1` (python tools/make_exercises.py --force)"
        )
    exercise_py.parent.mkdir(parents=True, exist_ok=True)
    exercise_py.write_text(py_text(nb), encoding="utf-8")
    write_ipynb(nb, exercise_py.with_suffix(".ipynb"))
    return exercise_py


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solutions", nargs="*", help="solutions/NN_slug.py (default: all)")
    parser.add_argument("--force", action="store_true", help="overwrite edited exercises")
    parser.add_argument("--out", default=str(REPO / "exercises"), help="output folder")
    args = parser.parse_args(argv)
    sources = [Path(p).with_suffix(".py") for p in args.solutions] or sorted(
        (REPO / "solutions").glob("*.py")
    )
    status = 0
    for solution_py in sources:
        try:
            written = write_exercise(solution_py, Path(args.out), force=args.force)
        except (ExerciseError, FileExistsError) as err:
            print(f"error: {err}", file=sys.stderr)
            status = 1
            continue
        print(f"wrote {rel(written)} and {rel(written.with_suffix('.ipynb'))}")
    if not sources:
        print("no solutions/*.py yet")
    return status


if __name__ == "__main__":
    sys.exit(main())
