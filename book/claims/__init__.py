"""The "claims checked" table of a chapter.

Each claim a chapter tests is recorded from the run that tested it, so that the numbers quoted
in the prose come from the notebook's own outputs::

    record_claim(
        "sdpa-scale",
        claim="Without the 1/sqrt(d) scale, softmax saturates as d grows",
        experiment="max attention weight vs d, 200 random queries",
        verdict="reproduced",
        measured=f"max weight {unscaled:.2f} unscaled vs {scaled:.2f} scaled at d=512",
    )
    claims_table()  # renders a Markdown table in the notebook

Re-recording an id replaces the entry (re-running a cell is harmless).

Besides the Markdown and the plain text, the table's display carries the same rows as JSON
under :data:`CLAIMS_MIME` (a vendor type that notebook front ends do not render), each with the
execution count of the cell that recorded it, so that ``python -m book.claims_index`` can read
an executed notebook's claims back without parsing Markdown and find the section that tested
each one. :func:`parse_claims_markdown` reads the Markdown table back (for notebooks executed
before the JSON existed).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLAIMS_MIME",
    "VERDICTS",
    "Claim",
    "ClaimsTable",
    "claims",
    "claims_table",
    "parse_claims_markdown",
    "record_claim",
    "reset_claims",
]

VERDICTS = ("reproduced", "partly", "not reproduced")
# (header, Claim attribute): the id (C1…C30 for the article's claims) comes first so a reader
# can find the claim in outline.md.
COLUMNS = (
    ("id", "claim_id"),
    ("claim", "claim"),
    ("experiment", "experiment"),
    ("verdict", "verdict"),
    ("measured", "measured"),
)
HEADERS = tuple(h for h, _ in COLUMNS)
# The machine-readable copy of a claims table in a notebook's outputs.
CLAIMS_MIME = "application/vnd.attention-book.claims+json"
CLAIMS_FORMAT_VERSION = 1

try:  # IPython is there in every notebook; the package itself does not need it
    from IPython.display import Markdown as _MarkdownBase
except ImportError:  # pragma: no cover - exercised only without IPython

    class _MarkdownBase:  # type: ignore[no-redef]
        def __init__(self, data: str) -> None:
            self.data = data

        def _repr_markdown_(self) -> str:
            return self.data


@dataclass(frozen=True)
class Claim:
    claim_id: str
    claim: str
    experiment: str
    verdict: str
    measured: str


_CLAIMS: dict[str, Claim] = {}
_CELLS: dict[str, int | None] = {}  # claim id -> execution count of the recording cell


def _current_cell() -> int | None:
    """The execution count of the notebook cell running now (``None`` outside IPython).

    IPython bumps ``shell.execution_count`` before it runs a cell; the running cell's own count
    is on the ``ExecutionResult`` the display hook holds while the cell runs.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - exercised only without IPython
        return None
    shell = get_ipython()
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} ({value!r})")
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    return " ".join(value.split())  # one line: a table cell cannot hold a newline


def record_claim(claim_id: str, claim: str, experiment: str, verdict: str, measured: str) -> None:
    """Record the outcome of testing one claim.

    Args:
        claim_id: short unique id, e.g. ``"sdpa-scale"``.
        claim: the claim in plain words.
        experiment: what was run to test it.
        verdict: one of ``"reproduced"``, ``"partly"``, ``"not reproduced"``.
        measured: the numbers the verdict rests on, as a short string.
    """
    claim_id = _text("claim_id", claim_id)
    fields = {
        "claim": _text("claim", claim),
        "experiment": _text("experiment", experiment),
        "verdict": _text("verdict", verdict),
        "measured": _text("measured", measured),
    }
    if fields["verdict"] not in VERDICTS:
        raise ValueError(f"verdict must be one of {list(VERDICTS)}, got {verdict!r}")
    _CLAIMS[claim_id] = Claim(claim_id, **fields)
    _CELLS[claim_id] = _current_cell()


def claims() -> list[Claim]:
    """The recorded claims, in the order they were first recorded."""
    return list(_CLAIMS.values())


def reset_claims() -> None:
    """Forget every recorded claim."""
    _CLAIMS.clear()
    _CELLS.clear()


def _markdown(rows: list[Claim]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADERS) + " |", "| " + " | ".join("---" for _ in HEADERS) + " |"]
    for c in rows:
        lines.append("| " + " | ".join(cell(getattr(c, attr)) for _, attr in COLUMNS) + " |")
    return "\n".join(lines)


def parse_claims_markdown(text: str) -> list[Claim]:
    """The rows of a table written by :func:`claims_table` (its ``text/markdown``), read back.

    The inverse of the rendering: cells are split on `` | ``, ``\\|`` is a literal pipe.
    Raises ``ValueError`` naming the line when ``text`` is not such a table.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    lines = text.strip().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not (line.startswith("| ") and line.endswith(" |")):
            raise ValueError(f"line {number} is not a table row ('| ... |'): {line!r}")
        cells, current, i, body = [], "", 0, line[2:-2]
        while i < len(body):
            if body.startswith("\\|", i):
                current, i = current + "|", i + 2
            elif body.startswith(" | ", i):
                cells.append(current)
                current, i = "", i + 3
            else:
                current, i = current + body[i], i + 1
        cells.append(current)
        if len(cells) != len(HEADERS):
            raise ValueError(
                f"line {number} has {len(cells)} cells, expected {len(HEADERS)} "
                f"({', '.join(HEADERS)}): {line!r}"
            )
        rows.append(cells)
    if len(rows) < 2 or tuple(rows[0]) != HEADERS or set(rows[1]) != {"---"}:
        raise ValueError(
            f"text must start with the header | {' | '.join(HEADERS)} | and its separator row"
        )
    return [Claim(*cells) for cells in rows[2:]]


def _plain(rows: list[Claim]) -> str:
    table = [HEADERS, *[tuple(getattr(c, attr) for _, attr in COLUMNS) for c in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    out = ["  ".join(s.ljust(w) for s, w in zip(r, widths, strict=True)).rstrip() for r in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


class ClaimsTable(_MarkdownBase):
    """Markdown in a notebook; an aligned plain-text table in ``repr`` (and ``text/plain``)."""

    def __init__(self, rows: list[Claim], cells: dict[str, int | None] | None = None) -> None:
        super().__init__(_markdown(rows))
        self.rows = rows
        self.cells = dict(cells or {})

    def __repr__(self) -> str:
        return _plain(self.rows)

    def to_json(self) -> dict:
        """The rows as JSON: ``{"version": 1, "claims": [{"id", ..., "cell"}, ...]}``, where
        ``cell`` is the execution count of the cell that recorded the claim (or ``None``)."""
        return {
            "version": CLAIMS_FORMAT_VERSION,
            "claims": [
                {header: getattr(c, attr) for header, attr in COLUMNS}
                | {"cell": self.cells.get(c.claim_id)}
                for c in self.rows
            ],
        }

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        # Only the JSON copy: IPython adds text/markdown and text/plain from the other reprs.
        return {CLAIMS_MIME: self.to_json()}


def claims_table() -> ClaimsTable:
    """The recorded claims as a table with columns id, claim, experiment, verdict, measured."""
    return ClaimsTable(claims(), _CELLS)
