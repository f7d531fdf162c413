"""The book's claims index, ``chapters/README.md``, generated from the executed notebooks.

Every chapter ends with ``claims_table()``; its stored output is what the notebook recorded
when it last ran. This module reads those outputs back (the JSON copy under
:data:`book.claims.CLAIMS_MIME` when there is one, else the Markdown table) and writes one
page that lists the article's thirty claims, C1–C30, in order — id, chapter, verdict, the
measured numbers, a link to the section of the notebook that tested it and, where the claim's
sweep is stored (``chapters/sceptic/``, :mod:`book.sceptic`), whether the verdict held under
each change a sceptic would try — followed by the other questions the book tested (ids such
as ``§2.1 shared Q/K`` or ``MQA/GQA``).

Ids with a suffix (``C9a``, ``C19 window``) are sub-claims: they roll up under their number, one
row each below a row for the whole claim. A claim no notebook has recorded yet is listed as
"not yet recorded", with the chapter expected to test it.

Nothing here is typed by hand except the list of the article's claims (their numbers, the
chapter expected to test each, and a one-line statement for claims not yet recorded)::

    python -m book.claims_index            # (re)write chapters/README.md
    python -m book.claims_index --check    # exit 1 if chapters/README.md is out of date

``tests/book/test_claims_index.py`` fails, like ``--check``, when the committed page differs
from what the notebooks recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from book.claims import CLAIMS_MIME, VERDICTS, parse_claims_markdown
from book.sceptic import stored_sweeps, sweep_cell

__all__ = [
    "ARTICLE_CLAIMS",
    "INDEX_NAME",
    "RecordedClaim",
    "article_number",
    "check_index",
    "main",
    "notebook_claims",
    "recorded_claims",
    "render_index",
    "write_index",
]

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = REPO / "chapters"
INDEX_NAME = "README.md"
NOT_RECORDED = "not yet recorded"

# The article's claims: number -> (chapter expected to test it, the claim in a few words).
# The words are only shown while no notebook has recorded the claim, and above sub-claims.
ARTICLE_CLAIMS: dict[int, tuple[int, str]] = {
    1: (1, "Information passed along an RNN fades with distance; LSTM gates slow the fading "
        "but do not stop it"),
    2: (1, "An RNN cannot be parallelised over time: each step waits for the previous one"),
    3: (1, "On 500-step sequences an LSTM cannot use early features, and more width or depth "
        "barely helps"),
    4: (1, "Attention links any two positions in one step instead of O(n)"),
    5: (2, "For i.i.d. zero-mean unit-variance components, q·k has mean 0 and variance d_k"),
    6: (2, "High-variance scores saturate the softmax and starve its gradient; dividing by "
        "√d_k restores unit variance"),
    7: (2, "At d_k = 512 without the scale the loss hardly moves for hundreds of steps"),
    8: (3, "h heads of width d_model/h cost about as much compute as one full-width head"),
    9: (3, "BERT-base splits 768 dimensions into 12 heads of 64, and its heads learn different "
        "patterns"),
    10: (3, "The head count is a trade-off: at d_model 512, 8 heads beat 4 and 16"),
    11: (4, "Self-attention is permutation-equivariant: without positions, order is invisible"),
    12: (4, "Sinusoidal channels run from high to low frequency, like the bits of a counter"),
    13: (4, "Shifting by k positions is one linear map (a rotation) of the sinusoidal code"),
    14: (4, "Sinusoidal encodings need no parameters and could extrapolate, but degrade past "
         "the training length"),
    15: (4, "RoPE makes scores depend on the offset only, adds no parameters and extrapolates "
         "better"),
    16: (5, "Attention's path between two positions is O(1), so gradients do not vanish with "
         "distance"),
    17: (5, "Heat maps show the long-range links (topic and conclusion of a document), with "
         "little weight on filler"),
    18: (5, "Attention costs O(n²) time and memory: twice the length, four times the cost"),
    19: (5, "Sparse, windowed and linear attention cut the cost; windows lose reach, linear "
         "attention some accuracy"),
    20: (6, "Without a causal mask a decoder's training loss falls fast but its generation "
         "collapses"),
    21: (6, "A large negative score before the softmax masks a position out; test that "
         "position 0 attends only to itself"),
    22: (6, "Unmasked padding dilutes the attention of real tokens; padding and causal masks "
         "combine"),
    23: (6, "In fp16, QKᵀ can overflow into NaN; keep the softmax in fp32 and watch the "
         "largest score"),
    24: (6, "The n × n matrix dominates memory; FlashAttention and checkpointing cut it without "
         "changing the results"),
    25: (7, "Swin's shifted windows make the cost linear in image size and still let "
         "information cross windows"),
    26: (7, "On strongly periodic or trending series a tuned LSTM or TCN can match plain "
         "attention, or be steadier"),
    27: (7, "Cross-attention links text tokens and image patches; CLIP aligns paired "
         "embeddings contrastively after projecting both to one width"),
    28: (8, "The wrong view/transpose order runs without error but mixes the heads and ruins "
         "the results"),
    29: (9, "Attention weights are not a faithful explanation of a prediction"),
    30: (9, "Pre-LN trains deep stacks more stably than Post-LN, which needs warm-up"),
}  # fmt: skip

_ARTICLE_ID = re.compile(r"^C(\d{1,2})(?![0-9])(.*)$")
_NOTEBOOK = re.compile(r"^(\d{2})_.+\.ipynb$")
_RECORD_CALL = re.compile(r"""record_claim\(\s*(?:claim_id\s*=\s*)?(["'])(?P<id>.+?)\1""")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class RecordedClaim:
    """One row of a chapter's stored claims table, with where it was tested."""

    claim_id: str
    claim: str
    experiment: str
    verdict: str
    measured: str
    chapter: int
    notebook: str  # file name, e.g. "05_long_range.ipynb"
    section: str  # the heading of the section whose cell recorded it ("" if unknown)

    @property
    def number(self) -> int | None:
        return article_number(self.claim_id)

    @property
    def anchor(self) -> str:
        """``notebook#heading`` as Jupyter names heading anchors (spaces become dashes)."""
        if not self.section:
            return self.notebook
        return f"{self.notebook}#{quote(self.section.replace(' ', '-'), safe='-_.~:,()')}"


def article_number(claim_id: str) -> int | None:
    """``19`` for ``"C19"``, ``"C19 window"`` or ``"C19a"``; ``None`` for any id that is not
    one of the article's claims C1–C30 (``"Q-softmax"``, ``"§10 guide"``, ``"C31"``)."""
    if not isinstance(claim_id, str):
        raise TypeError(f"claim_id must be a str, got {type(claim_id).__name__}")
    match = _ARTICLE_ID.match(claim_id)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number in ARTICLE_CLAIMS else None


# ------------------------------------------------------------------------------------------
# Reading a notebook
# ------------------------------------------------------------------------------------------


def _source(cell: dict) -> str:
    """A cell's source as one string (an ``.ipynb`` file may store it as a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _claims_outputs(cells: Sequence[dict]) -> list[dict]:
    """The ``data`` of every stored claims-table output, in notebook order."""
    found = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            markdown = data.get("text/markdown", "")
            if isinstance(markdown, list):
                markdown = "".join(markdown)
            if CLAIMS_MIME in data or markdown.startswith("| id | claim | experiment |"):
                found.append(data)
    return found


def _rows(data: dict) -> list[tuple[dict, int | None]]:
    """``(fields, execution count or None)`` per row of one stored table."""
    payload = data.get(CLAIMS_MIME)
    if isinstance(payload, dict) and isinstance(payload.get("claims"), list):
        return [(row, row.get("cell")) for row in payload["claims"]]
    markdown = data["text/markdown"]
    markdown = "".join(markdown) if isinstance(markdown, list) else markdown
    rows = parse_claims_markdown(markdown)
    return [
        (
            {"id": c.claim_id, "claim": c.claim, "experiment": c.experiment,
             "verdict": c.verdict, "measured": c.measured},
            None,
        )
        for c in rows
    ]  # fmt: skip


def _section_before(cells: Sequence, index: int) -> str:
    """The text of the last level-1 or level-2 heading in the markdown cells up to ``index``."""
    for cell in reversed(cells[: index + 1]):
        if cell["cell_type"] != "markdown":
            continue
        headings = [_HEADING.match(line) for line in _source(cell).splitlines()]
        headings = [m for m in headings if m and len(m.group(1)) <= 2]
        if headings:
            return headings[-1].group(2)
    return ""


def _recording_cell(cells: Sequence, claim_id: str, execution_count: int | None) -> int | None:
    """Index of the code cell that recorded ``claim_id``: the one with the stored execution
    count, else the one whose source calls ``record_claim`` with that literal id."""
    if execution_count is not None:
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code" and cell.get("execution_count") == execution_count:
                return i
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            ids = [m.group("id") for m in _RECORD_CALL.finditer(_source(cell))]
            if claim_id in ids:
                return i
    return None


def notebook_claims(path: Path) -> list[RecordedClaim]:
    """The claims that the executed notebook ``path`` (``NN_slug.ipynb``) recorded: the rows of
    its last stored claims table, in order. A notebook without one recorded none."""
    path = Path(path)
    match = _NOTEBOOK.match(path.name)
    if match is None:
        raise ValueError(f"path must name a chapter notebook NN_slug.ipynb, got {path.name!r}")
    # The stored JSON, read as it is: nbformat's reader would validate the whole notebook
    # (and its import alone takes most of a second), for a few fields of a few cells.
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    tables = _claims_outputs(cells)
    if not tables:
        return []
    found = []
    for fields, count in _rows(tables[-1]):
        missing = [
            k for k in ("id", "claim", "experiment", "verdict", "measured") if k not in fields
        ]
        if missing:
            raise ValueError(f"{path.name}: a stored claim lacks {missing}: {fields!r}")
        index = _recording_cell(cells, fields["id"], count)
        section = _section_before(cells, index) if index is not None else ""
        found.append(
            RecordedClaim(
                claim_id=fields["id"],
                claim=fields["claim"],
                experiment=fields["experiment"],
                verdict=fields["verdict"],
                measured=fields["measured"],
                chapter=int(match.group(1)),
                notebook=path.name,
                section=section,
            )
        )
    return found


def recorded_claims(
    chapters: Path = CHAPTERS, *, exclude: Iterable[str] = ()
) -> list[RecordedClaim]:
    """Every claim recorded by the notebooks ``chapters/NN_*.ipynb``, in chapter order
    (``exclude``: notebook file names to skip, e.g. the one running now)."""
    skip = set(exclude)
    found = []
    for path in sorted(Path(chapters).glob("[0-9][0-9]_*.ipynb")):
        if path.name not in skip:
            found.extend(notebook_claims(path))
    return found


# ------------------------------------------------------------------------------------------
# Writing the page
# ------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _link(c: RecordedClaim) -> str:
    label = f"{c.notebook.removesuffix('.ipynb')}"
    if c.section:
        label += f": {c.section}"
    label = label.replace("[", "(").replace("]", ")")
    return f"[{_cell(label)}]({c.anchor})"


def _row(
    claim_id: str, chapter: str, verdict: str, claim: str, measured: str, link: str, sweep: str
) -> str:
    return (
        "| "
        + " | ".join(_cell(x) for x in (claim_id, chapter, verdict, claim))
        + (f" | {_cell(measured)} | {link} | {_cell(sweep)} |")
    )


def _summary(verdicts: Sequence[str]) -> str:
    if len(set(verdicts)) == 1:
        return verdicts[0]
    counts = [f"{verdicts.count(v)} {v}" for v in VERDICTS if v in verdicts]
    return "mixed: " + ", ".join(counts)


HEADER = (
    "| id | chapter | verdict | claim, in the book's words | measured | tested in "
    "| sceptic's sweep |"
)
RULE = "| --- | --- | --- | --- | --- | --- | --- |"


def render_index(
    claims: Sequence[RecordedClaim], sweeps: Mapping[str, Mapping] | None = None
) -> str:
    """The Markdown of ``chapters/README.md`` for the recorded ``claims`` and the stored
    ``sweeps`` (claim id -> record, :func:`book.sceptic.stored_sweeps`; none by default)."""
    sweeps = sweeps or {}

    def swept(claim_id: str) -> str:
        return sweep_cell(sweeps.get(claim_id))

    by_number: dict[int, list[RecordedClaim]] = {n: [] for n in ARTICLE_CLAIMS}
    extras: list[RecordedClaim] = []
    for c in claims:
        (by_number[c.number] if c.number is not None else extras).append(c)

    rows, overall = [], []
    for n, (expected_chapter, words) in ARTICLE_CLAIMS.items():
        subs = by_number[n]
        if not subs:
            rows.append(_row(f"C{n}", f"{expected_chapter} (expected)", NOT_RECORDED, words,
                             "—", "—", swept(f"C{n}")))  # fmt: skip
            overall.append(NOT_RECORDED)
            continue
        if len(subs) == 1 and subs[0].claim_id == f"C{n}":
            c = subs[0]
            rows.append(_row(c.claim_id, str(c.chapter), c.verdict, c.claim, c.measured, _link(c),
                             swept(c.claim_id)))  # fmt: skip
            overall.append(c.verdict)
            continue
        chapters = ", ".join(str(ch) for ch in sorted({c.chapter for c in subs}))
        verdict = _summary([c.verdict for c in subs])
        rows.append(
            _row(
                f"C{n}",
                chapters,
                verdict,
                words,
                f"{len(subs)} sub-claim{'s' if len(subs) > 1 else ''} below",
                "—",
                swept(f"C{n}"),
            )
        )
        overall.append(verdict if not verdict.startswith("mixed") else "mixed")
        for c in subs:
            rows.append(_row(f"↳ {c.claim_id}", str(c.chapter), c.verdict, c.claim, c.measured,
                             _link(c), swept(c.claim_id)))  # fmt: skip

    counted = [f"{overall.count(v)} {v}" for v in (*VERDICTS, "mixed", NOT_RECORDED)]
    counted = [s for s in counted if not s.startswith("0 ")]
    lines = [
        "# Claims index",
        "",
        "Every claim the source article makes (C1–C30), with the verdict of the experiment "
        "that tested it, the numbers that verdict rests on and the section of the notebook "
        "where it was tested; then the other questions the book tested. A verdict is "
        "*reproduced*, *partly* (reproduced) or *not reproduced*; a claim split into "
        "sub-claims shows one row per sub-claim under a row for the whole claim.",
        "",
        "The last column is the sceptic's sweep (`make sceptic`, `book/sceptic.py`): the "
        "claim's experiment re-run as the chapter ran it (the baseline) and under each "
        "obvious change — other seeds, a longer budget, the standard initialisation, the "
        "claim's own knobs — with, per change, *held* or the verdict it became; *—* where "
        "no sweep is stored yet. The results are stored beside the chapters, in "
        "`chapters/sceptic/`.",
        "",
        "This page is generated from the claims tables stored in the executed notebooks "
        "(`chapters/NN_*.ipynb`); do not edit it by hand. Regenerate it with "
        "`python -m book.claims_index`; `python -m book.claims_index --check` and "
        "`tests/book/test_claims_index.py` fail when it differs from what the notebooks "
        "recorded.",
        "",
        f"**The article's 30 claims:** {', '.join(counted)}.",
        "",
        "## The article's claims, C1–C30",
        "",
        HEADER,
        RULE,
        *rows,
        "",
        "## Other questions the book tested",
        "",
    ]
    if extras:
        lines += [HEADER, RULE]
        lines += [
            _row(
                c.claim_id,
                str(c.chapter),
                c.verdict,
                c.claim,
                c.measured,
                _link(c),
                swept(c.claim_id),
            )
            for c in extras
        ]
    else:
        lines.append("None recorded yet.")
    return "\n".join(lines) + "\n"


def write_index(chapters: Path = CHAPTERS) -> Path:
    """Write ``chapters/README.md`` from the notebooks in ``chapters``; return its path."""
    path = Path(chapters) / INDEX_NAME
    text = render_index(recorded_claims(chapters), stored_sweeps(chapters))
    path.write_text(text, encoding="utf-8")
    return path


def check_index(chapters: Path = CHAPTERS) -> list[str]:
    """Problems with the committed index: empty when it equals what the notebooks recorded."""
    path = Path(chapters) / INDEX_NAME
    expected = render_index(recorded_claims(chapters), stored_sweeps(chapters))
    if not path.exists():
        return [f"{path} is missing: run python -m book.claims_index"]
    actual = path.read_text(encoding="utf-8")
    if actual == expected:
        return []
    old, new = actual.splitlines(), expected.splitlines()
    first = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    shown = new[first] if first < len(new) else "(end of file)"
    return [
        f"{path} differs from what the notebooks recorded (first at line {first + 1}: "
        f"expected {shown!r}): run python -m book.claims_index"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m book.claims_index", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the index differs from the notebooks"
    )
    parser.add_argument("--chapters", type=Path, default=CHAPTERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check:
        problems = check_index(args.chapters)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{args.chapters / INDEX_NAME} is up to date")
        return 1 if problems else 0
    path = write_index(args.chapters)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
