"""`make lab` under test: one JupyterLab harness for the server tests (tests/notebooks) and the
browser tests (tests/browser).

:class:`MakeLab` runs the README's ``make lab`` in a folder (the repository, or a copy made by
:func:`copy_book`), on a free loopback port with a random token, and talks to the server's
REST API. Its process group is ended by :meth:`MakeLab.stop`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from book.notebooks.common import REPO

STARTUP_SECONDS = 120  # a shared, loaded CI machine
# What `make lab` and `make check` need in a copy of the book (mtimes kept, so that the .venv
# stamps stay fresh); the copy's .venv is the repository's.
COPIED = ["Makefile", "jupytext.toml", "requirements-dev.txt", "pyproject.toml", "chapters",
          "exercises", "solutions", "book", "measure", "attention"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux: read from /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):  # the thread or process just ended
            continue
        for child in children:
            found += [int(child), *descendants(int(child))]
    return found


class MakeLab:
    """``make lab`` in ``root``, on a free port with a random token; ``extra_args`` are more
    JupyterLab options, ``env`` more environment variables."""

    def __init__(
        self, root: Path, workdir: Path, extra_args: str = "", env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = (
            f"--no-browser --port={self.port} --port-retries=0 --ServerApp.ip=127.0.0.1 "
            f"--IdentityProvider.token={self.token} {extra_args}"
        ).strip()
        full_env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(workdir / "runtime"), **(env or {}))
        self.log = workdir / "make_lab.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
                cwd=root, env=full_env, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip

    def api(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, path: str):
        status, body = self.api(path)
        assert status == 200, f"GET {path} -> {status}: {body[:300]!r}"
        return json.loads(body)

    def notebook(self, path: str) -> nbformat.NotebookNode:
        """The notebook at ``path`` as the server's contents API returns it."""
        model = self.json(f"/api/contents/{path}?type=notebook&content=1")
        return nbformat.from_dict(model["content"])

    def wait_until(self, condition, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"make lab exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if condition():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        pytest.fail(f"{what} not within {seconds} s:\n{self.tail()}")

    def wait_for_server(self, seconds: float = STARTUP_SECONDS) -> None:
        self.wait_until(lambda: self.api("/api/status")[0] == 200, "make lab", seconds)

    def server_env(self) -> dict[str, str]:
        """The environment of the jupyter server: what a JupyterLab terminal inherits."""
        for pid in descendants(self.proc.pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if any(b"jupyter-lab" in part or part == b"lab" for part in cmdline[:3]):
                raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                return dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        raise AssertionError(f"no jupyter lab process under make (pid {self.proc.pid})")

    def stop(self) -> None:
        os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def copy_book(dest: Path) -> Path:
    """A copy of what ``make lab`` serves, in ``dest``, sharing the repository's .venv."""
    for name in COPIED:
        source, target = REPO / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest
