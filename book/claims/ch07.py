"""Claims of chapter 7 (ViT, C25 Swin, C26 forecasting, C27 multimodal): thresholds, verdicts,
``assert_*`` functions and the cost runners.

The models, tasks and training steps are on the chapter's page (``book.pages.ch07``); this
module judges what they measured. Each ``*_verdict`` function returns one of
:data:`book.claims.VERDICTS` from the numbers alone; each ``assert_*`` raises
``AssertionError`` when its measurement says the claim (or the text's reading of it) is false.

Also here, because only this chapter's claims use them: :func:`forward_cost` (FLOPs, peak
bytes and time of one forward call of a whole model, as a :class:`measure.cost.Cost` whose
``seq_len`` is the token count), :func:`vit_cost`, :func:`layer_cost`, :func:`quadratic_fit`
and :func:`growth`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attention.blocks import EncoderLayer
from attention.vision import SwinBlock, VisionTransformer
from book.data import co2_monthly, digits
from book.experiments.parallel import run_keyed
from book.experiments.training import train_classifier
from book.pages.ch07 import (
    QUADRANTS,
    SmallCNN,
    digit_batches,
    field_map,
    forecast_split,
    forecaster_builds,
    swin_pyramid,
    swin_stack,
    synthetic_series,
    train_clip,
    train_neighbour_copy,
    train_quadrant_reader,
    tune_and_train,
    window_of,
)
from book.sceptic import Outcome, Perturbation, Sweep
from measure.cost import Cost
from measure.flops import matmul_flop_counter
from measure.memory import peak_extra_bytes
from measure.timing import time_forward

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# Thresholds, each set from its claim
# ------------------------------------------------------------------------------------------

# "ViT cost explodes": without the exact dense count, a fitted N² term that makes up at least a
# tenth of the FLOPs at the largest image still means quadratic growth (less is round-off or
# a linear cost).
QUADRATIC_SHARE = 0.10
# "ViTs need more data": with 150 digits the CNN must lead by at least 3 points of mean
# accuracy (less is within what a seed moves), and with all digits the lead must be smaller.
DATA_GAP = 0.03
# ... and "the gap shrinks" means by at least as much: 3 points of mean accuracy (a gap of 0.200
# that becomes 0.199 has not shrunk, it has stayed).
GAP_SHRINK = 0.03
# C25 task: chance for four colours, how far above it "cannot see" may wander (a seed's
# noise on 512 maps), and the accuracy that counts as "solved".
COPY_CHANCE, COPY_SLACK, SOLVED = 0.25, 0.10, 0.90
# C26: "as good as" = a mean test MSE at most 10 % above the plain Transformer's.
AS_GOOD = 0.10
# C27 cross-attention: twice the uniform share (4 of 16 patches = 0.25) on the word's own
# quadrant, and digits read at eight times chance (0.1).
MIN_MASS, MIN_READ_ACC = 0.5, 0.8
# C27 CLIP: retrieval among 100 pairs at ten times chance (0.01).
MIN_RETRIEVAL = 0.10
# C27 τ learned: learning 1/τ "helps" over fixing it at CLIP's start (1/0.07) only if mean
# retrieval is higher by more than the sampling error of a proportion near 0.4 measured on 100
# test pairs, √(0.4·0.6/100) ≈ 0.05.
LEARN_MARGIN = 0.05
CLIP_START_SCALE = 1 / 0.07

# C26 reads every model with the same head: all ``L`` states flattened (the library's Transformer
# forecaster's head). ``Forecaster`` also has a last-state head; a read-out listed here is judged.
READ_OUTS = ("flat",)
ADDITIONS = ("Transformer (flat)", "+ time (flat)", "Informer-style (flat)")
TRANSFORMERS = ADDITIONS


def _mean(values: Sequence[float]) -> float:
    values = [float(v) for v in values]
    if not values:
        raise ValueError("need at least one value (one per seed)")
    return sum(values) / len(values)


# ------------------------------------------------------------------------------------------
# Cost runners
# ------------------------------------------------------------------------------------------


def forward_cost(
    model: nn.Module, inputs: Tensor, tokens: int, *, timed: bool = True, repeats: int = 1
) -> Cost:
    """FLOPs, peak bytes and time (median of ``repeats`` calls after one warm-up) of
    ``model(inputs)`` without autograd; ``seq_len`` is ``tokens``, the tokens attended over."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    model.eval()
    with torch.no_grad():
        peak = peak_extra_bytes(lambda: model(inputs))
        counter = matmul_flop_counter()
        with counter:
            model(inputs)
    seconds = time_forward(lambda: model(inputs), repeats=repeats) if timed else math.nan
    return Cost(tokens, int(peak), int(counter.get_total_flops()), seconds)


def vit_cost(
    image_size: int,
    patch_size: int,
    *,
    d_model: int = 32,
    num_heads: int = 4,
    num_layers: int = 2,
    timed: bool = True,
) -> Cost:
    """One forward call of a :class:`attention.vision.VisionTransformer` on one square
    greyscale image of ``image_size`` pixels: ``seq_len = (image_size / patch_size)² + 1``
    (the patches and ``[CLS]``)."""
    torch.manual_seed(0)
    model = VisionTransformer(
        image_size, patch_size, 1, 10,
        d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=2 * d_model,
    )  # fmt: skip
    images = torch.randn(1, 1, image_size, image_size, generator=torch.Generator().manual_seed(0))
    return forward_cost(model, images, model.embedding.num_tokens, timed=timed)


def layer_cost(layer: nn.Module, grid: int, d_model: int, *, timed: bool = True) -> Cost:
    """FLOPs, bytes and time of ``layer`` on one ``(1, grid², d_model)`` token map."""
    x = torch.randn(1, grid * grid, d_model, generator=torch.Generator().manual_seed(0))
    return forward_cost(layer, x, grid * grid, timed=timed)


@dataclass(frozen=True)
class Quadratic:
    """``value ≈ c0 + c1·n + c2·n²`` fitted in float64; ``max_residual`` over the points."""

    c0: float
    c1: float
    c2: float
    max_residual: float


def quadratic_fit(ns: Sequence[int], values: Sequence[float]) -> Quadratic:
    """Least-squares ``c0 + c1·n + c2·n²`` through at least three points (float64).

    With exact counts (FLOPs) and four or more points, a zero residual shows the count *is*
    a quadratic in ``n``, and ``c2`` its quadratic coefficient.
    """
    if len(ns) != len(values) or len(ns) < 3:
        raise ValueError(
            f"need as many values as ns, at least 3; got {len(ns)} ns and {len(values)} values"
        )
    n = torch.tensor([float(v) for v in ns], dtype=torch.float64)
    y = torch.tensor([float(v) for v in values], dtype=torch.float64)
    scale = n.max()
    design = torch.stack([torch.ones_like(n), n / scale, (n / scale) ** 2], dim=1)  # (P, 3)
    coef = torch.linalg.lstsq(design, y[:, None]).solution[:, 0]  # (3,)
    residual = float((design @ coef - y).abs().max())
    return Quadratic(float(coef[0]), float(coef[1] / scale), float(coef[2] / scale**2), residual)


