"""The exercise-check framework (book.checks) on toy exercises registered here."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import book.checks as checks
from attention.functional import scaled_dot_product_attention
from book.checks import (
    CheckFailed,
    check,
    expect_close,
    expect_equal,
    expect_shape,
    expect_true,
    rand_qkv,
    randn,
    register,
)


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch):
    """Each test sees an empty registry and result list; the real ones are restored after."""
    monkeypatch.setattr(checks, "_REGISTRY", {})
    monkeypatch.setattr(checks, "_RESULTS", [])
    monkeypatch.delenv(checks.RESULTS_ENV, raising=False)


def register_attention_exercise():
    @register("97.1", title="Scaled dot-product attention")
    def _(candidate):
        q, k, v = rand_qkv(2, 3, 4, 6, 8)
        got = candidate(q, k, v)
        expect_shape("attention(q, k, v)", got, (2, 3, 4, 8), hint="(B, H, Lq, Ev)")
        expect_close("attention(q, k, v)", got, scaled_dot_product_attention(q, k, v))


def correct(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v


def unscaled(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def wrong_shape(q, k, v):
    return correct(q, k, v)[..., :4]


def crashes(q, k, v):
    return q @ v  # (.., 4, 8) @ (.., 6, 8): shapes do not multiply


def stub(q, k, v):
    raise NotImplementedError("Exercise 97.1")


def last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_pass_prints_tick_and_records(capsys):
    register_attention_exercise()
    assert check("97.1", correct) is None
    assert last_line(capsys) == "✓ Exercise 97.1 — Scaled dot-product attention"
    [result] = checks.results()
    assert (result.id, result.passed, result.message) == ("97.1", True, "")


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (stub, "not implemented yet"),
        (unscaled, "attention(q, k, v) is off by up to"),
        (
            wrong_shape,
            "attention(q, k, v) has shape (2, 3, 4, 4), expected (2, 3, 4, 8): (B, H, Lq, Ev)",
        ),
        (crashes, "your code raised RuntimeError:"),
        (42, "expected a function (or class), got int"),
    ],
    ids=["stub", "unscaled", "wrong-shape", "crash", "not-callable"],
)
def test_failures_print_cross_and_message_never_raise(capsys, candidate, expected):
    register_attention_exercise()
    check("97.1", candidate)
    line = last_line(capsys)
    assert line.startswith("✗ Exercise 97.1 — Scaled dot-product attention: "), line
    assert expected in line
    assert checks.results()[-1].passed is False


def test_crash_message_points_at_the_learners_line(capsys):
    register_attention_exercise()
    check("97.1", crashes)
    assert "(raised at `return q @ v" in last_line(capsys)


@pytest.mark.parametrize(
    ("exercise_id", "expected"),
    [
        ("97.9", "no check is registered for exercise 97.9 (book/checks/ch97.py is missing)"),
        ("3.1", "exercise_id must look like 'NN.k'"),
        (31, "exercise_id must be a str"),
    ],
)
def test_unknown_or_malformed_ids_are_reported_not_raised(capsys, exercise_id, expected):
    check(exercise_id, correct)
    assert expected in last_line(capsys)
    assert checks.results()[-1].passed is False


def test_results_are_appended_to_the_file_named_by_the_env_var(tmp_path, monkeypatch, capsys):
    register_attention_exercise()
    path = tmp_path / "results.jsonl"
    monkeypatch.setenv(checks.RESULTS_ENV, str(path))
    check("97.1", stub)
    check("97.1", correct)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r["passed"], r["message"]) for r in rows] == [
        ("97.1", False, "not implemented yet"),
        ("97.1", True, ""),
    ]
    assert rows[0]["title"] == "Scaled dot-product attention"


def test_chapter_module_is_imported_lazily(tmp_path, monkeypatch, capsys):
    (tmp_path / "ch96.py").write_text(
        "from book.checks import CheckFailed, register\n"
        "@register('96.2', title='Two')\n"
        "def _(candidate):\n"
        "    if candidate() != 2:\n"
        "        raise CheckFailed('expected 2')\n"
        "@register('96.1', title='One')\n"
        "def _(candidate):\n"
        "    pass\n"
    )
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "book.checks.ch96", raising=False)
    check("96.2", lambda: 3)
    assert last_line(capsys) == "✗ Exercise 96.2 — Two: expected 2"
    assert [ex.id for ex in checks.exercises_for_chapter("96")] == ["96.1", "96.2"]
    sys.modules.pop("book.checks.ch96", None)


def test_a_broken_chapter_module_is_reported(tmp_path, monkeypatch, capsys):
    (tmp_path / "ch95.py").write_text("import a_module_that_does_not_exist\n")
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    check("95.1", correct)
    assert "ModuleNotFoundError" in last_line(capsys)


def test_register_validates_its_arguments():
    with pytest.raises(ValueError, match="exercise_id must look like 'NN.k'"):
        register("1", title="x")
    with pytest.raises(ValueError, match="title must be a non-empty str"):
        register("97.1", title=" ")
    with pytest.raises(TypeError, match="must decorate a function"):
        register("97.1", title="x")(3)


# --- helpers for check authors ----------------------------------------------------------------


def test_expect_shape():
    expect_shape("x", torch.zeros(2, 3), (2, 3))
    expect_shape("x", (2, 3), [2, 3])
    with pytest.raises(
        CheckFailed, match=r"^x has shape \(3, 2\), expected \(2, 3\): transposed\?$"
    ):
        expect_shape("x", torch.zeros(3, 2), (2, 3), hint="transposed?")
    with pytest.raises(CheckFailed, match="x should be a tensor of shape"):
        expect_shape("x", "abc", (2, 3))


def test_expect_equal():
    expect_equal("n", 7, 7)
    expect_equal("n", torch.tensor(7), 7)
    expect_equal("m", torch.tensor([True, False]), torch.tensor([True, False]))
    with pytest.raises(CheckFailed, match=r"n is 8, expected 7"):
        expect_equal("n", 8, 7)
    with pytest.raises(CheckFailed, match=r"differs at 1 position\(s\), first at \(1,\)"):
        expect_equal("m", torch.tensor([True, True]), torch.tensor([True, False]))
    with pytest.raises(CheckFailed, match="has dtype torch.int64, expected torch.bool"):
        expect_equal("m", torch.tensor([1, 0]), torch.tensor([True, False]))
    with pytest.raises(CheckFailed, match="should be a bool"):
        expect_equal("flag", 1, True)


def test_expect_close_messages():
    expect_close("x", 1.0 + 1e-7, 1.0)
    with pytest.raises(CheckFailed, match=r"x is 1.5, expected 1: too big"):
        expect_close("x", 1.5, 1.0, hint="too big")
    with pytest.raises(CheckFailed, match="should be a number"):
        expect_close("x", "1.0", 1.0)
    with pytest.raises(CheckFailed, match=r"contains NaN \(first at \(1,\)\)"):
        expect_close("x", torch.tensor([0.0, float("nan")]), torch.zeros(2))
    with pytest.raises(CheckFailed, match=r"off by up to 2 \(at \(1, 0\): got 2, expected 0\)"):
        expect_close("x", torch.tensor([[0.0], [2.0]]), torch.zeros(2, 1))
    with pytest.raises(CheckFailed, match="should be a tensor"):
        expect_close("x", [0.0, 0.0], torch.zeros(2))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    noise=st.sampled_from([0.0, 1e-7, 1e-5, 1e-3, 1.0]),
    atol=st.sampled_from([1e-6, 1e-4]),
    rtol=st.sampled_from([1e-5, 1e-3]),
)
def test_expect_close_agrees_with_torch_allclose(shape, seed, noise, atol, rtol):
    expected = randn(*shape, seed=seed, dtype=torch.float64)
    got = expected + noise * randn(*shape, seed=seed + 1, dtype=torch.float64)
    reference = torch.allclose(got, expected, atol=atol, rtol=rtol)
    try:
        expect_close("x", got, expected, atol=atol, rtol=rtol)
        passed = True
    except CheckFailed:
        passed = False
    assert passed == reference


def test_random_makers_are_seeded_and_leave_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    q, k, v = rand_qkv(2, 3, 4, 5, 6, 7, seed=1)
    assert (q.shape, k.shape, v.shape) == ((2, 3, 4, 6), (2, 3, 5, 6), (2, 3, 5, 7))
    q2, _, _ = rand_qkv(2, 3, 4, 5, 6, 7, seed=1)
    assert torch.equal(q, q2)
    assert not torch.equal(q, rand_qkv(2, 3, 4, 5, 6, 7, seed=2)[0])
    assert torch.equal(randn(3, seed=5), torch.randn(3, generator=torch.Generator().manual_seed(5)))
    assert randn(2, dtype=torch.float64).dtype == torch.float64
    assert torch.equal(torch.get_rng_state(), before)


def test_expect_true():
    expect_true(True, "never shown")
    with pytest.raises(CheckFailed, match="^rows must sum to 1$"):
        expect_true(False, "rows must sum to 1")


def test_an_experiment_exercise_gets_the_run_as_evidence(capsys):
    """``check(id, candidate, **evidence)`` hands the evidence to the exercise's check; a
    prediction is graded against the run it predicted, and a miss says what the run gave."""
    from book.checks.helpers import check_prediction
    from book.sceptic import Outcome

    @register("97.2", title="Predict, then run")
    def _(predict, *, outcome):
        check_prediction(
            predict, outcome, setting="bias +5", why={"partly": "the far gradient survives"}
        )

    run = Outcome("partly", {"ratio": 0.65})
    check("97.2", lambda: "partly", outcome=run)
    assert last_line(capsys) == "✓ Exercise 97.2 — Predict, then run"
    check("97.2", lambda: "reproduced", outcome=run)
    assert last_line(capsys) == (
        "✗ Exercise 97.2 — Predict, then run: you predicted 'reproduced'; with bias +5 the run "
        "gives 'partly' (ratio 0.65). the far gradient survives"
    )
    check("97.2", lambda: "maybe", outcome=run)
    assert "should be one of 'reproduced', 'partly', 'not reproduced'" in last_line(capsys)
    check("97.2", lambda: "partly", outcome=0.65)
    assert "outcome should be the Outcome" in last_line(capsys)
    check("97.2", lambda: "partly")  # the run's cell was not run: reported, never raised
    assert "missing 1 required keyword-only argument: 'outcome'" in last_line(capsys)
