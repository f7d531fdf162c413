"""Claims of chapter 5 (long-range dependencies and their cost): thresholds, verdicts, asserts.

Every verdict the chapter records comes from a function here, judged on the measured numbers
with thresholds fixed from the claim (``tests/book/test_claims_ch05.py`` feeds each one the
cases that give each of its verdicts, a false case among them). The task, the models and the
tools that read a trained model's attention are on the chapter's page (``book.pages.ch05``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# C16, from the claim ("gradients do not vanish with distance", against an RNN's "O(n)"), fixed
# before the run: a recurrent gradient has vanished when its mean at distances 200-255 is below
# these fractions of its mean at distances 1-10 (the tanh RNN and the LSTM at torch's default
# initialisation: dozens of orders of magnitude); attention's is flat when the fitted factor per
# token is within C16_FLAT_RATE of 1 and far/near lies in C16_FLAT_BAND (a factor of 2 either way).
C16_RNN_VANISHED, C16_LSTM_VANISHED = 1e-30, 1e-20
C16_FLAT_RATE, C16_FLAT_BAND = 0.01, (0.5, 2.0)


def assert_c16_paths(
    rnn: Sequence[int | None],
    attention: dict[str, Sequence[int | None]],
    control: Sequence[int | None],
) -> None:
    """C16, paths in rounds indexed by distance ``d``: the RNN crosses ``d + 1`` cell
    applications, every attention model one layer at every distance, and the per-token control
    (no mixing) has no path from any other token."""
    assert all(p == d + 1 for d, p in enumerate(rnn)), f"RNN path is not d + 1: {list(rnn)}"
    for name, paths in attention.items():
        assert all(p == 1 for p in paths), f"{name}: path is not one layer everywhere: {paths}"
    assert control[0] == 1 and all(p is None for p in control[1:]), (
        f"the no-mixing control must reach its own token only, got {list(control)}"
    )


def c16_verdict(
    *,
    recurrent_far_near: Mapping[str, float],
    attention_rates: Mapping[str, float],
    attention_far_near: Mapping[str, float],
) -> str:
    """C16's gradient half. ``recurrent_far_near``: far/near gradient ratio of ``"RNN (tanh)"``
    and ``"LSTM"``; ``attention_*``: per attention model, the fitted gradient factor per token
    and the far/near ratio. "reproduced" when every attention gradient is flat in the distance
    and both recurrent ones vanished (below :data:`C16_RNN_VANISHED` /
    :data:`C16_LSTM_VANISHED`); "partly" when attention is flat but a recurrent gradient did
    not vanish (the contrast the claim draws fails, as for an LSTM with a forget-gate bias);
    "not reproduced" when an attention gradient is not flat."""
    if not attention_rates or set(attention_rates) != set(attention_far_near):
        raise ValueError(
            "attention_rates and attention_far_near must name the same attention models, got "
            f"{sorted(attention_rates)} and {sorted(attention_far_near)}"
        )
    low, high = C16_FLAT_BAND
    flat = all(abs(r - 1.0) < C16_FLAT_RATE for r in attention_rates.values()) and all(
        low < f < high for f in attention_far_near.values()
    )
    if not flat:
        return "not reproduced"
    vanished = (
        recurrent_far_near["RNN (tanh)"] < C16_RNN_VANISHED
        and recurrent_far_near["LSTM"] < C16_LSTM_VANISHED
    )
    return "reproduced" if vanished else "partly"


# C17's thresholds, from the claim ("the topic and the conclusion attend to each other while
# filler gets little weight"), fixed before the runs.
C17_SOLVED, C17_TOPIC_OVER_FILLER, C17_SHARP, C17_REVERSE_MAX = 0.95, 10.0, 0.9, 3.0


def c17_link_failures(
    cells: dict[tuple[int, int], float],
    *,
    accuracy: float,
    topic_over_filler: float,
    reverse_per_uniform: float,
    filler_mass_linked: float,
    filler_mass_unlinked: float,
) -> list[str]:
    """What contradicts C17 in one trained model at one length; empty when the claim holds.

    ``cells``: the conclusion's weight on the topic (in the head that looks hardest) per
    (topic, conclusion) combination; ``topic_over_filler``: the mean weight on the topic over
    that on one filler token; ``reverse_per_uniform``: the topic token's weight on the
    conclusion in units of 1/L; ``filler_mass_*``: the conclusion's total weight on filler in
    documents with and without the link (NaN when every document has it).

    The claim holds when the model solves the task (> :data:`C17_SOLVED`), the topic stands
    far above filler (> :data:`C17_TOPIC_OVER_FILLER` ×), each combination's link is sharp
    or absent (> :data:`C17_SHARP` or < 1 - C17_SHARP) with at least two sharp ones, and filler
    gets most of the weight only where the link is absent. The reverse direction must stay
    below :data:`C17_REVERSE_MAX` / L: the chapter's "partly" rests on its absence (the
    claim's "each other" does not hold), so a model that learned it must fail this check and
    send the reader back to the verdict.
    """
    if not cells:
        raise ValueError("cells must hold at least one (topic, conclusion) combination")
    failures = []
    if accuracy <= C17_SOLVED:
        failures.append(f"accuracy {accuracy:.3f} does not solve the task")
    if topic_over_filler <= C17_TOPIC_OVER_FILLER:
        failures.append(f"the topic gets only {topic_over_filler:.1f}x a filler token's weight")
    fuzzy = {c: v for c, v in cells.items() if 1 - C17_SHARP <= v <= C17_SHARP}
    if fuzzy:
        failures.append(f"links neither sharp nor absent: {fuzzy}")
    if sum(v > C17_SHARP for v in cells.values()) < 2:
        failures.append(f"fewer than two sharp links: {cells}")
    if reverse_per_uniform >= C17_REVERSE_MAX:
        failures.append(f"the reverse link is {reverse_per_uniform:.1f}/L")
    if not math.isnan(filler_mass_unlinked) and not (
        filler_mass_unlinked > 0.5 > filler_mass_linked
    ):
        failures.append(
            f"filler gets {filler_mass_linked:.2f} of the weight with the link and "
            f"{filler_mass_unlinked:.2f} without it"
        )
    return failures


def assert_c17_links(cells: dict[tuple[int, int], float], *, where: str, **measured) -> None:
    """C17 on one model and length (``where`` names them): fails with every contradiction
    :func:`c17_link_failures` finds."""
    failures = c17_link_failures(cells, **measured)
    assert not failures, f"C17 does not hold ({where}): " + "; ".join(failures)


def c17_verdict(runs: Sequence[tuple[Mapping[tuple[int, int], float], Mapping[str, float]]]) -> str:
    """C17 over every (model, length) run: ``(cells, measured)`` as for
    :func:`c17_link_failures`. The claim's parts: the *link* (every run solves the task with a
    sharp conclusion→topic link that stands far above filler: no failure of
    :func:`c17_link_failures` other than the reverse check), *each other* (the topic attends
    back, at least :data:`C17_REVERSE_MAX` / L, in every run), and *in every document* (every
    (topic, conclusion) combination linked, above :data:`C17_SHARP`, in every run).
    "reproduced" when all three hold; "partly" when the link holds but the reverse direction
    or some combination's link is missing; "not reproduced" when the link fails."""
    if not runs:
        raise ValueError("runs must hold at least one (cells, measured) run")
    link = all(
        not c17_link_failures(cells, **{**measured, "reverse_per_uniform": 0.0})
        for cells, measured in runs
    )
    if not link:
        return "not reproduced"
    mutual = all(m["reverse_per_uniform"] >= C17_REVERSE_MAX for _, m in runs)
    everywhere = all(all(v > C17_SHARP for v in cells.values()) for cells, _ in runs)
    return "reproduced" if mutual and everywhere else "partly"