def growth(values: Sequence[float]) -> list[float]:
    """Ratios of consecutive values: ``[v1/v0, v2/v1, ...]``, rounded to 4 digits."""
    return [round(b / a, 4) for a, b in zip(values, values[1:], strict=False)]


# ------------------------------------------------------------------------------------------
# ViT
# ------------------------------------------------------------------------------------------


def _vit_cost_parts(tokens, flops, d_model, num_layers) -> tuple[Quadratic, bool, bool]:
    if len(tokens) < 4:
        raise ValueError(f"need at least 4 (tokens, flops) points, got {len(tokens)}")
    fit_ = quadratic_fit(tokens, flops)
    exact = fit_.max_residual <= 1e-6 * max(flops)
    predicted = math.isclose(fit_.c2, 4 * num_layers * d_model, rel_tol=1e-6)
    return fit_, exact, predicted


def vit_cost_verdict(
    tokens: Sequence[int], flops: Sequence[int], *, d_model: int, num_layers: int
) -> str:
    """Verdict on "its cost explodes with the resolution (quadratic in the patches)": reproduced
    when the FLOPs are exactly a quadratic in the tokens with the ``N²`` coefficient dense
    attention predicts (``4 · layers · d``); partly when a fitted ``N²`` term that is not that
    one still makes up at least :data:`QUADRATIC_SHARE` of the largest count; not reproduced
    when it does not (the cost is about linear)."""
    fit_, exact, predicted = _vit_cost_parts(tokens, flops, d_model, num_layers)
    if exact and predicted:
        return "reproduced"
    quadratic_share = fit_.c2 * max(tokens) ** 2 / max(flops)  # at the largest image
    return "partly" if quadratic_share >= QUADRATIC_SHARE else "not reproduced"


def assert_vit_cost_quadratic(
    tokens: Sequence[int], flops: Sequence[int], *, d_model: int, num_layers: int
) -> Quadratic:
    """A ViT's FLOPs are a quadratic in the token count whose ``N²`` coefficient is exactly
    ``4 · num_layers · d_model`` (the two attention products, ``QKᵀ`` and ``AV``, of every
    layer). Needs at least four exact counts: three fix a quadratic, the others test it."""
    fit_, exact, predicted = _vit_cost_parts(tokens, flops, d_model, num_layers)
    assert exact, (
        f"the FLOP counts are not a quadratic in the token count: residual "
        f"{fit_.max_residual:.3g} of {max(flops):.3g}"
    )
    assert predicted, (
        f"the N² coefficient is {fit_.c2:.6g}, expected 4·layers·d = "
        f"{4 * num_layers * d_model}: the FLOPs do not grow as dense attention over the tokens "
        f"predicts"
    )
    return fit_


def vit_data_gaps(
    *,
    vit_small: Sequence[float],
    cnn_small: Sequence[float],
    vit_full: Sequence[float],
    cnn_full: Sequence[float],
) -> tuple[float, float]:
    """The CNN's lead in mean accuracy (CNN − ViT) with little data and with all of it."""
    return _mean(cnn_small) - _mean(vit_small), _mean(cnn_full) - _mean(vit_full)


def vit_data_verdict(
    gap_small: float, gap_full: float, *, margin: float = DATA_GAP, shrink: float = GAP_SHRINK
) -> str:
    """Verdict on "ViTs need more data": reproduced when the CNN leads by at least ``margin``
    with little data and its lead shrinks by at least ``shrink`` with all of it; partly when
    it leads by ``margin`` but the lead does not shrink that much; not reproduced when it does
    not lead by ``margin`` with little data."""
    if gap_small < margin:
        return "not reproduced"
    return "reproduced" if gap_small - gap_full >= shrink else "partly"


def assert_vit_needs_more_data(
    *,
    vit_small: Sequence[float],
    cnn_small: Sequence[float],
    vit_full: Sequence[float],
    cnn_full: Sequence[float],
    margin: float = DATA_GAP,
    shrink: float = GAP_SHRINK,
) -> tuple[float, float]:
    """With little data the CNN's mean accuracy beats the ViT's by at least ``margin``, and
    with all the data the ViT's deficit is smaller by at least ``shrink``. Returns the two
    gaps (CNN − ViT)."""
    gap_small, gap_full = vit_data_gaps(
        vit_small=vit_small, cnn_small=cnn_small, vit_full=vit_full, cnn_full=cnn_full
    )
    assert gap_small >= margin, (
        f"with little data the CNN leads by only {gap_small:+.3f} (mean accuracy), less than "
        f"the {margin} the claim predicts"
    )
    assert gap_small - gap_full >= shrink, (
        f"the ViT's deficit does not shrink by {shrink} with more data: {gap_small:+.3f} with "
        f"little, {gap_full:+.3f} with all"
    )
    return gap_small, gap_full


# ------------------------------------------------------------------------------------------
# C25, Swin
# ------------------------------------------------------------------------------------------


def _window_cost_parts(tokens, window, dense) -> tuple[bool, bool, bool]:
    linear = []
    for k in (0, 1):  # FLOPs, peak bytes
        per_token = [w[k] / n for w, n in zip(window, tokens, strict=True)]
        linear.append(max(per_token) - min(per_token) <= 1e-9 * max(per_token))
    dense_growth, token_growth = growth([d[0] for d in dense]), growth(tokens)
    faster = all(g > t for g, t in zip(dense_growth, token_growth, strict=True))
    return linear[0], linear[1], faster


def c25_cost_verdict(
    *, tokens: Sequence[int], window: Sequence[tuple[int, int]], dense: Sequence[tuple[int, int]]
) -> str:
    """Verdict on "Window attention makes the cost linear in the image size": reproduced when
    window attention's FLOPs and peak bytes per token are the same at every size and global
    attention's FLOPs grow faster than the tokens; partly when only the FLOPs are linear (or
    global attention is no worse); not reproduced when the window FLOPs are not linear."""
    flops_linear, bytes_linear, faster = _window_cost_parts(tokens, window, dense)
    if not flops_linear:
        return "not reproduced"
    return "reproduced" if bytes_linear and faster else "partly"


