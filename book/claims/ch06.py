"""Claims of chapter 6 (C20–C24 and the KV cache): thresholds, verdicts, asserts, runners.

The models, tasks and training steps are defined on the chapter's page and imported from the
module exported from it, :mod:`book.pages.ch06`. Here:

- the thresholds of each claim, as named constants (each with the reason it has its value);
- the verdict functions ``cNN_verdict(...) -> str`` (one of :data:`book.claims.VERDICTS`),
  computed from the measured numbers, and the ``assert_...`` functions, which raise
  ``AssertionError`` when the behaviour the chapter states is false;
- the measurement harness the chapter's cells call: the report of a masked softmax in words
  (C21), the table of mask tests (C21), the float16 overflow and NaN searches (C23), the
  exact peak memory of a stack of attention calls (C24), and the FLOPs, bytes and paired time
  ratio of decoding with and without a KV cache.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache

import torch

from attention.checks import check_choice, check_positive_int
from attention.decoder import CharDecoder, generate
from attention.functional import safe_softmax, scaled_dot_product_attention
from attention.masks import causal_mask, combine_masks
from book.claims import VERDICTS
from book.data import pydoc_text
from book.experiments.training import torch_threads
from book.pages.ch06 import (
    CAUSAL_VARIANTS,
    D_MODEL,
    FILLS,
    FP16_MAX,
    MASK_TESTS,
    MEMORY_METHODS,
    NUM_HEADS,
    NUM_LAYERS,
    SEQ_LEN,
    accuracy_vs_padding,
    build_decoder,
    eval_windows,
    masked_softmax,
    naive_softmax,
    padding_drift,
    stack_attention,
    text_data,
    train_decoder,
    train_padding_classifier,
    unigram_loss,
)
from book.progress import progress as progress_bar
from book.sceptic import Outcome, Perturbation, Sweep
from measure.flops import matmul_flop_counter
from measure.memory import kv_cache_bytes, peak_extra_bytes

Tensor = torch.Tensor
REPRODUCED, PARTLY, NOT_REPRODUCED = VERDICTS


def parts_verdict(parts: Mapping[str, bool]) -> str:
    """The verdict of a claim made of several parts: ``"reproduced"`` when every part holds,
    ``"not reproduced"`` when none does, ``"partly"`` otherwise."""
    if not parts:
        raise ValueError("parts must name at least one part of the claim, got none")
    held = sum(bool(v) for v in parts.values())
    return REPRODUCED if held == len(parts) else NOT_REPRODUCED if held == 0 else PARTLY


# ------------------------------------------------------------------------------------------
# C20: the missing causal mask
# ------------------------------------------------------------------------------------------

# "Falls fast": without the mask every seed's final training loss is below half the masked
# loss of the same seed (a factor that a difference in speed, not noise, produces).
C20_RATIO = 0.5


def c20_halves(
    train_masked: Sequence[float],
    train_unmasked: Sequence[float],
    honest_masked: Sequence[float],
    honest_unmasked: Sequence[float],
    *,
    baseline: float,
    ratio: float = C20_RATIO,
) -> dict[str, bool]:
    """C20's two halves, seed by seed (paired by seed). ``"training loss falls fast"``: without
    the mask every seed ends below ``ratio`` × the masked loss of the same seed.
    ``"generation collapses"``: without the mask every seed's honest left-to-right loss is worse
    than ``baseline`` (a model that ignores the context), while with the mask every seed beats
    it (else the comparison says nothing about the mask)."""
    pairs = list(zip(train_masked, train_unmasked, strict=True))
    return {
        "training loss falls fast": all(u < ratio * m for m, u in pairs),
        "generation collapses": all(h < baseline for h in honest_masked)
        and all(h > baseline for h in honest_unmasked),
    }


def c20_verdict(*args, **kwargs) -> str:
    """C20's verdict from :func:`c20_halves` (same arguments): reproduced when both halves hold
    on every seed, partly when one does, not reproduced when neither does."""
    return parts_verdict(c20_halves(*args, **kwargs))


def assert_c20_no_mask_cheats(
    train_masked: Sequence[float],
    train_unmasked: Sequence[float],
    honest_masked: Sequence[float],
    honest_unmasked: Sequence[float],
    *,
    baseline: float,
    ratio: float = C20_RATIO,
) -> None:
    """C20, both halves, seed by seed (see :func:`c20_halves`), with the seed that fails."""
    for m, u in zip(train_masked, train_unmasked, strict=True):
        assert u < ratio * m, (
            f"without the mask the training loss {u:.3f} is not below {ratio} x the masked "
            f"{m:.3f}: it did not fall faster"
        )
    for h in honest_masked:
        assert h < baseline, f"the masked model ({h:.3f}) does not beat the baseline {baseline:.3f}"
    for h in honest_unmasked:
        assert h > baseline, (
            f"without the mask the honest loss {h:.3f} beats the context-free baseline "
            f"{baseline:.3f}: generation did not collapse"
        )


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """The words (letter runs of two or more) of the training part of the text (first 90 %)."""
    return frozenset(re.findall(r"[A-Za-z]{2,}", pydoc_text()[: int(len(pydoc_text()) * 0.9)]))


def real_word_rate(texts: Sequence[str]) -> float:
    """Share of the letter runs (two letters or more) in ``texts`` that are words of the
    training text; 0 when there is none."""
    words = [w for t in texts for w in re.findall(r"[A-Za-z]{2,}", t)]
    return sum(w in known_words() for w in words) / len(words) if words else 0.0


def assert_monitor_matches(recorded: float, direct: float, *, rel: float = 1e-5) -> None:
    """The monitor's value for a forward pass equals the max score computed directly."""
    assert abs(recorded - direct) <= rel * max(1.0, abs(direct)), (
        f"the monitor recorded {recorded:.6g}, the direct computation gives {direct:.6g}"
    )


# ------------------------------------------------------------------------------------------
# C21: masking with a large negative
# ------------------------------------------------------------------------------------------


