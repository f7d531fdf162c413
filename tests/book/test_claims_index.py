"""The claims index (book.claims_index): the committed chapters/README.md is exactly what the
executed notebooks recorded; and, on small synthetic notebooks, how claims are read back, rolled
up under their number, linked to their section, and checked."""

from __future__ import annotations

import itertools
import json
import re

import nbformat
import pytest
from IPython.core.formatters import format_display_data

from book.claims import CLAIMS_MIME, claims_table, parse_claims_markdown, record_claim, reset_claims
from book.claims_index import (
    ARTICLE_CLAIMS,
    CHAPTERS,
    INDEX_NAME,
    article_number,
    check_index,
    main,
    notebook_claims,
    recorded_claims,
    render_index,
    write_index,
)


def test_the_committed_index_matches_what_the_notebooks_recorded():
    problems = check_index(CHAPTERS)
    assert not problems, "\n".join(problems) + "\n(regenerate: python -m book.claims_index)"


def test_the_index_lists_all_thirty_claims_in_order():
    text = (CHAPTERS / INDEX_NAME).read_text(encoding="utf-8")
    top_rows = re.findall(r"^\| (C\d+) \|", text, flags=re.MULTILINE)
    assert top_rows == [f"C{n}" for n in range(1, 31)]


def test_every_stored_json_table_agrees_with_its_markdown():
    """Where a notebook stored both copies of a claims table, they hold the same rows."""
    for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                data = out.get("data", {})
                if CLAIMS_MIME in data:
                    rows = parse_claims_markdown(data["text/markdown"])
                    stored = data[CLAIMS_MIME]["claims"]
                    assert [c.claim_id for c in rows] == [r["id"] for r in stored], path.name
                    assert [c.measured for c in rows] == [r["measured"] for r in stored]


@pytest.mark.parametrize(
    ("claim_id", "number"),
    [("C1", 1), ("C19 window", 19), ("C9a", 9), ("C30", 30), ("C10x", 10), ("C31", None),
     ("C100", None), ("C0", None), ("c5", None), ("Q-softmax", None), ("§10 guide", None),
     ("MQA/GQA", None), ("C", None)],
)  # fmt: skip
def test_article_number(claim_id, number):
    assert article_number(claim_id) == number


def test_article_number_refuses_a_non_string():
    with pytest.raises(TypeError, match="claim_id must be a str"):
        article_number(19)


def test_thirty_claims_each_with_a_chapter_and_words():
    assert sorted(ARTICLE_CLAIMS) == list(range(1, 31))
    assert all(1 <= ch <= 10 and words.strip() for ch, words in ARTICLE_CLAIMS.values())


# --- synthetic notebooks ------------------------------------------------------------------


def _table_output(json_copy: bool = True) -> nbformat.NotebookNode:
    data, _ = format_display_data(claims_table())
    if not json_copy:
        data = {k: v for k, v in data.items() if k != CLAIMS_MIME}
    return nbformat.v4.new_output("execute_result", data=data, execution_count=99)


def _code(source: str, count: int | None, outputs=()) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, execution_count=count)
    cell.outputs = list(outputs)
    return cell


