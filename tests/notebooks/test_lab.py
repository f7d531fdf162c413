"""``make lab`` works: JupyterLab starts from the venv, lists the chapters, and opens a ``.py``
twin as a notebook through jupytext's contents manager, with the settings that
python -m book.notebooks.lab_settings wrote (python files open with the "Jupytext Notebook" viewer).

One server is started for the module by the README's ``make lab`` (tests/lab_harness.py, which
the browser tests use too), on a free localhost port with a random token, serving the
repository, and stopped at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from book.notebooks import lab_settings
from book.notebooks.common import KERNEL_ENV, REPO, read_py
from tests.lab_harness import MakeLab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # starts JupyterLab servers

DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
VENV_OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The README's `make lab`, serving the repository itself."""
    server = MakeLab(REPO, tmp_path_factory.mktemp("lab"), env={"OMP_NUM_THREADS": "1"})
    server.probe = f"chapters/{sorted((REPO / 'chapters').glob('*.py'))[0].name}"
    try:
        server.wait_for_server()
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
    assert lab.api("/lab")[0] == 200


def test_make_lab_serves_the_book_from_the_chapters_folder(lab):
    assert lab.json("/api/contents/chapters")["type"] == "directory"
    assert "/lab/tree/chapters" in lab.tail()  # opens on the chapters folder
