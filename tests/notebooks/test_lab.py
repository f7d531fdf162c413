"""``make lab`` works: JupyterLab starts from the venv, lists the chapters, and opens a ``.py``
twin as a notebook through jupytext's contents manager, with the settings that
python -m book.notebooks.lab_settings wrote (python files open with the "Jupytext Notebook" viewer).

One server is started for the module, on a free localhost port with a random token, and
stopped at the end. The chapters are served read-only from the repository; while there is no
chapter yet, a temporary folder with a toy ``.py`` notebook stands in.
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

import pytest

from book.notebooks import lab_settings  # noqa: E402
from book.notebooks.common import KERNEL_ENV, REPO, read_py  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # starts JupyterLab servers

STARTUP_SECONDS = 120  # a shared, loaded CI machine
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
VENV_OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
TOY = "# %% [markdown]\n# # Probe\n\n# %%\nx = 1\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, root: Path, probe: str, workdir: Path) -> None:
        self.root, self.probe = root, probe
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = workdir / "lab.log"
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={self.url.rsplit(':', 1)[1]}",
            "--port-retries=0",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # containers
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(workdir / "runtime"), OMP_NUM_THREADS="1")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=log)

    def get(self, path: str) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, path: str) -> dict:
        status, body = self.get(path)
        assert status == 200, f"GET {path} -> {status}: {body[:300]!r}"
        return json.loads(body)

    def wait(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if self.get("/api/status")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"jupyter lab did not answer within {STARTUP_SECONDS} s:\n{self.tail()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("lab")
    chapters = sorted((REPO / "chapters").glob("*.py"))
    if chapters:
        root, probe = REPO, f"chapters/{chapters[0].name}"
    else:  # no chapter yet: a stand-in book with the same jupytext settings
        root = workdir / "book"
        (root / "chapters").mkdir(parents=True)
        shutil.copy(REPO / "jupytext.toml", root / "jupytext.toml")
        (root / "chapters" / "01_probe.py").write_text(TOY)
        probe = "chapters/01_probe.py"
    server = Lab(root, probe, workdir)
    try:
        server.wait()
        yield server
    finally:
        server.stop()


def test_lab_settings_are_in_the_venv():
    prefix = Path(sys.prefix)
    missing = "is missing: run `make venv` (or python -m book.notebooks.lab_settings .venv)"
    assert VENV_OVERRIDES.exists(), f"{VENV_OVERRIDES} {missing}"
    overrides = json.loads(VENV_OVERRIDES.read_text())
    assert overrides[DOCMANAGER]["defaultViewers"]["python"] == "Jupytext Notebook"
    assert overrides["@jupyterlab/notebook-extension:tracker"]["kernelShutdown"] is True
    server = lab_settings.server_config_path(prefix)
    assert server.exists(), f"{server} {missing}"
    written = json.loads(server.read_text())
    assert {
        key: written.get(key) for key in lab_settings.SERVER_CONFIG
    } == lab_settings.SERVER_CONFIG
    spec = json.loads(
        (prefix / "share" / "jupyter" / "kernels" / "python3" / "kernel.json").read_text()
    )
    assert spec["env"] == KERNEL_ENV  # inline figures in JupyterLab, whatever the shell exports


def test_lab_settings_script_merges_into_existing_overrides(tmp_path):
    path = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "dark"}}))
    lab_settings.write_overrides(tmp_path)
    written = json.loads(path.read_text())
    assert written["@jupyterlab/apputils-extension:themes"] == {"theme": "dark"}
    assert written[DOCMANAGER] == {"defaultViewers": {"python": "Jupytext Notebook"}}
    assert written["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_the_file_browser_hides_the_ipynb_of_pairs_and_the_pristine_exercises():
    from fnmatch import fnmatch

    def hidden(name: str) -> bool:
        return any(fnmatch(name, glob) for glob in lab_settings.HIDE_GLOBS)

    assert hidden("02_scaled_dot_product.ipynb") and hidden("exercises")
    assert not hidden("02_scaled_dot_product.py") and not hidden("my-exercises")
    assert not hidden("README.md") and not hidden("chapters") and not hidden("scratch.ipynb")


def test_chapters_folder_is_listed_with_py_twins_as_notebooks(lab):
    listing = lab.json("/api/contents/chapters")
    assert listing["type"] == "directory"
    entries = {entry["path"]: entry for entry in listing["content"]}
    assert lab.probe in entries
    assert entries[lab.probe]["type"] == "notebook"  # jupytext's contents manager
    assert not [path for path in entries if path.endswith(".ipynb")]  # each chapter once


def test_a_py_twin_opens_as_a_notebook(lab):
    model = lab.json(f"/api/contents/{lab.probe}?type=notebook&content=1")
    assert model["type"] == "notebook"
    cells = model["content"]["cells"]
    expected = read_py(lab.root / lab.probe).cells
    assert [(c["cell_type"], c["source"]) for c in cells] == [
        (c.cell_type, c.source) for c in expected
    ]


def test_the_running_lab_uses_the_jupytext_viewer_for_python_files(lab):
    settings = lab.json(f"/lab/api/settings/{DOCMANAGER}")
    default = settings["schema"]["properties"]["defaultViewers"]["default"]
    assert default.get("python") == "Jupytext Notebook"
    assert lab.get("/lab")[0] == 200


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_the_book(tmp_path):
    """The README's `make lab` itself starts a server rooted at the repository."""
    token, port = secrets.token_hex(16), free_port()
    args = f"--no-browser --port={port} --port-retries=0 --IdentityProvider.token={token}"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), OMP_NUM_THREADS="1")
    with open(tmp_path / "make_lab.log", "wb") as log:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
            cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/api/contents/chapters"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        deadline, listing = time.monotonic() + 60, None
        while listing is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    listing = json.loads(response.read())
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        log_text = (tmp_path / "make_lab.log").read_text(errors="replace")
        assert listing is not None, f"make lab did not serve the book:\n{log_text[-3000:]}"
        assert listing["type"] == "directory"
        assert "/lab/tree/chapters" in log_text  # opens on the chapters folder
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