def describe_row(weights: Tensor, allowed: Tensor) -> str:
    """What a softmax gave one row: ``"NaN"``, ``"zeros"``, ``"uniform over masked keys"``,
    ``"masked keys get 0"`` or ``"masked keys get <max weight>"``."""
    if torch.isnan(weights).any():
        return "NaN"
    if not allowed.any():
        if torch.all(weights == 0):
            return "zeros"
        if torch.allclose(weights, torch.full_like(weights, 1.0 / weights.numel())):
            return "uniform over masked keys"
        return f"weights sum to {float(weights.sum()):.3g}"
    leak = float(weights[~allowed].abs().max()) if (~allowed).any() else 0.0
    return "masked keys get 0" if leak == 0.0 else f"masked keys get {leak:.2g}"


def fill_report(
    dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 3.0
) -> dict[str, dict[str, str]]:
    """``report[fill][case]`` for the cases ``"partly masked row"`` and ``"fully masked row"``
    (scores ~ N(0, ``scale``²), one row of each), in ``dtype``, by the page's
    ``masked_softmax``; an error is reported by its type and message."""
    g = torch.Generator().manual_seed(seed)
    scores = (scale * torch.randn(2, 6, generator=g)).to(dtype)  # (2 rows, 6 keys)
    allowed = torch.tensor([[True, True, True, False, False, False], [False] * 6])
    report = {}
    for fill in FILLS:
        try:
            w = masked_softmax(scores, allowed, fill)  # (2, 6)
            report[fill] = {"partly masked row": describe_row(w[0], allowed[0]),
                            "fully masked row": describe_row(w[1], allowed[1])}  # fmt: skip
        except RuntimeError as err:
            text = f"raises RuntimeError: {err}"
            report[fill] = {"partly masked row": text, "fully masked row": text}
    return report


CORRECT_MASK = "correct (j <= i)"
ARTICLE_TEST = "position 0 sees only itself (article)"


def mask_test_table(n: int = 6) -> dict[str, dict[str, bool]]:
    """``table[variant][test]``: True when the test passes that mask implementation."""
    return {name: {t: fn(build(n)) for t, fn in MASK_TESTS.items()}
            for name, build in CAUSAL_VARIANTS.items()}  # fmt: skip


def c21_parts(
    report32: Mapping[str, Mapping[str, str]],
    report16: Mapping[str, Mapping[str, str]],
    table: Mapping[str, Mapping[str, bool]],
) -> dict[str, bool]:
    """C21's three parts. ``"-1e9 gives zero weight"``: in float32, on a row that keeps a key.
    ``"-1e9 gives zero weight everywhere"``: also on a fully masked row, and in float16.
    ``"the article's test catches every wrong mask"``: position 0 attending only to itself
    fails every wrong implementation in ``table`` (and passes the correct one)."""
    zero = "masked keys get 0"
    everywhere = report32["-1e9"]["fully masked row"] == "zeros" and all(
        report16["-1e9"][case] in (zero, "zeros") for case in report16["-1e9"]
    )
    article = table[CORRECT_MASK][ARTICLE_TEST] and not any(
        row[ARTICLE_TEST] for name, row in table.items() if name != CORRECT_MASK
    )
    return {
        "-1e9 gives zero weight": report32["-1e9"]["partly masked row"] == zero,
        "-1e9 gives zero weight everywhere": everywhere,
        "the article's test catches every wrong mask": article,
    }


def c21_verdict(report32, report16, table) -> str:
    """C21's verdict from :func:`c21_parts`: reproduced when all three parts hold, not
    reproduced when none does, partly otherwise."""
    return parts_verdict(c21_parts(report32, report16, table))


def assert_c21_large_negative(report32: Mapping[str, Mapping[str, str]]) -> None:
    """C21 as stated: in float32, masking with ``-1e9`` gives the masked keys exactly zero
    weight on a row that keeps at least one key."""
    got = report32["-1e9"]["partly masked row"]
    assert got == "masked keys get 0", f"-1e9 in float32: {got}"


# What the chapter states about the rows the claim leaves out, fill by fill (float32 and
# float16): a fully masked row, and -1e9 in half precision.
C21_FULLY_MASKED = {
    "-1e9": "uniform over masked keys",
    "-inf": "NaN",
    "finfo.min": "uniform over masked keys",
    "safe softmax": "zeros",
}


def assert_c21_edge_cases(
    report32: Mapping[str, Mapping[str, str]],
    report16: Mapping[str, Mapping[str, str]],
    cast_fill: float,
    cast_fully_masked: Tensor,
    doubled_min: float,
) -> None:
    """The behaviours the chapter reports beyond C21 as stated, each asserted:

    - a fully masked row, float32 and float16 (where the fill fits): ``-1e9`` and
      ``finfo.min`` give a uniform row, ``-inf`` gives NaN, the safe softmax zeros
      (:data:`C21_FULLY_MASKED`);
    - a partly masked row in float16: every fill that fits gives the masked keys exactly 0;
    - float16: ``masked_fill`` with ``-1e9`` raises; an additive float32 mask cast to float16
      turns ``-1e9`` into ``-inf`` (``cast_fill``) and its fully masked row into NaN
      (``cast_fully_masked``, the softmax of that row);
    - two ``finfo.min`` masks summed overflow to ``-inf`` (``doubled_min``).
    """
    for name, report in (("float32", report32), ("float16", report16)):
        for fill, expected in C21_FULLY_MASKED.items():
            got = report[fill]["fully masked row"]
            if name == "float16" and fill == "-1e9":
                assert got.startswith("raises RuntimeError"), f"float16 -1e9: {got}"
                continue
            assert got == expected, f"{name} {fill}, fully masked row: {got}, expected {expected}"
    for fill in ("-inf", "finfo.min", "safe softmax"):
        got = report16[fill]["partly masked row"]
        assert got == "masked keys get 0", f"float16 {fill}, partly masked row: {got}"
    assert cast_fill == float("-inf"), f"-1e9 cast to float16 gave {cast_fill}, expected -inf"
    assert torch.isnan(cast_fully_masked).all(), (
        f"softmax of a fully masked float16 row with the cast mask: {cast_fully_masked.tolist()}"
    )
    assert doubled_min == float("-inf"), f"finfo.min + finfo.min = {doubled_min}, expected -inf"


