"""Claims of chapter 8 (C28 and the article's test recipe): thresholds, verdicts, asserts and
the harness that runs every test on every head layout.

The head layouts, the hand-written module, the two-relation model and its training step, and
the seven unit tests are defined on the chapter's page and imported from the module exported
from it, :mod:`book.pages.ch08`. Here:

- :data:`TESTS`, :func:`run_test`, :func:`outcome_table`: every test on every layout;
  :func:`one_head_equal`: which layouts equal the correct one with the same weights;
- C28's thresholds (:data:`MIN_CORRECT`, :data:`RUIN_GAP`, :data:`REACH`);
- the verdict functions (``c28_..._verdict(...) -> str``, one of :data:`book.claims.VERDICTS`)
  and the ``assert_...`` functions, which raise ``AssertionError`` when the claim is false.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attention.checks import check_choice
from book.claims import VERDICTS
from book.experiments.seeds import Spread, spread
from book.pages.ch08 import (
    CORRECT,
    LAYOUTS,
    SILENT_WRONG,
    TEST_SHAPE,
    WRONG,
    HandMultiHeadAttention,
    LayoutRun,
    causal_weights_test,
    future_test,
    get_layout,
    gradient_test,
    head_independence_test,
    make_attention,
    permutation_test,
    shape_test,
    torch_comparison_test,
    train_layout,
)
from book.progress import progress as progress_bar
from book.sceptic import Outcome, Perturbation, Sweep

REPRODUCED, PARTLY, NOT_REPRODUCED = VERDICTS
Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# Every test on every layout
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleTest:
    """A unit test of an attention module: ``run(module) -> True`` when it passes."""

    name: str
    run: Callable[[nn.Module], bool]
    from_article: bool


TESTS: dict[str, ModuleTest] = {
    t.name: t
    for t in (
        ModuleTest("shape", shape_test, True),
        ModuleTest("causal mask", causal_weights_test, True),
        ModuleTest("gradients", gradient_test, True),
        ModuleTest("vs nn.MultiheadAttention", torch_comparison_test, False),
        ModuleTest("head independence", head_independence_test, False),
        ModuleTest("permutation", permutation_test, False),
        ModuleTest("no future leak", future_test, False),
    )
}
ARTICLE_TESTS = tuple(name for name, t in TESTS.items() if t.from_article)
# The article's optional extra: the comparison with torch's module given the same weights.
ARTICLE_OPTIONAL = "vs nn.MultiheadAttention"

PASSED, FAILED, RAISED = "passes", "fails", "raises"


def run_test(test: str | ModuleTest, module: nn.Module) -> str:
    """``"passes"``, ``"fails"``, or ``"raises"`` (the module raised an exception)."""
    t = test if isinstance(test, ModuleTest) else TESTS[check_choice("test", test, tuple(TESTS))]
    try:
        return PASSED if t.run(module) else FAILED
    except RuntimeError:
        return RAISED


# The bug set beyond the head layouts (a sceptic's perturbation): the most common silent bug
# with torch's module, section 8.3's nn.MultiheadAttention built with the default
# batch_first=False and fed (B, L, D).
BATCH_AS_SEQUENCE = "batch_first=False"
BUGS = (*WRONG, BATCH_AS_SEQUENCE)


class BatchAsSequence(HandMultiHeadAttention):
    """``nn.MultiheadAttention(D, H)`` (``batch_first=False``, the default) fed ``x (B, L, D)``:
    it reads ``x`` as ``(L', B', D)`` with ``L' = B``, so each position attends to the same
    position of the other sequences of the batch. Written as the correct layout run on
    ``x.transpose(0, 1)`` and transposed back (the tests check it equals torch's module with
    the same weights); the weights returned are ``(L, H, B, B)``."""

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
        result = super().forward(x.transpose(0, 1), mask=mask, causal=causal,
                                 need_weights=need_weights)  # fmt: skip
        if need_weights:
            out, weights = result  # (L, B, D), (L, H, B, B)
            return out.transpose(0, 1), weights  # (B, L, D)
        return result.transpose(0, 1)  # (B, L, D)


def make_buggy(bug: str, d_model: int = 12, num_heads: int = 2, *, seed: int = 0) -> nn.Module:
    """:func:`make_attention` for a head layout, :class:`BatchAsSequence` for
    :data:`BATCH_AS_SEQUENCE`; the same weights for the same ``seed``."""
    if bug == BATCH_AS_SEQUENCE:
        torch.manual_seed(seed)
        return BatchAsSequence(d_model, num_heads)
    return make_attention(bug, d_model, num_heads, seed=seed)


def outcome_table(
    layouts: Sequence[str] = tuple(LAYOUTS),
    *,
    d_model: int = 12,
    num_heads: int = 2,
    seed: int = 0,
) -> dict[str, dict[str, str]]:
    """``table[layout][test]``: the outcome of every test on a module with that layout (or
    :data:`BATCH_AS_SEQUENCE`); the same weights, from ``seed``, for every layout."""
    return {
        name: {
            test: run_test(test, make_buggy(name, d_model, num_heads, seed=seed)) for test in TESTS
        }
        for name in layouts
    }


def one_head_equal(
    layouts: Sequence[str] = WRONG, *, num_heads: int = 1, d_model: int = 12, seed: int = 0
) -> dict[str, bool]:
    """``{layout: torch.equal(its output, the correct layout's)}`` with the same weights and
    inputs (both from ``seed``); ``layouts`` may name :data:`BATCH_AS_SEQUENCE`."""
    x = torch.randn(*TEST_SHAPE, d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = make_attention(CORRECT, d_model, num_heads, seed=seed)(x)  # (B, L, D)
        equal = {}
        for name in layouts:
            try:
                equal[name] = torch.equal(make_buggy(name, d_model, num_heads, seed=seed)(x), want)
            except RuntimeError:
                equal[name] = False
    return equal


def accuracy_spreads(runs: Sequence[LayoutRun]) -> dict[str, Spread]:
    """Mean accuracy (both relations) over seeds, per layout, in the order first seen."""
    by_layout: dict[str, list[float]] = {}
    for run in runs:
        by_layout.setdefault(run.layout, []).append(run.mean_accuracy)
    return {name: spread(values) for name, values in by_layout.items()}


# ------------------------------------------------------------------------------------------
# C28: thresholds and verdicts
# ------------------------------------------------------------------------------------------

# The correct layout must learn the task (every seed's held-out accuracy at least 0.9), or the
# experiment cannot tell a ruined layout from a hard task.
MIN_CORRECT = 0.9
# "Ruins results": a mean at least 0.2 below the correct mean (a fifth of the way from
# perfect to nothing), and even the best seed below the correct worst seed.
RUIN_GAP = 0.2
# A layout that only permutes features must not be ruined: its best seed within 0.05 of the
# correct mean (the spread of the correct layout over seeds).
REACH = 0.05


def ruined(values: Sequence[float], correct: Sequence[float], *, gap: float = RUIN_GAP) -> bool:
    """A layout's accuracies over seeds are ruined against the correct layout's: mean at least
    ``gap`` below the correct mean and its best seed below the correct worst seed."""
    s, right = spread(values), spread(correct)
    return s.mean <= right.mean - gap and s.max < right.min


def c28_verdict(
    accuracy: Mapping[str, Sequence[float]],
    raises: Sequence[str],
    *,
    min_correct: float = MIN_CORRECT,
    gap: float = RUIN_GAP,
) -> str:
    """C28, "a wrong view/transpose order runs without error, mixes the heads and ruins
    results", over every wrong layout (``accuracy[layout]``: held-out accuracies over seeds of
    the trained layouts, ``"correct"`` included; ``raises``: the wrong layouts that raise
    instead of running). A wrong layout fits the claim when it runs and is :func:`ruined`.
    Reproduced when every wrong layout fits it, not reproduced when none does, partly
    otherwise. A correct layout that did not learn (a seed below ``min_correct``) leaves
    nothing to judge: ``ValueError``."""
    if CORRECT not in accuracy:
        raise ValueError(f"accuracy must hold the {CORRECT!r} layout, got {sorted(accuracy)}")
    if min(accuracy[CORRECT]) < min_correct:
        raise ValueError(
            f"the correct layout did not learn the task ({list(accuracy[CORRECT])} < "
            f"{min_correct}): the experiment cannot judge C28"
        )
    wrong = [n for n in accuracy if n != CORRECT] + [n for n in raises if n not in accuracy]
    fits = [n not in raises and ruined(accuracy[n], accuracy[CORRECT], gap=gap) for n in wrong]
    if not fits:
        raise ValueError("no wrong layout to judge")
    return REPRODUCED if all(fits) else NOT_REPRODUCED if not any(fits) else PARTLY


def c28_one_head_verdict(
    equal_one_head: Mapping[str, bool], equal_more_heads: Mapping[str, bool]
) -> str:
    """ "A head-layout bug is invisible with one head", over every wrong layout: a layout fits
    when its output equals the correct one with one head and differs with more. Reproduced when
    every layout fits, not reproduced when none does, partly otherwise."""
    fits = [equal_one_head[n] and not equal_more_heads[n] for n in equal_one_head]
    if not fits:
        raise ValueError("equal_one_head names no layout")
    return REPRODUCED if all(fits) else NOT_REPRODUCED if not any(fits) else PARTLY


def c28_tests_verdict(
    table: Mapping[str, Mapping[str, str]],
    layouts: Sequence[str],
    *,
    article: Sequence[str] = ARTICLE_TESTS,
    optional: str = ARTICLE_OPTIONAL,
) -> str:
    """The article's recipe ("shape, causal-mask and gradient tests, plus an optional
    comparison with nn.MultiheadAttention, verify a module"), judged on the wrong ``layouts``
    of ``table``: reproduced when its three tests alone catch every one (and pass the correct
    layout); partly when they do not but the recipe with its optional comparison does; not
    reproduced when even the comparison lets a wrong layout through."""

    def caught(tests: Sequence[str]) -> bool:
        right = all(table[CORRECT][t] == PASSED for t in tests)
        return right and all(any(table[n][t] != PASSED for t in tests) for n in layouts)

    if caught(article):
        return REPRODUCED
    return PARTLY if caught([*article, optional]) else NOT_REPRODUCED


def assert_c28_ruins(
    accuracy: Mapping[str, Sequence[float]],
    *,
    keeps_tokens: Mapping[str, bool],
    min_correct: float = MIN_CORRECT,
    gap: float = RUIN_GAP,
    reach: float = REACH,
) -> None:
    """C28, "a wrong view/transpose order ruins results", as predicted layout by layout.

    ``accuracy[layout]`` holds held-out accuracies over seeds (``accuracy["correct"]`` too).
    The correct layout must learn the task (every seed ``>= min_correct``). A layout that mixes
    tokens (``keeps_tokens[layout]`` False) must be ruined: mean at least ``gap`` below the
    correct mean and its best seed below the correct worst seed. A layout that only permutes
    each token's features must not be: its best seed within ``reach`` of the correct mean.
    """
    if CORRECT not in accuracy:
        raise ValueError(f"accuracy must hold the {CORRECT!r} layout, got {sorted(accuracy)}")
    right = spread(accuracy[CORRECT])
    assert right.min >= min_correct, (
        f"the correct layout did not learn the task: {right} < {min_correct}, so the "
        "experiment cannot tell a ruined variant from a hard task"
    )
    for name, values in accuracy.items():
        if name == CORRECT:
            continue
        s = spread(values)
        if keeps_tokens[name]:
            assert s.max >= right.mean - reach, (
                f"{name!r} only permutes features, yet its best seed {s.max:.3f} is more than "
                f"{reach} below the correct mean {right.mean:.3f}"
            )
        else:
            assert ruined(values, accuracy[CORRECT], gap=gap), (
                f"{name!r} mixes tokens but is not ruined: {s} against correct {right} "
                f"(needed a mean {gap} lower and every seed below the correct worst)"
            )


def assert_c28_one_head(
    equal_one_head: Mapping[str, bool],
    equal_two_heads: Mapping[str, bool],
    invisible: Sequence[str],
) -> None:
    """ "With one head the bug is invisible": the layouts in ``invisible`` give exactly the
    correct output with one head and a different one with two; every other layout differs
    already with one head."""
    for name, same in equal_one_head.items():
        if name in invisible:
            assert same, f"{name!r} was predicted invisible with one head but its output differs"
            assert not equal_two_heads[name], f"{name!r} is not a bug: equal with two heads too"
        else:
            assert not same, f"{name!r} was predicted visible with one head but gives equal output"


def assert_tests_miss(
    table: Mapping[str, Mapping[str, str]], tests: Sequence[str], layouts: Sequence[str]
) -> None:
    """Every test in ``tests`` passes every module in ``layouts`` (it misses the bugs)."""
    caught = [(t, name) for name in layouts for t in tests if table[name][t] != PASSED]
    assert not caught, f"these tests caught these layouts: {caught}"


def assert_test_catches(
    table: Mapping[str, Mapping[str, str]], test: str, layouts: Sequence[str]
) -> None:
    """``test`` passes the correct layout and fails (or raises on) every one of ``layouts``."""
    assert table[CORRECT][test] == PASSED, f"{test!r} rejects the correct layout"
    missed = [name for name in layouts if table[name][test] == PASSED]
    assert not missed, f"{test!r} passes these wrong layouts: {missed}"


def assert_tests_catch_together(
    table: Mapping[str, Mapping[str, str]], tests: Sequence[str], layouts: Sequence[str]
) -> None:
    """The correct layout passes every test in ``tests``, and each of ``layouts`` fails (or
    raises on) at least one of them."""
    rejected = [t for t in tests if table[CORRECT][t] != PASSED]
    assert not rejected, f"these tests reject the correct layout: {rejected}"
    missed = [name for name in layouts if all(table[name][t] == PASSED for t in tests)]
    assert not missed, f"{list(tests)} together pass these wrong layouts: {missed}"


# ------------------------------------------------------------------------------------------
# C28 under a sceptic's changes (book.sceptic; make sceptic CH=08 CLAIM=C28)
# ------------------------------------------------------------------------------------------


def c28_sweep_run(*, seeds: list[int], steps: int, num_heads: int) -> Outcome:
    """Train the correct layout and every silent wrong one on each of ``seeds`` (the chapter's
    :func:`train_layout`, ``steps`` steps, ``num_heads`` heads) and judge C28
    (:func:`c28_verdict`); the numbers: each layout's mean accuracy (min–max) over the seeds."""
    trained = (CORRECT, *SILENT_WRONG)
    settings = [(name, seed) for name in trained for seed in seeds]
    runs = [
        train_layout(name, seed=seed, steps=steps, num_heads=num_heads)
        for name, seed in progress_bar(settings, desc="runs", leave=False)
    ]
    accuracy = {name: s.values for name, s in accuracy_spreads(runs).items()}
    loud = [n for n in WRONG if not LAYOUTS[n].silent]
    try:
        verdict = c28_verdict(accuracy, loud)
    except ValueError:  # the correct layout did not learn: nothing is ruined against it
        verdict = NOT_REPRODUCED
    numbers = {
        name: f"{spread(v).mean:.3f} ({min(v):.3f}-{max(v):.3f})" for name, v in accuracy.items()
    }
    numbers["ruined"] = sorted(n for n in SILENT_WRONG if ruined(accuracy[n], accuracy[CORRECT]))
    return Outcome(verdict, numbers)


def c28_layout_run(*, layout: str, seed: int, steps: int, num_heads: int = 2) -> Outcome:
    """C28 for one wrong ``layout`` and one ``seed``: train it and the correct layout
    (:func:`train_layout`, ``steps`` steps) and judge with :func:`c28_verdict` on those two
    alone: "reproduced" when the layout is :func:`ruined`, "not reproduced" when it is not
    (or when the correct layout did not learn, which leaves nothing to judge). The run of an
    experiment exercise: a few seconds at the chapter's budget."""
    name = get_layout(layout).name
    if name == CORRECT:
        raise ValueError(f"layout must be a wrong layout, got {layout!r}")
    runs = {
        n: train_layout(n, seed=seed, steps=steps, num_heads=num_heads)
        for n in progress_bar((CORRECT, name), desc="runs", leave=False)
    }
    accuracy = {n: [r.mean_accuracy] for n, r in runs.items()}
    raises = [] if LAYOUTS[name].silent else [name]
    try:
        verdict = c28_verdict(accuracy, raises)
    except ValueError:
        verdict = NOT_REPRODUCED
    numbers = {"layout": name, "seed": seed, "steps": steps, "heads": num_heads}
    for n, r in runs.items():
        numbers[n] = f"previous {r.accuracy[0]:.2f}, partner {r.accuracy[1]:.2f}"
    return Outcome(verdict, numbers)


def c28_one_head_sweep_run(
    *, seeds: list[int], num_heads: int, d_model: int = 12, bugs: Sequence[str] = WRONG
) -> Outcome:
    """ "A head-layout bug is invisible with one head" (:func:`c28_one_head_verdict`) over
    ``bugs``: for each of ``seeds`` (weights and inputs), each bug's output against the correct
    module's with one head and with ``num_heads`` heads (:func:`one_head_equal`). A bug counts
    as invisible with one head only if equal on every seed, and as visible with more heads only
    if it differs on every seed."""
    ones = [one_head_equal(bugs, num_heads=1, d_model=d_model, seed=s) for s in seeds]
    more = [one_head_equal(bugs, num_heads=num_heads, d_model=d_model, seed=s) for s in seeds]
    equal_one = {n: all(e[n] for e in ones) for n in bugs}
    equal_more = {n: any(e[n] for e in more) for n in bugs}
    invisible = [n for n in bugs if equal_one[n]]
    numbers = {
        "heads": num_heads,
        "d_model": d_model,
        "invisible with 1 head": f"{len(invisible)} of {len(bugs)}",
        f"differ with {num_heads} heads": f"{sum(not v for v in equal_more.values())} of "
        f"{len(bugs)}",
        "visible with 1 head": ", ".join(n for n in bugs if not equal_one[n]) or "none",
        "invisible": invisible,
    }
    return Outcome(c28_one_head_verdict(equal_one, equal_more), numbers)


def c28_tests_sweep_run(
    *, seeds: list[int], num_heads: int, d_model: int = 12, bugs: Sequence[str] = WRONG
) -> Outcome:
    """The article's test recipe (:func:`c28_tests_verdict`) on ``bugs``: every test on the
    correct module and each bug with the weights of each of ``seeds``
    (:func:`outcome_table`), judged per seed; the verdict is the worst over the seeds (a
    recipe that verifies a module must do so whatever its weights). The numbers: per test,
    how many bugs it catches on every seed."""
    tables = [
        outcome_table((CORRECT, *bugs), d_model=d_model, num_heads=num_heads, seed=s) for s in seeds
    ]
    verdicts = [c28_tests_verdict(t, bugs) for t in tables]
    caught = {test: sum(all(t[n][test] != PASSED for t in tables) for n in bugs) for test in TESTS}
    free = ("head independence", "permutation", "no future leak")
    missed = [n for n in bugs if any(all(t[n][x] == PASSED for x in free) for t in tables)]
    numbers = {"heads": num_heads, "d_model": d_model, "bugs": len(bugs)}
    numbers |= {f"{test} catches": c for test, c in caught.items()}
    numbers["reference-free tests miss"] = ", ".join(missed) or "none"
    return Outcome(max(verdicts, key=VERDICTS.index), numbers)


_HEADS_SEEDS = (
    Perturbation("seeds 1–3", "the weights and inputs of seeds 1–3", {"seeds": [1, 2, 3]}),
    Perturbation("2 heads", "two heads of width 6", {"num_heads": 2}),
    Perturbation(
        "d_model 64, 8 heads",
        "a wider module, eight heads of width 8",
        {"d_model": 64, "num_heads": 8},
    ),  # fmt: skip
    Perturbation(
        "+ batch_first=False",
        "the bug set with section 8.3's nn.MultiheadAttention fed (B, L, D)",
        {"bugs": list(BUGS)},
    ),
)

# The chapter shows seeds 0-2, 300 steps (chapter 3's budget, not tuned) and 2 heads.
SCEPTIC_SWEEPS = (
    Sweep(
        "C28",
        run=c28_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 300, "num_heads": 2},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("1000 steps", "a 3.3× longer training budget", {"steps": 1000}),
            Perturbation(
                "4 heads", "four heads of width 8 (the claim's own knob)", {"num_heads": 4}
            ),
        ),
    ),
    # The chapter's table and one-head comparison: seed 0, 3 heads of width 4, every wrong layout.
    Sweep(
        "C28 one head",
        run=c28_one_head_sweep_run,
        baseline={"seeds": [0], "num_heads": 3, "d_model": 12, "bugs": list(WRONG)},
        perturbations=_HEADS_SEEDS,
    ),
    Sweep(
        "C28 tests",
        run=c28_tests_sweep_run,
        baseline={"seeds": [0], "num_heads": 3, "d_model": 12, "bugs": list(WRONG)},
        perturbations=(
            Perturbation(
                "seeds 1–3",
                "the weights of seeds 1–3 (each test keeps its own inputs)",
                {"seeds": [1, 2, 3]},
            ),  # fmt: skip
            *_HEADS_SEEDS[1:],
        ),
    ),
)
