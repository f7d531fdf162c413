"""Chapter 10's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it."""

from __future__ import annotations

import torch

from book.checks import exercises_for_chapter
from tests.book.check_outcomes import fails, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("10")}


def test_all_five_exercises_are_registered():
    assert sorted(EXERCISES) == ["10.1", "10.2", "10.3", "10.4", "10.5"]


# --- 10.1 -------------------------------------------------------------------------------------


def patchify(images, patch, *, grid_by_columns=False, pixels_by_columns=False):
    b, h, w = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch)
    x = x.permute(0, 3, 1, 4, 2) if grid_by_columns else x.permute(0, 1, 3, 2, 4)
    if pixels_by_columns:
        x = x.transpose(-1, -2)
    return x.reshape(b, -1, patch * patch)


def test_patchify():
    run_check("10.1", patchify)
    # the same answer another way: unfold rows, then columns
    run_check("10.1", lambda im, p: im.unfold(1, p, p).unfold(2, p, p).flatten(3).flatten(1, 2))
    fails("10.1", lambda im, p: im.reshape(im.shape[0], -1, p * p), "plain reshape")
    fails("10.1", lambda im, p: patchify(im, p, grid_by_columns=True), "patches are read column")
    fails("10.1", lambda im, p: patchify(im, p, pixels_by_columns=True), "inside a patch")
    fails("10.1", lambda im, p: patchify(im, p)[:, :-1], "shape")
    fails("10.1", lambda im, p: patchify(im, p) * 2, "off by up to")
    fails("10.1", lambda im, p: patchify(im, p).tolist(), "should return a torch.Tensor")


# --- 10.2 -------------------------------------------------------------------------------------


def flops(n, d, f, *, proj=4, ff=2, quad=2, per_mac=2):
    quadratic = quad * per_mac * n * n * d
    total = proj * per_mac * n * d * d + ff * per_mac * n * d * f + quadratic
    return total, quadratic


def test_layer_flops():
    run_check("10.2", flops)
    fails("10.2", lambda n, d, f: flops(n, d, f, quad=1), r"\[1\].*half the answer")
    fails("10.2", lambda n, d, f: flops(n, d, f, quad=1, per_mac=1), r"\[1\].*a quarter")
    fails("10.2", lambda n, d, f: flops(n, d, f, per_mac=1), r"\[1\].*half the answer")
    fails("10.2", lambda n, d, f: (flops(n, d, f)[0] / 2, flops(n, d, f)[1]), "not one")
    fails("10.2", lambda n, d, f: flops(n, d, f, proj=3), "output projection W_O")
    fails("10.2", lambda n, d, f: flops(n, d, f, ff=0), "add the feed-forward")
    fails("10.2", lambda n, d, f: flops(n, d, f, ff=1), "has two products")
    fails("10.2", lambda n, d, f: (flops(n, d, f)[0] - flops(n, d, f)[1], flops(n, d, f)[1]),
          "includes the two n × n")  # fmt: skip
    fails("10.2", lambda n, d, f: (flops(n, d, f)[0] + 1, flops(n, d, f)[1]), r"8·n·d²")
    fails("10.2", lambda n, d, f: flops(n, d, f)[0], "should return a pair")


# --- 10.3 -------------------------------------------------------------------------------------


def pool(x, keep):
    w = keep.to(x.dtype).unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1)


def test_masked_mean():
    run_check("10.3", pool)
    run_check("10.3", lambda x, k: torch.stack([x[i][k[i]].mean(0) for i in range(len(x))]))
    fails("10.3", lambda x, k: x.mean(1), "averages the padding")
    fails("10.3", lambda x, k: (x * k.unsqueeze(-1)).sum(1) / x.shape[1], "not by the padded")
    fails("10.3", lambda x, k: (x * k.unsqueeze(-1)).sum(1), "is a sum")
    fails("10.3", lambda x, k: pool(x, ~k), "you averaged the padding")
    fails("10.3", lambda x, k: pool(x, k)[:, :2], "shape")
    fails("10.3", lambda x, k: pool(x, k) + 0.5, "off by up to")