def assert_tests_verdicts(
    table: Mapping[str, Mapping[str, bool]], *, article_misses: Sequence[str]
) -> None:
    """The correct mask passes every test; the article's test passes exactly the wrong masks in
    ``article_misses``; every wrong mask fails at least one of the tests."""
    assert all(table[CORRECT_MASK].values()), (
        f"a test rejects the correct mask: {table[CORRECT_MASK]}"
    )
    passed = sorted(n for n, row in table.items() if n != CORRECT_MASK and row[ARTICLE_TEST])
    assert passed == sorted(article_misses), (
        f"the article's test passes these wrong masks: {passed}, expected {sorted(article_misses)}"
    )
    missed = [n for n, row in table.items() if n != CORRECT_MASK and all(row.values())]
    assert not missed, f"every test passes these wrong masks: {missed}"


# ------------------------------------------------------------------------------------------
# C22: padding
# ------------------------------------------------------------------------------------------

# Experiment 1: with the mask, the real tokens' outputs move by float32 rounding at most.
C22_ATOL = 1e-6
# Experiment 2: "dilutes" must cost a classifier that forgot its mask a visible share of its
# accuracy at the longest padding: 0.2, a fifth of the way from perfect to nothing.
C22_DROP = 0.2


def c22_parts(
    drift_masked: Sequence[float],
    drift_unmasked: Sequence[float],
    acc_masked: Sequence[Sequence[float]],
    acc_unmasked: Sequence[Sequence[float]],
    combined_diff: float,
    *,
    atol: float = C22_ATOL,
    drop: float = C22_DROP,
) -> dict[str, bool]:
    """C22's parts. ``"padding moves unmasked outputs"``: with the key-padding mask no drift
    exceeds ``atol``, without it every drift with padding does. ``"padding costs accuracy"``:
    per seed, the masked accuracy does not change with padding and the unmasked one falls by at
    least ``drop`` from no padding to the longest. ``"padding and causal masks combine"``: the
    combined mask gives torch SDPA's output (``combined_diff <= atol``)."""
    return {
        "padding moves unmasked outputs": max(drift_masked) <= atol
        and all(d > atol for d in drift_unmasked[1:]),
        "padding costs accuracy": all(max(r) - min(r) == 0.0 for r in acc_masked)
        and all(r[0] - r[-1] >= drop for r in acc_unmasked),
        "padding and causal masks combine": combined_diff <= atol,
    }


def c22_verdict(*args, **kwargs) -> str:
    """C22's verdict from :func:`c22_parts` (same arguments)."""
    return parts_verdict(c22_parts(*args, **kwargs))


def assert_c22_padding_invariance(
    drift_masked: Sequence[float], drift_unmasked: Sequence[float], *, atol: float = C22_ATOL
) -> None:
    """With the key-padding mask the real tokens' outputs do not move with the amount of
    padding (every drift ``<= atol``); without it they do, once there is padding."""
    assert max(drift_masked) <= atol, f"masked outputs moved with padding: {list(drift_masked)}"
    assert all(d > atol for d in drift_unmasked[1:]), (
        f"unmasked outputs did not move with padding: {list(drift_unmasked)}"
    )


def assert_c22_accuracy(
    masked: Sequence[Sequence[float]],
    unmasked: Sequence[Sequence[float]],
    *,
    drop: float = C22_DROP,
) -> None:
    """Per seed, accuracy against the padding lengths: with the mask it does not change at
    all; without it, the longest padding costs at least ``drop`` against no padding."""
    for row in masked:
        assert max(row) - min(row) == 0.0, f"masked accuracy moved with padding: {list(row)}"
    for row in unmasked:
        assert row[0] - row[-1] >= drop, (
            f"unmasked accuracy fell by only {row[0] - row[-1]:.3f} (< {drop}): {list(row)}"
        )


# ------------------------------------------------------------------------------------------
# C23: float16 overflow
# ------------------------------------------------------------------------------------------

# float16 has 11 significant bits: the measured overflow scale is the predicted one rounded
# up to a representable value, within 1 %.
C23_REL = 0.01


def overflow_scale_predicted(d_k: int, *, scale_first: bool = False) -> float:
    """The element size ``s`` at which ``q·k`` of two aligned vectors (every element ``s``)
    reaches float16's max: ``d_k s² = 65504``, or ``√d_k s² = 65504`` when ``q`` is scaled by
    ``1/√d_k`` before the product."""
    d_k = check_positive_int("d_k", d_k)
    return math.sqrt(FP16_MAX / (math.sqrt(d_k) if scale_first else d_k))


def _overflows(s: float, d_k: int, scale_first: bool) -> bool:
    q = torch.full((1, d_k), s, dtype=torch.float16)  # (1, d_k)
    if scale_first:
        q = q / math.sqrt(d_k)
    return bool(torch.isinf(q @ torch.full((d_k, 1), s, dtype=torch.float16)).any())


def overflow_scale_measured(d_k: int, *, scale_first: bool = False) -> float:
    """The smallest float16 element size ``s`` (aligned q = k = s·1) whose float16 product
    ``q @ kᵀ`` is ``inf``: a search over every float16 value from 1 to 65504."""
    candidates = torch.arange(0x3C00, 0x7BFF + 1, dtype=torch.int16).view(torch.float16)  # 1..max
    lo, hi = 0, len(candidates) - 1
    if not _overflows(float(candidates[hi]), d_k, scale_first):
        return math.inf
    while lo < hi:  # first candidate that overflows
        mid = (lo + hi) // 2
        if _overflows(float(candidates[mid]), d_k, scale_first):
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[lo])


