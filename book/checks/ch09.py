"""Checks of chapter 9's exercises (sigmoid attention, rollout, Kendall's τ, warm-up).

Every answer is compared with an independent computation: sigmoid weights against
:func:`attention.normalizers.normalize_scores`, rollout against :func:`book.pages.ch09.rollout`
(chapter 9's page), Kendall's τ against a count of concordant pairs in plain Python, the
warm-up factor against :func:`book.experiments.training.linear_warmup`. When an answer is
wrong, the check recomputes the usual mistakes and names the one that matches.
"""

from __future__ import annotations

import itertools
import math

import torch

from attention.normalizers import normalize_scores
from book.experiments.training import linear_warmup
from book.pages.ch09 import rollout as reference_rollout

from . import CheckFailed, expect_close, expect_shape, randn, register
from .helpers import check_prediction, expect_number, expect_tensor, matches

# --- 9.1 sigmoid attention weights with the −log n bias ---------------------------------------


@register("09.1", title="Sigmoid attention weights with the −log n bias")
def _sigmoid_weights(candidate):
    for shape, seed in (((2, 3, 5), 0), ((1, 4, 9), 1), ((2, 2, 6, 3), 2)):
        scores = randn(*shape, seed=seed) * 2
        call = f"sigmoid_weights(scores {tuple(scores.shape)})"
        got = expect_tensor(call, candidate(scores.clone()), floating=True)
        expect_shape(call, got, scores.shape, "one weight per score")
        expected = normalize_scores(scores, normalizer="sigmoid")
        if matches(got, expected):
            continue
        n_keys, n_queries = scores.shape[-1], scores.shape[-2]
        if matches(got, torch.sigmoid(scores)):
            raise CheckFailed(
                f"{call}: this is the plain sigmoid; add the bias −log n (n = {n_keys} keys) to "
                f"every score first, so that a row's weights sum to about 1 at the start"
            )
        if matches(got, torch.sigmoid(scores + math.log(n_keys))):
            raise CheckFailed(f"{call}: the bias has the wrong sign: it is −log n, not +log n")
        if matches(got, torch.sigmoid(scores - math.log(n_queries))):
            raise CheckFailed(
                f"{call}: n is the number of keys (the last dim, {n_keys}), not of queries "
                f"({n_queries})"
            )
        if matches(got, torch.sigmoid(scores) / n_keys):
            raise CheckFailed(
                f"{call}: dividing σ(s) by n is not the same as σ(s − log n); add the bias "
                f"inside the sigmoid"
            )
        s = torch.sigmoid(scores - math.log(n_keys))
        if matches(got, s / s.sum(-1, keepdim=True)):
            raise CheckFailed(
                f"{call}: do not normalise the rows: sigmoid attention's weights are "
                f"independent of each other, which is the point of it"
            )
        expect_close(call, got, expected, hint="weights = σ(scores − log n), n = scores.shape[-1]")


# --- 9.2 attention rollout ---------------------------------------------------------------------


def _rollout_variant(weights, *, residual=True, order="left", average=False):
    out = None
    mats = []
    for w in weights:
        a = w.mean(1)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1])
        mats.append(a)
    if average:
        return sum(mats) / len(mats)
    for a in mats:
        if out is None:
            out = a
        else:
            out = a @ out if order == "left" else out @ a
    return out


@register("09.2", title="Attention rollout across layers")
def _rollout(candidate):
    for b, h, l, layers, seed in ((2, 2, 5, 3, 0), (1, 3, 4, 2, 1), (2, 1, 6, 4, 2)):
        weights = [randn(b, h, l, l, seed=seed + 10 * i).softmax(-1) for i in range(layers)]
        call = f"rollout({layers} layers of weights {(b, h, l, l)})"
        got = expect_tensor(call, candidate([w.clone() for w in weights]), floating=True)
        expect_shape(call, got, (b, l, l), "(B, L, L): the heads are averaged")
        expected = reference_rollout(weights)
        if matches(got, expected):
            continue
        if matches(got, _rollout_variant(weights, residual=False)):
            raise CheckFailed(
                f"{call}: the residual connection is missing: use 0.5·A + 0.5·I in every "
                f"layer, since each token also keeps its own vector"
            )
        if matches(got, _rollout_variant(weights, order="right")):
            raise CheckFailed(
                f"{call}: the product is in the wrong order: a later layer's matrix goes on "
                f"the left (rollout_l = Â_l · rollout_(l−1))"
            )
        if matches(got, _rollout_variant(weights, average=True)):
            raise CheckFailed(f"{call}: the layers are averaged; multiply them instead")
        if matches(got, _rollout_variant(weights[-1:])):
            raise CheckFailed(f"{call}: only the last layer is used; multiply all of them")
        expect_close(
            call, got, expected, hint="rollout = Â_L ··· Â_1 with Â = 0.5·mean_h A + 0.5·I"
        )


# --- 9.3 Kendall's tau -------------------------------------------------------------------------


def _tau(a, b, *, denominator="pairs"):
    n = len(a)
    total = 0
    for i, j in itertools.combinations(range(n), 2):
        total += (1 if a[i] > a[j] else -1) * (1 if b[i] > b[j] else -1)
    if denominator == "pairs":
        return total / (n * (n - 1) / 2)
    if denominator == "n2":
        return total / (n * n)
    return total / (n * (n - 1))


