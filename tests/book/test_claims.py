"""The claims table (book.claims): validation, Markdown and plain-text rendering."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.formatters import format_display_data
from IPython.display import Markdown

from book.claims import (
    CLAIMS_MIME,
    VERDICTS,
    claims,
    claims_table,
    parse_claims_markdown,
    record_claim,
    reset_claims,
)


@pytest.fixture(autouse=True)
def empty_book():
    reset_claims()
    yield
    reset_claims()


def parse_markdown_table(text: str) -> list[list[str]]:
    """Rows of a Markdown pipe table, with escaped pipes restored (an independent reader)."""
    rows = []
    for line in text.splitlines():
        assert line.startswith("| ") and line.endswith(" |"), line
        cells, current, i, body = [], "", 0, line[2:-2]
        while i < len(body):
            if body.startswith("\\|", i):
                current, i = current + "|", i + 2
            elif body.startswith(" | ", i):
                cells.append(current)
                current, i = "", i + 3
            else:
                current, i = current + body[i], i + 1
        rows.append([*cells, current])
    return rows


def test_table_has_the_five_columns_in_recording_order():
    record_claim("b", "Scaling keeps softmax soft", "max weight vs d", "reproduced", "0.31 vs 0.99")
    record_claim("a", "Heads specialise", "entropy per head", "partly", "3 of 8 heads")
    rows = parse_markdown_table(claims_table().data)
    assert rows[0] == ["id", "claim", "experiment", "verdict", "measured"]
    assert rows[1] == ["---"] * 5
    assert rows[2:] == [
        ["b", "Scaling keeps softmax soft", "max weight vs d", "reproduced", "0.31 vs 0.99"],
        ["a", "Heads specialise", "entropy per head", "partly", "3 of 8 heads"],
    ]


def test_rerecording_an_id_replaces_it_in_place():
    record_claim("a", "first", "e", "reproduced", "1")
    record_claim("b", "second", "e", "partly", "2")
    record_claim("a", "first, again", "e", "not reproduced", "3")
    assert [(c.claim_id, c.claim, c.verdict) for c in claims()] == [
        ("a", "first, again", "not reproduced"),
        ("b", "second", "partly"),
    ]


def test_notebook_display_has_markdown_and_an_aligned_plain_text_table():
    record_claim("a", "A | B", "line one\nline two", "reproduced", "x = 1.00")
    table = claims_table()
    assert isinstance(table, Markdown)
    data, _ = format_display_data(table)
    assert "A \\| B" in data["text/markdown"]
    assert "line one line two" in data["text/markdown"]  # newlines would break the row
    plain = data["text/plain"].splitlines()
    assert plain[0].split() == ["id", "claim", "experiment", "verdict", "measured"]
    assert set(plain[1].replace(" ", "")) == {"-"}
    assert plain[2].startswith("a   A | B  line one line two  reproduced  x = 1.00")
    assert repr(table) == data["text/plain"]


def test_empty_table_has_only_the_header():
    assert parse_markdown_table(claims_table().data) == [
        ["id", "claim", "experiment", "verdict", "measured"],
        ["---"] * 5,
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"verdict": "yes"}, ValueError, "verdict must be one of"),
        ({"verdict": "Reproduced"}, ValueError, "verdict must be one of"),
        ({"measured": 0.5}, TypeError, r"measured must be a str, got float \(0.5\)"),
        ({"claim": ""}, ValueError, "claim must be a non-empty str"),
        ({"claim_id": None}, TypeError, "claim_id must be a str"),
        ({"experiment": "  "}, ValueError, "experiment must be a non-empty str"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    args = {"claim_id": "a", "claim": "c", "experiment": "e", "verdict": "partly", "measured": "m"}
    with pytest.raises(error, match=match):
        record_claim(**{**args, **kwargs})
    assert claims() == []


def test_reset_forgets_everything():
    record_claim("a", "c", "e", "partly", "m")
    reset_claims()
    assert claims() == [] and len(parse_markdown_table(claims_table().data)) == 2


text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20).filter(
    lambda s: s.strip() and s == " ".join(s.split()) and "\\" not in s
)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(text, text, st.sampled_from(VERDICTS), text), max_size=4))
def test_markdown_round_trips_any_single_line_text(rows):
    reset_claims()
    for n, (claim, experiment, verdict, measured) in enumerate(rows):
        record_claim(f"id{n}", claim, experiment, verdict, measured)
    parsed = parse_markdown_table(claims_table().data)[2:]
    assert parsed == [[f"id{n}", *r] for n, r in enumerate(rows)]


# --- the machine-readable copy and reading a table back ------------------------------------


def test_display_carries_the_rows_as_json_with_the_recording_cell(monkeypatch):
    counts = iter([7, 9])
    monkeypatch.setattr("book.claims._current_cell", lambda: next(counts))
    record_claim("C1", "A | B", "e", "reproduced", "x = 1")
    record_claim("§2 q", "second", "e2", "partly", "y = 2")
    data, _ = format_display_data(claims_table())
    assert set(data) >= {CLAIMS_MIME, "text/markdown", "text/plain"}
    assert data[CLAIMS_MIME] == {
        "version": 1,
        "claims": [
            {"id": "C1", "claim": "A | B", "experiment": "e", "verdict": "reproduced",
             "measured": "x = 1", "cell": 7},
            {"id": "§2 q", "claim": "second", "experiment": "e2", "verdict": "partly",
             "measured": "y = 2", "cell": 9},
        ],
    }  # fmt: skip


def test_rerecording_moves_the_recording_cell_and_reset_forgets_it(monkeypatch):
    counts = iter([3, 4])
    monkeypatch.setattr("book.claims._current_cell", lambda: next(counts))
    record_claim("a", "c", "e", "partly", "m")
    record_claim("a", "c", "e", "reproduced", "m")
    assert claims_table().to_json()["claims"][0]["cell"] == 4
    reset_claims()
    assert claims_table().to_json() == {"version": 1, "claims": []}


def test_the_recording_cell_is_the_running_cell_of_an_ipython_shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from book.claims import record_claim as _r", store_history=True)
        before = shell.execution_count
        shell.run_cell("_r('z', 'c', 'e', 'partly', 'm')", store_history=True)
        assert claims_table().to_json()["claims"][0]["cell"] == before
    finally:
        InteractiveShell.clear_instance()


def test_outside_ipython_there_is_no_cell():
    from book.claims import _current_cell

    assert _current_cell() is None


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12),
            st.sampled_from(VERDICTS),
            st.text(alphabet="ab |\\x-", min_size=1, max_size=12),
        ),
        max_size=4,
    )
)
def test_parse_claims_markdown_inverts_the_table_even_with_pipes_and_backslashes(rows):
    reset_claims()
    kept = []
    for n, (claim, verdict, measured) in enumerate(rows):
        if not claim.strip() or not measured.strip():
            continue
        record_claim(f"C{n} x", claim, "exp | ment", verdict, measured)
        kept.append(claims()[-1])
    assert parse_claims_markdown(claims_table().data) == kept


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not a table", "line 1 is not a table row"),
        ("| a | b |\n| --- | --- |", "line 1 has 2 cells, expected 5"),
        ("| id | claim | experiment | verdict | oops |\n| --- | --- | --- | --- | --- |",
         "must start with the header"),
    ],
)  # fmt: skip
def test_parse_claims_markdown_names_what_is_wrong(text, match):
    with pytest.raises(ValueError, match=match):
        parse_claims_markdown(text)
    with pytest.raises(TypeError, match="text must be a str"):
        parse_claims_markdown(None)