def first_nan_score(kind: str, dtype: torch.dtype = torch.float16) -> float:
    """The smallest top score ``m`` (a row ``[m, 0, 0, 0]``, ``m`` swept over float16 values
    from 1 to 65504) at which the softmax ``kind`` gives NaN or inf: ``"naive"`` (the page's
    ``naive_softmax``), ``"torch"`` (``torch.softmax``) or ``"package"`` (float32 inside)."""
    check_choice("kind", kind, ("naive", "torch", "package"))
    values = torch.arange(0x3C00, 0x7BFF + 1, dtype=torch.int16).view(torch.float16)  # 1..max
    rows = torch.zeros(len(values), 4, dtype=torch.float16)  # (N, 4)
    rows[:, 0] = values
    rows = rows.to(dtype)
    if kind == "naive":
        w = naive_softmax(rows)
    elif kind == "torch":
        w = torch.softmax(rows, dim=-1)
    else:
        w = safe_softmax(rows.float(), dim=-1).to(dtype)
    bad = ~torch.isfinite(w).all(dim=-1)  # (N,)
    return float(values[bad.nonzero()[0, 0]]) if bad.any() else math.inf


def precision_errors(
    *, scale: float, seed: int = 0, n: int = 64, d_k: int = 64
) -> dict[str, float]:
    """Largest error of the attention output against float64, for float16 and bfloat16 inputs
    computed naively in their own dtype (product and softmax), and through the package (which
    computes in float32), on inputs ~ N(0, scale²)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        scale * torch.randn(1, 1, n, d_k, generator=g, dtype=torch.float64) for _ in range(3)
    )  # (1, 1, n, d_k) each
    ref = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ v  # (1, 1, n, d_k)
    errors = {}
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        qh, kh, vh = q.to(dt), k.to(dt), v.to(dt)
        naive = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ vh
        errors[f"{name} naive"] = float((naive.double() - ref).abs().max())
        pkg = scaled_dot_product_attention(qh, kh, vh)
        errors[f"{name} package"] = float((pkg.double() - ref).abs().max())
    errors["float32"] = float(
        (scaled_dot_product_attention(q.float(), k.float(), v.float()).double() - ref).abs().max()
    )
    return errors


def c23_parts(
    overflow: Sequence[tuple[float, float]],
    first_nan_naive: float,
    package_finite: Sequence[bool],
    *,
    rel: float = C23_REL,
) -> dict[str, bool]:
    """C23's parts. ``"QKᵀ overflows where predicted"``: every measured float16 overflow scale
    (``overflow`` holds (predicted, measured) pairs) within ``rel`` of the prediction.
    ``"a float16 softmax gives NaN"``: the textbook softmax fails at a finite score near
    ``ln 65504`` (within ``rel``). ``"float32 inside stays finite"``: the package's attention
    is finite at every scale tried."""
    limit = math.log(FP16_MAX)
    return {
        "QKᵀ overflows where predicted": all(abs(m - p) <= rel * p for p, m in overflow),
        "a float16 softmax gives NaN": abs(first_nan_naive - limit) <= rel * limit,
        "float32 inside stays finite": bool(package_finite) and all(package_finite),
    }


def c23_verdict(*args, **kwargs) -> str:
    """C23's verdict from :func:`c23_parts` (same arguments)."""
    return parts_verdict(c23_parts(*args, **kwargs))


def assert_c23_overflow(predicted: float, measured: float, *, rel: float = C23_REL) -> None:
    """The measured float16 overflow scale is within ``rel`` of the predicted one."""
    assert abs(measured - predicted) <= rel * predicted, (
        f"float16 product overflows at s = {measured:.4g}, predicted {predicted:.4g} "
        f"(more than {rel:.0%} apart)"
    )


def assert_package_fp16_finite(scales: Sequence[float], outputs: Sequence[Tensor]) -> None:
    """The package's attention on float16 inputs stays finite at every scale tried."""
    bad = [s for s, o in zip(scales, outputs, strict=True) if not torch.isfinite(o).all()]
    assert not bad, f"the package's float16 attention is not finite at scales {bad}"


# ------------------------------------------------------------------------------------------
# C24: memory
# ------------------------------------------------------------------------------------------

# C24's thresholds, from the claim (n² against n; a cut; no growth with depth against growth).
C24_THRESHOLDS = {
    "dense slope at least": 1.8,
    "flash slope at most": 1.2,
    "checkpointing cut at least": 1.25,
    "checkpointed depth growth at most": 1.25,
    "dense depth growth at least": 1.5,
}
# "Without changing results": outputs and gradients equal to float32 rounding.
C24_ATOL = 1e-4


def qkv(n: int, *, seed: int = 0, b: int = 1, h: int = 2, e: int = 32):
    """Three ``(b, h, n, e)`` tensors that require gradients, from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, e, generator=g).requires_grad_() for _ in range(3))


def peak_memory(method: str, n: int, *, layers: int) -> int:
    """Exact peak bytes of a forward and backward pass through the page's ``stack_attention``
    (gradients of q, k, v included), by :func:`measure.memory.peak_extra_bytes`."""
    q, k, v = qkv(n)

    def run():
        stack_attention(method, q, k, v, layers=layers).sum().backward()

    with torch_threads(1):
        return peak_extra_bytes(run)


def outputs_and_grads(method: str, n: int, *, layers: int) -> list[Tensor]:
    """The output of ``stack_attention`` and the gradients of q, k, v (one thread)."""
    q, k, v = qkv(n)
    with torch_threads(1):
        out = stack_attention(method, q, k, v, layers=layers)
        out.sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


def slope(ns: Sequence[int], values: Sequence[float]) -> float:
    """Log–log slope between the last two points: 2 for an n² cost, 1 for a linear one."""
    return math.log(values[-1] / values[-2]) / math.log(ns[-1] / ns[-2])


def c24_parts(
    slopes: Mapping[str, float],
    peaks: Mapping[str, int],
    depth_growth: Mapping[str, float],
    *,
    max_diff: float,
    atol: float = C24_ATOL,
) -> dict[str, bool]:
    """C24's parts (thresholds :data:`C24_THRESHOLDS`). ``"the n × n matrix dominates and
    flash removes it"``: dense peak slope ≥ 1.8, flash ≤ 1.2 and under a quarter of the dense
    peak at the largest n. ``"checkpointing cuts memory"``: it cuts the dense peak by ≥ 1.25×,
    its peak does not grow with depth (≤ 1.25×) while dense's does (≥ 1.5×). ``"results
    unchanged"``: outputs and gradients agree (``max_diff <= atol``)."""
    t, flash, ckpt = C24_THRESHOLDS, "flash (package)", "dense + checkpointing"
    return {
        "the n x n matrix dominates and flash removes it": slopes["dense"]
        >= t["dense slope at least"]
        and slopes[flash] <= t["flash slope at most"]
        and peaks[flash] < peaks["dense"] / 4,
        "checkpointing cuts memory": peaks["dense"] / peaks[ckpt] >= t["checkpointing cut at least"]
        and depth_growth[ckpt] <= t["checkpointed depth growth at most"]
        and depth_growth["dense"] >= t["dense depth growth at least"],
        "results unchanged": max_diff <= atol,
    }


