"""The nbval sanitizers erase what legitimately differs between runs, and nothing measured."""

from __future__ import annotations

import re

import pytest
from nbval.plugin import get_sanitize_patterns

from book.notebooks.common import REPO

PATTERNS = get_sanitize_patterns((REPO / "book" / "notebooks" / "nbval_sanitize.cfg").read_text())


def sanitize(text: str) -> str:
    for regex, replace in PATTERNS:  # in file order, as nbval applies them
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize(
    "text",
    [
        "depth: 4/4",  # a finished book.progress bar
        "depth:   0%|          | 0/4 [00:00<?, ?it/s]",  # its first drawing
        "LSTM 32, seed 1: 120/120",
    ],
)
def test_progress_bars_are_erased(text):
    assert sanitize(text) == "TQDM-BAR"


@pytest.mark.parametrize(
    "text",
    [
        "test accuracy 0.918 (min 0.904, max 0.929) over 3 seeds",
        "LSTM 32, forget bias +5: uses the signal on 2 of 3 seeds (seeds 0-2: 0.742, 0.707, 0.260)",
        "heads 1/2/4: accuracy 0.60, 0.99, 1.00",
        "ratio: 3/4 of the pairs",
    ],
)
def test_measured_lines_are_kept(text):
    assert sanitize(text) == text
