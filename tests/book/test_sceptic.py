"""The sceptic's sweeps (book.sceptic): every declared sweep has stored results computed from
the code it runs now; and, on a toy sweep in a temporary directory, that a missing result, an
edit of the experiment's source or of its declaration is caught, and an unrelated edit is not.
"""

from __future__ import annotations

import importlib
import json
import linecache
import sys

import pytest

import book.sceptic as sceptic
from book.sceptic import (
    Outcome,
    Perturbation,
    Sweep,
    declared_sweeps,
    main,
    run_sweep,
    source_fingerprint,
    stale_problems,
    stored_sweeps,
    sweep_cell,
    sweep_path,
    sweep_summary,
)


def test_every_declared_sweep_is_stored_and_fresh():
    problems = stale_problems()
    assert not problems, "stale sceptic's sweeps:\n" + "\n".join(problems)


def test_chapter_2_declares_c7_with_the_changes_the_issue_asks_for():
    chapter, sweep = declared_sweeps()["C7"]
    assert chapter == 2
    assert sweep.baseline == {"seeds": [0, 1, 2], "steps": 400, "d_k": 512, "qk_init": "normal"}
    changes = {p.name: dict(p.kwargs) for p in sweep.perturbations}
    assert changes == {
        "seeds 3–5": {"seeds": [3, 4, 5]},
        "1200 steps": {"steps": 1200},
        "torch init": {"qk_init": "torch"},
        "d_k 64": {"d_k": 64},
        "d_k 128": {"d_k": 128},
    }
    assert sweep_path(2).name == "02_scaled_dot_product.json"


def test_every_claim_of_chapter_2_has_a_sweep_with_the_claim_s_own_knob():
    import re

    from book.notebooks.common import REPO

    source = (REPO / "chapters" / "02_scaled_dot_product.py").read_text(encoding="utf-8")
    recorded = set(re.findall(r'record_claim\(\s*"([^"]+)"', source))
    declared = {cid for cid, (chapter, _) in declared_sweeps().items() if chapter == 2}
    assert recorded == declared == {"§2.1 shared Q/K", "C5", "C6", "C7"}
    knobs = {"§2.1 shared Q/K": {"d_k", "d_model"}, "C5": {"d_ks", "distributions"}}
    knobs["C6"] = {"n_keys", "d_ks"}
    for claim_id, wanted in knobs.items():
        _, sweep = declared_sweeps()[claim_id]
        changed = {key for p in sweep.perturbations for key in p.kwargs}
        assert {"seeds"} | wanted <= changed, claim_id
    _, c6 = declared_sweeps()["C6"]
    assert {p.kwargs.get("n_keys") for p in c6.perturbations} >= {256, 512}  # issue 18


def test_the_fingerprint_covers_what_c7_runs():
    _, sweep = declared_sweeps()["C7"]
    _, covered = source_fingerprint(sweep.run)
    for name in (
        "book.claims.ch02.c7_verdict",
        "book.claims.ch02.C7_PLATEAU",  # a threshold
        "book.pages.ch02.RetrievalModel",  # a class the run builds, on the page
        "book.experiments.training.fit",  # the training loop, in another module
        "attention.functional.scaled_dot_product_attention",  # the library
    ):
        assert name in covered
    assert not any(n.startswith("book.progress") for n in covered)  # a bar changes no result
    assert "book.pages.ch02.dot_product_stats" not in covered  # C5: not run by C7


# --- a toy sweep in a temporary directory --------------------------------------------------