def c24_verdict(*args, **kwargs) -> str:
    """C24's verdict from :func:`c24_parts` (same arguments)."""
    return parts_verdict(c24_parts(*args, **kwargs))


def assert_c24_memory(
    slopes: Mapping[str, float],
    peaks: Mapping[str, int],
    depth_growth: Mapping[str, float],
    *,
    max_diff: float,
    atol: float = C24_ATOL,
) -> None:
    """C24, every part of :func:`c24_parts`, each with its own message."""
    t = C24_THRESHOLDS
    assert slopes["dense"] >= t["dense slope at least"], (
        f"dense peak memory slope {slopes['dense']:.2f} < {t['dense slope at least']}"
    )
    flash = "flash (package)"
    assert slopes[flash] <= t["flash slope at most"], f"flash slope {slopes[flash]:.2f} too high"
    assert peaks[flash] < peaks["dense"] / 4, f"flash peak {peaks[flash]} not < dense / 4"
    cut = peaks["dense"] / peaks["dense + checkpointing"]
    assert cut >= t["checkpointing cut at least"], (
        f"checkpointing cut the dense peak by only {cut:.2f}x"
    )
    assert depth_growth["dense + checkpointing"] <= t["checkpointed depth growth at most"], (
        f"the checkpointed peak grew {depth_growth['dense + checkpointing']:.2f}x with depth"
    )
    assert depth_growth["dense"] >= t["dense depth growth at least"], (
        f"the dense peak grew only {depth_growth['dense']:.2f}x with depth"
    )
    assert max_diff <= atol, f"outputs or gradients differ by {max_diff:.2g} > {atol}"


def assert_equal_to_package(mine: Tensor, package: Tensor, *, atol: float = 1e-5) -> None:
    """A hand-written attention equals the package's (largest difference ``<= atol``)."""
    diff = float((mine - package).abs().max())
    assert diff <= atol, f"the hand-written loop differs from the package by {diff:.3g} > {atol}"


# ------------------------------------------------------------------------------------------
# The KV cache
# ------------------------------------------------------------------------------------------

# "Cheaper" is judged on what decoding computes, which neither a machine's speed nor its load
# changes: with the cache, decoding must do at most half the matrix-multiply FLOPs of
# recomputing the prefix. Recomputation pushes O(T²) token positions through the model, the
# cache O(T); a cut below 2x would not be the saving the claim is about. Times are shown beside
# the counts, marked "(this machine)", and judge nothing.
KV_FLOP_CUT = 2.0


def decode_flops(model: CharDecoder, prompt: Tensor, new: int, *, use_cache: bool) -> int:
    """Matrix-multiply FLOPs of one greedy generation of ``new`` tokens after ``prompt``
    (torch's ``FlopCounterMode``, by :func:`measure.flops.matmul_flop_counter`): a count, the
    same on every machine."""
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        generate(model, prompt, max_new_tokens=new, use_cache=use_cache)
    return int(counter.get_total_flops())


def kv_bytes_computed(model: CharDecoder, positions: int, batch_size: int = 1) -> int:
    """Bytes of keys and values the model computes (every layer) for ``positions`` token
    positions: ``positions`` times the cache's bytes per position (:meth:`new_cache`)."""
    return positions * model.new_cache(batch_size).nbytes // model.max_len


def paired_time_ratio(
    model: CharDecoder, prompt: Tensor, new: int, *, pairs: int = 5
) -> tuple[float, float, float]:
    """``(ratio, seconds recomputing, seconds with the cache)``: the two ways of decoding
    ``new`` tokens timed back to back ``pairs`` times (which goes first alternates), after one
    untimed run of each, one thread; the ratio is the median of the per-pair ratios (a load
    that slows both halves of a pair cancels), the seconds are medians. For showing, never
    for judging: it depends on the machine."""

    def run(use_cache):
        return generate(model, prompt, max_new_tokens=new, use_cache=use_cache)

    ratios, full, cached = [], [], []
    with torch_threads(1):
        run(True), run(False)
        for i in range(pairs):
            times = {}
            for use_cache in (True, False) if i % 2 else (False, True):
                start = time.perf_counter()
                run(use_cache)
                times[use_cache] = time.perf_counter() - start
            ratios.append(times[False] / times[True])
            full.append(times[False])
            cached.append(times[True])
    return statistics.median(ratios), statistics.median(full), statistics.median(cached)


