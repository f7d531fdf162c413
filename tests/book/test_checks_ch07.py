"""Chapter 7's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention.multimodal import clip_contrastive_loss
from book.checks import exercises_for_chapter
from book.checks.ch07 import _patches, _windowed
from tests.book.check_outcomes import fails, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("07")}


def test_all_six_exercises_are_registered():
    assert sorted(EXERCISES) == ["07.1", "07.2", "07.3", "07.4", "07.5", "07.6"]


# --- 07.1 -------------------------------------------------------------------------------------


def patchify_right(images, p):
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def test_patchify():
    run_check("07.1", patchify_right)
    run_check("07.1", lambda x, p: _patches(x, p))
    fails("07.1", lambda x, p: x.reshape(x.shape[0], -1, x.shape[1] * p * p), "plain reshape")
    fails("07.1", lambda x, p: _patches(x, p, grid="column"), "column by column")
    fails("07.1", lambda x, p: _patches(x, p, inner="hwc"), "channel axis first")
    fails("07.1", lambda x, p: _patches(x, p, inner="cwh"), "inside each patch column")
    fails("07.1", lambda x, p: patchify_right(x, p)[:, :-1], "shape")
    fails("07.1", lambda x, p: patchify_right(x, p) + 0.5, "F.unfold")
    fails("07.1", lambda x, p: patchify_right(x, p).long(), "floating-point")


# --- 07.2 -------------------------------------------------------------------------------------


def shifted(block, x, **kw):
    s = block.shift
    args = {"first": s, "back": -s} | kw
    return _windowed(block, x, **args)


def test_shifted_window_attention():
    run_check("07.2", shifted)
    fails("07.2", lambda b, x: shifted(b, x, back=None), "never shifts the windows back")
    fails("07.2", lambda b, x: shifted(b, x, back=b.shift), "same direction")
    fails("07.2", lambda b, x: shifted(b, x, first=-b.shift, back=b.shift), "down and right")
    fails("07.2", lambda b, x: shifted(b, x, mask=False), "region mask")
    fails("07.2", lambda b, x: shifted(b, x, first=0, back=0, mask=False), "regular windows")
    fails("07.2", lambda b, x: shifted(b, x)[:, :-1], "shape")
    fails("07.2", lambda b, x: shifted(b, x) * 1.1, "sub-layer")


# --- 07.3 -------------------------------------------------------------------------------------


def _both(image, text, scale, *, normalise=True, divide=False):
    if normalise:
        image, text = F.normalize(image, dim=-1), F.normalize(text, dim=-1)
    logits = image @ text.T / scale if divide else scale * image @ text.T
    target = torch.arange(len(logits))
    return F.cross_entropy(logits, target), F.cross_entropy(logits.T, target)


def test_clip_loss():
    run_check("07.3", clip_contrastive_loss)
    fails("07.3", lambda i, t, s: _both(i, t, s)[0], "only the image → text")
    fails("07.3", lambda i, t, s: _both(i, t, s)[1], "only the text → image")
    fails("07.3", lambda i, t, s: sum(_both(i, t, s)), "adds the two directions")
    fails("07.3", lambda i, t, s: sum(_both(i, t, s, normalise=False)) / 2, "normalisation")
    fails("07.3", lambda i, t, s: sum(_both(i, t, s, divide=True)) / 2, "divides by logit_scale")
    fails("07.3", lambda i, t, s: sum(_both(i, t, s)) / 2 + 0.1, "off by up to")
    fails("07.3", lambda i, t, s: torch.zeros(3), "scalar tensor")


# --- 07.4 -------------------------------------------------------------------------------------


def test_vit_attention_scores():
    run_check("07.4", lambda s, p, h: h * ((s // p) ** 2 + 1) ** 2)
    fails("07.4", lambda s, p, h: h * (s // p) ** 4, r"\[CLS\] token")
    fails("07.4", lambda s, p, h: h * ((s // p) ** 2 + 1), "square it")
    fails("07.4", lambda s, p, h: h * (s // p + 1) ** 2, "tile both axes")
    fails("07.4", lambda s, p, h: h * (s * s + 1) ** 2, "pixel tokens")
    fails("07.4", lambda s, p, h: ((s // p) ** 2 + 1) ** 2, "multiply by num_heads")
    fails("07.4", lambda s, p, h: h * ((s // p) ** 2 + 2) ** 2, r"H · \(\(S/p\)² \+ 1\)²")
    fails("07.4", lambda s, p, h: "many", "should be a number")


# --- 07.5 -------------------------------------------------------------------------------------


def naive_right(history, horizon, period):
    return history[:, -period:][:, torch.arange(horizon) % period]


def test_seasonal_naive():
    run_check("07.5", naive_right)
    fails("07.5", lambda h, n, p: h[:, :p][:, torch.arange(n) % p], "first")
    fails("07.5", lambda h, n, p: h[:, -1:].expand(-1, n), "last value")
    fails("07.5", lambda h, n, p: h[:, -p - 1 : -1][:, torch.arange(n) % p], "off by one")
    fails("07.5", lambda h, n, p: h[:, -p:][:, : min(n, p)], "shape")
    fails("07.5", lambda h, n, p: naive_right(h, n, p) + 1, "t mod period")


# --- 07.6 -------------------------------------------------------------------------------------


def _run_07_6(verdict: str, scale: float = 2.0):
    from book.sceptic import Outcome

    numbers = {"seeds": [0], "steps": 250, "learned: image → text": 0.37,
               "fixed: image → text": 0.26, "fixed 1/τ": scale}  # fmt: skip
    return Outcome(verdict, numbers)


def _check_07_6(prediction: str, outcome) -> None:
    EXERCISES["07.6"].check(lambda: prediction, outcome=outcome)


def test_predict_fixed_scale_passes_the_runs_verdict():
    _check_07_6("reproduced", _run_07_6("reproduced"))
    _check_07_6("not reproduced", _run_07_6("not reproduced"))


def test_predict_fixed_scale_explains_a_miss():
    import pytest

    from book.checks import CheckFailed

    with pytest.raises(CheckFailed, match="predicted 'not reproduced'.*cannot express"):
        _check_07_6("not reproduced", _run_07_6("reproduced"))
    with pytest.raises(CheckFailed, match="retrieves as well as the learned"):
        _check_07_6("reproduced", _run_07_6("not reproduced"))


def test_predict_fixed_scale_rejects_the_unchanged_baseline():
    import pytest

    from book.checks import CheckFailed

    with pytest.raises(CheckFailed, match="fixed at 1.0, not 2"):
        _check_07_6("reproduced", _run_07_6("reproduced", scale=1.0))
    with pytest.raises(CheckFailed, match="fixed at None"):
        _check_07_6("reproduced", object())
