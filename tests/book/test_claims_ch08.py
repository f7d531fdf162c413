"""Chapter 8's claims module (:mod:`book.claims.ch08`): the test table and the one-head
comparison, and every verdict and asserting function fed a case where its claim is false (and
the case that gives each verdict it can return)."""

from __future__ import annotations

import pytest
import torch

from book.claims import ch08 as claims
from book.claims.ch08 import FAILED, PASSED, RAISED
from book.pages.ch08 import (
    CORRECT,
    LAYOUTS,
    SILENT_WRONG,
    WRONG,
    LayoutRun,
    make_attention,
    package_twin,
)


def test_run_test_reports_a_raising_module():
    assert claims.run_test("shape", make_attention("no contiguous", 12, 3)) == RAISED
    with pytest.raises(ValueError, match="test"):
        claims.run_test("colour", make_attention(CORRECT))


def test_outcome_table_and_one_head_equal():
    table = claims.outcome_table(d_model=12, num_heads=3)
    assert set(table) == set(LAYOUTS) and all(
        set(row) == set(claims.TESTS) for row in table.values()
    )
    assert all(v == PASSED for v in table[CORRECT].values())
    assert table["reshape split"]["vs nn.MultiheadAttention"] == FAILED
    equal_1 = claims.one_head_equal(WRONG, num_heads=1)
    assert equal_1["reshape both"] and not equal_1["transpose first"]
    assert not any(claims.one_head_equal(WRONG, num_heads=3).values())


# --- asserting functions: each fails on a false case -----------------------------------------

KEEPS = {"correct": True, "mixing": False, "permuting": True}


def test_assert_c28_ruins():
    good = {"correct": [0.99, 1.0, 0.98], "mixing": [0.3, 0.35, 0.32], "permuting": [1.0, 0.6, 1]}
    kwargs = dict(keeps_tokens=KEEPS, min_correct=0.9, gap=0.2, reach=0.05)
    claims.assert_c28_ruins(good, **kwargs)
    with pytest.raises(AssertionError, match="did not learn"):
        claims.assert_c28_ruins({**good, "correct": [0.99, 0.5, 1.0]}, **kwargs)
    with pytest.raises(AssertionError, match="not ruined"):
        claims.assert_c28_ruins({**good, "mixing": [0.3, 0.3, 0.99]}, **kwargs)  # one seed as good
    with pytest.raises(AssertionError, match="not ruined"):
        claims.assert_c28_ruins({**good, "mixing": [0.85, 0.85, 0.85]}, **kwargs)  # small gap
    with pytest.raises(AssertionError, match="only permutes"):
        claims.assert_c28_ruins({**good, "permuting": [0.5, 0.6, 0.7]}, **kwargs)
    with pytest.raises(ValueError, match="correct"):
        claims.assert_c28_ruins({"mixing": [0.1]}, **kwargs)


def test_assert_c28_one_head():
    one = {"a": True, "b": False}
    two = {"a": False, "b": False}
    claims.assert_c28_one_head(one, two, invisible=["a"])
    with pytest.raises(AssertionError, match="predicted invisible"):
        claims.assert_c28_one_head(one, two, invisible=["a", "b"])
    with pytest.raises(AssertionError, match="predicted visible"):
        claims.assert_c28_one_head(one, two, invisible=[])
    with pytest.raises(AssertionError, match="not a bug"):
        claims.assert_c28_one_head(one, {"a": True, "b": False}, invisible=["a"])


def _table(rows):
    return {name: dict(zip(("t1", "t2"), row, strict=True)) for name, row in rows.items()}