def kv_cache_parts(
    same_tokens: bool,
    rows: Mapping[str, tuple[int, int, int, int]],
    *,
    num_heads: int,
    cut: float = KV_FLOP_CUT,
) -> dict[str, bool]:
    """The KV-cache claim's parts. ``rows[kind] = (H_kv, cache bytes, FLOPs recomputing, FLOPs
    with the cache)``. ``"exact"``: cached decoding chose the recomputed tokens.
    ``"cheaper"``: every kind does at most ``1 / cut`` of the recomputing FLOPs with the cache.
    ``"GQA/MQA shrink it by H/H_kv"``: every cache is the MHA one (``H_kv = num_heads``) times
    ``H_kv / num_heads``."""
    mha = [r[1] for r in rows.values() if r[0] == num_heads]
    shrink = bool(mha) and all(b * num_heads == mha[0] * h for h, b, _, _ in rows.values())
    return {
        "exact": bool(same_tokens),
        "cheaper": all(full >= cut * cached for _, _, full, cached in rows.values()),
        "GQA/MQA shrink it by H/H_kv": shrink,
    }


def kv_cache_verdict(*args, **kwargs) -> str:
    """The KV-cache claim's verdict from :func:`kv_cache_parts` (same arguments)."""
    return parts_verdict(kv_cache_parts(*args, **kwargs))


def assert_cache_exact(cached, recomputed) -> None:
    """Decoding with the cache gives the tokens (and logits) of full recomputation."""
    assert torch.equal(cached.tokens, recomputed.tokens), "cached decoding chose other tokens"
    diff = float((cached.logits - recomputed.logits).abs().max())
    assert diff <= 1e-4, f"cached logits differ from recomputed ones by {diff:.3g}"


# ------------------------------------------------------------------------------------------
# The sceptic's sweeps of the trained claims (book.sceptic; make sceptic CH=06)
# ------------------------------------------------------------------------------------------


def _span(values: Sequence[float], fmt: str = ".2f") -> str:
    return f"{min(values):{fmt}}-{max(values):{fmt}}"


def c20_sweep_run(*, seeds: list[int], steps: int) -> Outcome:
    """Train the chapter's decoder with and without the mask on each of ``seeds`` for
    ``steps`` steps and judge C20 (:func:`c20_verdict`, unigram baseline of section 6.1)."""
    data = text_data()
    _, targets = eval_windows(data)  # (32, SEQ_LEN)
    baseline = unigram_loss(data.train, targets, data.vocab.size)
    settings = [(causal, seed) for causal in (True, False) for seed in seeds]
    runs = {
        (causal, seed): train_decoder(causal=causal, seed=seed, steps=steps)
        for causal, seed in progress_bar(settings, desc="runs", leave=False)
    }
    masked = [runs[True, s] for s in seeds]
    unmasked = [runs[False, s] for s in seeds]
    numbers = (
        [r.final_train_loss for r in masked],
        [r.final_train_loss for r in unmasked],
        [r.honest for r in masked],
        [r.honest for r in unmasked],
    )
    return Outcome(
        c20_verdict(*numbers, baseline=baseline),
        {
            "train loss masked": _span(numbers[0]),
            "train loss unmasked": _span(numbers[1]),
            "honest loss masked": _span(numbers[2]),
            "honest loss unmasked": _span(numbers[3]),
            "unigram": f"{baseline:.2f}",
        },
    )


def combined_mask_difference() -> float:
    """Section 6.3's last check: a causal mask ANDed with left padding, the package's
    attention against torch's SDPA given the same bool mask (largest difference)."""
    n = 6
    left_keep = torch.tensor([[False, False, True, True, True, True], [True] * n])  # (B, L)
    both = combine_masks(causal_mask(n), left_keep[:, None, None, :])  # (B, 1, L, L)
    q, k, v = (
        torch.randn(2, 2, n, 8, generator=torch.Generator().manual_seed(s)) for s in (4, 5, 6)
    )
    ours = scaled_dot_product_attention(q, k, v, both)  # (B, H, L, E)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=both)
    return float((ours - theirs).abs().max())


C22_PADS = (0, 1, 2, 4, 8, 16)
C22_EVAL_PADS = (0, 4, 8, 16, 32)


def c22_sweep_run(*, seeds: list[int], steps: int, train_masked: bool) -> Outcome:
    """Train the padding classifier on each of ``seeds`` (``steps`` steps, with or without its
    mask in training), measure its accuracy against padding with and without the mask, and
    judge C22 (:func:`c22_verdict`, with section 6.3's drift and combined-mask check)."""
    drift = {m: padding_drift(list(C22_PADS), masked=m) for m in (True, False)}
    models = [
        train_padding_classifier(seed, steps=steps, use_mask=train_masked)
        for seed in progress_bar(seeds, desc="runs", leave=False)
    ]
    acc = {
        m: [accuracy_vs_padding(model, list(C22_EVAL_PADS), masked=m) for model in models]
        for m in (True, False)
    }
    return Outcome(
        c22_verdict(drift[True], drift[False], acc[True], acc[False], combined_mask_difference()),
        {
            "trained": "with its mask" if train_masked else "without its mask",
            "steps": steps,
            "masked, 0 pads": _span([r[0] for r in acc[True]]),
            f"masked, {C22_EVAL_PADS[-1]} pads": _span([r[-1] for r in acc[True]]),
            "no mask, 0 pads": _span([r[0] for r in acc[False]]),
            f"no mask, {C22_EVAL_PADS[-1]} pads": _span([r[-1] for r in acc[False]]),
        },
    )


# ------------------------------------------------------------------------------------------
# The sweeps of the claims no training decides: C21, C23, C24 and the KV cache
# ------------------------------------------------------------------------------------------

_LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_RANK = {NOT_REPRODUCED: 0, PARTLY: 1, REPRODUCED: 2}


