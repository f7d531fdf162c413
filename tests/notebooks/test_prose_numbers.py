r"""Every number a chapter's prose quotes comes from the notebook (STYLE.md, "Chapters").

A number in a markdown cell of ``chapters/NN_*.py`` must appear in the notebook's code or in
the stored output of a **checked** cell (``chapters/NN_*.ipynb``, a cell tagged
``nbval-check-output``: stream and ``text/plain`` / ``text/markdown`` / ``text/html`` outputs,
and the recorded claims JSON). A checked output is compared with a fresh run on every
``make test`` — exactly, or within the cell's tolerance class where it depends on rounding
(``book.notebooks.tolerance``) — so the number the prose quotes is the one a reader's run
gives, on any CPU. The rules, decided once here:

- **Exempt**: integers 0–10 (counts, small dimensions, list markers); four-digit years next to a
  name or inside parentheses (citations); section numbers (``§4.3``, "section 4.3", a heading's
  own number, and any number of the form N.M that is a section heading of the book when a
  ``§``/"section"/"chapter" precedes it); claim ids (``C1``–``C30``, ``C9a``) and exercise ids
  (``02.1``, "exercise 3.4"); figure/table/equation numbers; everything in inline code, code
  blocks, link targets and HTML tags; digits inside words (``float32``, ``W1``, ``GPT-2``).
- **LaTeX math** (``$…$``, ``$$…$$``): integers are formula constants and exempt, and so is a
  coefficient (a number followed by a symbol or a bracket: ``$1.5(h-1)/D$``) and the value of a
  closed-form expression (a number after ``=``/``\approx`` in a span that applies a function
  such as ``\ln``, ``\sigma``, ``\sqrt``, ``\frac``, ``e^``: ``$\ln 8 \approx 2.08$``). Any
  other number with a decimal point or an exponent (``$0.731$``) looks measured and is checked.
- **Versions** (``torch 2.5``, "since version 2.5", ``Python 3.11``) are exempt.
- **Matching** compares values, not spellings: ``0.85`` = ``0.850``, ``1e-5`` = ``1e-05`` =
  ``0.00001``, ``×14.5`` = ``14.5``, ``10,000`` = ``10_000``; a sign is ignored (``−0.3`` is
  ``-0.3``). A prose number with at least two significant digits also matches a printed number
  that rounds to it at the prose's precision (``0.85`` for a printed ``0.8512``; ``33`` for
  ``33.2``); a one-digit number must match exactly. A percentage is its own value: ``85 %``
  matches a printed ``85`` or ``85.0%``, never a printed ``0.85``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import nbformat
import pytest

from book.claims import CLAIMS_MIME
from book.notebooks.common import REPO, read_py

CHAPTERS = sorted((REPO / "chapters").glob("[0-9][0-9]_*.py"))
OUTPUT_MIMES = ("text/plain", "text/markdown", "text/html")

# --- what the prose quotes ------------------------------------------------------------------

# A number in prose: not glued to a word on its left (W1, float32, C10, GPT-2, x.5), with
# optional thousands separators, decimals and an exponent (1e-5, 2.5E+03).
PROSE_NUMBER = re.compile(
    r"(?<![\w.])(?<![A-Za-z]-)(?<![A-Za-z]\.)"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+\-−]?\d+)?)"
    r"(?![\w.]*\d)"  # not the start of a longer dotted token (1706.03762v5, 2.13.0)
    r"(?!\.\d)"
)
FENCED = re.compile(r"```.*?```", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
URL = re.compile(r"https?://\S+")
HTML_TAG = re.compile(r"<[^>\n]*>")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
CLAIM_ID = re.compile(r"\bC\d{1,2}[a-z]?\b")
EXERCISE_ID = re.compile(r"\b0\d\.\d+\b")
LIST_MARKER = re.compile(r"^(\s*(?:#\s*)?)\d+[.)]\s", re.M)
HEADING_NUMBER = re.compile(r"^#+\s+(\d+(?:\.\d+)+)", re.M)
YEAR = re.compile(r"^(?:19[5-9]\d|20[0-4]\d)$")
# Before a citation year: a name ("Gers et al. 2000", "Jozefowicz, 2015"), or an open bracket.
YEAR_BEFORE = re.compile(r"(?:[A-Z][\w\-’']+|al\.|and|&)\s*,?\s*\(?\s*$|\(\s*$|;\s*$")
SECTION_BEFORE = re.compile(r"(?:§|[Ss]ections?|[Cc]hapters?|[Cc]h\.)[^.;:!?]{0,24}$")
VERSION_BEFORE = re.compile(r"(?:[Vv]ersions?|[Tt]orch|PyTorch|Python|CUDA|v)\s*$")
# A closed-form expression inside math: the number it evaluates to is not a measurement.
MATH_FUNCTION = re.compile(r"\\(?:ln|log|exp|sigma|sqrt|frac|tfrac|dfrac|cos|sin|tanh)\b|e\^")
MATH_COEFFICIENT_AFTER = re.compile(r"\s*[(\\A-Za-z{]")
LABEL_BEFORE = re.compile(r"(?:[Ff]ig(?:ure)?s?\.?|[Tt]ables?|[Ee]q(?:uation)?s?\.?|[Ee]xercises?)"
                          r"\s*$")  # fmt: skip


@dataclass(frozen=True)
class Quote:
    """One number quoted in a markdown cell."""

    text: str  # as written, e.g. "0.85"
    cell: int  # index of the cell in the notebook
    context: str  # the words around it, for the failure message
    in_math: bool = False


def _blank(match: re.Match) -> str:
    """Replace a match by spaces of the same length, so that offsets stay put."""
    return " " * len(match.group(0))


def section_numbers(markdowns: list[str]) -> set[str]:
    """The section numbers of the book's headings ("2.3", "4.5.1")."""
    return {m.group(1) for md in markdowns for m in HEADING_NUMBER.finditer(md)}


