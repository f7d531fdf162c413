"""Shared pieces of the browser tests: Chromium through Playwright, screenshots, console errors.

Playwright for Python drives the system Chromium (``/usr/bin/chromium``, Debian's package
``chromium``, or ``$CHROMIUM``); Playwright's own browser download is never used. Without
Chromium the tests that need it are skipped with one line saying how to enable them, except
under ``CI=true``, where ``make test-browser`` installs the package first and a missing
browser is a failure. Screenshots of every step go to ``_build/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from book.notebooks.common import REPO

SCREENSHOTS = REPO / "_build" / "screenshots"
# Headless Chromium as root in a container, on a machine without a network: no sandbox, no
# GPU, and none of the background services that would try to reach the network (without
# these, the closed network refuses their connections many at a time).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
]
HOW_TO_ENABLE = (
    "browser tests skipped: no Chromium found; install it (Debian/Ubuntu: "
    "`apt-get install chromium`) or set CHROMIUM=/path/to/chromium, then `make test-browser`"
)


def chromium_path() -> str | None:
    candidates = [os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


@pytest.fixture(scope="session")
def chromium():
    """A headless Chromium (Playwright ``Browser``); each test opens its own fresh context
    (Playwright gives every launch a new, empty profile directory)."""
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no Chromium: `make test-browser` should have installed it")
        pytest.skip(HOW_TO_ENABLE)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - pinned in requirements-dev.txt
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("browser tests skipped: playwright is not installed (run `make venv`)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


class Console:
    """Every console error and uncaught exception a page reports."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        page.on(
            "console",
            lambda msg: (
                self.errors.append(f"console.{msg.type}: {msg.text}")
                if msg.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda err: self.errors.append(f"page error: {err}"))


def screenshot_dir(name: str) -> Path:
    """A fresh ``_build/screenshots/NAME`` folder for one test module's steps."""
    folder = SCREENSHOTS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder
