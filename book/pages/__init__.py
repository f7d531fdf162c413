"""Modules exported from the chapters' pages by ``make export`` (``book.notebooks.export``).

``book/pages/chNN.py`` holds the cells chapter NN marks ``#| export``; its header names the
chapter to edit. Edit the chapter, never these modules: ``tests/notebooks/test_export.py``
fails when a module differs from what its chapter exports.
"""
