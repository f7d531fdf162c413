"""Chapter 5's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from book.checks import CheckFailed, check, exercises_for_chapter, results
from tests.book.check_outcomes import fails, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("05")}


def test_all_five_exercises_are_registered():
    assert sorted(EXERCISES) == ["05.1", "05.2", "05.3", "05.4", "05.5", "05.6"]


# --- 05.1 -------------------------------------------------------------------------------------


def table_right(n, h, b=1, nbytes=4):
    return b * h * n * n * nbytes


def test_score_table_bytes():
    run_check("05.1", table_right)
    fails("05.1", lambda n, h, b, nb: b * h * n * nb, "n × n entries")
    fails("05.1", lambda n, h, b, nb: b * n * n * nb, "multiply by num_heads")
    fails("05.1", lambda n, h, b, nb: h * n * n * nb, "multiply by batch_size")
    fails("05.1", lambda n, h, b, nb: b * h * n * n, "bytes_per_element")
    fails("05.1", lambda n, h, b, nb: 8 * table_right(n, h, b, nb), "not bits")
    fails("05.1", lambda n, h, b, nb: b * h * n * (n + 1) // 2 * nb, "triangular")
    fails("05.1", lambda n, h, b, nb: table_right(n, h, b, nb) + 1, r"B · H · n² · bytes")
    fails("05.1", lambda n, h, b, nb: "big", "should be a number")


# --- 05.2 -------------------------------------------------------------------------------------


def band(q, k, v, left, right, *, lo=None, hi=None, scale=True, invert=False, dim=-1):
    i = torch.arange(q.shape[-2])[:, None]
    j = torch.arange(k.shape[-2])[None, :]
    lo = (j >= i - left) if lo is None else lo(i, j)
    hi = (j <= i + right) if hi is None else hi(i, j)
    allowed = lo & hi
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    scores = scores.masked_fill(allowed if invert else ~allowed, float("-inf"))
    return torch.softmax(scores, dim=dim).nan_to_num(0.0) @ v


def test_band_attention():
    run_check("05.2", band)
    fails("05.2", lambda q, k, v, left, right: band(q, k, v, left, 0), "only backwards")
    fails("05.2", lambda q, k, v, left, right: band(q, k, v, 0, right), "only forwards")
    fails(
        "05.2",
        lambda q, k, v, le, ri: band(
            q, k, v, le, ri, lo=lambda i, j: j > i - le, hi=lambda i, j: j < i + ri
        ),
        "strict inequalities",
    )
    fails("05.2", lambda q, k, v, le, ri: band(q, k, v, le, ri, scale=False), "sqrt")
    fails("05.2", lambda q, k, v, le, ri: band(q, k, v, le, ri, invert=True), "inverted")
    fails("05.2", lambda q, k, v, le, ri: band(q, k, v, le, ri, dim=-2), "over the keys")
    fails(
        "05.2",
        lambda q, k, v, le, ri: torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v,
        "full attention",
    )
    fails("05.2", lambda q, k, v, le, ri: band(q, k, v, le, ri)[..., :2], "shape")
    fails("05.2", lambda q, k, v, le, ri: band(q, k, v, le, ri) + 0.1, "off by up to")


# --- 05.3 -------------------------------------------------------------------------------------


def savings_right(n, left, right):
    pairs = sum(min(n - 1, i + right) - max(0, i - left) + 1 for i in range(n))
    return n * n / pairs


def test_window_savings():
    run_check("05.3", savings_right)
    fails("05.3", lambda n, le, ri: n / (le + ri + 1), "ignores the edges")
    fails("05.3", lambda n, le, ri: n / (le + ri) if le + ri else 1.0, "own")
    fails("05.3", lambda n, le, ri: 1 / savings_right(n, le, ri), "upside down")
    fails("05.3", lambda n, le, ri: "8x", "should be a number")
    fails("05.3", lambda n, le, ri: savings_right(n, le, ri) * 1.01, "count, for each query")


# --- 05.4 -------------------------------------------------------------------------------------


def linear_right(q, k, v, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    state = phi_k.transpose(-2, -1) @ v
    z = phi_k.sum(-2)
    return (phi_q @ state) / (phi_q @ z.unsqueeze(-1) + eps)


def test_linear_attention():
    run_check("05.4", linear_right)

    def no_plus_one(q, k, v, eps=1e-6):
        phi_q, phi_k = F.elu(q), F.elu(k)
        return (phi_q @ (phi_k.transpose(-2, -1) @ v)) / (phi_q @ phi_k.sum(-2).unsqueeze(-1) + eps)

    def no_normaliser(q, k, v, eps=1e-6):
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        return phi_q @ (phi_k.transpose(-2, -1) @ v)

    def softmax(q, k, v, eps=1e-6):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    fails("05.4", no_plus_one, r"elu\(x\) \+ 1, not elu")
    fails("05.4", no_normaliser, "normaliser")
    fails("05.4", softmax, "softmax attention")
    fails("05.4", lambda q, k, v, eps=1e-6: linear_right(q, k, v).transpose(-2, -1), "shape")
    fails("05.4", lambda q, k, v, eps=1e-6: linear_right(q, k, v) * 1.1, "off by up to")


def test_linear_attention_fails_the_table_route_on_cost():
    """(φ(Q)φ(K)ᵀ)V gives the right values through the n × n table: the check measures cost."""

    def table_route(q, k, v, eps=1e-6):
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        kernel = phi_q @ phi_k.transpose(-2, -1)  # (B, H, Lq, Lk): the forbidden table
        return (kernel @ v) / (kernel.sum(-1, keepdim=True) + eps)

    def broadcast_table(q, k, v, eps=1e-6):  # no matmul builds it: only memory can tell
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        kernel = (phi_q[..., :, None, :] * phi_k[..., None, :, :]).sum(-1)  # (B, H, Lq, Lk)
        return torch.einsum("bhqk,bhkd->bhqd", kernel, v) / (kernel.sum(-1, keepdim=True) + eps)

    fails("05.4", table_route, r"grew .*× .*n × n table")
    fails("05.4", broadcast_table, r"peak memory grew")


# --- 05.5 -------------------------------------------------------------------------------------


def longest_right(memory, h, nbytes=2):
    return math.isqrt(memory // (h * nbytes))


def test_longest_sequence():
    run_check("05.5", longest_right)
    fails("05.5", lambda m, h, nb: math.isqrt(m // nb), "divide the memory by num_heads")
    fails("05.5", lambda m, h, nb: math.isqrt(m // h), "divide by it")
    fails("05.5", lambda m, h, nb: round(math.sqrt(m / (h * nb))), "round down")
    fails("05.5", lambda m, h, nb: math.sqrt(m / (h * nb)), "whole number")
    fails("05.5", lambda m, h, nb: m // (h * nb), "square root")
    fails("05.5", lambda m, h, nb: "many", "should be an int")
    fails("05.5", lambda m, h, nb: longest_right(m, h, nb) - 1, "the largest n with")


def test_check_prints_and_records(capsys):
    check("05.5", longest_right)
    check("05.5", lambda m, h, nb: (_ for _ in ()).throw(NotImplementedError("Exercise 05.5")))
    out = capsys.readouterr().out
    assert "✓ Exercise 05.5" in out and "not implemented yet" in out
    assert results()[-1].passed is False


# --- 05.6 -------------------------------------------------------------------------------------


def bias_outcome(verdict, bias="+1", lstm="7.8e-20"):
    from book.sceptic import Outcome

    numbers = {"forget-gate bias": bias, "LSTM far/near": lstm, "RNN far/near": "7.9e-69"}
    return Outcome(verdict, numbers)


def predict_then_run(prediction, outcome):
    (exercise,) = [ex for ex in exercises_for_chapter("05") if ex.id == "05.6"]
    exercise.check(lambda: prediction, outcome=outcome)


def test_predict_then_run_passes_the_right_prediction():
    predict_then_run("partly", bias_outcome("partly"))
    predict_then_run("reproduced", bias_outcome("reproduced", lstm="1e-25"))


def test_predict_then_run_explains_a_miss():
    with pytest.raises(CheckFailed, match="you predicted 'reproduced'.*half open"):
        predict_then_run("reproduced", bias_outcome("partly"))
    with pytest.raises(CheckFailed, match="did not open the gate enough"):
        predict_then_run("partly", bias_outcome("reproduced", lstm="1e-25"))


def test_predict_then_run_rejects_the_unchanged_baseline():
    baseline = bias_outcome("reproduced", bias="torch default", lstm="2.5e-44")
    with pytest.raises(CheckFailed, match="not '\\+1'"):
        predict_then_run("reproduced", baseline)


def test_the_real_run_with_bias_plus_one_gives_partly():
    from book.claims.ch05 import c16_sweep_run

    outcome = c16_sweep_run(seeds=[0], forget_bias=1.0)
    assert outcome.numbers["forget-gate bias"] == "+1"
    predict_then_run("partly", outcome)