def c21_sweep_run(*, seeds: list[int], low_precision: str, scale: float, n: int) -> Outcome:
    """C21 (:func:`c21_verdict`) as section 6.2 measures it: each fill on a partly and a fully
    masked row of scores ~ N(0, ``scale``²) drawn from each of ``seeds``, in float32 and in
    ``low_precision`` (``"float16"`` or ``"bfloat16"``), and the unit tests on the causal masks
    of ``n`` tokens. The verdict is the worst seed's."""
    check_choice("low_precision", low_precision, tuple(_LOW_PRECISION))
    table = mask_test_table(n)
    reports = [
        (fill_report(torch.float32, s, scale), fill_report(_LOW_PRECISION[low_precision], s, scale))
        for s in seeds
    ]
    verdicts = [c21_verdict(r32, low, table) for r32, low in reports]

    def cases(fill: str, which: int) -> str:
        """The distinct outcomes of ``fill`` over the seeds: partly / fully masked row."""
        seen = []
        for pair in reports:
            row = pair[which][fill]
            text = f"{row['partly masked row']} / {row['fully masked row']}"
            seen.append(text.split(":")[0] if "raises" in text else text)
        return "; ".join(dict.fromkeys(seen))

    article_passes = [m for m, row in table.items() if m != CORRECT_MASK and row[ARTICLE_TEST]]
    caught_by_all = all(not all(row.values()) for m, row in table.items() if m != CORRECT_MASK)
    return Outcome(
        min(verdicts, key=_RANK.__getitem__),
        {
            "setting": f"{low_precision}, scores ~ N(0, {scale:g}²), seeds {seeds}, {n} tokens",
            "float32 -1e9 (partly / fully masked)": cases("-1e9", 0),
            "float32 -inf": cases("-inf", 0),
            "float32 safe softmax": cases("safe softmax", 0),
            f"{low_precision} -1e9": cases("-1e9", 1),
            f"{low_precision} safe softmax": cases("safe softmax", 1),
            "wrong masks the article's test passes": ", ".join(article_passes) or "none",
            "every wrong mask fails a test": caught_by_all,
        },
    )


# Section 6.4's aligned inputs for the package's float16 path: 4 tokens of width d_k.
def _package_finite(scales: Sequence[float], d_k: int) -> list[bool]:
    outs = []
    for s in scales:
        qh = torch.full((1, 1, 4, d_k), float(s), dtype=torch.float16)  # (1, 1, 4, d_k)
        outs.append(bool(torch.isfinite(scaled_dot_product_attention(qh, qh, qh)).all()))
    return outs


def c23_sweep_run(*, d_ks: list[int], scales: list[float], d_k: int) -> Outcome:
    """C23 (:func:`c23_verdict`) as section 6.4 measures it: the predicted and measured float16
    overflow scale at each of ``d_ks`` (scaling after the product and before it), the first
    NaN of the textbook float16 softmax, and the package's attention on aligned float16 inputs
    of width ``d_k`` at each of ``scales``."""
    overflow = {
        (dk, first): (
            overflow_scale_predicted(dk, scale_first=first),
            overflow_scale_measured(dk, scale_first=first),
        )
        for dk in d_ks
        for first in (False, True)
    }
    first_nan = first_nan_score("naive")
    finite = _package_finite(scales, d_k)
    worst = max(abs(m - p) / p for p, m in overflow.values())
    return Outcome(
        c23_verdict(list(overflow.values()), first_nan, finite),
        {
            "setting": f"d_k {d_ks}; package at d_k {d_k}, scales {scales}",
            "overflow scale, scale after (predicted / measured)": ", ".join(
                f"d_k {dk}: {overflow[dk, False][0]:.2f} / {overflow[dk, False][1]:.2f}"
                for dk in d_ks
            ),
            "largest gap to the prediction": f"{100 * worst:.2f}%",
            "textbook softmax NaN from": f"{first_nan:.2f}",
            "package finite at every scale": all(finite),
        },
    )


# The largest output/gradient difference is measured at this length (section 6.5's).
_C24_DIFF_N = 256


def c24_sweep_run(*, ns: list[int], layers: int) -> Outcome:
    """C24 (:func:`c24_verdict`) as section 6.5 measures it: the exact peak bytes of a forward
    and backward pass through ``layers`` attention calls by each method at each of ``ns``
    (slopes from the last two), one layer against ``layers`` at the largest n, and the
    largest output/gradient difference to dense at n = 256."""
    peaks = {m: [peak_memory(m, n, layers=layers) for n in ns] for m in MEMORY_METHODS}
    one_layer = {m: peak_memory(m, ns[-1], layers=1) for m in MEMORY_METHODS}
    depth_growth = {m: peaks[m][-1] / one_layer[m] for m in MEMORY_METHODS}
    slopes = {m: slope(ns, peaks[m]) for m in MEMORY_METHODS}
    ref = outputs_and_grads("dense", _C24_DIFF_N, layers=layers)
    max_diff = max(
        float((a - b).abs().max())
        for m in MEMORY_METHODS[1:]
        for a, b in zip(outputs_and_grads(m, _C24_DIFF_N, layers=layers), ref, strict=True)
    )
    last = {m: v[-1] for m, v in peaks.items()}
    flash, ckpt = "flash (package)", "dense + checkpointing"
    return Outcome(
        c24_verdict(slopes, last, depth_growth, max_diff=max_diff),
        {
            "setting": f"{layers} layers, n {ns}",
            "slopes dense / flash / checkpointed": " / ".join(
                f"{slopes[m]:.2f}" for m in MEMORY_METHODS
            ),
            "flash removes of the dense peak (largest n)": f"{1 - last[flash] / last['dense']:.0%}",
            "checkpointing cut": f"{last['dense'] / last[ckpt]:.2f}x",
            "peak growth from 1 layer, dense / checkpointed": (
                f"{depth_growth['dense']:.2f}x / {depth_growth[ckpt]:.2f}x"
            ),
            "max diff": f"{max_diff:.0e}",
        },
    )


@lru_cache(maxsize=1)
def _trained_decoder(steps: int) -> CharDecoder:
    """Section 6.1's masked decoder, seed 0 (the one section 6.6 decodes with)."""
    return train_decoder(causal=True, seed=0, steps=steps).model


