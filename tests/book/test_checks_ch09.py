"""Chapter 9's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it."""

from __future__ import annotations

import math

import pytest
import torch

from book.checks import CheckFailed, exercises_for_chapter
from book.sceptic import Outcome
from tests.book.check_outcomes import fails, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("09")}


def test_all_five_exercises_are_registered():
    assert sorted(EXERCISES) == ["09.1", "09.2", "09.3", "09.4", "09.5"]


# --- 09.1 -------------------------------------------------------------------------------------


def sigmoid_weights(scores):
    return torch.sigmoid(scores - math.log(scores.shape[-1]))


def test_sigmoid_weights():
    run_check("09.1", sigmoid_weights)
    run_check("09.1", lambda s: 1 / (1 + s.shape[-1] * torch.exp(-s)))  # the same, rewritten
    fails("09.1", torch.sigmoid, "plain sigmoid")
    fails("09.1", lambda s: torch.sigmoid(s + math.log(s.shape[-1])), "wrong sign")
    fails("09.1", lambda s: torch.sigmoid(s - math.log(s.shape[-2])), "number of keys")
    fails("09.1", lambda s: torch.sigmoid(s) / s.shape[-1], "dividing")
    fails("09.1", lambda s: sigmoid_weights(s) / sigmoid_weights(s).sum(-1, keepdim=True),
          "do not normalise")  # fmt: skip
    fails("09.1", lambda s: sigmoid_weights(s)[..., :-1], "shape")
    fails("09.1", lambda s: sigmoid_weights(s) * 1.1, "off by up to")
    fails("09.1", lambda s: sigmoid_weights(s).tolist(), "should return a torch.Tensor")


# --- 09.2 -------------------------------------------------------------------------------------


def rollout(weights, *, residual=True, left=True):
    out = None
    for w in weights:
        a = w.mean(1)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1])
        out = a if out is None else (a @ out if left else out @ a)
    return out


def test_rollout():
    run_check("09.2", rollout)
    fails("09.2", lambda ws: rollout(ws, residual=False), "residual connection is missing")
    fails("09.2", lambda ws: rollout(ws, left=False), "wrong order")
    fails("09.2", lambda ws: sum(0.5 * w.mean(1) + 0.5 * torch.eye(w.shape[-1]) for w in ws)
          / len(ws), "averaged")  # fmt: skip
    fails("09.2", lambda ws: rollout(ws[-1:]), "only the last layer")
    fails("09.2", lambda ws: rollout(ws)[:, :-1], "shape")
    fails("09.2", lambda ws: rollout(ws) * 1.5, "off by up to")


# --- 09.3 -------------------------------------------------------------------------------------


def kendall_tau(a, b, *, denominator=None):
    n = len(a)
    s = torch.sign(a[:, None] - a[None, :]) * torch.sign(b[:, None] - b[None, :])
    total = s.sum() / 2
    return float(total / (denominator or n * (n - 1) / 2))


def test_kendall_tau():
    run_check("09.3", kendall_tau)
    fails("09.3", lambda a, b: kendall_tau(a, b, denominator=len(a) ** 2), "divided by n²")
    fails("09.3", lambda a, b: kendall_tau(a, b, denominator=len(a) * (len(a) - 1)),
          "half the answer")  # fmt: skip
    fails("09.3", lambda a, b: 2 * kendall_tau(a, b), "twice the answer")
    fails("09.3", lambda a, b: float(torch.corrcoef(torch.stack([a, b]))[0, 1]), "Pearson")

    def spearman(a, b):
        ra, rb = (x.argsort().argsort().double() for x in (a, b))
        return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])

    fails("09.3", spearman, "Spearman")
    fails("09.3", lambda a, b: kendall_tau(a, b) + 0.3, "concordant")
    fails("09.3", lambda a, b: "tau", "should be a number")


# --- 09.4 -------------------------------------------------------------------------------------


def test_warmup_factor():
    run_check("09.4", lambda step, w: min(1.0, (step + 1) / w))
    fails("09.4", lambda step, w: min(1.0, step / w), "off by one")
    fails("09.4", lambda step, w: (step + 1) / w, "cap it at 1")
    fails("09.4", lambda step, w: min(0.9, (step + 1) / w), "never reached")
    fails("09.4", lambda step, w: min(1.0, (step + 1) / w) if step < w else 0.5, "at step")
    fails("09.4", lambda step, w: None, "should be a number")


# --- 09.5 predict, then run -------------------------------------------------------------------

ONE_LAYER = Outcome("partly", {"layers": 1, "tau max": 0.02, "controls max": 0.0,
                               "beyond min": 0.16})  # fmt: skip


def _predict(verdict):
    return lambda: verdict


def test_the_right_prediction_passes():
    EXERCISES["09.5"].check(_predict("partly"), outcome=ONE_LAYER)


def test_a_wrong_prediction_fails_with_the_explanation():
    with pytest.raises(CheckFailed, match=r"you predicted 'reproduced'.*gives 'partly'.*"
                       r"only mixing of the rows"):  # fmt: skip
        EXERCISES["09.5"].check(_predict("reproduced"), outcome=ONE_LAYER)


def test_an_outcome_of_the_unchanged_baseline_fails():
    baseline = Outcome("partly", {"layers": 2, "tau max": 0.1})
    with pytest.raises(CheckFailed, match="has 2 layers, not 1"):
        EXERCISES["09.5"].check(_predict("partly"), outcome=baseline)
