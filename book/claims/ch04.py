"""Claims of chapter 4 (positional encoding): thresholds, verdicts, asserts, seed loop.

Every verdict the chapter records comes from a function here, judged on the measured numbers
with thresholds fixed from the claim (``tests/book/test_claims_ch04.py`` feeds each one the
cases that give each of its verdicts). The models, task and training step these numbers
come from are on the chapter's page (``book.pages.ch04``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

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
    "c11_verdict",
    "c12_verdict",
    "c13_verdict",
    "c14_verdict",
    "c15_verdict",
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