@pytest.fixture
def book_dir(tmp_path, monkeypatch):
    """Two chapter notebooks: chapter 1 stores the JSON copy (with recording cells), chapter 2
    only the Markdown (as notebooks executed before the JSON existed)."""
    reset_claims()
    counts = itertools.chain([3, 3, 5], itertools.repeat(None))
    monkeypatch.setattr("book.claims._current_cell", lambda: next(counts))
    for claim_id, verdict in (("C19 window", "reproduced"), ("C19 cost", "partly")):
        record_claim(claim_id, f"claim {claim_id}", "exp", verdict, "accuracy 0.50 vs 1.00")
    record_claim("Q-softmax", "softmax | sigmoid", "exp", "partly", "0.91 vs 0.42")
    nb1 = nbformat.v4.new_notebook()
    nb1.cells = [
        nbformat.v4.new_markdown_cell("# Chapter 1 — A test\n\nintro"),
        nbformat.v4.new_markdown_cell("## 1.1 Windows and costs (C19)\n\n### a sub-heading"),
        _code("ids = ['C19 window', 'C19 cost']\nfor i in ids:\n    record_claim(i, ...)", 3),
        nbformat.v4.new_markdown_cell("## 1.2 Why softmax?"),
        _code("record_claim(QID, ...)", 5),
        nbformat.v4.new_markdown_cell("## Claims checked"),
        _code("claims_table()", 6, [_table_output()]),
    ]
    reset_claims()
    record_claim("C5", "dot products have variance d_k", "exp", "reproduced", "within 2.0%")
    record_claim("C9a", "BERT-base shapes", "exp", "reproduced", "12 heads of 64")
    nb2 = nbformat.v4.new_notebook()
    nb2.cells = [
        nbformat.v4.new_markdown_cell("## 2.3 Why divide by $\\sqrt{d_k}$?"),
        _code('record_claim(\n    "C5",\n    claim="...",\n)', 1),
        nbformat.v4.new_markdown_cell("## 2.4 Heads"),
        _code("record_claim(claim_id='C9a', claim='...')", 2),
        _code("claims_table()", 3, [_table_output(json_copy=False)]),
    ]
    reset_claims()
    nb3 = nbformat.v4.new_notebook()  # a chapter that recorded nothing yet
    nb3.cells = [nbformat.v4.new_markdown_cell("# Chapter 3")]
    for name, nb in (("01_test.ipynb", nb1), ("02_more.ipynb", nb2), ("03_empty.ipynb", nb3)):
        nbformat.write(nb, str(tmp_path / name))
    (tmp_path / "notes.ipynb").write_text("not a chapter")  # ignored: no NN_ prefix
    yield tmp_path
    reset_claims()


def test_claims_are_read_back_with_their_sections(book_dir):
    found = {c.claim_id: c for c in recorded_claims(book_dir)}
    assert list(found) == ["C19 window", "C19 cost", "Q-softmax", "C5", "C9a"]
    # found by the stored execution count, although the ids are computed
    assert found["C19 window"].section == "1.1 Windows and costs (C19)"
    assert found["Q-softmax"].section == "1.2 Why softmax?"
    assert found["Q-softmax"].claim == "softmax | sigmoid"
    # found by the literal id in the source (Markdown-only notebook)
    assert found["C5"].section == "2.3 Why divide by $\\sqrt{d_k}$?"
    assert found["C9a"].section == "2.4 Heads" and found["C9a"].chapter == 2
    assert found["C5"].anchor == "02_more.ipynb#2.3-Why-divide-by-%24%5Csqrt%7Bd_k%7D%24%3F"
    assert recorded_claims(book_dir, exclude=("01_test.ipynb",))[0].claim_id == "C5"


def test_the_json_copy_is_preferred_to_the_markdown(book_dir):
    path = book_dir / "01_test.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[-1].outputs[0]["data"][CLAIMS_MIME]["claims"][0]["measured"] = "from the JSON"
    nbformat.write(nb, str(path))
    assert notebook_claims(path)[0].measured == "from the JSON"


def test_the_last_table_of_a_notebook_wins(book_dir):
    path = book_dir / "02_more.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    reset_claims()
    record_claim("C7", "later", "exp", "partly", "1.7×")
    nb.cells.append(_code("claims_table()", 9, [_table_output()]))
    nbformat.write(nb, str(path))
    assert [c.claim_id for c in notebook_claims(path)] == ["C7"]


def test_a_broken_table_is_refused_by_name(book_dir):
    path = book_dir / "01_test.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    del nb.cells[-1].outputs[0]["data"][CLAIMS_MIME]["claims"][0]["verdict"]
    nbformat.write(nb, str(path))
    with pytest.raises(ValueError, match=r"01_test.ipynb: a stored claim lacks \['verdict'\]"):
        notebook_claims(path)
    with pytest.raises(ValueError, match="NN_slug.ipynb"):
        notebook_claims(book_dir / "notes.ipynb")


