"""The claims table (book.claims): validation, Markdown and plain-text rendering."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.formatters import format_display_data
from IPython.display import Markdown

from book.claims import VERDICTS, claims, claims_table, record_claim, reset_claims


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