# C18, from the claim ("doubling the length quadruples both"): the weight tensor and the matmul
# FLOPs are exact counts, so x4.00 exactly; the peak bytes include O(n) terms, so their ratio
# must tend to 4 from below: within (C18_PEAK_MIN, 4] per doubling.
C18_PEAK_MIN = 3.9


def c18_verdict(
    *, weight_ratios: Sequence[float], flop_ratios: Sequence[float], peak_ratios: Sequence[float]
) -> str:
    """C18 from the ratios per doubling of the length: "reproduced" when the weight bytes and
    the FLOPs quadruple exactly and the peak bytes by (:data:`C18_PEAK_MIN`, 4]; "partly" when
    the counts quadruple but the peak does not (something else dominates the memory); "not
    reproduced" when the counts do not quadruple."""
    if not (weight_ratios and flop_ratios and peak_ratios):
        raise ValueError("need at least one doubling for each of weights, FLOPs and peak bytes")
    counts = all(r == 4.0 for r in list(weight_ratios) + list(flop_ratios))
    if not counts:
        return "not reproduced"
    peak = all(C18_PEAK_MIN < r <= 4.0 for r in peak_ratios)
    return "reproduced" if peak else "partly"


# C19's thresholds, set from the claim before the runs: chance is 1/2; a model "is at chance"
# when its mean accuracy over seeds is below 0.6, "solves" the task when above 0.9; a run
# "matches" the prediction from reach when it is within 0.1 of it.
C19_CHANCE_BELOW = 0.6
C19_SOLVED_ABOVE = 0.9
C19_MATCH = 0.1