def test_masked_mean_that_only_works_on_the_check_batch_is_caught():
    """Correct on ordinary values, but lets huge padded values leak (a clamp)."""

    def leaky(x, keep):
        out = pool(x, keep)
        return out + (x * (~keep).unsqueeze(-1)).clamp(min=10).sum(1) * 0 + (x.max() > 100) * 1.0

    fails("10.3", leaky, "must not enter the mean")


# --- 10.4 -------------------------------------------------------------------------------------


def neighbours(rows, cols, radius, *, swap=False, manhattan=False, strict=False):
    i = torch.arange(rows * cols)
    r, c = (i % rows, i // rows) if swap else (i // cols, i % cols)
    dr, dc = (r[:, None] - r[None, :]).abs(), (c[:, None] - c[None, :]).abs()
    if manhattan:
        return dr + dc <= radius
    if strict:
        return (dr < radius) & (dc < radius)
    return (dr <= radius) & (dc <= radius)


def test_grid_neighbours():
    run_check("10.4", neighbours)
    i = lambda rows, cols: torch.arange(rows * cols)  # noqa: E731
    fails("10.4", lambda ro, co, ra: (i(ro, co)[:, None] - i(ro, co)[None, :]).abs() <= ra,
          "window in reading order")  # fmt: skip
    fails("10.4", lambda ro, co, ra: (i(ro, co)[:, None] - i(ro, co)[None, :]).abs()
          <= ra * co + ra, "wraps around")  # fmt: skip
    fails("10.4", lambda ro, co, ra: neighbours(ro, co, ra, swap=True), "swapped")
    fails("10.4", lambda ro, co, ra: neighbours(ro, co, ra, manhattan=True), "diamond")
    fails("10.4", lambda ro, co, ra: neighbours(ro, co, ra, strict=True), "inclusive")
    fails("10.4", lambda ro, co, ra: neighbours(ro, co, ra).int(), "bool mask")
    fails("10.4", lambda ro, co, ra: neighbours(ro, co, ra)[1:], "shape")
    fails("10.4", lambda ro, co, ra: ~neighbours(ro, co, ra), "differs at")


# --- 10.5 predict, then run -------------------------------------------------------------------


def _relative_outcome(rope_base: float, rope_gap: float):
    from book.claims.ch10 import s10_relative_verdict
    from book.sceptic import Outcome

    accuracy = {"sinusoidal": [0.80], "learned": [0.90], "RoPE": [0.90 - rope_gap], "ALiBi": [0.5]}
    numbers = {"RoPE gap": rope_gap, "ALiBi gap": 0.4, "rope_base": rope_base}
    return Outcome(s10_relative_verdict(accuracy), numbers)


def _predict(answer):
    return lambda: answer


def test_predict_rope_base_right_prediction_passes():
    run = _relative_outcome(16.0, 0.01)  # RoPE within 0.05: partly
    assert run.verdict == "partly"
    EXERCISES["10.5"].check(_predict("partly"), outcome=run)
    run = _relative_outcome(16.0, 0.2)
    assert run.verdict == "reproduced"
    EXERCISES["10.5"].check(_predict("reproduced"), outcome=run)


def test_predict_rope_base_wrong_prediction_fails_with_the_reason():
    import pytest

    from book.checks import CheckFailed

    with pytest.raises(CheckFailed, match=r"gives 'partly'.*RoPE 0.01.*turns across"):
        EXERCISES["10.5"].check(_predict("reproduced"), outcome=_relative_outcome(16.0, 0.01))
    with pytest.raises(CheckFailed, match="one of"):
        EXERCISES["10.5"].check(_predict("maybe"), outcome=_relative_outcome(16.0, 0.01))


def test_predict_rope_base_rejects_the_unchanged_baseline():
    import pytest

    from book.checks import CheckFailed

    with pytest.raises(CheckFailed, match="RoPE base 10000.0, not 16"):
        EXERCISES["10.5"].check(_predict("reproduced"), outcome=_relative_outcome(10000.0, 0.2))
    with pytest.raises(CheckFailed, match="Outcome"):
        EXERCISES["10.5"].check(_predict("reproduced"), outcome=None)