def assert_c25_window_cost_linear(
    *,
    tokens: Sequence[int],
    window: Sequence[tuple[int, int]],
    dense: Sequence[tuple[int, int]],
) -> None:
    """Window attention: FLOPs and peak bytes per token identical at every size (exactly
    linear in the area); global attention: FLOPs grow faster than the token count."""
    flops_linear, bytes_linear, faster = _window_cost_parts(tokens, window, dense)
    for what, ok, k in (("FLOPs", flops_linear, 0), ("peak bytes", bytes_linear, 1)):
        assert ok, (
            f"window attention's {what} per token change with the image size: "
            f"{[w[k] / n for w, n in zip(window, tokens, strict=True)]}"
        )
    assert faster, (
        f"global attention's FLOPs grow no faster than the tokens: "
        f"×{growth([d[0] for d in dense])} vs ×{growth(tokens)}"
    )


def _shift_parts(fields: dict, own_window: Tensor) -> tuple[bool, dict, bool, bool, list[float]]:
    depths = sorted({d for _, d in fields})
    regular_stays = all(torch.equal(fields[False, d], own_window) for d in depths)
    left = {d: (fields[True, d] & ~own_window).flatten(-2).any(-1) for d in depths}  # (T,) each
    some_cross = any(bool(left[d].any()) for d in depths if d >= 2)
    all_cross = bool(left[depths[-1]].all())
    sizes = [float(fields[True, d].flatten(-2).sum(-1).float().mean()) for d in depths]
    grows = all(b > a for a, b in zip(sizes, sizes[1:], strict=False))
    return regular_stays, left, some_cross, all_cross and grows, sizes


def c25_shift_verdict(fields: dict, own_window: Tensor) -> str:
    """``fields[(shifted, depth)]``: bool receptive fields ``(..., G, G)``, one per output token
    (every token of the map, or one), ``own_window`` each token's regular window, the same
    shape. "Shifted windows let information cross window borders": reproduced when regular
    windows keep *every* token's field to its own window at every depth while with the shift
    every token's field has left it at the deepest stack and the mean field keeps growing;
    partly when some tokens never leave their window (or the field stops growing); not
    reproduced when regular windows leak or no token's field leaves its window."""
    regular_stays, _, some_cross, all_cross_and_grow, _ = _shift_parts(fields, own_window)
    if not (regular_stays and some_cross):
        return "not reproduced"
    return "reproduced" if all_cross_and_grow else "partly"


def assert_c25_shift_crosses_windows(fields: dict, own_window: Tensor) -> dict:
    """Regular windows: every field is exactly its token's window. Shifted: from two blocks on
    some fields reach outside, at the deepest stack every token's field does, and the mean
    field grows with every depth. Returns ``{depth: tokens whose field has left}``."""
    for (shifted, d), field in sorted(fields.items()):
        assert shifted or torch.equal(field, own_window), (
            f"with regular windows only, {d} block(s) let a token's field leave its window "
            f"({int((field & ~own_window).sum())} token pairs outside)"
        )
    _, left, some_cross, all_cross_and_grow, sizes = _shift_parts(fields, own_window)
    assert some_cross, "with shifted windows no token's field ever leaves its own window"
    stuck = int((~left[max(left)]).sum())
    assert all_cross_and_grow, (
        f"with shifted windows {stuck} token(s) still see only their own window after "
        f"{max(left)} blocks, or the mean field does not grow with depth: sizes {sizes}"
    )
    return {d: int(v.sum()) for d, v in left.items()}


def c25_pyramid_verdict(
    stages: Sequence[tuple[int, int]], *, suits_detection: bool | None = None
) -> str:
    """Verdict on "Patch merging gives hierarchical maps that suit detection and segmentation": the
    pyramid (each stage halves the side and doubles the width) is measured here, the suitability
    only by a detection experiment (``suits_detection``; ``None``: not run). Reproduced when
    both hold; partly when the pyramid holds and the suitability is untested or fails; not
    reproduced when the pyramid does not hold."""
    if not _is_pyramid(stages):
        return "not reproduced"
    return "reproduced" if suits_detection else "partly"