TOY = """
from book.sceptic import Outcome, Perturbation, Sweep

THRESHOLD = 1.5
_CALLS = None  # state the module rebinds as it runs, not a constant


def double(x):
    global _CALLS
    _CALLS = (_CALLS or (0,))[0] + 1, "calls"
    return 2 * x


def unrelated():
    return "not run by the sweep"


def run(*, x):
    value = double(x)
    verdict = "reproduced" if value > THRESHOLD else "not reproduced"
    return Outcome(verdict, {"value": value, "per seed": [value]})


SCEPTIC_SWEEPS = (
    Sweep(
        "C99",
        run=run,
        baseline={"x": 1},
        perturbations=(Perturbation("x 0", "zero instead of one", {"x": 0}),),
    ),
)
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A toy experiment module ``toy_sceptic_experiment`` and a chapters folder holding
    ``99_toy.py``; ``toy.edit(old, new)`` edits the module's source and reloads it."""
    monkeypatch.setattr(
        sceptic, "FINGERPRINTED", (*sceptic.FINGERPRINTED, "toy_sceptic_experiment")
    )
    source = tmp_path / "toy_sceptic_experiment.py"
    source.write_text(TOY)
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    (chapters / "99_toy.py").write_text("# a chapter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    module = importlib.import_module("toy_sceptic_experiment")

    class Toy:
        def declared(self):
            return {"C99": (99, module.SCEPTIC_SWEEPS[0])}

        def edit(self, old, new):
            nonlocal module
            text = source.read_text()
            assert old in text
            source.write_text(text.replace(old, new))
            linecache.clearcache()
            importlib.invalidate_caches()
            module = importlib.reload(module)

    toy = Toy()
    toy.chapters = chapters
    yield toy
    sys.modules.pop("toy_sceptic_experiment", None)


def test_a_missing_sweep_fails_until_it_is_run(toy):
    (problem,) = stale_problems(toy.declared(), toy.chapters)
    assert "C99: no stored sweep in 99_toy.json" in problem
    assert "make sceptic CH=99 CLAIM=C99" in problem
    record = run_sweep("C99", 99, toy.declared()["C99"][1], chapters=toy.chapters)
    assert stale_problems(toy.declared(), toy.chapters) == []
    stored = json.loads((toy.chapters / "sceptic" / "99_toy.json").read_text())
    assert stored["claims"]["C99"] == record
    assert record["baseline"]["verdict"] == "reproduced"
    assert record["perturbations"][0]["verdict"] == "not reproduced"
    assert record["perturbations"][0]["numbers"]["value"] == 0
    assert record["torch"] and len(record["source_sha256"]) == 64
    assert "toy_sceptic_experiment.double" in record["sources"]


def test_state_a_run_leaves_behind_does_not_change_the_fingerprint(toy):
    """``_CALLS`` (rebound with ``global``) is None before the run and a tuple after it; the
    fingerprint is the same, while an edit of the constant THRESHOLD changes it."""
    run = toy.declared()["C99"][1].run
    before, names = source_fingerprint(run)
    run(x=1)
    assert source_fingerprint(run) == (before, names)
    assert not any(name.endswith("._CALLS") for name in names)
    assert "toy_sceptic_experiment.THRESHOLD" in names
    toy.edit("THRESHOLD = 1.5", "THRESHOLD = 2.5")
    assert source_fingerprint(toy.declared()["C99"][1].run)[0] != before


def test_editing_the_experiments_source_makes_the_stored_sweep_stale(toy):
    run_sweep("C99", 99, toy.declared()["C99"][1], chapters=toy.chapters, show_progress=False)
    toy.edit('return "not run by the sweep"', 'return "still not run by the sweep"')
    assert stale_problems(toy.declared(), toy.chapters) == []  # not what the sweep runs
    toy.edit("return 2 * x", "return 3 * x")  # a function the run calls
    (problem,) = stale_problems(toy.declared(), toy.chapters)
    assert "C99: the code the sweep runs changed since 99_toy.json was written" in problem
    toy.edit("return 3 * x", "return 2 * x")
    assert stale_problems(toy.declared(), toy.chapters) == []
    toy.edit("THRESHOLD = 1.5", "THRESHOLD = 2.5")  # a threshold
    assert "changed since" in stale_problems(toy.declared(), toy.chapters)[0]


def test_changing_the_declared_perturbations_makes_the_stored_sweep_stale(toy):
    run_sweep("C99", 99, toy.declared()["C99"][1], chapters=toy.chapters, show_progress=False)
    toy.edit('{"x": 0}', '{"x": -1}')
    (problem,) = stale_problems(toy.declared(), toy.chapters)
    assert "declared baseline or perturbations differ" in problem


def test_a_sweep_is_shown_as_held_or_what_it_became(toy):
    record = run_sweep(
        "C99", 99, toy.declared()["C99"][1], chapters=toy.chapters, show_progress=False
    )
    assert sweep_cell(record) == "baseline: reproduced; x 0: not reproduced"
    assert sweep_cell(None) == "—"
    flipped = record | {"perturbations": [record["perturbations"][0] | {"verdict": "reproduced"}]}
    assert sweep_cell(flipped) == "baseline: reproduced; x 0: held"
    assert sweep_summary("C99", toy.chapters).splitlines() == [
        "baseline  reproduced      value 2",
        "x 0       not reproduced  value 0",
    ]
    assert list(stored_sweeps(toy.chapters)) == ["C99"]
    with pytest.raises(ValueError, match="C98: no stored sweep"):
        sweep_summary("C98", toy.chapters)


def test_declarations_are_checked_by_name():
    def run(**kwargs):
        return Outcome("partly")

    with pytest.raises(ValueError, match="verdict must be one of"):
        Outcome("maybe")
    with pytest.raises(ValueError, match="numbers must hold JSON values"):
        Outcome("partly", {"x": float("nan")})
    with pytest.raises(ValueError, match="kwargs must be a non-empty mapping"):
        Perturbation("nothing", "no change", {})
    with pytest.raises(ValueError, match=r"\['lr'\] not in the baseline"):
        Sweep("C1", run, {"steps": 1}, (Perturbation("lr", "a rate", {"lr": 0.1}),))
    with pytest.raises(ValueError, match="names must be distinct"):
        Sweep("C1", run, {"steps": 1}, (Perturbation("a", "b", {"steps": 2}),) * 2)
    with pytest.raises(TypeError, match="run must be callable"):
        Sweep("C1", "run", {"steps": 1}, (Perturbation("a", "b", {"steps": 2}),))


def test_main_says_when_nothing_matches(capsys):
    assert main(["--claim", "C0"]) == 2
    err = capsys.readouterr().err
    assert "no declared sweep matches (declared: " in err
    assert all(claim in err for claim in ("C1", "§2.1 shared Q/K", "C5", "C6", "C7"))


def test_main_check_passes_on_the_stored_sweeps(capsys):
    assert main(["--chapter", "2", "--check"]) == 0
    assert "stored sweeps up to date: §2.1 shared Q/K, C5, C6, C7" in capsys.readouterr().out


def test_the_sweep_run_is_not_part_of_make_test():
    from book.notebooks.common import REPO

    makefile = (REPO / "Makefile").read_text()
    assert "-m book.sceptic" in makefile.split("\nsceptic:")[1].split("\n\n")[0]
    test_targets = makefile.split("\ntest:")[1].split("\n\n")[0]
    assert "sceptic" not in test_targets
