"""A reader's and a learner's session in JupyterLab, in a real browser.

``make lab`` serves a copy of the book (so that running and saving never touches the
repository) on a free port; headless Chromium then does what a reader does, one test per
step, each leaving a screenshot in ``_build/screenshots/lab/``:

1. the landing page lists each chapter once, with its whole name, and no toast;
2. double-clicking a ``.py`` twin opens it as a notebook, with a kernel;
3. Run → Run All Cells, then Ctrl+S: the saved file (read through the contents API) has every
   code cell run without error and as many figures as the committed notebook; the ``.py`` is
   unchanged byte for byte;
4. closing the tab shuts its kernel down; reopening shows no widget error;
5. a learner edits two exercises in their copy (``my-exercises/``; one right answer, one
   wrong), saves, and ``make check``, run with the environment a JupyterLab terminal has,
   prints ✓ for the one and ✗ for the other, without make or kernel noise;
6. no console error and no toast came up during the whole session.

Readiness comes from JupyterLab itself (``--LabApp.expose_app_in_browser``: the app's
``restored`` promise, the session's kernel status, the kernel's ``execute_input`` messages,
the document's ``dirty`` flag) and from the server's REST API, never from fixed sleeps.
"""

from __future__ import annotations

import json
import os
import re
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

from book.notebooks.common import REPO, WIDGET_MIME
from tests.browser.conftest import Console, screenshot_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]

CHAPTER = "chapters/02_scaled_dot_product"  # the quickest chapter with figures and a bar
EXERCISE = "my-exercises/02_scaled_dot_product"
# One right answer, one wrong one (twice too few FLOPs), typed into the learner's copy.
ANSWERS = {
    "02.2": (
        "def score_variance(d_k: int, var_q: float, var_k: float, scale: float) -> float:\n"
        "    return d_k * var_q * var_k * scale**2"
    ),
    "02.4": (
        "def qk_flops(batch: int, heads: int, n_queries: int, n_keys: int, d_k: int) -> int:\n"
        "    return batch * heads * n_queries * n_keys * d_k"
    ),
}
# What `make lab` and `make check` need in the copy (mtimes kept, so that the .venv stamps
# stay fresh); the copy's .venv is the repository's.
COPIED = ["Makefile", "jupytext.toml", "requirements-dev.txt", "pyproject.toml", "chapters",
          "exercises", "solutions", "book", "measure", "attention"]  # fmt: skip
STARTUP_SECONDS = 90
RUN_ALL_SECONDS = 400
# Records every toast JupyterLab shows (the news question, update checks, errors), across
# page loads.
TOAST_RECORDER = """
new MutationObserver(() => {
  const seen = JSON.parse(sessionStorage.getItem('toasts') || '[]');
  for (const toast of document.querySelectorAll('.Toastify__toast')) {
    if (!seen.includes(toast.innerText)) seen.push(toast.innerText);
  }
  sessionStorage.setItem('toasts', JSON.stringify(seen));
}).observe(document, {childList: true, subtree: true});
"""
CURRENT = "window.jupyterapp.shell.currentWidget"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
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
    """``make lab`` in a copy of the book, on a free port with a random token."""

    def __init__(self, root: Path, workdir: Path) -> None:
        self.root = root
        # The committed chapter, as the copy holds it before a reader touches it.
        self.committed_nb = nbformat.read(root / (CHAPTER + ".ipynb"), as_version=4)
        self.committed_py = (root / (CHAPTER + ".py")).read_bytes()
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = (
            f"--no-browser --port={self.port} --port-retries=0 --ServerApp.ip=127.0.0.1 "
            f"--IdentityProvider.token={self.token} --LabApp.expose_app_in_browser=True "
            "--TabKernelManager.shutdown_after_disconnect=2"  # 30 s for a reader
        )
        env = dict(
            os.environ,
            JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(workdir / "user-settings"),  # no reader's settings
            JUPYTERLAB_WORKSPACES_DIR=str(workdir / "workspaces"),  # a fresh workspace
        )
        self.log = workdir / "make_lab.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
                cwd=root, env=env, stdout=log, stderr=log, start_new_session=True,
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


