"""Chapter 6's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it (the wrong mask polarity, -1e9 in float16, NaN or uniform weights on a
fully masked row, the padding mask on the queries, the overflow scale or cache size with a
known slip)."""

from __future__ import annotations

import math

import pytest
import torch

from attention.functional import safe_softmax
from attention.masks import causal_mask, padding_mask
from book.checks import CheckFailed, exercises_for_chapter
from book.claims.ch06 import c22_sweep_run
from tests.book.check_outcomes import fails, fails_with, passes, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("06")}


def test_all_six_exercises_are_registered():
    assert sorted(EXERCISES) == ["06.1", "06.2", "06.3", "06.4", "06.5", "06.6"]


# --- 06.1 -------------------------------------------------------------------------------------


def test_causal_mask():
    run_check("06.1", lambda n: torch.ones(n, n, dtype=torch.bool).tril())
    passes("06.1", causal_mask)
    fails("06.1", lambda n: ~causal_mask(n), "wrong polarity")
    fails("06.1", lambda n: torch.ones(n, n).triu(1).bool(), "nn.MultiheadAttention")
    fails("06.1", lambda n: causal_mask(n).T.contiguous(), "transposed")
    fails("06.1", lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "diagonal")
    fails("06.1", lambda n: torch.ones(n, n).tril(), "bool tensor")
    fails("06.1", lambda n: torch.ones(n, n + 1, dtype=torch.bool), r"\(L, L\)")
    fails("06.1", lambda n: torch.ones(n, n, dtype=torch.bool), "lower triangle")


# --- 06.2 -------------------------------------------------------------------------------------


def right_softmax(scores, allowed):
    return safe_softmax(scores.float().masked_fill(~allowed, float("-inf"))).to(scores.dtype)


def minus_1e9(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, -1e9), dim=-1)


def minus_inf(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def finfo_min(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), dim=-1)


def additive_cast(scores, allowed):
    return torch.softmax(scores + torch.where(allowed, 0.0, -1e9).to(scores.dtype), dim=-1)


def test_masked_softmax():
    run_check("06.2", right_softmax)
    fails("06.2", minus_1e9, "-1e9 does not fit in float16")
    fails("06.2", minus_inf, "NaN in the fully masked row")
    fails("06.2", finfo_min, "uniform weights")
    fails("06.2", additive_cast, "became -inf when cast to float16")
    fails("06.2", lambda s, a: torch.softmax(s, dim=-1), "masked keys must get weight 0")
    fails("06.2", lambda s, a: right_softmax(s, ~a), "masked keys must get weight 0")
    fails("06.2", lambda s, a: right_softmax(s, a)[..., :3], "shape")
    in_float32 = lambda s, a: right_softmax(s.float(), a)  # noqa: E731  (the values are right)
    fails("06.2", in_float32, "returns torch.float32; the result must have the dtype")


def test_masked_softmax_reports_a_crash():
    fails_with("06.2", lambda s, a: s.masked_fill(a), "TypeError")


# --- 06.3 -------------------------------------------------------------------------------------


def test_key_padding():
    run_check("06.3", lambda lengths, n: padding_mask(lengths, n))
    fails("06.3", lambda lengths, n: padding_mask(lengths, n).transpose(-1, -2), "queries")
    fails("06.3", lambda lengths, n: ~padding_mask(lengths, n).transpose(-1, -2), "queries")
    fails("06.3", lambda lengths, n: ~padding_mask(lengths, n), "wrong polarity")
    fails("06.3", lambda lengths, n: padding_mask(lengths, n)[:, 0, 0], r"\(B, 1, 1, L\)")
    fails("06.3", lambda lengths, n: padding_mask(lengths, n).float(), "bool")
    fails("06.3", lambda lengths, n: padding_mask(lengths - 1, n), "lengths")


# --- 06.4 -------------------------------------------------------------------------------------


def test_overflow_scale():
    passes("06.4", lambda d: math.sqrt(65504 / d))
    fails("06.4", lambda d: 65504 / d, "square root")
    fails("06.4", lambda d: math.sqrt(65504 / math.sqrt(d)), "before")
    fails("06.4", lambda d: math.sqrt(math.log(65504) / d), "exp")
    fails("06.4", lambda d: math.sqrt(torch.finfo(torch.bfloat16).max / d), "bfloat16")
    fails("06.4", lambda d: 1.0, "d_k·s²")


# --- 06.5 -------------------------------------------------------------------------------------


def test_kv_cache_bytes():
    passes("06.5", lambda nl, b, h, hk, d, t, e: 2 * nl * b * hk * d * t * e)
    fails("06.5", lambda nl, b, h, hk, d, t, e: 2 * nl * b * h * d * t * e, "num_kv_heads")
    fails("06.5", lambda nl, b, h, hk, d, t, e: nl * b * hk * d * t * e, "factor of 2")
    fails("06.5", lambda nl, b, h, hk, d, t, e: 2 * b * hk * d * t * e, "num_layers")
    fails("06.5", lambda nl, b, h, hk, d, t, e: 2 * nl * b * hk * d * t, "bytes_per_element")
    fails("06.5", lambda nl, b, h, hk, d, t, e: 2 * nl * hk * d * t * e, "batch")
    fails("06.5", lambda *args: 0, "2 \\(keys and values\\)")


# --- 06.6 predict, then run -------------------------------------------------------------------


def test_predicting_c22_for_a_classifier_trained_without_its_mask():
    check_66 = EXERCISES["06.6"].check
    run = c22_sweep_run(seeds=[0], steps=60, train_masked=False)  # the exercise's run
    assert run.verdict == "partly"
    check_66(lambda: "partly", outcome=run)
    with pytest.raises(CheckFailed, match="gives 'partly'.*learns to give them no weight"):
        check_66(lambda: "reproduced", outcome=run)
    # the chapter's setting (trained with its mask) is not the exercise's run
    baseline = c22_sweep_run(seeds=[0], steps=60, train_masked=True)
    assert baseline.verdict == "reproduced"
    with pytest.raises(CheckFailed, match="train_masked=False"):
        check_66(lambda: "reproduced", outcome=baseline)
    with pytest.raises(CheckFailed, match="outcome should be the Outcome"):
        check_66(lambda: "partly", outcome=0.5)
