"""Chapter 3's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it."""

from __future__ import annotations

import math
import re

import pytest
import torch

from book.checks import CheckFailed, check, exercises_for_chapter, results
from tests.book.check_outcomes import fails, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("03")}


def test_all_six_exercises_are_registered():
    assert sorted(EXERCISES) == ["03.1", "03.2", "03.3", "03.4", "03.5", "03.6"]


# --- 03.1 / 03.2 ------------------------------------------------------------------------------


def split_right(x, num_heads):
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads).transpose(1, 2)


def merge_right(x):
    b, h, l, dh = x.shape
    return x.transpose(1, 2).reshape(b, l, h * dh)


def test_split_heads():
    run_check("03.1", split_right)
    fails("03.1", lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), "straight to")
    fails("03.1", lambda x, h: x.view(x.shape[0], x.shape[1], h, -1), r"transpose\(1, 2\)")
    fails(
        "03.1",
        lambda x, h: x.view(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
        "every H-th feature",
    )
    fails("03.1", lambda x, h: split_right(x, h) * 2, "off by up to")


def test_merge_heads():
    run_check("03.2", merge_right)
    fails("03.2", lambda x: x.reshape(x.shape[0], x.shape[2], -1), "mixes tokens")
    fails("03.2", lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), "not contiguous")
    fails("03.2", lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1) + 1, "off by")


# --- 03.3 -------------------------------------------------------------------------------------


def params_right(d_model, num_heads, num_kv_heads, bias):
    d_head = d_model // num_heads
    kv_width = num_kv_heads * d_head
    weights = 2 * d_model * d_model + 2 * d_model * kv_width
    biases = 2 * d_model + 2 * kv_width if bias else 0
    return weights + biases


def test_attention_params():
    run_check("03.3", params_right)
    assert params_right(768, 12, 12, True) == 2_362_368  # BERT-base, independently known
    fails("03.3", lambda d, h, kv, bias: params_right(d, h, kv, False), "forget the biases")
    fails("03.3", lambda d, h, kv, bias: params_right(d, h, h, bias), "num_kv_heads")
    fails(
        "03.3",
        lambda d, h, kv, bias: params_right(d, h, kv, bias) - d * d - (d if bias else 0),
        "forget W_O",
    )
    fails("03.3", lambda d, h, kv, bias: h * params_right(d, h, kv, bias), "does not multiply")
    fails("03.3", lambda d, h, kv, bias: 7, r"is 7, expected 2362368$")


# --- 03.4 -------------------------------------------------------------------------------------


def expand_right(kv, num_heads):
    if num_heads % kv.shape[1]:
        raise ValueError(f"num_heads must be a multiple of {kv.shape[1]}, got {num_heads}")
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)


def test_expand_kv_right_passes_and_matches_the_package():
    run_check("03.4", expand_right)
    # The package's own copy (MultiHeadAttention.forward with an attn_fn) is repeat_interleave.
    kv = torch.arange(2.0).view(1, 2, 1, 1)  # heads 0 and 1
    assert expand_right(kv, 6).flatten().tolist() == [0, 0, 0, 1, 1, 1]