def figures(nb: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in out.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("browser_lab")
    server = MakeLab(copy_book(workdir / "book"), workdir)
    try:
        server.wait_until(lambda: server.api("/api/status")[0] == 200, "make lab", STARTUP_SECONDS)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def session(chromium, lab):
    """One browser page for the whole module, and what it reported."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(TOAST_RECORDER)
    page = context.new_page()
    page.set_default_timeout(60_000)
    console = Console(page)
    shots = screenshot_dir("lab")
    try:
        yield page, console, shots
    finally:
        context.close()


def open_lab(page, lab: MakeLab, folder: str) -> None:
    """Load JupyterLab on ``folder`` in a fresh workspace and wait until it is restored."""
    page.goto(f"{lab.url}/lab/tree/{folder}?reset&token={lab.token}")
    page.wait_for_function("() => window.jupyterapp !== undefined")
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    page.locator(".jp-DirListing-content .jp-DirListing-item").first.wait_for()


def open_in_browser(page, name: str) -> None:
    """Double-click ``name`` in the file browser; wait for the notebook and an idle kernel."""
    page.locator(".jp-DirListing-itemText", has_text=re.compile(f"^{re.escape(name)}$")).dblclick()
    page.wait_for_function(
        f"""(name) => {{
            const w = {CURRENT};
            return w && w.context && w.context.path.endsWith(name) && w.content
                && w.content.widgets && w.content.widgets.length > 0
                && w.sessionContext.session && w.sessionContext.session.kernel
                && w.sessionContext.session.kernel.status === 'idle';
        }}""",
        arg=name,
        timeout=STARTUP_SECONDS * 1000,
    )


def save(page) -> None:
    page.keyboard.press("Control+s")
    page.wait_for_function(f"() => !{CURRENT}.context.model.dirty")


def test_1_landing_page_lists_each_chapter_once_with_its_whole_name(session, lab):
    page, _, shots = session
    open_lab(page, lab, "chapters")
    page.locator(".jp-DirListing-itemText", has_text="02_scaled_dot_product.py").wait_for()
    items = page.locator(".jp-DirListing-itemText")
    names = items.all_inner_texts()
    page.screenshot(path=shots / "1_landing.png")
    chapters = sorted(p.name for p in (lab.root / "chapters").glob("[0-9][0-9]_*.py"))
    assert sorted(n for n in names if n.endswith(".py")) == chapters
    assert not [n for n in names if n.endswith(".ipynb")], "each chapter is listed twice"
    truncated = items.evaluate_all(
        "els => els.filter(e => e.scrollWidth > e.clientWidth).map(e => e.innerText)"
    )
    assert truncated == [], f"names cut off in the file browser: {truncated}"
    root = [entry["name"] for entry in lab.json("/api/contents/")["content"]]
    assert "my-exercises" in root and "exercises" not in root  # learners see their copies


def test_2_a_py_twin_opens_as_a_notebook(session, lab):
    page, _, shots = session
    open_in_browser(page, Path(CHAPTER).name + ".py")
    kind = page.evaluate(f"() => {CURRENT}.node.classList.contains('jp-NotebookPanel')")
    page.screenshot(path=shots / "2_opened.png")
    assert kind, "the .py twin did not open as a notebook"
    kernel = page.evaluate(f"() => {CURRENT}.sessionContext.kernelDisplayName")
    assert kernel == "Python 3 (attention-book)"


def test_3_run_all_and_save_gives_the_committed_notebook_back(session, lab):
    page, _, shots = session
    n_code = page.evaluate(
        f"""() => {{
            const w = {CURRENT};
            window.__executed = 0;
            window.__errors = [];
            w.sessionContext.iopubMessage.connect((_, msg) => {{
                if (msg.header.msg_type === 'execute_input') window.__executed += 1;
                if (msg.header.msg_type === 'error') window.__errors.push(msg.content.ename
                    + ': ' + msg.content.evalue);
            }});
            return w.content.widgets.filter(
                c => c.model.type === 'code' && c.model.sharedModel.getSource().trim()).length;
        }}"""
    )
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
    page.wait_for_function(
        f"""(n) => (window.__executed >= n || window.__errors.length > 0)
            && {CURRENT}.sessionContext.session.kernel.status === 'idle'""",
        arg=n_code,
        timeout=RUN_ALL_SECONDS * 1000,
    )
    errors = page.evaluate("() => window.__errors")
    save(page)
    page.screenshot(path=shots / "3_run_all_saved.png")
    assert errors == [], f"cells raised: {errors}"

    saved = lab.notebook(CHAPTER + ".ipynb")
    committed = lab.committed_nb
    code = [c for c in saved.cells if c.cell_type == "code" and c.source.strip()]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    stored_errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert stored_errors == []
    assert figures(saved) == figures(committed) > 0, "the saved notebook lost figures"
    widgets = [o for c in code for o in c.outputs if WIDGET_MIME in o.get("data", {})]
    assert widgets == [], "progress bars were saved as widgets"
    on_disk = (lab.root / (CHAPTER + ".ipynb")).read_text(encoding="utf-8")
    assert figures(nbformat.reads(on_disk, as_version=4)) == figures(committed)
    py = (lab.root / (CHAPTER + ".py")).read_bytes()
    assert py == lab.committed_py, "saving changed the .py twin"


def test_4_closing_shuts_the_kernel_down_and_reopening_shows_no_widget_error(session, lab):
    page, _, shots = session
    page.keyboard.press("Alt+w")  # File → Close Tab
    lab.wait_until(lambda: lab.json("/api/kernels") == [], "kernel shut down on close", 60)
    open_lab(page, lab, "chapters")
    open_in_browser(page, Path(CHAPTER).name + ".py")
    # JupyterLab draws only the cells in view: bring each into view before reading the page.
    page.evaluate(
        f"""async () => {{
            const nb = {CURRENT}.content;
            for (let i = 0; i < nb.widgets.length; i += 1) await nb.scrollToItem(i);
        }}"""
    )
    text = page.locator(".jp-NotebookPanel").inner_text()
    page.screenshot(path=shots / "4_reopened.png")
    assert "Error displaying widget" not in text and "model not found" not in text
    assert page.locator(".jp-OutputArea-output img").count() > 0  # figures are drawn
    page.keyboard.press("Alt+w")
    lab.wait_until(lambda: lab.json("/api/kernels") == [], "kernel shut down on close", 60)


def type_answer(page, exercise_id: str, source: str) -> None:
    """Click into the exercise's stub cell and replace its text, as a learner would."""
    index = page.evaluate(
        f"""(stub) => {CURRENT}.content.widgets.findIndex(
            c => c.model.sharedModel.getSource().includes(stub))""",
        f'NotImplementedError("Exercise {exercise_id}")',
    )
    assert index >= 0, f"no stub for exercise {exercise_id}"
    page.evaluate(f"async (i) => {{ await {CURRENT}.content.scrollToItem(i); }}", index)
    editor = page.evaluate_handle(
        f"(i) => {CURRENT}.content.widgets[i].node.querySelector('.cm-content')", index
    )
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)  # no key events: no auto-indent, no auto-brackets
    page.keyboard.press("Escape")