def _is_pyramid(stages: Sequence[tuple[int, int]]) -> bool:
    return len(stages) >= 2 and all(
        (s1, c1) == (s0 // 2, 2 * c0)
        for (s0, c0), (s1, c1) in zip(stages, stages[1:], strict=False)
    )


def assert_c25_pyramid(stages: Sequence[tuple[int, int]]) -> None:
    """Each patch-merging stage halves the map's side and doubles its width."""
    for (s0, c0), (s1, c1) in zip(stages, stages[1:], strict=False):
        assert (s1, c1) == (s0 // 2, 2 * c0), (
            f"a merging stage took {s0}×{s0}×{c0} to {s1}×{s1}×{c1}, expected "
            f"{s0 // 2}×{s0 // 2}×{2 * c0}"
        )


def c25_task_verdict(
    *,
    border_shifted: Sequence[float],
    border_regular: Sequence[float],
    inside_shifted: Sequence[float],
    inside_regular: Sequence[float],
) -> str:
    """Verdict on "Without the shift, windows cannot pass information across their borders": not
    reproduced when regular windows rise above chance + slack at the border at some seed (the
    information crossed anyway); reproduced when they stay there while shifted windows solve the
    border and both solve the inside at every seed; partly otherwise (blocked without the shift,
    but the task not solved with it)."""
    if max(border_regular) > COPY_CHANCE + COPY_SLACK:
        return "not reproduced"
    solved = min(border_shifted) >= SOLVED
    learned = min(min(inside_shifted), min(inside_regular)) >= SOLVED
    return "reproduced" if solved and learned else "partly"


def assert_c25_shift_decides(
    *,
    border_shifted: Sequence[float],
    border_regular: Sequence[float],
    inside_shifted: Sequence[float],
    inside_regular: Sequence[float],
    chance: float = COPY_CHANCE,
    solved: float = SOLVED,
    slack: float = COPY_SLACK,
) -> None:
    """At the window border: regular windows stay within ``slack`` of chance at every seed,
    shifted ones reach ``solved`` at every seed. Inside the windows both reach ``solved``."""
    assert max(border_regular) <= chance + slack, (
        f"regular windows reach {max(border_regular):.3f} at the border, more than chance "
        f"{chance:.3f} + {slack}: information crossed the border without the shift"
    )
    assert min(border_shifted) >= solved, (
        f"shifted windows reach only {min(border_shifted):.3f} at the border (a seed), below "
        f"{solved}: the shift did not carry the neighbour's colour across"
    )
    for name, values in (("shifted", inside_shifted), ("regular", inside_regular)):
        assert min(values) >= solved, (
            f"{name} windows reach only {min(values):.3f} inside the windows, below {solved}: "
            f"the task was not learned at all"
        )


# ------------------------------------------------------------------------------------------
# C26, forecasting
# ------------------------------------------------------------------------------------------


def _series_means(mse: dict, series: str, names: Sequence[str]) -> dict[str, float]:
    return {name: _mean(mse[series][name]) for name in names}


def c26_steadier(values: Sequence[float], plain: Sequence[float]) -> bool:
    """ "Steadier" than the Transformer: a smaller range over the seeds *and* a worst seed no
    worse than the Transformer's worst, so that a model that is steady but worse everywhere
    (an LSTM 3× worse with a tiny range) is not steadier, it is worse."""
    return max(values) - min(values) < max(plain) - min(plain) and max(values) <= max(plain)


def c26_claim_holds(by_model: dict, *, read_out: str = "flat", tol: float = AS_GOOD) -> bool:
    """C26 on one series and one read-out: ``LSTM (r)`` or ``TCN (r)`` is "as good as"
    ``Transformer (r)`` (mean MSE at most ``tol`` above its mean) or :func:`c26_steadier`."""
    plain = by_model[f"Transformer ({read_out})"]
    for name in (f"LSTM ({read_out})", f"TCN ({read_out})"):
        values = by_model[name]
        if _mean(values) <= (1 + tol) * _mean(plain) or c26_steadier(values, plain):
            return True
    return False


def c26_verdict(mse: dict, *, tol: float = AS_GOOD) -> str:
    """``mse[series][model]``: test MSEs over seeds. Reproduced when :func:`c26_claim_holds`
    on every series with every read-out in :data:`READ_OUTS` (the same head on every model),
    partly on some, not reproduced on none."""
    holds = [
        c26_claim_holds(by_model, read_out=r, tol=tol)
        for by_model in mse.values()
        for r in READ_OUTS
    ]
    return "reproduced" if all(holds) else "partly" if any(holds) else "not reproduced"


def c26_attention_verdict(mse: dict, *, tol: float = AS_GOOD) -> str:
    """ "Attention is what the Transformer forecaster brings": on a series it does when the
    same model without attention (``no attention (flat)``) has a mean MSE more than ``tol``
    above the Transformer's (flat). Reproduced on every series, partly on some, not
    reproduced on none (then the flattening head, not attention, does the work)."""
    matters = [
        _mean(by["no attention (flat)"]) > (1 + tol) * _mean(by["Transformer (flat)"])
        for by in mse.values()
    ]
    return "reproduced" if all(matters) else "partly" if any(matters) else "not reproduced"


def c26_additions_verdict(mse: dict) -> str:
    """Verdict on "time-aware encodings or ProbSparse help a Transformer": an addition helps on a
    series when it lowers the plain Transformer's (flat read-out, as the additions) mean MSE.
    Reproduced when both additions help on every series, not reproduced when neither helps on
    any, partly in between."""
    helps = [
        means[name] < means["Transformer (flat)"]
        for series in mse
        for means in [_series_means(mse, series, ADDITIONS)]
        for name in ADDITIONS[1:]
    ]
    return "reproduced" if all(helps) else "partly" if any(helps) else "not reproduced"


def c26_linear_verdict(mse: dict) -> str:
    """Zeng et al.: "a linear model beats Transformer forecasters". Reproduced when DLinear's
    mean MSE is below every Transformer variant's on every series; partly when it is below
    every variant's on some series, or below the Informer-style one's (the kind Zeng et al.
    compared against) on every series; not reproduced otherwise."""
    beats_all, beats_informer = [], []
    for series in mse:
        linear = _mean(mse[series]["DLinear"])
        means = _series_means(mse, series, TRANSFORMERS)
        beats_all.append(linear < min(means.values()))
        beats_informer.append(linear < means["Informer-style (flat)"])
    if all(beats_all):
        return "reproduced"
    return "partly" if any(beats_all) or all(beats_informer) else "not reproduced"


# C26's experiment: lookback, horizon, period, steps, batch, learning-rate grid (the chapter's):
# 100 steps of 32 windows (every model sees 3 200 windows), the learning rate tuned after 50,
# the grid widened at its edges.
C26_GEOMETRY, C26_STEPS, C26_BATCH, C26_GRID = (36, 12, 12), 100, 32, (1e-3, 3e-3, 1e-2)
# The models C26's own verdict compares (the sweep trains only these).
C26_COMPARED = tuple(f"{m} ({r})" for r in READ_OUTS for m in ("LSTM", "TCN", "Transformer"))


def c26_splits() -> dict:
    """The chapter's two series, split and standardised: Mauna Loa CO₂ and the synthetic one."""
    lookback, horizon, period = C26_GEOMETRY
    co2 = co2_monthly()
    values, phase = synthetic_series(960, period=period, noise=0.2)
    series = {"CO₂ (Mauna Loa)": (co2.values, co2.month), "synthetic": (values, phase)}
    return {
        name: forecast_split(v, p, lookback=lookback, horizon=horizon)
        for name, (v, p) in series.items()
    }


def c26_runs(
    splits: dict, names: Sequence[str] | None = None, *, seeds: Sequence[int],
    steps: int = C26_STEPS, grid: Sequence[float] = C26_GRID, progress: bool = False,
) -> dict:  # fmt: skip
    """``{(series, model): tune_and_train(...)}``: every model tuned on the same grid by the
    validation MSE of ``seeds[0]`` after half the budget, then trained on every seed for the
    whole budget, on every series; the (series, model) pairs side by side
    (:func:`~book.experiments.parallel.run_keyed`). ``progress``: a bar over the pairs."""
    builds = forecaster_builds(*C26_GEOMETRY)
    names = list(builds) if names is None else list(names)
    pairs = [(series, name) for series in splits for name in names]

    def tune(pair: tuple[str, str]) -> dict:
        series, name = pair
        return tune_and_train(
            builds[name],
            splits[series],
            grid=grid,
            seeds=list(seeds),
            steps=steps,
            batch_size=C26_BATCH,
            tune_steps=max(1, steps // 2),
        )  # fmt: skip

    return run_keyed(tune, pairs, desc="forecasters" if progress else None)


def c26_table(tuned: dict) -> dict:
    """``mse[series][model]``: the test MSEs over seeds, from :func:`c26_runs`' result."""
    mse: dict = {}
    for (series, name), t in tuned.items():
        mse.setdefault(series, {})[name] = [run["test_mse"] for run in t["runs"]]
    return mse


_C26_CACHE: dict = {}


def _c26_mse(seeds: Sequence[int], steps: int, names: Sequence[str] | None = None) -> dict:
    """:func:`c26_table` of :func:`c26_runs`, computed once per setting: the four C26 sweeps
    judge the same runs."""
    key = (tuple(seeds), steps, None if names is None else tuple(names))
    if key not in _C26_CACHE:
        _C26_CACHE[key] = c26_table(c26_runs(c26_splits(), names, seeds=seeds, steps=steps))
    return _C26_CACHE[key]


def _c26_outcome(verdict, names: Sequence[str], *, seeds, steps, **numbers) -> Outcome:
    mse = _c26_mse(seeds, steps)
    out = {"seeds": list(seeds), "steps": steps, **numbers}
    for series, by in mse.items():
        for name in names:
            out[f"{series}: {name}"] = round(_mean(by[name]), 5)
    return Outcome(verdict(mse), out)


def c26_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C26_STEPS) -> Outcome:
    """C26 (:func:`c26_verdict`) on the chapter's experiment, with other seeds or budget."""
    mse = _c26_mse(seeds, steps)
    holds = {
        f"{series} {r}: holds": c26_claim_holds(by, read_out=r)
        for series, by in mse.items()
        for r in READ_OUTS
    }
    return _c26_outcome(c26_verdict, C26_COMPARED, seeds=seeds, steps=steps, **holds)


def c26_attention_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C26_STEPS):
    """C26 attention (:func:`c26_attention_verdict`), the same runs."""
    names = ("Transformer (flat)", "no attention (flat)")
    return _c26_outcome(c26_attention_verdict, names, seeds=seeds, steps=steps)


