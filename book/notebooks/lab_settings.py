"""Configure a virtual environment's Jupyter for reading the book: ``make venv`` runs it.

Writes three things under ``PREFIX`` (the ``.venv``), each read by JupyterLab at start-up:

- the kernel spec ``python3`` ("Python 3 (attention-book)") with the book's kernel environment
  (``book.notebooks.common.KERNEL_ENV``: inline figures whatever ``MPLBACKEND`` the shell
  has, a fixed hash seed);
- ``share/jupyter/lab/settings/overrides.json``, JupyterLab's defaults: ``.py`` twins open
  with jupytext's "Jupytext Notebook" viewer; no news or update toasts; closing a notebook
  shuts its kernel down; the file browser shows names without the last-modified column;
- ``etc/jupyter/jupyter_server_config.json``, the server's: the file browser
  hides the ``.ipynb`` of each ``NN_slug`` pair (its ``.py`` twin opens the same notebook,
  outputs included), the book's pristine ``exercises/`` folder (learners work on their copy
  in ``my-exercises/``) and the ``*.egg-info`` folder of the editable install; a kernel no
  browser tab is connected to is shut down
  (:mod:`book.notebooks.lab_kernels`).

Usage: python -m book.notebooks.lab_settings .venv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from book.notebooks.common import KERNEL_ENV, KERNELSPEC

OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"python": "Jupytext Notebook"},
    },
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True},
    "@jupyterlab/filebrowser-extension:browser": {"showLastModifiedColumn": False},
}
# Names the file browser does not list (jupyter_server's defaults first).
HIDE_GLOBS = [
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".DS_Store",
    "*~",
    "[0-9][0-9]_*.ipynb",
    "exercises",
    "*.egg-info",
]
SERVER_CONFIG = {
    "ContentsManager": {"hide_globs": HIDE_GLOBS},
    "ServerApp": {"kernel_manager_class": "book.notebooks.lab_kernels.TabKernelManager"},
    "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
}


def overrides_path(prefix: Path) -> Path:
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def server_config_path(prefix: Path) -> Path:
    # Not jupyter_server_config.d/: the server reads only extension switches from there.
    return Path(prefix) / "etc" / "jupyter" / "jupyter_server_config.json"


def write_overrides(prefix: Path) -> Path:
    """Merge :data:`OVERRIDES` into the prefix's ``overrides.json`` (other keys are kept)."""
    path = overrides_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(OVERRIDES)
    path.write_text(json.dumps(current, indent=2) + "\n")
    return path


def write_server_config(prefix: Path) -> Path:
    """Merge :data:`SERVER_CONFIG` into the prefix's server config, section by section."""
    path = server_config_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() else {}
    for section, values in SERVER_CONFIG.items():
        current.setdefault(section, {}).update(values)
    path.write_text(json.dumps(current, indent=2) + "\n")
    return path


def install_kernel(prefix: Path) -> str:
    """Install the ``python3`` kernel spec of ``prefix`` with the book's environment."""
    from ipykernel.kernelspec import install

    return install(
        prefix=str(prefix),
        kernel_name=KERNELSPEC["name"],
        display_name=KERNELSPEC["display_name"],
        env=dict(KERNEL_ENV),
    )


def main(prefix: str) -> None:
    install_kernel(Path(prefix))
    write_overrides(Path(prefix))
    write_server_config(Path(prefix))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sys.prefix)
