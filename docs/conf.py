"""Sphinx configuration of the rendered book (``make book``; see docs/index.md).

The book's source is the repository itself (``sphinx-build -c docs . OUT``): the executed
``chapters/NN_*.ipynb`` are rendered with their stored outputs by myst-nb (never re-executed:
``tests/notebooks/test_notebook_freshness.py`` guarantees the outputs are current), in
sphinx-book-theme, with the claims index ``chapters/README.md`` when it exists. MathJax is
served from the site itself (the ``sphinx-mathjax-offline`` package ships MathJax 3), so the
site works offline and fetches nothing at view time (``tests/browser/test_book.py`` fails on
any external script, style sheet, font or image).
"""

from __future__ import annotations

import re
from pathlib import Path

project = "Attention, tested"
author = ""  # no "By ..." line under every page
html_show_copyright = False

root_doc = "docs/index"
# Every chapter that exists (a glob, so new chapters need no edit here), and the claims index.
include_patterns = ["docs/index.md", "chapters/[0-9][0-9]_*.ipynb", "chapters/README.md"]
exclude_patterns = [".venv", "_build", ".git", "my-exercises", "**/.ipynb_checkpoints"]

extensions = ["myst_nb", "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the stored outputs are the book
nb_merge_streams = True
# Markdown outputs (each chapter's claims table) as GitHub-flavoured Markdown, which has tables;
# myst-nb's default, CommonMark, has none and shows a table as a paragraph of "| … |" text.
nb_render_markdown_format = "gfm"
suppress_warnings = ["myst.header"]  # chapters may skip a heading level
# The claims table's machine-readable copy (read back by book.claims_index) is not for readers:
# the page shows its Markdown form. myst-nb's Sphinx reader renders every type of a bundle before
# choosing, and warns for the ones it cannot render; the book's only such type is that copy
# (suppressing hides any other unknown type too; the book emits none).
nb_mime_priority_overrides = [("*", "application/vnd.attention-book.claims+json", None)]
suppress_warnings.append("mystnb.unknown_mime_type")

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "home_page_in_toc": False,  # the title above the toc links to it
    "show_toc_level": 2,
    "use_download_button": True,
    "navigation_with_keys": False,
    # The sidebar has the search field; without this the header above every page shows
    # a second one.
    "navbar_persistent": [],
}
html_context = {"default_mode": "auto"}  # light or dark as the reader's system is
html_show_sourcelink = False
# Long code lines and wide tables wrap to the column (docs/_static/book.css).
html_static_path = ["_static"]
html_css_files = ["book.css"]  # the download button offers the .ipynb
# Result summaries are fetched from the pages, which browsers refuse for a site opened from
# disk (file://): show titles only, so that search works offline without errors.
html_show_search_summary = False

# The landing page is docs/index.html; index.html at the top of the site sends readers there.
REDIRECT = (
    '<!DOCTYPE html>\n<meta charset="utf-8">\n<title>{title}</title>\n'
    '<meta http-equiv="refresh" content="0; url=docs/index.html">\n'
    '<a href="docs/index.html">{title}</a>\n'
)


# The claims index (chapters/README.md, a table of C1-C30 built from the notebooks) joins the
# table of contents once it exists.
CLAIMS = "chapters/README"
CLAIMS_TOC = "\n\n```{toctree}\n:caption: Claims\n:maxdepth: 1\n\n/" + CLAIMS + "\n```\n"


# The claims index links each claim to its section as JupyterLab and GitHub name it
# (``05_long_range.ipynb#5.5-Remedies,-…-(C19)``); Sphinx names sections otherwise, so in the
# book each link goes to the chapter's page.
SECTION_LINK = re.compile(r"(\]\(\d\d_[\w\-]+\.ipynb)#[^\s|]*\)(?=\s*\|)")


def _add_claims_index(app, docname, source) -> None:
    if docname == root_doc and (Path(app.srcdir) / f"{CLAIMS}.md").exists():
        source[0] += CLAIMS_TOC
    if docname == CLAIMS:
        source[0] = SECTION_LINK.sub(r"\1)", source[0])


def _write_redirect(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        (Path(app.outdir) / "index.html").write_text(REDIRECT.format(title=project))


def setup(app):
    app.connect("source-read", _add_claims_index)
    app.connect("build-finished", _write_redirect)