def c26_additions_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C26_STEPS):
    """C26 additions (:func:`c26_additions_verdict`), the same runs."""
    return _c26_outcome(c26_additions_verdict, ADDITIONS, seeds=seeds, steps=steps)


def c26_linear_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C26_STEPS):
    """C26 linear (:func:`c26_linear_verdict`), the same runs."""
    names = ("DLinear", *TRANSFORMERS)
    return _c26_outcome(c26_linear_verdict, names, seeds=seeds, steps=steps)


# ------------------------------------------------------------------------------------------
# C27, multimodal
# ------------------------------------------------------------------------------------------


def c27_cross_verdict(*, mass: Sequence[Sequence[float]], accuracy: Sequence[float]) -> str:
    """``mass[seed][word]``: attention mass on the word's own quadrant. "Cross-attention
    connects text tokens to image patches": reproduced when every word at every seed puts at
    least :data:`MIN_MASS` on its quadrant and every seed reads the digits with accuracy at
    least :data:`MIN_READ_ACC`; partly when only one of the two holds; not reproduced when
    neither does."""
    found = all(m >= MIN_MASS for per_word in mass for m in per_word)
    read = min(accuracy) >= MIN_READ_ACC
    return "reproduced" if found and read else "partly" if found or read else "not reproduced"


def assert_c27_words_find_their_patches(
    *,
    mass: Sequence[Sequence[float]],
    accuracy: Sequence[float],
    min_mass: float = MIN_MASS,
    min_accuracy: float = MIN_READ_ACC,
) -> None:
    """Each word's attention mass on its own quadrant at least ``min_mass`` for every word
    and seed, and ``accuracy[seed]`` at least ``min_accuracy``."""
    for seed, per_word in enumerate(mass):
        for word, m in zip(QUADRANTS, per_word, strict=True):
            assert m >= min_mass, (
                f"seed {seed}: '{word}' puts only {m:.3f} of its attention on its quadrant, "
                f"below {min_mass}: the word did not find its patches"
            )
    assert min(accuracy) >= min_accuracy, (
        f"a seed reads the digits with accuracy {min(accuracy):.3f}, below {min_accuracy}"
    )


def assert_clip_uniform_loss(loss: float, batch_size: int, *, tol: float = 1e-5) -> None:
    """With every logit equal, CLIP's symmetric loss is exactly ``ln B``."""
    assert abs(loss - math.log(batch_size)) <= tol, (
        f"loss with equal logits is {loss:.6f}, expected ln {batch_size} = "
        f"{math.log(batch_size):.6f}"
    )


def c27_clip_verdict(*, image_to_text: Sequence[float], text_to_image: Sequence[float]) -> str:
    """Verdict on "CLIP aligns paired embeddings": reproduced when retrieval is at least
    :data:`MIN_RETRIEVAL` in both directions at every seed, partly in one direction, not
    reproduced in neither."""
    ok = [min(values) >= MIN_RETRIEVAL for values in (image_to_text, text_to_image)]
    return "reproduced" if all(ok) else "partly" if any(ok) else "not reproduced"


def assert_c27_clip_aligns(
    *,
    image_to_text: Sequence[float],
    text_to_image: Sequence[float],
    min_retrieval: float = MIN_RETRIEVAL,
) -> None:
    """Retrieval at least ``min_retrieval`` in both directions at every seed."""
    for name, values in (("image → text", image_to_text), ("text → image", text_to_image)):
        assert min(values) >= min_retrieval, (
            f"{name} retrieval falls to {min(values):.3f} at a seed, below {min_retrieval}: "
            f"the embeddings are not aligned"
        )


def c27_temperature_verdict(
    *,
    learned: tuple[Sequence[float], Sequence[float]],
    fixed: tuple[Sequence[float], Sequence[float]],
) -> str:
    """``(image → text, text → image)`` retrieval over seeds, with the learned temperature and
    with the scale fixed at 1. "The temperature matters": reproduced when the fixed scale
    retrieves worse on average in both directions, partly in one, not reproduced in neither."""
    worse = [_mean(f) < _mean(a) for a, f in zip(learned, fixed, strict=True)]
    return "reproduced" if all(worse) else "partly" if any(worse) else "not reproduced"


def assert_c27_temperature_matters(
    *,
    learned: tuple[Sequence[float], Sequence[float]],
    fixed: tuple[Sequence[float], Sequence[float]],
    fixed_losses: Sequence[float],
    floor: float,
) -> None:
    """With the scale fixed at 1 retrieval is worse on average in both directions than with
    the learned temperature, and the loss stays at or above the floor that scale allows."""
    for name, a, b in (
        ("image → text", learned[0], fixed[0]),
        ("text → image", learned[1], fixed[1]),
    ):
        assert _mean(b) < _mean(a), (
            f"{name}: τ = 1 retrieves {_mean(b):.3f} on average, not worse than the learned "
            f"temperature's {_mean(a):.3f}"
        )
    assert min(fixed_losses) >= floor - 1e-6, (
        f"a loss of {min(fixed_losses):.4f} is below the floor {floor:.4f} at this scale: "
        f"the floor formula or the scale is wrong"
    )


