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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "VERDICTS",
    "Claim",
    "ClaimsTable",
    "claims",
    "claims_table",
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


def claims() -> list[Claim]:
    """The recorded claims, in the order they were first recorded."""
    return list(_CLAIMS.values())


def reset_claims() -> None:
    """Forget every recorded claim."""
    _CLAIMS.clear()


def _markdown(rows: list[Claim]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADERS) + " |", "| " + " | ".join("---" for _ in HEADERS) + " |"]
    for c in rows:
        lines.append("| " + " | ".join(cell(getattr(c, attr)) for _, attr in COLUMNS) + " |")
    return "\n".join(lines)


def _plain(rows: list[Claim]) -> str:
    table = [HEADERS, *[tuple(getattr(c, attr) for _, attr in COLUMNS) for c in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    out = ["  ".join(s.ljust(w) for s, w in zip(r, widths, strict=True)).rstrip() for r in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


class ClaimsTable(_MarkdownBase):
    """Markdown in a notebook; an aligned plain-text table in ``repr`` (and ``text/plain``)."""

    def __init__(self, rows: list[Claim]) -> None:
        super().__init__(_markdown(rows))
        self.rows = rows

    def __repr__(self) -> str:
        return _plain(self.rows)


def claims_table() -> ClaimsTable:
    """The recorded claims as a table with columns id, claim, experiment, verdict, measured."""
    return ClaimsTable(claims())