def test_assert_tests_miss_and_catch():
    table = _table({
        "correct": (PASSED, PASSED), "x": (PASSED, FAILED), "y": (PASSED, RAISED),
    })  # fmt: skip
    claims.assert_tests_miss(table, ["t1"], ["x", "y"])
    with pytest.raises(AssertionError, match="caught"):
        claims.assert_tests_miss(table, ["t1", "t2"], ["x"])
    claims.assert_test_catches(table, "t2", ["x", "y"])
    with pytest.raises(AssertionError, match="passes these wrong layouts"):
        claims.assert_test_catches(table, "t1", ["x"])
    bad_reference = _table({"correct": (FAILED, PASSED), "x": (FAILED, FAILED)})
    with pytest.raises(AssertionError, match="rejects the correct"):
        claims.assert_test_catches(bad_reference, "t1", ["x"])


def test_assert_tests_catch_together():
    table = _table({
        "correct": (PASSED, PASSED), "x": (FAILED, PASSED), "y": (PASSED, FAILED),
        "z": (PASSED, PASSED),
    })  # fmt: skip
    claims.assert_tests_catch_together(table, ["t1", "t2"], ["x", "y"])
    with pytest.raises(AssertionError, match="together pass"):
        claims.assert_tests_catch_together(table, ["t1", "t2"], ["x", "z"])
    with pytest.raises(AssertionError, match="reject the correct"):
        claims.assert_tests_catch_together({**table, "correct": {"t1": FAILED, "t2": PASSED}},
                                    ["t1"], ["x"])  # fmt: skip


def test_accuracy_spreads():
    runs = [LayoutRun("a", s, [], (acc, acc)) for s, acc in enumerate((0.2, 0.4))]
    runs.append(LayoutRun("b", 0, [], (1.0, 0.0)))
    spreads = claims.accuracy_spreads(runs)
    assert list(spreads) == ["a", "b"]
    assert spreads["a"].values == (0.2, 0.4) and spreads["b"].mean == 0.5


# --- verdicts ---------------------------------------------------------------------------------


def test_c28_verdict():
    correct = [0.99, 1.0, 0.98]
    ruined, fine = [0.3, 0.35, 0.32], [1.0, 0.97, 0.99]
    assert claims.c28_verdict({"correct": correct, "a": ruined, "b": ruined}, []) == "reproduced"
    assert claims.c28_verdict({"correct": correct, "a": ruined, "b": fine}, []) == "partly"
    # a layout that raises does not fit "runs without error"
    assert claims.c28_verdict({"correct": correct, "a": ruined}, ["loud"]) == "partly"
    assert claims.c28_verdict({"correct": correct, "a": fine}, ["loud"]) == "not reproduced"
    with pytest.raises(ValueError, match="did not learn"):
        claims.c28_verdict({"correct": [0.99, 0.5, 1.0], "a": ruined}, [])
    with pytest.raises(ValueError, match="correct"):
        claims.c28_verdict({"a": ruined}, [])


def test_c28_one_head_verdict():
    assert claims.c28_one_head_verdict({"a": True}, {"a": False}) == "reproduced"
    assert claims.c28_one_head_verdict({"a": True, "b": False}, {"a": False, "b": False}) == (
        "partly"
    )
    assert claims.c28_one_head_verdict({"a": False}, {"a": False}) == "not reproduced"
    assert claims.c28_one_head_verdict({"a": True}, {"a": True}) == "not reproduced"  # no bug


def test_c28_tests_verdict():
    p, f = PASSED, FAILED
    tests = (*claims.ARTICLE_TESTS, claims.ARTICLE_OPTIONAL)

    def table(**rows):
        return {name: dict(zip(tests, row, strict=True)) for name, row in rows.items()}

    right = (p, p, p, p)
    assert claims.c28_tests_verdict(table(correct=right, x=(f, p, p, f)), ["x"]) == "reproduced"
    assert claims.c28_tests_verdict(table(correct=right, x=(p, p, p, f)), ["x"]) == "partly"
    assert claims.c28_tests_verdict(table(correct=right, x=(p, p, p, p)), ["x"]) == (
        "not reproduced"
    )
    # a test that rejects the correct module verifies nothing
    assert claims.c28_tests_verdict(table(correct=(f, p, p, p), x=(f, p, p, f)), ["x"]) == (
        "not reproduced"
    )