def c27_learning_verdict(
    *,
    learned: tuple[Sequence[float], Sequence[float]],
    fixed_large: tuple[Sequence[float], Sequence[float]],
    margin: float = LEARN_MARGIN,
) -> str:
    """``(image → text, text → image)`` retrieval over seeds with 1/τ learned and fixed at
    CLIP's starting value. "Learning the temperature helps": reproduced when learning beats
    the fixed scale by more than ``margin`` on average in both directions, partly in one, not
    reproduced in neither (then the experiment shows a large scale is needed, not that
    learning it helps)."""
    better = [_mean(a) > _mean(f) + margin for a, f in zip(learned, fixed_large, strict=True)]
    return "reproduced" if all(better) else "partly" if any(better) else "not reproduced"


# ------------------------------------------------------------------------------------------
# C27's sweeps: the tiny CLIP with other seeds and a 3× budget
# ------------------------------------------------------------------------------------------

C27_STEPS = 250
_C27_CACHE: dict = {}


def c27_clip_retrieval(*, seeds: Sequence[int], steps: int, logit_scale: float | None) -> tuple:
    """``(image → text per seed, text → image per seed)`` of :func:`book.pages.ch07.train_clip`
    on the chapter's digits (``logit_scale=None``: learned), computed once per setting."""
    key = (tuple(seeds), steps, logit_scale)
    if key not in _C27_CACHE:
        data = digits()
        runs = [
            train_clip(
                (data.train_images, data.train_labels),
                (data.test_images, data.test_labels),
                seed=seed,
                steps=steps,
                logit_scale=logit_scale,
            )  # fmt: skip
            for seed in seeds
        ]
        _C27_CACHE[key] = tuple([r[d] for r in runs] for d in ("image_to_text", "text_to_image"))
    return _C27_CACHE[key]


def _c27_numbers(seeds, steps, **arms) -> dict:
    out = {"seeds": list(seeds), "steps": steps}
    for arm, (i2t, t2i) in arms.items():
        out[f"{arm}: image → text"] = round(_mean(i2t), 3)
        out[f"{arm}: text → image"] = round(_mean(t2i), 3)
    return out


def c27_clip_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C27_STEPS) -> Outcome:
    """C27 CLIP (:func:`c27_clip_verdict`) with other seeds or budget."""
    learned = c27_clip_retrieval(seeds=seeds, steps=steps, logit_scale=None)
    numbers = _c27_numbers(seeds, steps, learned=learned)
    numbers["worst seed"] = round(min(min(learned[0]), min(learned[1])), 3)
    return Outcome(c27_clip_verdict(image_to_text=learned[0], text_to_image=learned[1]), numbers)


def c27_temperature_sweep_run(
    *, seeds: Sequence[int] = (0, 1, 2), steps: int = C27_STEPS, fixed_scale: float = 1.0
) -> Outcome:
    """C27 τ (:func:`c27_temperature_verdict`: 1/τ fixed at ``fixed_scale``, 1 in the chapter,
    against learned) with other seeds, budget or fixed scale."""
    learned = c27_clip_retrieval(seeds=seeds, steps=steps, logit_scale=None)
    fixed = c27_clip_retrieval(seeds=seeds, steps=steps, logit_scale=fixed_scale)
    verdict = c27_temperature_verdict(learned=learned, fixed=fixed)
    numbers = _c27_numbers(seeds, steps, learned=learned, fixed=fixed)
    return Outcome(verdict, {**numbers, "fixed 1/τ": fixed_scale})


def c27_learning_sweep_run(*, seeds: Sequence[int] = (0, 1, 2), steps: int = C27_STEPS):
    """C27 τ learned (:func:`c27_learning_verdict`: learned against fixed at 1/0.07) with other
    seeds or budget."""
    learned = c27_clip_retrieval(seeds=seeds, steps=steps, logit_scale=None)
    large = c27_clip_retrieval(seeds=seeds, steps=steps, logit_scale=CLIP_START_SCALE)
    verdict = c27_learning_verdict(learned=learned, fixed_large=large)
    return Outcome(verdict, _c27_numbers(seeds, steps, learned=learned, **{"1/τ = 14.3": large}))


# ------------------------------------------------------------------------------------------
# Sweep runners for the claims that no training decides (ViT cost, C25 cost, shift, pyramid)
# and for the remaining trained ones (ViT data, C25 task, C27 cross)
# ------------------------------------------------------------------------------------------

VIT_SIDES, VIT_PATCH, VIT_WIDTH, VIT_LAYERS, VIT_STEPS = (8, 16, 32, 64), 2, 32, 2, 200
VIT_SIZES = (150, 1347)


def vit_cost_sweep_run(
    *, sides: Sequence[int] = VIT_SIDES, patch_size: int = VIT_PATCH, d_model: int = VIT_WIDTH,
    num_layers: int = VIT_LAYERS,
) -> Outcome:  # fmt: skip
    """ViT cost (:func:`vit_cost_verdict`) with other image sides, patch size or model size:
    exact FLOP counts, untimed."""
    costs = [
        vit_cost(s, patch_size, d_model=d_model, num_layers=num_layers, timed=False) for s in sides
    ]
    tokens, flops = [c.seq_len for c in costs], [c.flops for c in costs]
    fit_ = quadratic_fit(tokens, flops)
    share = [4 * num_layers * d_model * n**2 / f for n, f in zip(tokens, flops, strict=True)]
    numbers = {
        "sides": list(sides), "patch": patch_size, "tokens": tokens,
        "N'² coefficient": round(fit_.c2, 3), "predicted 4·layers·d": 4 * num_layers * d_model,
        "attention's share, smallest": round(share[0], 3),
        "attention's share, largest": round(share[-1], 3),
    }  # fmt: skip
    verdict = vit_cost_verdict(tokens, flops, d_model=d_model, num_layers=num_layers)
    return Outcome(verdict, numbers)


_VIT_DATA_CACHE: dict = {}