def test_expand_kv_mistakes_are_named():
    fails("03.4", lambda kv, h: kv.repeat(1, h // kv.shape[1], 1, 1), "tiled")
    fails("03.4", lambda kv, h: kv, "shape")
    fails("03.4", lambda kv, h: expand_right(kv, h) * 2, "values differ")

    def no_error(kv, h):
        return kv.repeat_interleave(max(h // kv.shape[1], 1), dim=1)

    fails("03.4", no_error, "should raise a ValueError naming num_heads")

    def vague_error(kv, h):
        if h % kv.shape[1]:
            raise ValueError("bad")
        return expand_right(kv, h)

    fails("03.4", vague_error, "should name num_heads")


# --- 03.5 -------------------------------------------------------------------------------------


def mha_right(x, w_q, w_k, w_v, w_o, num_heads):
    b, l, d = x.shape
    dh = d // num_heads
    q, k, v = (
        (x @ w).view(b, l, num_heads, dh).transpose(1, 2) for w in (w_q, w_k, w_v)
    )  # (B, H, L, Dh)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)  # (B, H, L, L)
    out = (weights @ v).transpose(1, 2).reshape(b, l, d)  # (B, L, D)
    return out @ w_o


def mha_mistake(
    *,
    scale_by_d_model=False,
    scale_by_d_head=False,
    transposed=False,
    no_scale=False,
    no_w_o=False,
    wrong_split=False,
    softmax_dim=-1,
    hard_head_dim=None,
):
    def forward(x, w_q, w_k, w_v, w_o, num_heads):
        b, l, d = x.shape
        dh = hard_head_dim or d // num_heads
        if transposed:
            w_q, w_k, w_v, w_o = (w.T for w in (w_q, w_k, w_v, w_o))
        if wrong_split:
            q, k, v = ((x @ w).reshape(b, num_heads, l, dh) for w in (w_q, w_k, w_v))
        else:
            q, k, v = ((x @ w).view(b, l, -1, dh).transpose(1, 2) for w in (w_q, w_k, w_v))
        scale = 1.0 if no_scale else 1 / math.sqrt(d if scale_by_d_model else dh)
        if scale_by_d_head:
            scale = 1 / dh
        weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=softmax_dim)
        out = (weights @ v).transpose(1, 2).reshape(b, l, d)
        return out if no_w_o else out @ w_o

    return forward


def test_mha_forward():
    run_check("03.5", mha_right)
    fails("03.5", mha_mistake(scale_by_d_model=True), "sqrt\\(d_model\\)")
    fails("03.5", mha_mistake(no_scale=True), "not scaled")
    fails("03.5", mha_mistake(no_w_o=True), "output projection is missing")
    fails("03.5", mha_mistake(wrong_split=True), "straight to")
    fails("03.5", mha_mistake(softmax_dim=-2), r"over the queries \(dim=-2\)")
    fails("03.5", mha_mistake(hard_head_dim=4), "head width")
    fails("03.5", mha_mistake(scale_by_d_head=True), "divided by d_head")
    fails("03.5", mha_mistake(transposed=True), r"x @ w\.T")


def test_merge_heads_view_error_has_no_doubled_period():
    def view_after_transpose(x):
        return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)

    with pytest.raises(CheckFailed) as info:
        run_check("03.2", view_after_transpose)
    assert not re.search(r"(?<!\.)\.\.(?!\.)", str(info.value))  # "..", not an ellipsis


# --- the check() wrapper ----------------------------------------------------------------------


def test_a_stub_reads_not_implemented_and_a_right_answer_a_tick(capsys):
    def stub(x, num_heads):
        raise NotImplementedError("Exercise 03.1")

    check("03.1", stub)
    check("03.1", split_right)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("✗ Exercise 03.1") and "not implemented yet" in out[0]
    assert out[1] == "✓ Exercise 03.1 — Split the heads"
    assert [r.passed for r in results()[-2:]] == [False, True]


# --- 03.6 predict, then run: C8 at L 4096 ------------------------------------------------------


def _graded(prediction, run):
    check("03.6", lambda: prediction, outcome=run)
    return results()[-1]


def test_c8_prediction_right_passes_on_the_real_run():
    from book.claims.ch03 import c8_sweep_run

    run = c8_sweep_run(seq_len=4096, d_model=768, num_heads=12)
    assert run.verdict == "partly"
    assert _graded("partly", run).passed


def test_c8_prediction_wrong_fails_with_the_reason():
    from book.claims.ch03 import c8_sweep_run

    result = _graded("reproduced", c8_sweep_run(seq_len=4096, d_model=768, num_heads=12))
    assert not result.passed
    assert "the run gives 'partly'" in result.message and "grows as L²" in result.message


def test_c8_prediction_on_the_unchanged_baseline_fails():
    from book.claims.ch03 import c8_sweep_run

    result = _graded("reproduced", c8_sweep_run(seq_len=512, d_model=768, num_heads=12))
    assert not result.passed
    assert "not 'L 4096, d_model 768, h 12'" in result.message
