"""The book's progress bar: one function, so that every long loop looks and behaves the same.

Chapters and experiments write ``for x in progress(items, desc="...")``. ``TQDM_DISABLE=1``
(set by ``make execute`` and the notebook tests) turns every bar off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(
    iterable: Iterable[T], *, desc: str, total: int | None = None, leave: bool = True
) -> Iterator[T]:
    """``iterable`` with a progress bar labelled ``desc`` (``leave=False``: erase it when done)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=leave)
