"""The notebook tools, each runnable as a module from the repository root:

- ``python -m book.notebooks.execute [paths]``: re-execute chapters and solutions from their
  ``.py`` twins (``make execute``);
- ``python -m book.notebooks.exercises [--force]``: generate ``exercises/`` from
  ``solutions/`` (``make exercises``);
- ``python -m book.notebooks.check 03``: check a learner's exercises (``make check CH=03``);
- ``python -m book.notebooks.lab_settings PREFIX``: JupyterLab settings so that ``.py`` twins
  open as notebooks.

Shared helpers (reading pairs, hashing sources, executing) live in
:mod:`book.notebooks.common`.
"""