def vit_data_accuracies(*, seeds: Sequence[int], steps: int, sizes=VIT_SIZES) -> dict:
    """``{(model, n_train): [test accuracy per seed]}``: the chapter's ViT and SmallCNN trained
    on ``n_train`` digits (``train_classifier``, Adam 3e-3, batches of 32, no clipping),
    tested on the 450 test digits; computed once per setting."""
    key = (tuple(seeds), steps, tuple(sizes))
    if key not in _VIT_DATA_CACHE:
        data = digits()
        test = (data.test_images.unsqueeze(1), data.test_labels)  # (450, 1, 8, 8), (450,)

        def build_vit() -> VisionTransformer:
            return VisionTransformer(
                8, VIT_PATCH, 1, 10, d_model=VIT_WIDTH, num_heads=4, num_layers=VIT_LAYERS,
                d_ff=2 * VIT_WIDTH,
            )  # fmt: skip

        out: dict = {}
        for n in sizes:
            for name, build in (("ViT", build_vit), ("CNN", SmallCNN)):
                out[name, n] = [
                    train_classifier(
                        build,
                        digit_batches(data.train_images, data.train_labels, n, seed),
                        steps=steps,
                        seed=seed,
                        clip=None,
                        test=test,
                    ).accuracy  # fmt: skip
                    for seed in seeds
                ]
        _VIT_DATA_CACHE[key] = out
    return _VIT_DATA_CACHE[key]


def vit_data_sweep_run(
    *, seeds: Sequence[int] = (0, 1, 2), steps: int = VIT_STEPS, sizes=VIT_SIZES
) -> Outcome:
    """ViT data (:func:`vit_data_verdict`: a lead of ``DATA_GAP`` with the fewer digits that
    shrinks by ``GAP_SHRINK`` with the more) with other seeds, budget or data sizes."""
    acc = vit_data_accuracies(seeds=seeds, steps=steps, sizes=sizes)
    small, full = sizes
    gap_small, gap_full = vit_data_gaps(
        vit_small=acc["ViT", small], cnn_small=acc["CNN", small],
        vit_full=acc["ViT", full], cnn_full=acc["CNN", full],
    )  # fmt: skip
    numbers = {"seeds": list(seeds), "steps": steps, "sizes": list(sizes)}
    numbers |= {f"{m} on {n}": round(_mean(v), 3) for (m, n), v in acc.items()}
    numbers |= {"gap, fewer": round(gap_small, 3), "gap, more": round(gap_full, 3),
                "shrinks by": round(gap_small - gap_full, 3)}  # fmt: skip
    return Outcome(vit_data_verdict(gap_small, gap_full), numbers)


C25_SIDES, C25_WIDTH, C25_WINDOW = (8, 16, 32), 32, 4


def _ratios(values: Sequence[float], spec: str) -> str:
    return ", ".join(f"{g:{spec}}" for g in growth(values))


def c25_cost_sweep_run(
    *, sides: Sequence[int] = C25_SIDES, window_size: int = C25_WINDOW
) -> Outcome:
    """C25 cost (:func:`c25_cost_verdict`) with other map sides or window sizes: one
    `SwinBlock` (shift ``window_size // 2``) against one global pre-LN `EncoderLayer`, width 32,
    2 heads, exact FLOPs and peak bytes (untimed)."""
    window, dense = [], []
    for side in sides:
        block = SwinBlock(C25_WIDTH, side, 2, window_size, shift=window_size // 2)
        layer = EncoderLayer(C25_WIDTH, 2, 4 * C25_WIDTH, pre_ln=True)
        window.append(layer_cost(block, side, C25_WIDTH, timed=False))
        dense.append(layer_cost(layer, side, C25_WIDTH, timed=False))
    kwargs = dict(
        tokens=[c.seq_len for c in window],
        window=[(c.flops, c.peak_bytes) for c in window],
        dense=[(c.flops, c.peak_bytes) for c in dense],
    )
    numbers = {
        "sides": list(sides), "window": window_size,
        "window FLOPs × per doubling": _ratios([c.flops for c in window], ".2f"),
        "window bytes ×": _ratios([c.peak_bytes for c in window], ".2f"),
        "global FLOPs ×": _ratios([c.flops for c in dense], ".1f"),
    }  # fmt: skip
    return Outcome(c25_cost_verdict(**kwargs), numbers)


def c25_field_maps(*, grid: int, window_size: int, depths: Sequence[int]) -> tuple[dict, Tensor]:
    """The chapter's receptive-field experiment: ``{(shifted, depth): field_map (G², G, G)}``
    of freshly initialised `swin_stack`s (width 16, ``torch.manual_seed(0)`` first), and every
    token's own regular window ``(G², G, G)``."""
    torch.manual_seed(0)
    maps = {
        (shifted, depth): field_map(
            swin_stack(depth, shifted=shifted, grid=grid, window_size=window_size), grid, 16
        )
        for shifted in (False, True)
        for depth in depths
    }
    own = torch.stack(
        [window_of((r, c), grid, window_size) for r in range(grid) for c in range(grid)]
    )  # (G², G, G)
    return maps, own


def c25_shift_sweep_run(
    *, grid: int = 16, window_size: int = C25_WINDOW, depths: Sequence[int] = (1, 2, 4)
) -> Outcome:
    """C25 shift (:func:`c25_shift_verdict`, judged on every token, the corners included)
    with other depths, window sizes or map sides."""
    maps, own = c25_field_maps(grid=grid, window_size=window_size, depths=depths)
    _, left, _, _, _ = _shift_parts(maps, own)
    corners = {"(0, 0)": 0, f"({grid - 1}, {grid - 1})": grid * grid - 1}
    numbers = {"grid": grid, "window": window_size, "depths": list(depths)}
    for d in depths:
        numbers[f"{d} block(s): tokens that leave their window"] = int(left[d].sum())
        for name, t in corners.items():
            numbers[f"{d} block(s): corner {name} sees"] = int(maps[True, d][t].sum())
    return Outcome(c25_shift_verdict(maps, own), numbers)


def c25_pyramid_sweep_run(*, side: int = 16, width: int = 16, stages: int = 3) -> Outcome:
    """C25 pyramid (:func:`c25_pyramid_verdict`; suitability for detection is not run) with
    other map sides or numbers of stages."""
    torch.manual_seed(0)
    x = torch.randn(2, side * side, width)  # (B, H·W, C)
    x, pyramid = swin_pyramid(x, side, width, stages=stages, window_size=C25_WINDOW)
    numbers = {
        "side": side, "stages": stages,
        "pyramid": " → ".join(f"{s}×{s}×{c}" for s, c in pyramid), "last tensor": list(x.shape),
    }  # fmt: skip
    return Outcome(c25_pyramid_verdict(pyramid, suits_detection=None), numbers)


C25_COPY_STEPS = 150
_C25_TASK_CACHE: dict = {}


def c25_task_sweep_run(
    *, seeds: Sequence[int] = (0, 1, 2), steps: int = C25_COPY_STEPS,
    window_size: int = C25_WINDOW,
) -> Outcome:  # fmt: skip
    """C25 task (:func:`c25_task_verdict`) with other seeds, budget or window size (8 × 8
    maps; the border columns are those whose right neighbour lies in the next window)."""
    key = (tuple(seeds), steps, window_size)
    if key not in _C25_TASK_CACHE:
        _C25_TASK_CACHE[key] = {
            (shifted, seed): train_neighbour_copy(
                shifted=shifted, seed=seed, steps=steps, window_size=window_size
            )
            for shifted in (False, True)
            for seed in seeds
        }
    runs = _C25_TASK_CACHE[key]
    kwargs = {
        f"{part}_{name}": [runs[shifted, seed][key_] for seed in seeds]
        for part, key_ in (("border", "border"), ("inside", "interior"))
        for name, shifted in (("shifted", True), ("regular", False))
    }
    numbers = {"seeds": list(seeds), "steps": steps, "window": window_size}
    numbers |= {k: round(_mean(v), 3) for k, v in kwargs.items()}
    numbers["border, regular, max"] = round(max(kwargs["border_regular"]), 3)
    numbers["border, shifted, min"] = round(min(kwargs["border_shifted"]), 3)
    return Outcome(c25_task_verdict(**kwargs), numbers)


C27_READER_STEPS = 300


def c27_cross_sweep_run(
    *, seeds: Sequence[int] = (0, 1, 2), steps: int = C27_READER_STEPS
) -> Outcome:
    """C27 cross (:func:`c27_cross_verdict`) with other seeds or budget."""
    data = digits()
    runs = [
        train_quadrant_reader(
            (data.train_images, data.train_labels),
            (data.test_images, data.test_labels),
            seed=seed,
            steps=steps,
        )  # fmt: skip
        for seed in seeds
    ]
    mass = [r["mass"].tolist() for r in runs]
    accuracy = [r["accuracy"] for r in runs]
    numbers = {
        "seeds": list(seeds), "steps": steps,
        "least mass on own quadrant": round(min(min(m) for m in mass), 3),
        "accuracy, mean": round(_mean(accuracy), 3),
        "accuracy, worst seed": round(min(accuracy), 3),
    }  # fmt: skip
    return Outcome(c27_cross_verdict(mass=mass, accuracy=accuracy), numbers)


# ------------------------------------------------------------------------------------------
# The sceptic's sweeps
# ------------------------------------------------------------------------------------------


def _sweep(claim, run, base_steps, long_steps, what) -> Sweep:
    return Sweep(
        claim,
        run=run,
        baseline={"seeds": [0, 1, 2], "steps": base_steps},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation(
                f"{long_steps} steps",
                f"a 3× longer training budget ({what})",
                {"steps": long_steps},
            ),  # fmt: skip
        ),
    )


