"""``make test-notebooks`` machinery: nbval with the repository's conftest.py plugin and
sanitizers, on toy notebooks in a temporary book (one pytest run, four kernels).

- a solution's ``check(...)`` cell is compared with its stored "✓" line even in --nbval-lax
  mode, so a solution that stops passing fails the run;
- exercise notebooks (no stored outputs) are only checked for errors;
- cells tagged nbval-check-output (nbval's own spelling of the tag) are compared after
  sanitizing (memory addresses, ...);
- a checked cell with a tolerance class compares its decimals within it: a fresh 0.905
  passes against a stored 0.918 (what two CPUs give), a stored 0.968 (an edit of 0.05) fails;
- the run ends with each notebook's execution time and the total.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from book.notebooks.common import REPO, prepare_for_execution, read_py, write_ipynb
from book.notebooks.exercises import write_exercise

SOLUTION = """\
# %%
from book.checks import check, expect_equal, register


@register("93.1", title="Double")
def _(candidate):
    expect_equal("double(3)", candidate(3), 6)


# %% tags=["nbval-check-output"]
print(object(), 2 + 2)

# %%
def double(x):
    ### BEGIN SOLUTION
    return {answer}
    ### END SOLUTION


# %%
check("93.1", double)
"""

STORED = {  # cell index -> the stream output stored by a good run
    1: "<object object at 0x7f0123456789> 4\n",
    3: "✓ Exercise 93.1 — Double\n",
}


TOLERANT = """\
# %% tags=["nbval-check-output"] tolerance="trained"
print(f"test accuracy {0.905:.3f} over {3} seeds")
"""


def stored_tolerant(path, stored_text: str):
    """A chapter notebook whose one checked cell has a tolerance and ``stored_text`` stored."""
    path.with_suffix(".py").write_text(TOLERANT)
    nb = prepare_for_execution(read_py(path.with_suffix(".py")))
    cell = nb.cells[0]
    assert cell.metadata["tolerance"] == "trained"  # jupytext reads the metadata
    cell.execution_count = 1
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored_text)]
    write_ipynb(nb, path)


def stored_solution(path, answer: str, stored: dict[int, str] = STORED):
    """A solution notebook as `make execute` would store it (outputs of a passing run)."""
    path.with_suffix(".py").write_text(SOLUTION.format(answer=answer))
    nb = prepare_for_execution(read_py(path.with_suffix(".py")))
    code = [c for c in nb.cells if c.cell_type == "code"]
    for n, cell in enumerate(code, start=1):
        cell.execution_count = n
    for i, text in stored.items():
        code[i].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    write_ipynb(nb, path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nbval_run_compares_solution_checks_sanitizes_and_reports_times(tmp_path):
    (tmp_path / "solutions").mkdir()
    good = tmp_path / "solutions" / "93_good.ipynb"
    bad = tmp_path / "solutions" / "93_bad.ipynb"
    stored_solution(good, "2 * x")
    stored_solution(bad, "3 * x")  # stored output says ✓, a fresh run says ✗
    # A tagged cell whose stored output a fresh run does not reproduce (nbval reads the tag
    # only in its own spelling, nbval-check-output: an upper-case tag was silently ignored).
    stale = tmp_path / "solutions" / "93_stale.ipynb"
    stored_solution(stale, "2 * x", STORED | {1: "<object object at 0x7f0123456789> 5\n"})
    (tmp_path / "chapters").mkdir()
    stored_tolerant(
        tmp_path / "chapters" / "93_other_cpu.ipynb", "test accuracy 0.918 over 3 seeds\n"
    )
    stored_tolerant(tmp_path / "chapters" / "93_edited.ipynb", "test accuracy 0.968 over 3 seeds\n")
    stored_tolerant(tmp_path / "chapters" / "93_count.ipynb", "test accuracy 0.905 over 2 seeds\n")
    exercise = write_exercise(good.with_suffix(".py"), tmp_path / "exercises")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "conftest",  # the repository's conftest.py, found on PYTHONPATH
        "-p",
        "no:cacheprovider",
        "-q",
        "-rf",
        "--rootdir",
        str(tmp_path),
        "-c",
        str(tmp_path / "pytest.ini"),
        "--nbval-lax",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        str(REPO / "book" / "notebooks" / "nbval_sanitize.cfg"),
        "solutions/93_good.ipynb",
        "solutions/93_bad.ipynb",
        "solutions/93_stale.ipynb",
        "chapters/93_other_cpu.ipynb",
        "chapters/93_edited.ipynb",
        "chapters/93_count.ipynb",
        f"exercises/{exercise.stem}.ipynb",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=290)
    out = run.stdout + run.stderr
    failed = [line.split(" - ")[0] for line in out.splitlines() if line.startswith("FAILED ")]
    assert sorted(failed) == [
        "FAILED chapters/93_count.ipynb::Cell 0",
        "FAILED chapters/93_edited.ipynb::Cell 0",
        "FAILED solutions/93_bad.ipynb::Cell 3",
        "FAILED solutions/93_stale.ipynb::Cell 1",
    ], out
    assert "within tolerance: no, number 1 is out of tolerance: stored 0.968" in out, out
    assert "within tolerance: no, integer 2 differs: stored 2, fresh 3" in out, out
    assert run.returncode == 1, out
    assert "notebook execution times" in out
    times = {line.split()[0] for line in out.splitlines() if line.strip().endswith(" s")}
    assert {"solutions/93_good.ipynb", "solutions/93_bad.ipynb", "total"} <= times, out
    assert f"exercises/{exercise.stem}.ipynb" in times, out
