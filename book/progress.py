"""The book's progress bar: one function, so that every long loop looks and behaves the same.

Chapters and experiments write ``for x in progress(items, desc="...")``.

In a Jupyter kernel the bar is tqdm drawn as **plain text in one output** that it updates in
place (a display with an id), not tqdm.auto's ipywidgets bar: widget state is not saved with a
notebook, so a widget bar comes back as "Error displaying widget: model not found" when the
notebook is reopened. When the loop ends the output is replaced by a line without timings
(``desc: n/total``), or emptied with ``leave=False``, so that a notebook run twice stores the
same text and a reopened notebook shows what the run left. An erased bar's output is reused by
the next bar of the same cell, so a loop of inner bars leaves one empty output, not one each.
Outside a kernel (scripts, tests, the benchmark) it is tqdm's usual text bar on stderr.
``TQDM_DISABLE=1`` turns every bar off, and so does :func:`silence` in a process of its own
(the worker processes of :mod:`book.experiments.parallel`, whose bars would draw into the
parent's outputs).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.std import tqdm

T = TypeVar("T")


def in_kernel() -> bool:
    """True inside a Jupyter (IPython) kernel, where outputs go to a notebook."""
    if "IPython" not in sys.modules:  # never import IPython just to find out
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _cell() -> int:
    """The execution count of the cell running now (the same for its whole run)."""
    from IPython import get_ipython

    return get_ipython().execution_count


class TextDisplayBar(tqdm):
    """tqdm drawn as text in one notebook output that is updated in place (no widget)."""

    _erased: list = []  # (cell, display handle) of closed leave=False bars, free for reuse

    def __init__(self, *args, **kwargs) -> None:
        kwargs["gui"] = True  # tqdm.std prints nothing itself; display() below draws
        self._handle = None
        super().__init__(*args, **kwargs)
        if self.disable:
            return
        from IPython.display import display

        cell = _cell()
        TextDisplayBar._erased = [(c, h) for c, h in TextDisplayBar._erased if c == cell]
        if TextDisplayBar._erased:
            self._handle = TextDisplayBar._erased.pop()[1]
            self.display()
        else:
            self._handle = display(self._bundle(str(self)), raw=True, display_id=True)

    @staticmethod
    def _bundle(text: str) -> dict[str, str]:
        # An empty text/html too, so that HTML renderings (the book) show nothing for "".
        return {"text/plain": text, "text/html": ""} if not text else {"text/plain": text}

    def display(self, msg=None, pos=None, **_) -> bool:  # called by tqdm at each refresh
        if self._handle is not None:
            self._handle.update(self._bundle(str(self) if msg is None else msg), raw=True)
        return True

    def final_text(self) -> str:
        """What the output keeps after the loop: no rate, no time, so every run agrees."""
        if not self.leave:
            return ""
        done = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        return f"{self.desc}: {done}" if self.desc else done

    def close(self) -> None:
        if self.disable:
            return
        super().close()
        self.display(msg=self.final_text())
        if not self.leave:
            TextDisplayBar._erased.append((_cell(), self._handle))


_silenced = False


def silence() -> None:
    """Draw no bar from now on in this process (:func:`progress` still iterates)."""
    global _silenced
    _silenced = True


def progress(
    iterable: Iterable[T], *, desc: str, total: int | None = None, leave: bool = True
) -> Iterator[T]:
    """``iterable`` with a progress bar labelled ``desc`` (``leave=False``: erase it when done)."""
    if _silenced:
        return tqdm(iterable, desc=desc, total=total, leave=leave, disable=True)
    bar = TextDisplayBar if in_kernel() else tqdm
    return bar(iterable, desc=desc, total=total, leave=leave)