def prose_numbers(
    markdown: str, cell: int = 0, sections: frozenset[str] = frozenset()
) -> list[Quote]:
    """The numbers one markdown cell quotes that must come from the notebook (module rules)."""
    text = markdown
    for pattern in (FENCED, INLINE_CODE, LINK_TARGET, URL, HTML_TAG, CLAIM_ID, EXERCISE_ID):
        text = pattern.sub(_blank, text)
    text = LIST_MARKER.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), text)
    text = HEADING_NUMBER.sub(_blank, text)
    math_spans = [m.span() for m in MATH.finditer(text)]
    quotes = []
    for m in PROSE_NUMBER.finditer(text):
        raw = m.group("num")
        start = m.start("num")
        before = text[max(0, start - 40) : start]
        span = next(((a, b) for a, b in math_spans if a <= start < b), None)
        in_math = span is not None
        value = parse_number(raw)
        if value is None:
            continue
        is_int = re.fullmatch(r"[\d,]+", raw) is not None
        if is_int and 0 <= value <= 10:
            continue
        if in_math and is_int:
            continue
        if in_math and MATH_COEFFICIENT_AFTER.match(text, m.end("num")):
            continue  # a coefficient: 1.5(h - 1), 0.5\,x
        if (
            in_math
            and MATH_FUNCTION.search(text[span[0] : start])
            and re.search(r"(?:=|\\approx)\s*$", text[span[0] : start])
        ):
            continue  # the value of a closed-form expression: \ln 8 \approx 2.08
        if VERSION_BEFORE.search(before):
            continue
        if is_int and YEAR.match(raw) and YEAR_BEFORE.search(before):
            continue
        if LABEL_BEFORE.search(before):
            continue
        if raw in sections and SECTION_BEFORE.search(before):
            continue
        if before.rstrip().endswith("§"):
            continue
        context = " ".join(markdown[max(0, start - 50) : m.end() + 30].split())
        quotes.append(Quote(raw, cell, context, in_math))
    return quotes


# --- what the notebook produces -------------------------------------------------------------

HAYSTACK_NUMBER = re.compile(r"\d[\d_,]*(?:\.\d+)?(?:[eE][+\-−]?\d+)?")


def parse_number(text: str) -> Decimal | None:
    """The absolute value of a written number (``"1,000"``, ``"1_000"``, ``"1e-05"``)."""
    cleaned = text.replace(",", "").replace("_", "").replace("−", "-").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return abs(value) if value.is_finite() else None


def haystack_numbers(texts: list[str]) -> set[Decimal]:
    """Every number written anywhere in the given code and output texts."""
    found = set()
    for text in texts:
        for m in HAYSTACK_NUMBER.finditer(text):
            raw = m.group(0)
            # "1,2,3" is a list, not one thousand-separated number; keep its parts too.
            candidates = {raw, *re.split(r"[,]", raw)}
            for candidate in candidates:
                value = parse_number(candidate)
                if value is not None:
                    found.add(value)
    return found