def _spearman(a, b):
    ra = torch.tensor(a).argsort().argsort().double()
    rb = torch.tensor(b).argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def _pearson(a, b):
    x, y = torch.tensor(a).double(), torch.tensor(b).double()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()))


@register("09.3", title="Kendall's rank correlation")
def _kendall(candidate):
    cases = []
    for n, seed in ((6, 0), (8, 1), (5, 2)):
        a = randn(n, seed=seed)
        b = a + randn(n, seed=seed + 50)
        cases.append((a, b))
    cases.append((torch.tensor([1.0, 2, 3, 4]), torch.tensor([1.0, 20, 300, 4000])))
    for a, b in cases:
        al, bl = a.tolist(), b.tolist()
        call = f"kendall_tau({[round(x, 2) for x in al]}, {[round(x, 2) for x in bl]})"
        got = expect_number(call, candidate(a.clone(), b.clone()))
        expected = _tau(al, bl)
        if math.isclose(got, expected, abs_tol=1e-6):
            continue
        if math.isclose(got, _tau(al, bl, denominator="n2"), abs_tol=1e-6):
            raise CheckFailed(
                f"{call}: divided by n² = {len(al) ** 2}; divide by the number of pairs, "
                f"n(n−1)/2 = {len(al) * (len(al) - 1) // 2}"
            )
        if math.isclose(got, _tau(al, bl, denominator="ordered"), abs_tol=1e-6):
            raise CheckFailed(
                f"{call}: half the answer: counting each unordered pair once, divide by "
                f"n(n−1)/2, not n(n−1)"
            )
        if math.isclose(got, 2 * expected, abs_tol=1e-6):
            raise CheckFailed(f"{call}: twice the answer: each pair is counted twice")
        if math.isclose(got, _spearman(al, bl), abs_tol=1e-6):
            raise CheckFailed(f"{call}: this is Spearman's ρ; Kendall's τ counts pairs")
        if math.isclose(got, _pearson(al, bl), abs_tol=1e-6):
            raise CheckFailed(
                f"{call}: this is Pearson's correlation of the values; a rank correlation "
                f"only looks at the order"
            )
        raise CheckFailed(
            f"{call} is {got:.6g}, expected {expected:.6g}: (concordant − discordant pairs) / "
            f"number of pairs"
        )


# --- 9.4 linear warm-up ------------------------------------------------------------------------


@register("09.4", title="The learning-rate factor of a linear warm-up")
def _warmup(candidate):
    for warmup in (4, 10, 1):
        reference = linear_warmup(warmup)
        steps = range(warmup + 5)
        got = [expect_number(f"warmup_factor({s}, {warmup})", candidate(s, warmup)) for s in steps]
        want = [reference(s) for s in steps]
        if all(math.isclose(g, w, abs_tol=1e-9) for g, w in zip(got, want, strict=True)):
            continue
        call = f"warmup_factor(step, {warmup}) for step = 0 … {warmup + 4}"
        if all(
            math.isclose(g, min(1.0, s / warmup), abs_tol=1e-9)
            for g, s in zip(got, steps, strict=True)
        ):
            raise CheckFailed(
                f"{call}: off by one: step 0 gets factor 0, so the first update does nothing; "
                f"use (step + 1) / warmup_steps"
            )
        if all(
            math.isclose(g, (s + 1) / warmup, abs_tol=1e-9) for g, s in zip(got, steps, strict=True)
        ):
            raise CheckFailed(f"{call}: the factor keeps growing after the warm-up; cap it at 1")
        if got[warmup - 1] < 1 - 1e-9:
            raise CheckFailed(
                f"{call}: the full rate is never reached at step {warmup - 1} (got "
                f"{got[warmup - 1]:.6g}); the last warm-up step must use factor 1"
            )
        first_bad = next(s for s in steps if not math.isclose(got[s], want[s], abs_tol=1e-9))
        raise CheckFailed(
            f"{call}: at step {first_bad} got {got[first_bad]:.6g}, expected "
            f"{want[first_bad]:.6g} (factor min(1, (step + 1) / warmup_steps))"
        )


# --- 9.5 predict, then run: C29 with a one-layer classifier ------------------------------------


@register("09.5", title="Predict, then run: C29 with a one-layer classifier")
def _predict_one_layer(predict, *, outcome):
    from book.sceptic import Outcome

    if isinstance(outcome, Outcome) and outcome.numbers.get("layers") != 1:
        raise CheckFailed(
            f"this run has {outcome.numbers.get('layers')} layers, not 1: the knob was not "
            f"changed; run c29_sweep_run(..., num_layers=1)"
        )
    check_prediction(
        predict,
        outcome,
        setting="a one-layer classifier",
        why={
            "reproduced": "Attention still ranks the rows unlike leave-one-out, the controls "
            "rarely pass, and the searched adversary succeeds on at least half of the images "
            "the controls fail on.",
            "partly": "Attention still ranks the rows unlike leave-one-out (part i holds), but "
            "with one layer the [CLS] weights are the only mixing of the rows, so the output "
            "depends on them: the search rarely finds far weights that keep the output "
            "within the tolerance (beyond min < 0.5), or uniform/permuted weights pass for "
            "most images — part (ii) fails.",
            "not reproduced": "Attention ranks the rows like leave-one-out and the adversary "
            "part fails too.",
        },
    )