def assert_c19_blind_at_chance(
    accuracies: dict[str, Sequence[float]], predicted: dict[str, float]
) -> None:
    """Every configuration whose read-out cannot reach the topic (predicted 1/2) is at chance
    on every seed: nothing leaks past the mask."""
    blind = [name for name, p in predicted.items() if p == 0.5]
    if not blind:
        raise ValueError("no configuration is predicted blind: nothing to check")
    for name in blind:
        assert max(accuracies[name]) < C19_CHANCE_BELOW, (
            f"{name} cannot reach the topic yet scored {list(accuracies[name])}"
        )


def c19_reach_verdict(accuracies: dict[str, Sequence[float]], predicted: dict[str, float]) -> str:
    """``"reproduced"`` when every configuration's mean accuracy over seeds is within
    :data:`C19_MATCH` of the prediction from its reach; ``"partly"`` when the blind ones are
    at chance but a configuration that can reach the topic falls short (reach is necessary,
    not sufficient within the budget); ``"not reproduced"`` when a blind one beats chance."""
    blind = [n for n, p in predicted.items() if p == 0.5]
    if any(sum(accuracies[n]) / len(accuracies[n]) >= C19_CHANCE_BELOW for n in blind):
        return "not reproduced"
    if all(
        abs(sum(accuracies[n]) / len(accuracies[n]) - predicted[n]) < C19_MATCH for n in predicted
    ):
        return "reproduced"
    return "partly"


def c19_reach_verdict_at_lengths(
    by_length: dict[int, tuple[dict[str, Sequence[float]], dict[str, float]]],
) -> str:
    """:func:`c19_reach_verdict` at every length of ``by_length`` (length -> accuracies over
    seeds, predictions), combined: ``"reproduced"`` only when it is at every length, ``"not
    reproduced"`` when it is not reproduced at any, ``"partly"`` otherwise."""
    if not by_length:
        raise ValueError("by_length must hold at least one length, got none")
    verdicts = {c19_reach_verdict(acc, pred) for acc, pred in by_length.values()}
    if "not reproduced" in verdicts:
        return "not reproduced"
    return "reproduced" if verdicts == {"reproduced"} else "partly"


def assert_c19_linear_learns_slower(
    full_solved: Sequence[int | None],
    linear_solved: Sequence[int | None],
    linear_accuracy: Sequence[float],
) -> None:
    """C19 linear, "optimisation speed, not a ceiling", over seeds: every linear seed solves
    the task later than every full-attention seed (``None``: not within the budget), and at
    least one linear seed solves it (accuracy above :data:`C19_SOLVED_ABOVE`)."""
    never = float("inf")
    full = [never if s is None else s for s in full_solved]
    linear = [never if s is None else s for s in linear_solved]
    assert max(full) < never, f"full attention did not solve every seed: {list(full_solved)}"
    assert min(linear) > max(full), (
        f"a linear seed solved as fast as full attention: linear {list(linear_solved)}, full "
        f"{list(full_solved)}"
    )
    assert max(linear_accuracy) > C19_SOLVED_ABOVE, (
        f"no linear seed learned the task: {list(linear_accuracy)} (a ceiling, not speed)"
    )