SCEPTIC_SWEEPS = (
    _sweep("C26", c26_sweep_run, C26_STEPS, 3 * C26_STEPS, "every model, re-tuned"),
    _sweep("C26 attention", c26_attention_sweep_run, C26_STEPS, 3 * C26_STEPS, "re-tuned"),
    _sweep("C26 additions", c26_additions_sweep_run, C26_STEPS, 3 * C26_STEPS, "re-tuned"),
    _sweep("C26 linear", c26_linear_sweep_run, C26_STEPS, 3 * C26_STEPS, "re-tuned"),
    _sweep("C27 CLIP", c27_clip_sweep_run, C27_STEPS, 3 * C27_STEPS, "CLIP is undertrained"),
    _sweep("C27 τ", c27_temperature_sweep_run, C27_STEPS, 3 * C27_STEPS, "CLIP"),
    _sweep("C27 τ learned", c27_learning_sweep_run, C27_STEPS, 3 * C27_STEPS, "CLIP"),
    _sweep("C27 cross", c27_cross_sweep_run, C27_READER_STEPS, 3 * C27_READER_STEPS, "reader"),
    Sweep(
        "ViT data",
        run=vit_data_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": VIT_STEPS, "sizes": list(VIT_SIZES)},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation(
                f"{3 * VIT_STEPS} steps",
                "a 3× longer budget (the ViT's loss is still falling at 200)",
                {"steps": 3 * VIT_STEPS},
            ),  # fmt: skip
            Perturbation("75 vs 600 digits", "other data sizes", {"sizes": [75, 600]}),
        ),
    ),
    Sweep(
        "ViT cost",
        run=vit_cost_sweep_run,
        baseline={
            "sides": list(VIT_SIDES),
            "patch_size": VIT_PATCH,
            "d_model": VIT_WIDTH,
            "num_layers": VIT_LAYERS,
        },  # fmt: skip
        perturbations=(
            Perturbation("patches of 4", "coarser patches, same sides", {"patch_size": 4}),
            Perturbation("sides 12–96", "other image sides", {"sides": [12, 24, 48, 96]}),
            Perturbation("width 64, 4 layers", "a larger model", {"d_model": 64, "num_layers": 4}),
        ),
    ),
    Sweep(
        "C25 cost",
        run=c25_cost_sweep_run,
        baseline={"sides": list(C25_SIDES), "window_size": C25_WINDOW},
        perturbations=(
            Perturbation("sides 16–64", "larger maps", {"sides": [16, 32, 64]}),
            Perturbation("window 2", "smaller windows", {"window_size": 2}),
            Perturbation(
                "window 8, sides 16–64", "larger windows", {"window_size": 8, "sides": [16, 32, 64]}
            ),
        ),
    ),
    Sweep(
        "C25 shift",
        run=c25_shift_sweep_run,
        baseline={"grid": 16, "window_size": C25_WINDOW, "depths": [1, 2, 4]},
        perturbations=(
            Perturbation("depths 1–2", "stop at two blocks (corner tokens)", {"depths": [1, 2]}),
            Perturbation("depths 1–3", "an odd depth", {"depths": [1, 2, 3]}),
            Perturbation("window 8", "larger windows, same map", {"window_size": 8}),
            Perturbation("grid 8", "a smaller map", {"grid": 8}),
        ),
    ),
    Sweep(
        "C25 pyramid",
        run=c25_pyramid_sweep_run,
        baseline={"side": 16, "stages": 3},
        perturbations=(
            Perturbation(
                "side 32, 4 stages", "a larger map, one more stage", {"side": 32, "stages": 4}
            ),
            Perturbation("side 8, 2 stages", "a smaller map", {"side": 8, "stages": 2}),
        ),
    ),
    Sweep(
        "C25 task",
        run=c25_task_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": C25_COPY_STEPS, "window_size": C25_WINDOW},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation(
                f"{3 * C25_COPY_STEPS} steps", "a 3× longer budget", {"steps": 3 * C25_COPY_STEPS}
            ),
            Perturbation("window 2", "2 × 2 windows: three border columns", {"window_size": 2}),
        ),
    ),
)