def test_5_a_learner_edits_exercises_and_make_check_reads_them(session, lab):
    page, _, shots = session
    open_lab(page, lab, "my-exercises")
    open_in_browser(page, Path(EXERCISE).name + ".py")
    for exercise_id, source in ANSWERS.items():
        type_answer(page, exercise_id, source)
    save(page)
    page.screenshot(path=shots / "5_exercises_edited.png")
    page.keyboard.press("Alt+w")
    saved = lab.notebook(EXERCISE + ".ipynb")
    assert all(any(c.source == s for c in saved.cells) for s in ANSWERS.values())
    pristine = lab.root / "exercises" / (Path(EXERCISE).name + ".py")
    assert pristine.read_bytes() == (REPO / "exercises" / pristine.name).read_bytes()

    env = lab.server_env()  # what a JupyterLab terminal inherits from `make lab`
    inherited = sorted(set(env) & {"MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MPLBACKEND"})
    assert inherited == [], f"the lab's terminals inherit {inherited}"
    run = subprocess.run(
        ["make", "check", "CH=02"], cwd=lab.root, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    out = run.stdout + run.stderr
    (shots / "5_make_check.txt").write_text(out)
    assert run.returncode == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if re.match(r"^\d\d\.\d+\s", line)}
    assert "✓" in rows["02.2"], out
    assert "✗" in rows["02.4"] and "not implemented yet" not in rows["02.4"], out
    assert all("✗" in row for key, row in rows.items() if key not in ANSWERS), out
    assert out.startswith(f"Checked {EXERCISE}.ipynb (a copy; your file is unchanged; its .py")
    for noise in ("Entering directory", "Error 1", "make: ***", "without encryption"):
        assert noise not in out, f"make check printed {noise!r}:\n{out}"


def test_6_no_console_error_and_no_toast(session):
    page, console, shots = session
    toasts = page.evaluate("() => JSON.parse(sessionStorage.getItem('toasts') || '[]')")
    page.screenshot(path=shots / "6_end.png")
    assert toasts == [], f"toasts came up: {toasts}"
    assert console.errors == [], "console errors:\n" + "\n".join(console.errors)