def kv_cache_sweep_run(
    *, kv_heads: list[int], length: int, prompt: int, batch_size: int, steps: int
) -> Outcome:
    """The KV-cache claim (:func:`kv_cache_verdict`) as section 6.6 measures it: cached against
    recomputed greedy decoding on section 6.1's trained decoder (``steps`` steps, seed 0), and,
    for untrained decoders of the chapter's width with each of ``kv_heads`` key/value heads,
    ``length - prompt`` tokens after a random prompt of ``prompt`` tokens, ``batch_size``
    sequences: the same tokens, the cache's bytes and the matrix-multiply FLOPs each way.
    Times are not measured: they judge nothing."""
    data = text_data()
    model0 = _trained_decoder(steps)
    window, _ = eval_windows(data, n=4, seed=5)  # (4, SEQ_LEN)
    cached = generate(model0, window[:, :8], max_new_tokens=SEQ_LEN - 8, use_cache=True)
    recomputed = generate(model0, window[:, :8], max_new_tokens=SEQ_LEN - 8, use_cache=False)
    same = torch.equal(cached.tokens, recomputed.tokens)
    new = length - prompt
    rows = {}
    for h_kv in kv_heads:
        dec = build_decoder(
            data.vocab.size, causal=True, seed=0, num_kv_heads=h_kv, max_len=length
        ).eval()
        g = torch.Generator().manual_seed(0)
        p = torch.randint(0, data.vocab.size, (batch_size, prompt), generator=g)  # (B, prompt)
        with torch.no_grad(), torch_threads(1):
            a = generate(dec, p, max_new_tokens=new, use_cache=True)
            b = generate(dec, p, max_new_tokens=new, use_cache=False)
        same = same and torch.equal(a.tokens, b.tokens)
        nbytes = kv_cache_bytes(
            NUM_LAYERS, h_kv, D_MODEL // NUM_HEADS, length, batch_size=batch_size,
            bytes_per_element=4,
        )  # fmt: skip
        with torch_threads(1):
            flops = [decode_flops(dec, p, new, use_cache=c) for c in (False, True)]
        rows[f"H_kv {h_kv}"] = (h_kv, nbytes, *flops)
    return Outcome(
        kv_cache_verdict(same, rows, num_heads=NUM_HEADS),
        {
            "setting": f"H_kv {kv_heads} of {NUM_HEADS}, {new} tokens after {prompt}, "
            f"batch {batch_size}",
            "same tokens": same,
            "cache bytes": ", ".join(f"{k} {r[1]}" for k, r in rows.items()),
            "FLOPs cut": ", ".join(f"{k} {r[2] / r[3]:.0f}x" for k, r in rows.items()),
        },
    )


# The chapter shows seeds 0-2, 200 steps for the decoder and 60 for the classifier (trained
# with its mask, on batches padded by up to CLS_TRAIN_PAD extra pads).
SCEPTIC_SWEEPS = (
    Sweep(
        "C20",
        run=c20_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 200},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("600 steps", "a 3× longer training budget", {"steps": 600}),
        ),
    ),
    Sweep(
        "C22",
        run=c22_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 60, "train_masked": True},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("180 steps", "a 3× longer training budget", {"steps": 180}),
            Perturbation(
                "trained without the mask",
                "the classifier trained without its padding mask (the bug from the start), "
                "then run with and without it",
                {"train_masked": False},
            ),
        ),
    ),
    # C21: other random scores, bfloat16 in place of float16, scores 100x larger, and the unit
    # tests on shorter and longer masks.
    Sweep(
        "C21",
        run=c21_sweep_run,
        baseline={"seeds": [0], "low_precision": "float16", "scale": 3.0, "n": 6},
        perturbations=(
            Perturbation("seeds 1–5", "other random scores", {"seeds": [1, 2, 3, 4, 5]}),
            Perturbation(
                "bfloat16", "bfloat16 as the half precision", {"low_precision": "bfloat16"}
            ),
            Perturbation("scores × 100", "scores ~ N(0, 300²)", {"scale": 300.0}),
            Perturbation("32 tokens", "unit tests on masks of 32 tokens", {"n": 32}),
        ),
    ),
    # C23: small and large d_k, and inputs up to float16's largest value.
    Sweep(
        "C23",
        run=c23_sweep_run,
        baseline={"d_ks": [16, 64, 128], "scales": [1.0, 16.0, 32.0, 100.0, 1000.0], "d_k": 64},
        perturbations=(
            Perturbation("d_k 1–8", "tiny heads", {"d_ks": [1, 2, 8]}),
            Perturbation(
                "d_k 256–4096",
                "wide heads (the package at d_k 4096)",
                {"d_ks": [256, 1024, 4096], "d_k": 4096},
            ),
            Perturbation(
                "inputs to 65504",
                "aligned inputs up to float16's max",
                {"scales": [1000.0, 10000.0, 65504.0]},
            ),
        ),
    ),
    # C24: the lengths the slopes are read from, and the depth.
    Sweep(
        "C24",
        run=c24_sweep_run,
        baseline={"ns": [128, 256, 512, 1024], "layers": 4},
        perturbations=(
            Perturbation("n 32–256", "short sequences", {"ns": [32, 64, 128, 256]}),
            Perturbation("n to 2048", "a longer sequence", {"ns": [256, 512, 1024, 2048]}),
            Perturbation("2 layers", "a shallower stack", {"layers": 2}),
            Perturbation("8 layers", "a deeper stack", {"layers": 8}),
        ),
    ),
    # The KV cache: which kinds, the length decoded, the prompt and the batch.
    Sweep(
        "KV cache",
        run=kv_cache_sweep_run,
        baseline={
            "kv_heads": [4, 2, 1],
            "length": 160,
            "prompt": 32,
            "batch_size": 1,
            "steps": 200,
        },
        perturbations=(
            Perturbation("64 tokens", "a short decode (32 after 32)", {"length": 64}),
            Perturbation("512 tokens", "a long decode (480 after 32)", {"length": 512}),
            Perturbation("prompt of 4", "a short prompt", {"prompt": 4}),
            Perturbation("batch 8", "8 sequences at once", {"batch_size": 8}),
        ),
    ),
)