def test_the_index_rolls_sub_claims_up_and_lists_the_rest(book_dir):
    text = render_index(recorded_claims(book_dir))
    lines = text.splitlines()
    row = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ")}
    assert "| C5 | 2 | reproduced | dot products have variance d_k | within 2.0% |" in row["C5"]
    assert "[02_more: 2.3 Why divide by $\\sqrt{d_k}$?](02_more.ipynb#2.3-" in row["C5"]
    assert "| C9 | 2 | reproduced |" in row["C9"] and "1 sub-claim below" in row["C9"]
    assert "| C19 | 1 | mixed: 1 reproduced, 1 partly |" in row["C19"]
    assert lines.index(row["C19"]) + 1 == lines.index(row["↳ C19 window"])
    assert (
        "[01_test: 1.1 Windows and costs (C19)](01_test.ipynb#1.1-Windows-and-costs-(C19))"
        in (row["↳ C19 window"])
    )
    assert "| C20 | 6 (expected) | not yet recorded |" in row["C20"]
    assert "softmax \\| sigmoid" in row["Q-softmax"]  # a pipe cannot break the table
    assert lines.index(row["Q-softmax"]) > lines.index(row["C30"])  # extras come last
    assert "2 reproduced, 1 mixed, 27 not yet recorded" in text


def test_check_fails_until_the_index_is_regenerated(book_dir, capsys):
    assert check_index(book_dir) == [
        f"{book_dir / INDEX_NAME} is missing: run python -m book.claims_index"
    ]
    assert main(["--chapters", str(book_dir), "--check"]) == 1
    assert main(["--chapters", str(book_dir)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert check_index(book_dir) == []
    assert main(["--chapters", str(book_dir), "--check"]) == 0
    index = book_dir / INDEX_NAME
    index.write_text(index.read_text().replace("reproduced", "REPRODUCED", 1))
    (problem,) = check_index(book_dir)
    assert "differs from what the notebooks recorded (first at line" in problem
    assert main(["--chapters", str(book_dir), "--check"]) == 1
    assert "run python -m book.claims_index" in capsys.readouterr().err
    write_index(book_dir)
    assert check_index(book_dir) == []


def test_a_re_executed_notebook_makes_the_index_stale(book_dir):
    write_index(book_dir)
    path = book_dir / "02_more.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    reset_claims()
    record_claim("C5", "dot products have variance d_k", "exp", "partly", "within 9%")
    nb.cells[-1].outputs = [_table_output()]
    nbformat.write(nb, str(path))
    assert check_index(book_dir), "a changed verdict must make the index stale"


def test_no_extras_says_so(tmp_path):
    assert "None recorded yet." in render_index([])
    assert render_index([]).count("not yet recorded |") == 30


def _sweep(base: str, *changed: tuple[str, str]) -> dict:
    return {
        "baseline": {"name": "baseline", "verdict": base},
        "perturbations": [{"name": name, "verdict": verdict} for name, verdict in changed],
    }


def test_the_sweep_column_says_per_change_held_or_what_the_verdict_became(book_dir):
    sweeps = {
        "C5": _sweep("partly", ("seeds 3–5", "partly"), ("torch init", "not reproduced")),
        "C19 cost": _sweep("partly", ("1200 steps", "reproduced")),
    }
    text = render_index(recorded_claims(book_dir), sweeps)
    assert "| tested in | sceptic's sweep |" in text
    row = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert row["C5"].endswith(" | baseline: partly; seeds 3–5: held; torch init: not reproduced |")
    assert row["↳ C19 cost"].endswith(" | baseline: partly; 1200 steps: reproduced |")
    for claim_id in ("↳ C19 window", "C19", "C20", "Q-softmax"):  # no sweep stored
        assert row[claim_id].endswith(" | — |")
    assert all(line.count(" | ") == 6 for line in row.values())  # seven columns everywhere


def test_a_stored_sweep_beside_the_chapters_reaches_the_index(book_dir):
    write_index(book_dir)
    (book_dir / "sceptic").mkdir()
    stored = {"version": 1, "claims": {"C5": _sweep("reproduced", ("d_k 64", "reproduced"))}}
    (book_dir / "sceptic" / "02_more.json").write_text(json.dumps(stored))
    assert check_index(book_dir), "a new stored sweep must make the index stale"
    write_index(book_dir)
    text = (book_dir / INDEX_NAME).read_text(encoding="utf-8")
    assert "| baseline: reproduced; d_k 64: held |" in text