def c19_global_verdict(accuracies: dict[str, Sequence[float]], predicted: dict[str, float]) -> str:
    """The verdict on "global tokens restore the reach": ``"not reproduced"`` when a blind
    configuration beats chance (the mask leaks) or no seed of any configuration that can
    reach the topic beats chance (the remedy gave nothing within the budget);
    ``"reproduced"`` when every seed of every such configuration solves the task (above
    :data:`C19_SOLVED_ABOVE`); ``"partly"`` in between."""
    blind = [n for n, p in predicted.items() if p == 0.5]
    sighted = [n for n, p in predicted.items() if p > 0.5]
    if not sighted:
        raise ValueError("no configuration can reach the topic: nothing to judge")
    if any(max(accuracies[n]) >= C19_CHANCE_BELOW for n in blind):
        return "not reproduced"
    seeds = [a for n in sighted for a in accuracies[n]]
    if all(a < C19_CHANCE_BELOW for a in seeds):
        return "not reproduced"
    if all(a > C19_SOLVED_ABOVE for a in seeds):
        return "reproduced"
    return "partly"


# C19 cost, from the claim ("cut the cost to O(n)"): fitted exponents of peak bytes and FLOPs in
# n (exact counts): dense attention's are quadratic, a remedy's linear within these bands (its
# fixed-size blocks and O(n) tensors keep the fit a little off 1).
C19_DENSE_MEMORY, C19_DENSE_FLOPS = (1.9, 2.05), 1.99
C19_LINEAR_MEMORY, C19_LINEAR_FLOPS = (0.85, 1.15), (0.95, 1.1)


def c19_cost_verdict(
    memory_exponent: Mapping[str, float],
    flop_exponent: Mapping[str, float],
    *,
    dense: str,
    remedies: Sequence[str],
) -> str:
    """C19 cost: "reproduced" when the ``dense`` entry grows quadratically in memory and FLOPs
    and every one of ``remedies`` linearly (the bands above); "partly" when dense is quadratic
    and only some remedies are linear; "not reproduced" when none is, or dense is not
    quadratic (then nothing was cut)."""
    if not remedies:
        raise ValueError("remedies must name at least one variant")
    low, high = C19_DENSE_MEMORY
    if not (low < memory_exponent[dense] < high and flop_exponent[dense] > C19_DENSE_FLOPS):
        return "not reproduced"
    (m_low, m_high), (f_low, f_high) = C19_LINEAR_MEMORY, C19_LINEAR_FLOPS
    linear = [
        m_low < memory_exponent[n] < m_high and f_low < flop_exponent[n] < f_high for n in remedies
    ]
    if all(linear):
        return "reproduced"
    return "partly" if any(linear) else "not reproduced"


# C19 linear, from the claim ("loses some accuracy"): at the same budget, a mean accuracy over
# seeds lower than full attention's by more than C19_LOSES (about the spread of one seed's
# accuracy over 512 test documents) is accuracy lost.
C19_LOSES = 0.05


def c19_linear_verdict(full: Sequence[float], linear: Sequence[float]) -> str:
    """C19 linear, from the accuracies over seeds of full and linear attention at one budget:
    "not reproduced" when linear attention's mean is within :data:`C19_LOSES` of full
    attention's (nothing lost); "reproduced" when it is lower and no linear seed learns the
    task (above :data:`C19_SOLVED_ABOVE`: a ceiling); "partly" when it is lower on average but
    some seed learns the task (a cost in optimisation speed, not in what it can represent)."""
    if not full or not linear:
        raise ValueError("full and linear must hold at least one accuracy each")
    lost = sum(full) / len(full) - sum(linear) / len(linear) > C19_LOSES
    if not lost:
        return "not reproduced"
    return "partly" if max(linear) > C19_SOLVED_ABOVE else "reproduced"
