"""attention.normalizers against a float64 loop over rows, and on bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.normalizers import (
    NORMALIZERS,
    normalize_scores,
    normalized_attention,
    sigmoid_attention,
)
from tests.attention.inputs import random_qkv
from tests.reference import naive_attention_float64

SIZES = dict(lq=3, lk=5, e=4, ev=3, dtype=torch.float32)  # b = h = 2


def naive_float64(q, k, v, allowed=None, *, normalizer, bias=None):
    """Row by row in float64, from the definitions in the module docstring."""
    q, k, v = (t.double() for t in (q, k, v))
    b, h, lq, e = q.shape
    lk = k.shape[2]
    out = torch.zeros(b, h, lq, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(lq):
                keep = [
                    j
                    for j in range(lk)
                    if allowed is None or bool(allowed.expand(b, h, lq, lk)[bi, hi, i, j])
                ]
                if not keep:
                    continue
                s = [float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(e) for j in keep]
                if normalizer == "softmax":
                    m = max(s)
                    w = [math.exp(x - m) for x in s]
                    w = [x / sum(w) for x in w]
                elif normalizer == "sigmoid":
                    shift = -math.log(len(keep)) if bias is None else bias
                    w = [1 / (1 + math.exp(-(x + shift))) for x in s]
                else:
                    top = [max(x, 0.0) for x in s] if normalizer == "relu" else s
                    total = sum(top)
                    w = [0.0] * len(top) if total == 0 else [x / total for x in top]
                for j, wj in zip(keep, w, strict=True):
                    out[bi, hi, i] += wj * v[bi, hi, j]
    return out


@pytest.mark.parametrize("normalizer", ["softmax", "sigmoid", "relu"])
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 1000),
    lq=st.integers(1, 4),
    lk=st.integers(1, 6),
    masked=st.booleans(),
)
def test_matches_the_float64_loop(normalizer, seed, lq, lk, masked):
    q, k, v = random_qkv(**{**SIZES, "lq": lq, "lk": lk}, seed=seed)
    allowed = None
    if masked:
        allowed = torch.rand(1, 1, lq, lk, generator=torch.Generator().manual_seed(seed)) > 0.4
    got = normalized_attention(q, k, v, allowed, normalizer=normalizer)
    want = naive_float64(q, k, v, allowed, normalizer=normalizer)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-4)


def test_plain_matches_the_loop_on_positive_scores():
    # positive scores keep the sum away from 0, where "plain" is ill-conditioned on purpose
    q, k, v = random_qkv(**SIZES, seed=3)
    k = q[:, :, :1].abs().expand(-1, -1, 5, -1).clone() + 0.1
    q = q.abs() + 0.1
    got = normalized_attention(q, k, v, normalizer="plain")
    torch.testing.assert_close(got.double(), naive_float64(q, k, v, normalizer="plain"))


def test_softmax_equals_the_reference_attention():
    q, k, v = random_qkv(**SIZES, seed=1)
    allowed = torch.tensor([[True, False, True, True, False]])
    got = normalized_attention(q, k, v, allowed, normalizer="softmax")
    torch.testing.assert_close(got.double(), naive_attention_float64(q, k, v, allowed))


def test_sigmoid_bias_default_is_minus_log_n_and_zero_is_plain():
    q, k, v = random_qkv(**SIZES, seed=2)
    for bias in (None, 0.0, -1.5):
        got, w = sigmoid_attention(q, k, v, score_bias=bias, need_weights=True)
        want = naive_float64(q, k, v, normalizer="sigmoid", bias=bias)
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-4)
    scores = q @ k.transpose(-2, -1) / 2.0
    torch.testing.assert_close(w, torch.sigmoid(scores - 1.5))


def test_weights_sum_to_one_except_sigmoid():
    q, k, v = random_qkv(**{**SIZES, "lk": 6}, seed=4)
    for normalizer in NORMALIZERS:
        _, w = normalized_attention(q, k, v, normalizer=normalizer, need_weights=True)
        sums = w.sum(-1)
        if normalizer == "sigmoid":
            assert not torch.allclose(sums, torch.ones_like(sums))
        elif normalizer in ("softmax", "plain"):
            torch.testing.assert_close(sums, torch.ones_like(sums))
        else:  # relu: 1, or 0 for a row with no positive score
            assert bool(((sums - 1).abs() < 1e-5).logical_or(sums == 0).all())


@pytest.mark.parametrize("normalizer", NORMALIZERS)
def test_fully_masked_rows_give_zeros_and_finite_gradients(normalizer):
    q, k, v = random_qkv(**SIZES, seed=5)
    q.requires_grad_(True)
    allowed = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    allowed[..., 1, :] = False
    out = normalized_attention(q, k, v, allowed, normalizer=normalizer)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_relu_row_with_no_positive_score_gives_zeros_and_no_gradient():
    scores = torch.tensor([[-1.0, -2.0, -0.5], [1.0, -1.0, 3.0]], requires_grad=True)
    w = normalize_scores(scores, normalizer="relu")
    assert torch.equal(w[0], torch.zeros(3))
    torch.testing.assert_close(w[1], torch.tensor([0.25, 0.0, 0.75]))
    (w * torch.arange(3.0)).sum().backward()
    assert torch.equal(scores.grad[0], torch.zeros(3))


def test_float_mask_is_an_additive_bias_and_half_precision_is_computed_in_float32():
    q, k, v = random_qkv(**SIZES, seed=6)
    bias = torch.randn(1, 1, 3, 5, generator=torch.Generator().manual_seed(0))
    got = normalized_attention(q, k, v, bias, normalizer="softmax")
    scores = q @ k.transpose(-2, -1) / 2.0 + bias
    torch.testing.assert_close(got, scores.softmax(-1) @ v)
    half = normalized_attention(q.half(), k.half(), v.half(), normalizer="sigmoid")
    assert half.dtype == torch.float16
    torch.testing.assert_close(
        half.float(), normalized_attention(q, k, v, normalizer="sigmoid"), atol=2e-3, rtol=2e-3
    )


def test_bad_input_names_the_argument():
    q, k, v = random_qkv(**SIZES, seed=7)
    with pytest.raises(ValueError, match="normalizer"):
        normalized_attention(q, k, v, normalizer="tanh")
    with pytest.raises(TypeError, match="score_bias must be a float or None"):
        sigmoid_attention(q, k, v, score_bias="-log n")
    with pytest.raises(ValueError, match="score_bias must be finite, got nan"):
        sigmoid_attention(q, k, v, score_bias=float("nan"))
    with pytest.raises(ValueError, match="score_bias is only used by normalizer='sigmoid'"):
        normalized_attention(q, k, v, normalizer="relu", score_bias=-1.0)
    with pytest.raises(ValueError, match="key"):
        normalized_attention(q, k[..., :3], v)
    with pytest.raises(TypeError, match="mask"):
        normalized_attention(q, k, v, torch.ones(3, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="query"):
        normalized_attention(q.long(), k, v)


def test_normalize_scores_takes_a_bool_or_a_float_mask():
    g = torch.Generator().manual_seed(8)
    scores = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)  # (B, Lq, Lk)
    keep = torch.rand(3, 5, generator=g) > 0.3
    keep[:, 0] = True  # every row keeps a key, so torch.softmax has no NaN row
    bias = torch.randn(3, 5, generator=g, dtype=torch.float64).masked_fill(~keep, -math.inf)
    want = torch.softmax(scores + bias, dim=-1)
    torch.testing.assert_close(normalize_scores(scores, mask=bias), want)
    want = torch.softmax(scores.masked_fill(~keep, -math.inf), dim=-1)
    torch.testing.assert_close(normalize_scores(scores, mask=keep), want)
