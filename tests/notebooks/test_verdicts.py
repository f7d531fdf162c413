"""No chapter writes a verdict by hand: every ``record_claim(..., verdict=...)`` in a chapter
takes its verdict from a function of the measured numbers (in ``book/claims/chNN.py``, where a
companion test feeds it a false case), never from a string literal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))


def literal_verdicts(source: str) -> list[int]:
    """Line numbers of ``record_claim`` calls whose ``verdict`` is a literal string (or an
    f-string, or a conditional between literals: a verdict chosen in the notebook)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "record_claim":
            continue
        verdicts = [k.value for k in node.keywords if k.arg == "verdict"]
        verdicts += node.args[3:4]  # record_claim(id, claim, experiment, verdict, measured)
        for value in verdicts:
            literal = all(
                isinstance(
                    n,
                    (
                        ast.Constant,
                        ast.JoinedStr,
                        ast.IfExp,
                        ast.Compare,
                        ast.Name,
                        ast.BoolOp,
                        ast.FormattedValue,
                        ast.Load,
                        ast.And,
                        ast.Or,
                    ),
                )
                for n in ast.walk(value)
            ) and any(isinstance(n, (ast.Constant, ast.JoinedStr)) for n in ast.walk(value))
            if literal:
                lines.append(node.lineno)
    return lines


def test_the_scan_finds_every_hand_written_verdict():
    source = (
        'record_claim("C1", claim="c", experiment="e", verdict="partly", measured="m")\n'
        'record_claim("C2", "c", "e", "reproduced", "m")\n'
        'book.claims.record_claim("C3", claim="c", experiment="e", verdict=f"{v}", measured="")\n'
        'record_claim("C4", "c", "e", verdict="partly" if ok else "no", measured="")\n'
        'record_claim("C5", claim="c", experiment="e", verdict=c5_verdict(runs), measured="m")\n'
        'record_claim("C6", claim="c", experiment="e", verdict=VERDICT[ok], measured="m")\n'
    )
    assert literal_verdicts(source) == [1, 2, 3, 4]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_chapter_writes_a_verdict_by_hand(path):
    lines = literal_verdicts(path.read_text(encoding="utf-8"))
    assert not lines, (
        f"{path.name}, lines {lines}: a literal verdict; compute it with a verdict function in "
        f"book/claims/ch{path.stem[:2]}.py that a companion test feeds a false case"
    )