def significant_digits(text: str) -> int:
    mantissa = re.split(r"[eE]", text.replace(",", ""))[0]
    return len(mantissa.replace(".", "").lstrip("0")) or 1


def matches(quote: str, produced: set[Decimal]) -> bool:
    """Whether ``quote`` is in ``produced`` or, with ≥ 2 significant digits, rounds from one."""
    value = parse_number(quote)
    if value is None:
        return True
    if value in produced:
        return True
    if significant_digits(quote) < 2:
        return False
    mantissa = re.split(r"[eE]", quote)[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = (
        int(re.split(r"[eE]", quote)[1].replace("−", "-")) if re.search(r"[eE]", quote) else 0
    )
    step = Decimal(10) ** (exponent - decimals)  # the unit of the quote's last written digit
    half = step / 2
    return any(abs(p - value) <= half for p in produced if not math.isclose(half, 0))


CHECK_TAG = "nbval-check-output"


def notebook_texts(py_nb: nbformat.NotebookNode, ipynb: nbformat.NotebookNode | None) -> list[str]:
    """The code of a notebook and every text its checked cells' stored outputs hold."""
    texts = [c.source for c in py_nb.cells if c.cell_type == "code"]
    for cell in ipynb.cells if ipynb is not None else []:
        if cell.cell_type != "code" or CHECK_TAG not in cell.metadata.get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                texts.append(output.get("text", ""))
            data = output.get("data", {})
            for mime in OUTPUT_MIMES:
                if mime in data:
                    value = data[mime]
                    texts.append("".join(value) if isinstance(value, list) else value)
            if CLAIMS_MIME in data:
                texts.append(json.dumps(data[CLAIMS_MIME], ensure_ascii=False))
    return texts


def unmatched_quotes(
    py_nb: nbformat.NotebookNode,
    ipynb: nbformat.NotebookNode | None,
    sections: frozenset[str] = frozenset(),
) -> list[Quote]:
    """The numbers the notebook's markdown quotes that neither its code nor its checked outputs
    contain."""
    produced = haystack_numbers(notebook_texts(py_nb, ipynb))
    missing = []
    for i, cell in enumerate(py_nb.cells):
        if cell.cell_type != "markdown":
            continue
        missing += [
            q for q in prose_numbers(cell.source, i, sections) if not matches(q.text, produced)
        ]
    return missing


def book_sections() -> frozenset[str]:
    return frozenset(section_numbers([c.source for p in CHAPTERS for c in read_py(p).cells
                                      if c.cell_type == "markdown"]))  # fmt: skip


# --- the chapters ---------------------------------------------------------------------------


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_comes_from_the_notebook(py: Path):
    ipynb_path = py.with_suffix(".ipynb")
    ipynb = nbformat.read(ipynb_path, as_version=4) if ipynb_path.exists() else None
    missing = unmatched_quotes(read_py(py), ipynb, book_sections())
    assert not missing, (
        f"{py.relative_to(REPO)}: the prose quotes numbers that neither the code nor the stored "
        "outputs of checked cells contain (print or record them in a cell tagged "
        "nbval-check-output, with a tolerance class where they depend on rounding, or "
        "reword):\n" + "\n".join(f"  cell {q.cell}: {q.text!r} in “…{q.context}…”" for q in missing)
    )


# --- the matcher itself ---------------------------------------------------------------------


def toy(markdown: str, code: str = "x = 1", printed: str | None = None, checked: bool = True):
    """A made-up notebook (py twin, executed twin) with one markdown cell and one code cell
    (tagged nbval-check-output unless ``checked`` is false)."""
    py_nb = nbformat.v4.new_notebook()
    py_nb.cells = [nbformat.v4.new_markdown_cell(markdown), nbformat.v4.new_code_cell(code)]
    ipynb = nbformat.v4.new_notebook()
    code_cell = nbformat.v4.new_code_cell(code)
    if checked:
        code_cell.metadata["tags"] = [CHECK_TAG]
    if printed is not None:
        code_cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    ipynb.cells = [nbformat.v4.new_markdown_cell(markdown), code_cell]
    return py_nb, ipynb


def missing_in(markdown: str, code: str = "x = 1", printed: str | None = None, sections=()):
    return [q.text for q in unmatched_quotes(*toy(markdown, code, printed), frozenset(sections))]


def test_a_quoted_number_nobody_printed_fails():
    assert missing_in("The model reached 0.731 accuracy.") == ["0.731"]


def test_a_printed_number_passes():
    assert missing_in("The model reached 0.731 accuracy.", printed="accuracy 0.7310\n") == []


def test_a_number_printed_only_by_an_unchecked_cell_fails():
    """Its stored value is never compared with a fresh run: it may be stale, or hold on one
    CPU only."""
    quoted = "The model reached 0.731 accuracy."
    assert unmatched_quotes(*toy(quoted, printed="accuracy 0.731\n", checked=False)) != []


def test_a_number_in_the_code_passes():
    assert missing_in("We train for 120 steps.", code="STEPS = 120") == []


def test_numbers_in_text_plain_markdown_and_claims_outputs_count():
    py_nb, ipynb = toy("Loss 2.345, gap 17.5 and speed-up 12.25.")
    ipynb.cells[1].outputs = [
        nbformat.v4.new_output("execute_result", data={"text/plain": "2.345"}, execution_count=1),
        nbformat.v4.new_output("display_data", data={"text/markdown": "| gap | 17.5 |"}),
        nbformat.v4.new_output(
            "display_data", data={CLAIMS_MIME: {"rows": [{"measured": "×12.25"}]}}
        ),
    ]
    assert unmatched_quotes(py_nb, ipynb) == []


@pytest.mark.parametrize(
    ("prose", "printed"),
    [
        ("0.85", "0.850"),
        ("0.850", "0.85"),
        ("1e-5", "1e-05"),
        ("1e-05", "0.00001"),
        ("×14.5", "14.5"),
        ("14.5", "x14.50"),
        ("10,000", "10_000"),
        ("10,000", "10000"),
        ("−0.31", "-0.31"),
        ("0.85", "0.8512"),  # two significant digits: the prose rounds the printed value
        ("33", "33.2"),
        ("85 %", "85.0%"),
        ("1.8e-7", "1.8e-07"),
    ],
)
def test_matching_is_robust_to_formatting(prose, printed):
    assert missing_in(f"We measured {prose} here.", printed=printed) == []


@pytest.mark.parametrize(
    ("prose", "printed"),
    [
        ("85 %", "0.85"),  # a percentage is not the fraction unless the percentage is printed
        ("0.85", "85"),
        ("0.9", "0.87"),  # one significant digit: no rounding allowed
        ("0.86", "0.8512"),
        ("14.5", "145"),
        ("1e-5", "1e-06"),
    ],
)
def test_different_values_do_not_match(prose, printed):
    assert missing_in(f"We measured {prose} here.", printed=printed) != []


@pytest.mark.parametrize(
    "prose",
    [
        "Vaswani et al. 2017 introduced it; Gers et al. (2000) and (Jozefowicz, 2015) too.",
        "See §4.3 and section 4.5, and chapter 4.5.",
        "Claims C14, C15 and C9a, and C1–C30.",
        "Exercise 02.1 and exercises 3.4; check 03.5.",
        "Inline code `torch.randn(512, 64)` and a block\n```\nx = 1234\n```",
        "Formula constants $\\sqrt{512}$ and $$e^{12} / 2^{16}$$.",
        "Three seeds, 10 heads, 0 errors, list:\n1. first\n2. second",
        "float32, bfloat16, W1, GPT-2 and x2.",
        "A [link](https://arxiv.org/abs/1706.03762) and <img width=640>.",
        "In Figure 12 and Table 13, eq. 14.",
        "Since version 2.5 of PyTorch (torch 2.13 and Python 3.11).",
        "A ratio of $1.5(h-1)/D$; guessing costs $\\ln 8 \\approx 2.08$ nats; "
        "$\\sigma(3) \\approx 0.95$.",
    ],
)
def test_exempt_numbers(prose):
    assert missing_in(prose, sections={"4.3", "4.5"}) == []


def test_a_measured_looking_number_inside_math_is_checked():
    assert missing_in("The ratio is $0.731$ and $d_k = 512$.") == ["0.731"]
    assert missing_in("The loss fell to $L \\approx 0.731$ nats.") == ["0.731"]


def test_a_section_number_without_a_section_word_is_checked():
    assert missing_in("It rose by 4.3 points.", sections={"4.3"}) == ["4.3"]


def test_a_year_that_is_not_a_citation_is_checked():
    assert missing_in("We train for 2000 steps.") == ["2000"]
