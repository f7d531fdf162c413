"""Write JupyterLab settings into a virtual environment so `.py` twins open as notebooks.

JupyterLab reads ``<prefix>/share/jupyter/lab/settings/overrides.json`` at start-up; the
``defaultViewers`` entry makes a double-click on a Python file open it with jupytext's
"Jupytext Notebook" factory instead of the text editor.

Usage: python -m book.notebooks.lab_settings .venv
"""

import json
import sys
from pathlib import Path

OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"python": "Jupytext Notebook"},
    },
}


def main(prefix: str) -> None:
    path = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(OVERRIDES)
    path.write_text(json.dumps(current, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sys.prefix)
