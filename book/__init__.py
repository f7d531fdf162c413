"""book: the machinery of the textbook, kept apart from the ``attention`` library.

The library (``attention/``) is what a reader reuses in their own model code and depends on
torch only. Everything here exists for the book: per-chapter experiments
(:mod:`book.experiments`), learner checks (:mod:`book.checks`), claims tables
(:mod:`book.claims`), figures (:mod:`book.plotting`), notebook tools (:mod:`book.notebooks`)
and the environment check (``python -m book.env_check``). It imports ``attention`` and
``measure`` (time, memory and FLOPs, shared with the benchmark); neither imports it.
"""
