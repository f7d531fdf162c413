"""Claims of chapter 4 (positional encoding): thresholds, verdicts, asserts, seed loop.

Every verdict the chapter records comes from a function here, judged on the measured numbers
with thresholds fixed from the claim (``tests/book/test_claims_ch04.py`` feeds each one the
cases that give each of its verdicts). The models, task and training step these numbers
come from are on the chapter's page (``book.pages.ch04``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from attention.heads import MultiHeadAttention
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rope,
    sinusoidal_encoding,
)
from book.pages.ch04 import (
    build_lookback_model,
    fit_shift_matrix,
    lookback_accuracy,
    sinusoidal_shift_matrix,
    sinusoidal_wavelengths,
    train_lookback,
    zero_crossings,
)
from book.sceptic import Outcome, Perturbation, Sweep

__all__ = [
    "BETTER",
    "C11_BROKEN",
    "C11_EQUIVARIANT",
    "C11_POOLED",
    "C12_WAVELENGTH",
    "C13_EXACT",
    "C13_FIT",
    "C15_EXACT",
    "DROP",
    "LEARNED",
    "assert_c14_quality_drops_past_training_length",
    "assert_c15_rope_extrapolates_better",
    "SCEPTIC_SWEEPS",
    "c11_sweep_run",
    "c11_verdict",
    "c12_sweep_run",
    "c13_sweep_run",
    "c12_verdict",
    "c13_verdict",
    "c14_verdict",
    "c14_sweep_run",
    "c15_sweep_run",
    "c15_verdict",
    "learned_pe_sweep_run",
    "learned_pe_verdict",
    "lookback_accuracy_over_seeds",
]

# C11 is an identity: equal outputs up to float32 rounding (a few 1e-7 on these sizes), and a
# position signal that moves a word's output by a visible amount.
C11_EQUIVARIANT = 1e-5  # max |attn(Px) - P attn(x)| over the permutations
C11_POOLED = 1e-6  # the two sentences' mean-pooled vectors
C11_BROKEN = 0.05  # with positions, a word's output moves by more than this
# C12: the measured wavelengths (from zero crossings) follow 2π·10000^(2i/d) within 5%: a
# count of crossings over 1,000 positions is exact to one crossing, i.e. to 5% at 20.
C12_WAVELENGTH = 0.05
# C13 is an identity in float64: a shift error and a least-squares fit at rounding level.
C13_EXACT = 1e-12  # max |PE[p+k] - M_k PE[p]| over all p
C13_FIT = 1e-8  # max |M_fit - M_k| on a well-conditioned table (d = 16)
C15_EXACT = 1e-12  # spread of q·k along a diagonal m - n = const (float64)
# C14/C15 (look-back task), fixed from the claims before the run: the model "learned the task"
# when every seed reaches 0.9 at the training length; "quality drops" means the mean falls by
# at least 0.3 (a third of the range from perfect to chance); "better" means a mean at least
# 0.1 higher (more than the spread of one model's accuracy over 512 test sequences).
LEARNED, DROP, BETTER = 0.9, 0.3, 0.1


def _mean(values: Sequence[float]) -> float:
    values = list(values)
    if not values:
        raise ValueError("need at least one seed")
    return sum(values) / len(values)


def c11_verdict(*, perm_error: float, pooled_gap: float, position_gaps: Mapping[str, float]) -> str:
    """C11: "reproduced" when attention is equivariant (``perm_error`` < :data:`C11_EQUIVARIANT`,
    ``pooled_gap`` < :data:`C11_POOLED`) and every position scheme of ``position_gaps`` (name
    -> largest change of a word's output when the sentence is reversed) breaks the symmetry
    (> :data:`C11_BROKEN`); "partly" when equivariant but some scheme leaves the two sentences
    alike; "not reproduced" when attention is not equivariant."""
    if not position_gaps:
        raise ValueError("position_gaps must hold at least one positional scheme")
    if not (perm_error < C11_EQUIVARIANT and pooled_gap < C11_POOLED):
        return "not reproduced"
    if all(g > C11_BROKEN for g in position_gaps.values()):
        return "reproduced"
    return "partly"


def c12_verdict(crossings: Sequence[int], *, max_rel_error: float) -> str:
    """C12 from the zero crossings of each sin channel (pair 0 first) and the largest relative
    error of the measured wavelengths against the formula: "reproduced" when the frequency
    never rises with the channel, spans fast to still (the first pair crosses more than 100
    times as often as the last) and the wavelengths follow the formula (within
    :data:`C12_WAVELENGTH`); "partly" when the multi-scale ordering holds but the wavelengths
    do not follow the formula; "not reproduced" when the frequency rises somewhere or does not
    span scales."""
    crossings = list(crossings)
    if len(crossings) < 2:
        raise ValueError(f"crossings must hold at least two channels, got {crossings}")
    falls = all(b <= a for a, b in zip(crossings, crossings[1:], strict=False))
    spans = crossings[0] > 100 * max(crossings[-1], 1)
    if not (falls and spans):
        return "not reproduced"
    return "reproduced" if max_rel_error < C12_WAVELENGTH else "partly"


def c13_verdict(*, shift_error: float, fit_gap: float) -> str:
    """C13: "reproduced" when one matrix shifts every position exactly (``shift_error`` <
    :data:`C13_EXACT`) and a least-squares fit from the table alone finds that matrix
    (``fit_gap`` < :data:`C13_FIT`); "partly" when the shift is exact but the fit finds another
    matrix; "not reproduced" when no single matrix shifts every position."""
    if shift_error >= C13_EXACT:
        return "not reproduced"
    return "reproduced" if fit_gap < C13_FIT else "partly"


def learned_pe_verdict(
    *,
    params: Mapping[int, int],
    d_model: int,
    refuses_past_table: bool,
    in_range: Sequence[float],
    past_trained: Sequence[float],
) -> str:
    """The learned table's two parts: parameters linear in max_len (``params[max_len] ==
    d_model * max_len`` for every size measured), and "locked to the trained length" (the
    table refuses positions past its end, ``refuses_past_table``, and a larger table's mean
    accuracy over seeds just past the trained lengths, ``past_trained``, is at least
    :data:`DROP` below its mean in range, ``in_range``). Both: "reproduced"; one: "partly";
    neither: "not reproduced"."""
    if not params:
        raise ValueError("params must hold at least one table size")
    linear = all(count == d_model * n for n, count in params.items())
    locked = refuses_past_table and _mean(in_range) - _mean(past_trained) >= DROP
    if linear and locked:
        return "reproduced"
    return "partly" if linear or locked else "not reproduced"


def _beyond(accuracy: Mapping[int, Sequence[float]], train_max: int) -> list[int]:
    if train_max not in accuracy:
        raise ValueError(f"accuracy has no entry at train_max={train_max}")
    beyond = [n for n in accuracy if n >= 2 * train_max]
    if not beyond:
        raise ValueError(f"accuracy has no test length >= 2 * train_max = {2 * train_max}")
    return beyond


def assert_c14_quality_drops_past_training_length(
    accuracy: Mapping[int, Sequence[float]], *, train_max: int, learned: float, drop: float
) -> None:
    """C14: a sinusoidal model that learned the task in range loses quality past it.

    ``accuracy[n]`` holds one accuracy per seed at test length ``n``. Fails unless every seed
    reaches ``learned`` at ``train_max`` (the model did learn the task), and the mean accuracy
    at every tested length of at least ``2 * train_max`` is at least ``drop`` below the mean at
    ``train_max``. (Lengths between ``train_max`` and twice it are reported, not judged.)
    """
    beyond = _beyond(accuracy, train_max)
    in_range = accuracy[train_max]
    if min(in_range) < learned:
        raise AssertionError(
            f"at the training length {train_max} a seed reached only {min(in_range):.3f} "
            f"(< {learned}): the model did not learn the task, so a drop says nothing"
        )
    for n in beyond:
        if _mean(in_range) - _mean(accuracy[n]) < drop:
            raise AssertionError(
                f"at {n} tokens the mean accuracy {_mean(accuracy[n]):.3f} is within {drop} of "
                f"{_mean(in_range):.3f} at {train_max}: quality does not drop"
            )


def c14_verdict(accuracy: Mapping[int, Sequence[float]], *, train_max: int, params: int) -> str:
    """C14 (``accuracy[n]``: one sinusoidal accuracy per seed at length ``n``): "reproduced"
    when the encoding has no parameters, every seed learned the task in range (:data:`LEARNED`)
    and the mean drops by :data:`DROP` at every length of at least twice the training length;
    "partly" when it drops at some of those lengths only; "not reproduced" when it has
    parameters, did not learn the task (nothing to extrapolate) or never drops."""
    beyond = _beyond(accuracy, train_max)
    if params != 0 or min(accuracy[train_max]) < LEARNED:
        return "not reproduced"
    top = _mean(accuracy[train_max])
    dropped = [top - _mean(accuracy[n]) >= DROP for n in beyond]
    if all(dropped):
        return "reproduced"
    return "partly" if any(dropped) else "not reproduced"


def assert_c15_rope_extrapolates_better(
    rope: Mapping[int, Sequence[float]],
    other: Mapping[int, Sequence[float]],
    *,
    lengths: Sequence[int],
    margin: float,
) -> None:
    """C15's "extrapolates better": RoPE's mean accuracy beats ``other``'s at each length.

    ``rope[n]`` and ``other[n]`` hold one accuracy per seed at test length ``n``; at every
    length in ``lengths`` (past the training lengths) RoPE's mean must exceed the other
    encoding's mean by at least ``margin``.
    """
    for n in lengths:
        if n not in rope or n not in other:
            raise ValueError(f"no accuracy at length {n} for both encodings")
        gap = _mean(rope[n]) - _mean(other[n])
        if gap < margin:
            raise AssertionError(
                f"at {n} tokens RoPE's mean accuracy {_mean(rope[n]):.3f} beats the other "
                f"encoding's {_mean(other[n]):.3f} by {gap:.3f} < {margin}: not better"
            )


def c15_verdict(
    *,
    diagonal_spread: float,
    params: int,
    rope: Mapping[int, Sequence[float]],
    other: Mapping[int, Sequence[float]],
    near: Sequence[int],
    far: int,
    train_max: int,
) -> str:
    """C15's parts: *exact* (scores depend on m - n only, ``diagonal_spread`` <
    :data:`C15_EXACT`, and no parameters), *better* (RoPE's mean beats ``other``'s by
    :data:`BETTER` at every length of ``near``) and *extrapolates* (RoPE keeps its accuracy at
    ``far``: its mean there within :data:`DROP` of its mean at ``train_max``). "reproduced"
    when all three hold; "partly" when exact and better hold but RoPE too loses its accuracy
    far out, or when only one of exact and better holds; "not reproduced" when neither does."""
    exact = diagonal_spread < C15_EXACT and params == 0
    better = all(_mean(rope[n]) - _mean(other[n]) >= BETTER for n in near)
    extrapolates = _mean(rope[train_max]) - _mean(rope[far]) < DROP
    if exact and better and extrapolates:
        return "reproduced"
    return "partly" if exact or better else "not reproduced"


def lookback_accuracy_over_seeds(
    run: Callable[[int], Sequence[float | None]],
    lengths: Sequence[int],
    *,
    seeds: Sequence[int],
    done: Mapping[int, Sequence[float | None]] | None = None,
) -> dict[int, list[float | None]]:
    """``{length: [accuracy of each seed]}``: ``run(seed)`` (build, train and test one model:
    one accuracy per length of ``lengths``) for each seed in order; seeds in ``done`` (seed ->
    accuracies) are taken as given, not rerun."""
    done = dict(done or {})
    by_seed = {seed: list(done[seed]) if seed in done else list(run(seed)) for seed in seeds}
    for seed, accs in by_seed.items():
        if len(accs) != len(lengths):
            raise ValueError(
                f"seed {seed} has {len(accs)} accuracies, expected one per length ({len(lengths)})"
            )
    return {n: [by_seed[s][i] for s in seeds] for i, n in enumerate(lengths)}


# ------------------------------------------------------------------------------------------
# C14 and C15 under a sceptic's changes (book.sceptic; make sceptic CH=04 CLAIM=C15)
# ------------------------------------------------------------------------------------------

# The chapter's setting (section 4.6): trained on 8-32 tokens, 3 back, judged at these lengths.
SWEEP_TRAIN_MIN, SWEEP_TRAIN_MAX, SWEEP_OFFSET = 8, 32, 3
SWEEP_LENGTHS = (32, 48, 64, 96, 128)


_LOOKBACK_RUNS: dict[tuple, tuple[int, tuple[float, ...]]] = {}


def _lookback_run(
    positional: str, seed: int, steps: int, num_layers: int, d_model: int
) -> tuple[int, tuple[float, ...]]:
    """Build and train one look-back model as section 4.6 does (the page's
    ``build_lookback_model``, ``train_lookback``) and test it at :data:`SWEEP_LENGTHS`:
    (positional parameters, accuracies). Cached: C14's and C15's sweeps share the
    sinusoidal runs."""
    key = (positional, seed, steps, num_layers, d_model)
    if key in _LOOKBACK_RUNS:
        return _LOOKBACK_RUNS[key]
    torch.set_num_threads(1)  # as the chapter: tiny models run fastest on one thread
    model = build_lookback_model(positional, 128, seed=seed, num_layers=num_layers, d_model=d_model)
    train_lookback(
        model,
        steps=steps,
        min_len=SWEEP_TRAIN_MIN,
        max_len=SWEEP_TRAIN_MAX,
        offset=SWEEP_OFFSET,
        seed=seed,
    )
    params = 0 if model.pos is None else sum(p.numel() for p in model.pos.parameters())
    accuracies = [lookback_accuracy(model, n, offset=SWEEP_OFFSET) for n in SWEEP_LENGTHS]
    _LOOKBACK_RUNS[key] = params, tuple(float(a) for a in accuracies)
    return _LOOKBACK_RUNS[key]


def _lookback_over_seeds(positional: str, seeds, **setting) -> tuple[int, dict[int, list[float]]]:
    runs = [_lookback_run(positional, seed, **setting) for seed in seeds]
    accuracy = {n: [accs[i] for _, accs in runs] for i, n in enumerate(SWEEP_LENGTHS)}
    return max(params for params, _ in runs), accuracy


def _means(accuracy: Mapping[int, Sequence[float]], lengths: Sequence[int]) -> str:
    """Mean accuracy over the seeds at each length, "1.00 / 0.11 / …"."""
    return " / ".join(f"{_mean(accuracy[n]):.2f}" for n in lengths)


def c14_sweep_run(*, seeds: list[int], steps: int, num_layers: int, d_model: int) -> Outcome:
    """C14 (:func:`c14_verdict`) on the sinusoidal look-back model of section 4.6, trained on
    each of ``seeds``; the numbers: mean accuracy over the seeds by test length, and the worst
    seed in range."""
    params, accuracy = _lookback_over_seeds(
        "sinusoidal", seeds, steps=steps, num_layers=num_layers, d_model=d_model
    )
    return Outcome(
        c14_verdict(accuracy, train_max=SWEEP_TRAIN_MAX, params=params),
        {
            "model": f"{num_layers} layer(s), d_model {d_model}, {steps} steps, seeds {seeds}",
            "mean accuracy at 32/48/64/96/128 tokens": _means(accuracy, SWEEP_LENGTHS),
            "worst seed at 32": round(min(accuracy[SWEEP_TRAIN_MAX]), 3),
            "positional parameters": params,
        },
    )


def _rope_diagonal_spread() -> float:
    """Section 4.5's test: one q and one k (seed 7) at every pair of 64 positions; the largest
    spread of the score along a diagonal m - n = const (float64)."""
    gen = torch.Generator().manual_seed(7)
    q_vec, k_vec = torch.randn(2, 16, generator=gen, dtype=torch.float64)  # (Dh,) each
    q_at = apply_rope(q_vec.expand(1, 1, 64, 16))[0, 0]  # (64, Dh)
    k_at = apply_rope(k_vec.expand(1, 1, 64, 16))[0, 0]  # (64, Dh)
    scores = q_at @ k_at.T  # (64, 64)
    return max(
        float(scores.diagonal(offset=d).max() - scores.diagonal(offset=d).min())
        for d in range(-63, 64)
    )


def c15_sweep_run(*, seeds: list[int], steps: int, num_layers: int, d_model: int) -> Outcome:
    """C15 (:func:`c15_verdict`): RoPE against the sinusoidal model of section 4.6, both
    trained on each of ``seeds``; "better" judged at 48 and 64 tokens, "extrapolates" at 128."""
    setting = {"steps": steps, "num_layers": num_layers, "d_model": d_model}
    rope_params, rope = _lookback_over_seeds("rope", seeds, **setting)
    _, sinusoidal = _lookback_over_seeds("sinusoidal", seeds, **setting)
    near, far = [48, 64], 4 * SWEEP_TRAIN_MAX
    return Outcome(
        c15_verdict(
            diagonal_spread=_rope_diagonal_spread(),
            params=rope_params,
            rope=rope,
            other=sinusoidal,
            near=near,
            far=far,
            train_max=SWEEP_TRAIN_MAX,
        ),
        {
            "model": f"{num_layers} layer(s), d_model {d_model}, {steps} steps, seeds {seeds}",
            "RoPE mean accuracy at 32/48/64/128 tokens": _means(
                rope, [SWEEP_TRAIN_MAX, *near, far]
            ),
            "sinusoidal": _means(sinusoidal, [SWEEP_TRAIN_MAX, *near, far]),
            "RoPE worst seed at 128": round(min(rope[far]), 3),
        },
    )


# ------------------------------------------------------------------------------------------
# C11, C12, C13 and the learned table under a sceptic's changes
# ------------------------------------------------------------------------------------------

_WORST = {verdict: rank for rank, verdict in enumerate(("not reproduced", "partly", "reproduced"))}


@torch.no_grad()
def _c11_numbers(seed: int, length: int, d_model: int, num_heads: int, permutations: int):
    """Section 4.1's measurements with ``seed`` (0: the chapter's): the three-word sentences
    (word vectors from seed ``4 + seed``, the layer from ``seed``) and ``permutations`` random
    permutations of ``length`` random tokens (seed ``5 + seed``); position gaps on the
    sentences and on the ``length`` tokens read backwards."""
    gen = torch.Generator().manual_seed(4 + seed)
    embedding = torch.randn(3, d_model, generator=gen)  # (V, D): "I", "love", "you"
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, num_heads=num_heads).eval()
    swap = torch.tensor([2, 1, 0])
    x_a = embedding.unsqueeze(0)  # (1, 3, D): "I love you"
    x_b = x_a[:, swap]  # (1, 3, D): "you love I"
    out_a, out_b = mha(x_a)[0], mha(x_b)[0]  # (3, D) each
    gen = torch.Generator().manual_seed(5 + seed)
    x = torch.randn(1, length, d_model, generator=gen)  # (1, L, D)
    out = mha(x)  # (1, L, D)
    perm_error = 0.0
    for _ in range(permutations):
        perm = torch.randperm(length, generator=gen)
        perm_error = max(perm_error, float((mha(x[:, perm]) - out[:, perm]).abs().max()))
    sinusoidal = SinusoidalPositionalEncoding(d_model, max_len=max(16, length))
    mha_rope = MultiHeadAttention(
        d_model, num_heads=num_heads, rotary=RotaryEmbedding(d_model // num_heads)
    ).eval()
    mha_rope.load_state_dict(mha.state_dict())  # same weights; RoPE adds none
    back = torch.arange(length - 1, -1, -1)  # the L tokens read backwards

    def gap(layer, add, first, second, order):
        return float((layer(add(second))[0] - layer(add(first))[0][order]).abs().max())

    def same(t):
        return t

    gaps = {
        "sinusoidal": gap(mha, sinusoidal, x_a, x_b, swap),
        "RoPE": gap(mha_rope, same, x_a, x_b, swap),
        f"sinusoidal, {length} tokens reversed": gap(mha, sinusoidal, x, x[:, back], back),
        f"RoPE, {length} tokens reversed": gap(mha_rope, same, x, x[:, back], back),
    }
    pooled_gap = float((out_a.mean(0) - out_b.mean(0)).abs().max())
    return perm_error, pooled_gap, gaps


def c11_sweep_run(
    *, seeds: list[int], length: int, d_model: int, num_heads: int, permutations: int
) -> Outcome:
    """C11 (:func:`c11_verdict`) on section 4.1's measurements for each of ``seeds`` (new word
    vectors, layer weights and random tokens; seed 0 is the chapter's), ``permutations``
    permutations of ``length`` tokens, a ``num_heads``-head layer of width ``d_model``. The
    verdict is the worst seed's; the numbers the worst case over the seeds (largest
    permutation error and pooled gap, smallest position gap)."""
    runs = [_c11_numbers(s, length, d_model, num_heads, permutations) for s in seeds]
    verdicts = [c11_verdict(perm_error=p, pooled_gap=g, position_gaps=gaps) for p, g, gaps in runs]

    def smallest(names: Sequence[str]) -> str:
        return " / ".join(f"{min(gaps[n] for _, _, gaps in runs):.2f}" for n in names)

    sentence, long = list(runs[0][2])[:2], list(runs[0][2])[2:]
    return Outcome(
        min(verdicts, key=_WORST.__getitem__),
        {
            "setting": f"d_model {d_model}, {num_heads} heads, {length} tokens, seeds {seeds}",
            "max |attn(Px) - P attn(x)|": f"{max(p for p, _, _ in runs):.0e}",
            "pooled gap": f"{max(g for _, g, _ in runs):.0e}",
            "smallest position gap, sentence (sin / RoPE)": smallest(sentence),
            "position gap, the tokens reversed (sin / RoPE)": smallest(long),
            f"seeds with a position gap under {C11_BROKEN}": (
                f"{sum(min(gaps.values()) <= C11_BROKEN for _, _, gaps in runs)} of {len(seeds)}"
            ),
        },
    )


def c12_sweep_run(*, d_model: int, length: int, base: float) -> Outcome:
    """C12 (:func:`c12_verdict`) as section 4.2 measures it: zero crossings of each sin channel
    of a ``(length, d_model)`` table with ``base``, and the wavelengths of the pairs with at
    least 20 crossings against ``2π · base^(2i/d)``."""
    table = sinusoidal_encoding(length, d_model, base=base, dtype=torch.float64)  # (L, D)
    crossings = zero_crossings(table[:, 0::2])  # (D/2,)
    wavelengths = sinusoidal_wavelengths(d_model, base)  # (D/2,)
    measured = 2 * (length - 1) / crossings.clamp(min=1).double()  # (D/2,)
    well_sampled = crossings >= 20
    rel_error = (
        float((measured[well_sampled] / wavelengths[well_sampled] - 1).abs().max())
        if bool(well_sampled.any())
        else 0.0
    )
    return Outcome(
        c12_verdict(crossings.tolist(), max_rel_error=rel_error),
        {
            "setting": f"d_model {d_model}, {length} positions, base {base:g}",
            "crossings, first / last pair": f"{int(crossings[0])} / {int(crossings[-1])}",
            "wavelengths off the formula by at most": f"{100 * rel_error:.1f}%",
        },
    )


def c13_sweep_run(
    *, d_model: int, length: int, base: float, offsets: list[int], fit_offset: int
) -> Outcome:
    """C13 (:func:`c13_verdict`) as section 4.3 measures it, in float64: the largest error of
    ``M_k`` over every position of a ``(length, d_model)`` table (``base``) for each k of
    ``offsets``, and how far a least-squares fit from the table alone lands from
    ``M_fit_offset``."""
    table = sinusoidal_encoding(length, d_model, base=base, dtype=torch.float64)  # (L, D)
    shift_error = max(
        float((table[k:] - table[:-k] @ sinusoidal_shift_matrix(k, d_model, base).T).abs().max())
        for k in offsets
    )
    m_fit = fit_shift_matrix(table, fit_offset)  # (D, D)
    fit_gap = float((m_fit - sinusoidal_shift_matrix(fit_offset, d_model, base)).abs().max())
    return Outcome(
        c13_verdict(shift_error=shift_error, fit_gap=fit_gap),
        {
            "setting": f"d_model {d_model}, {length} positions, base {base:g}, k {offsets}",
            "shift error": f"{shift_error:.0e}",
            f"|M_fit - M_{fit_offset}|": f"{fit_gap:.0e}" if fit_gap < 0.01 else f"{fit_gap:.2f}",
        },
    )


# Section 4.4's parameter counts (d_model 768) and the table that must refuse position 32.
_LEARNED_MAX_LENS = (128, 256, 512, 1024, 2048, 4096)


def learned_pe_sweep_run(*, seeds: list[int], steps: int, num_layers: int, d_model: int) -> Outcome:
    """The learned table (:func:`learned_pe_verdict`): parameters of 768-wide tables of
    section 4.4's sizes, whether a table of 32 refuses a 33rd position, and section 4.6's
    look-back model with a table of 128 trained on 8-32 tokens on each of ``seeds``, judged
    at 32 tokens (in range) and 48 (rows 32-47 untrained)."""
    params = {
        n: LearnedPositionalEmbedding(768, max_len=n).weight.numel() for n in _LEARNED_MAX_LENS
    }
    try:
        LearnedPositionalEmbedding(max_len=32, d_model=16)(torch.zeros(1, 33, 16))
        refuses = False
    except ValueError:
        refuses = True
    _, accuracy = _lookback_over_seeds(
        "learned", seeds, steps=steps, num_layers=num_layers, d_model=d_model
    )
    return Outcome(
        learned_pe_verdict(
            params=params,
            d_model=768,
            refuses_past_table=refuses,
            in_range=accuracy[SWEEP_TRAIN_MAX],
            past_trained=accuracy[48],
        ),
        {
            "model": f"{num_layers} layer(s), d_model {d_model}, {steps} steps, seeds {seeds}",
            "table of 32 refuses a 33rd position": refuses,
            "mean accuracy at 32/48/64/96/128 tokens": _means(accuracy, SWEEP_LENGTHS),
            "worst seed at 32": round(min(accuracy[SWEEP_TRAIN_MAX]), 3),
        },
    )


# The changes C14's and C15's verdicts are re-run under: the chapter shows seeds 0-2, 400
# steps, one layer, d_model 32. The sceptic: model size (2 layers and d = 64 keep
# RoPE's accuracy far further out), then seeds and a 3x budget.
_LOOKBACK_BASELINE = {"seeds": [0, 1, 2], "steps": 400, "num_layers": 1, "d_model": 32}
_LOOKBACK_PERTURBATIONS = (
    Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
    Perturbation("1200 steps", "a 3× longer training budget", {"steps": 1200}),
    Perturbation("d_model 64", "a wider model (one layer)", {"d_model": 64}),
    Perturbation(
        "2 layers, d_model 64", "a deeper and wider model", {"num_layers": 2, "d_model": 64}
    ),
)
SCEPTIC_SWEEPS = (
    # C11, an identity: other random inputs and weights, a long and a short sequence, a wider
    # layer; positions (sinusoidal, RoPE) are the case that must break it.
    Sweep(
        "C11",
        c11_sweep_run,
        {"seeds": [0], "length": 10, "d_model": 8, "num_heads": 2, "permutations": 100},
        (
            Perturbation(
                "seeds 1–4", "other word vectors, weights and tokens", {"seeds": [1, 2, 3, 4]}
            ),
            Perturbation("1,000 tokens", "permutations of a long sequence", {"length": 1000}),
            Perturbation("2 tokens", "the shortest sequence with an order", {"length": 2}),
            Perturbation(
                "d_model 512, 8 heads",
                "a layer of a real model's width",
                {"d_model": 512, "num_heads": 8},
            ),
        ),
    ),
    # C12: the width, the window the frequencies are counted over, and the base.
    Sweep(
        "C12",
        c12_sweep_run,
        {"d_model": 64, "length": 1000, "base": 10000.0},
        (
            Perturbation("d_model 512", "a real model's width", {"d_model": 512}),
            Perturbation("4,000 positions", "a longer window", {"length": 4000}),
            Perturbation("250 positions", "a shorter window", {"length": 250}),
            Perturbation("base 10", "a small base: wavelengths 2π to 2π·10", {"base": 10.0}),
        ),
    ),
    # C13: the width (where the fit is ill-conditioned), a longer table, far offsets, the base.
    Sweep(
        "C13",
        c13_sweep_run,
        {"d_model": 16, "length": 1000, "base": 10000.0, "offsets": [1, 5, 50], "fit_offset": 5},
        (
            Perturbation("d_model 64", "a wider table", {"d_model": 64}),
            Perturbation(
                "d_model 64, 10,000 positions",
                "a wider table fitted on ten times the positions",
                {"d_model": 64, "length": 10000},
            ),
            Perturbation(
                "k 500 and 900",
                "offsets of half the table and more",
                {"offsets": [500, 900], "fit_offset": 200},
            ),
            Perturbation("base 100", "another base", {"base": 100.0}),
        ),
    ),
    Sweep("C14", c14_sweep_run, _LOOKBACK_BASELINE, _LOOKBACK_PERTURBATIONS),
    Sweep("C15", c15_sweep_run, _LOOKBACK_BASELINE, _LOOKBACK_PERTURBATIONS),
    # The learned table: the same changes as C14 and C15 (whether more training or a bigger
    # model makes use of rows no training sequence reached).
    Sweep("§4 learned PE", learned_pe_sweep_run, _LOOKBACK_BASELINE, _LOOKBACK_PERTURBATIONS),
)
