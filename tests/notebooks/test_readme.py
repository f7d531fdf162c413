"""README.md's chapter index lists every chapter, under the title of its first heading."""

from __future__ import annotations

import re

from book.notebooks.common import REPO, read_py

ROW = re.compile(r"^\| (\d+) \| (.+?) \| \[`(chapters/\d\d_\w+\.ipynb)`\]\(\3\) \|", re.M)


def index_rows() -> dict[str, tuple[int, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Chapters\n", 1)[1].split("\n## ", 1)[0]
    return {path: (int(n), title) for n, title, path in ROW.findall(section)}


def test_every_chapter_has_a_row_with_its_title():
    rows = index_rows()
    problems = []
    for py in sorted((REPO / "chapters").glob("[0-9][0-9]_*.py")):
        path = f"chapters/{py.stem}.ipynb"
        first = read_py(py).cells[0].source.splitlines()[0]  # "# Chapter N — Title"
        number, _, title = first.removeprefix("# Chapter ").partition(" — ")
        if path not in rows:
            problems.append(f"README.md's chapter index has no row for {path}")
        elif rows[path] != (int(number), title):
            problems.append(f"README.md: {path} is listed as {rows[path]}, its heading says "
                            f"{(int(number), title)}")  # fmt: skip
    stray = [p for p in rows if not (REPO / p).exists()]
    problems += [f"README.md lists {p}, which does not exist" for p in stray]
    assert not problems, "\n".join(problems)


def test_the_readme_does_not_promise_a_number_of_chapters():
    intro = (REPO / "README.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert not re.search(r"^(Ten|Five|\w+) chapters,", intro, re.M)