def test_the_chapters_test_table_gives_partly():
    table = claims.outcome_table(d_model=12, num_heads=3)
    assert claims.c28_tests_verdict(table, WRONG) == "partly"
    assert claims.c28_tests_verdict(table, ["no contiguous"]) == "reproduced"  # it raises
    assert set(SILENT_WRONG) < set(LAYOUTS)


def test_c28_sweep_declares_seeds_budget_and_heads():
    sweep = claims.SCEPTIC_SWEEPS[0]
    assert sweep.claim_id == "C28"
    assert sweep.baseline == {"seeds": [0, 1, 2], "steps": 300, "num_heads": 2}
    assert {k for p in sweep.perturbations for k in p.kwargs} == {"seeds", "steps", "num_heads"}
    budgets = [p.kwargs["steps"] for p in sweep.perturbations if "steps" in p.kwargs]
    assert budgets and min(budgets) >= 3 * sweep.baseline["steps"]


def test_c28_sweep_run_on_a_tiny_budget():
    # two steps: the correct layout has not learnt the task, so nothing can be judged ruined
    outcome = claims.c28_sweep_run(seeds=[0], steps=2, num_heads=2)
    assert outcome.verdict == "not reproduced"
    assert set(outcome.numbers) == {CORRECT, *SILENT_WRONG, "ruined"}


def test_batch_as_sequence_is_torchs_module_with_batch_first_false():
    from torch import nn

    module = claims.make_buggy(claims.BATCH_AS_SEQUENCE, 12, 3, seed=0)
    reference = nn.MultiheadAttention(12, 3)  # batch_first=False, the default
    reference.load_state_dict(package_twin(module).to_torch().state_dict())
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))  # (B, L, D)
    with torch.no_grad():
        torch.testing.assert_close(module(x), reference(x, x, x, need_weights=False)[0])
        assert not torch.allclose(module(x), make_attention(CORRECT, 12, 3, seed=0)(x))
    # the same weights as every layout from the same seed
    assert torch.equal(module.q_proj.weight, make_attention(CORRECT, 12, 3, seed=0).q_proj.weight)


def test_sub_claim_sweeps_declare_seeds_heads_and_the_bug_set():
    sweeps = {s.claim_id: s for s in claims.SCEPTIC_SWEEPS}
    for claim_id in ("C28 one head", "C28 tests"):
        sweep = sweeps[claim_id]
        assert sweep.baseline == {"seeds": [0], "num_heads": 3, "d_model": 12, "bugs": list(WRONG)}
        assert {k for p in sweep.perturbations for k in p.kwargs} == {
            "seeds", "num_heads", "d_model", "bugs",
        }  # fmt: skip


def test_c28_one_head_sweep_run_judges_a_small_case():
    out = claims.c28_one_head_sweep_run(seeds=[0, 1], num_heads=2, bugs=list(claims.BUGS))
    assert out.verdict == "partly"  # transpose first, no transpose, batch_first differ with 1 head
    assert out.numbers["invisible with 1 head"] == "5 of 8"
    assert "batch_first=False" in out.numbers["visible with 1 head"]
    # only the layouts that one head hides: every one fits the claim
    only = claims.c28_one_head_sweep_run(seeds=[0], num_heads=2, bugs=["reshape both"])
    assert only.verdict == "reproduced"


def test_c28_tests_sweep_run_judges_a_small_case():
    out = claims.c28_tests_sweep_run(seeds=[0], num_heads=2, bugs=list(claims.BUGS))
    assert out.verdict == "partly"  # only the optional comparison catches every bug
    assert out.numbers["vs nn.MultiheadAttention catches"] == 8
    assert out.numbers["reference-free tests miss"] == "batch_first=False"
    # the one loud bug: the article's tests catch it (it raises)
    loud = claims.c28_tests_sweep_run(seeds=[0], num_heads=2, bugs=["no contiguous"])
    assert loud.verdict == "reproduced"
