"""Claims of chapter 3 (C8, C9a, C9b, C10, MQA/GQA): thresholds, verdict functions,
asserting functions, and the runners of the sceptic's sweeps of C8, C9a, C9b, C10 and MQA/GQA
(``SCEPTIC_SWEEPS``).

The FLOP count, the parameter count, the pairs model, its training step and the head-mass
measurement these claims rest on are defined on the page, ``chapters/03_multi_head.py``
(exported to :mod:`book.pages.ch03`); the two-relation task is shared with chapter 8 and lives
in :mod:`book.experiments.tasks`; the key/value cache size in :mod:`measure.memory`.

Every ``*_verdict`` returns one of :data:`book.claims.VERDICTS`; every ``assert_*`` raises
``AssertionError`` when its claim is false (``tests/book/test_claims_ch03.py`` feeds each a
false case).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from torch import nn

from attention.checks import check_positive_int
from attention.heads import MultiHeadAttention
from book.pages.ch03 import FlopCount, attention_parameter_count, mha_flops, train_pairs
from book.sceptic import Outcome, Perturbation, Sweep
from measure.memory import kv_cache_bytes

__all__ = [
    "C8_ABOUT_SAME",
    "C9B_THRESHOLDS",
    "C10_MARGIN",
    "C10_HEADS",
    "C10_PRACTICE_HEAD_WIDTH",
    "SCEPTIC_SWEEPS",
    "assert_c8_same_matmuls",
    "assert_c9a_heads_split_without_new_parameters",
    "assert_c9b_heads_specialise",
    "assert_c10_control_narrow_heads_fit_worse",
    "assert_c10_rises_then_falls",
    "assert_kv_cache_shrinks",
    "c8_overhead",
    "c8_sweep_run",
    "c8_verdict",
    "c9a_failures",
    "c9a_sweep_run",
    "c9a_verdict",
    "c9b_specialisation_failures",
    "c9b_sweep_run",
    "c9b_verdict",
    "c10_sweep_run",
    "c10_verdict",
    "kv_cache_sweep_run",
    "kv_cache_verdict",
]

# ------------------------------------------------------------------------------------------
# C8: the cost of h heads versus one head of full width
# ------------------------------------------------------------------------------------------

# "About the same compute": the matrix products must cost exactly the same (the claim's
# mechanism: h products of width D/h are one product of width D), and what the head count
# adds, the elementwise softmax work, must stay under 1 % of the layer's FLOPs, a difference
# no timing of the layer could tell from noise.
C8_ABOUT_SAME = 0.01


def c8_overhead(one: FlopCount, many: FlopCount) -> float:
    """The extra FLOPs of ``many`` heads relative to one head: ``many.total / one.total - 1``."""
    return many.total / one.total - 1


def assert_c8_same_matmuls(one: FlopCount, many: FlopCount) -> None:
    """C8's mechanism: every matrix product costs the same with many heads as with one."""
    assert many.matmul == one.matmul, (
        f"matrix products differ: {many.matmul:,} FLOPs with many heads, {one.matmul:,} with one"
    )


def c8_verdict(one: FlopCount, many: FlopCount, *, max_overhead: float = C8_ABOUT_SAME) -> str:
    """C8's verdict from the FLOP counts of one head and of many heads at the same width.

    - ``"reproduced"``: the matrix products cost exactly the same and the whole layer costs
      less than ``max_overhead`` more (:data:`C8_ABOUT_SAME`);
    - ``"partly"``: the matrix products cost the same, but the softmax work the heads add is
      ``max_overhead`` or more (a narrow model with many heads, where ``1.5 (h - 1) / D`` is
      not small);
    - ``"not reproduced"``: the matrix products differ.
    """
    if many.matmul != one.matmul:
        return "not reproduced"
    return "reproduced" if c8_overhead(one, many) < max_overhead else "partly"


# ------------------------------------------------------------------------------------------
# C9a: BERT-base's heads, counted
# ------------------------------------------------------------------------------------------


def c9a_failures(d_model: int, counts: Mapping[str, int], independent: int) -> list[str]:
    """What contradicts C9a ("splitting d_model into heads adds no parameters"); [] when it
    holds. ``counts`` maps a label (``"12 heads"``) to the parameter count of an attention
    layer of width ``d_model`` with that many heads; ``independent`` is the count of an
    implementation written by others (``torch.nn.MultiheadAttention``), which must equal the
    hand count :func:`book.pages.ch03.attention_parameter_count`."""
    d_model = check_positive_int("d_model", d_model)
    failures = []
    expected = attention_parameter_count(d_model)
    if independent != expected:
        failures.append(
            f"the independent layer has {independent:,} parameters, the hand count of 4 "
            f"matrices and 4 biases at d_model {d_model} is {expected:,}"
        )
    wrong = {label: n for label, n in counts.items() if n != independent}
    if wrong:
        failures.append(
            f"parameter counts {wrong} differ from the independent count {independent:,}: the "
            "head count changed the number of parameters"
        )
    return failures


def assert_c9a_heads_split_without_new_parameters(
    d_model: int, counts: Mapping[str, int], independent: int
) -> None:
    """C9a, a configuration fact: fails with every contradiction :func:`c9a_failures` finds."""
    failures = c9a_failures(d_model, counts, independent)
    if failures:
        raise AssertionError("; ".join(failures))


def c9a_verdict(d_model: int, counts: Mapping[str, int], independent: int) -> str:
    """``"reproduced"`` when every count equals the independent one and the hand count;
    ``"not reproduced"`` otherwise (a configuration fact has no "partly")."""
    return "not reproduced" if c9a_failures(d_model, counts, independent) else "reproduced"


# ------------------------------------------------------------------------------------------
# C9b: heads that divide the work (the pairs task)
# ------------------------------------------------------------------------------------------


class _Run(Protocol):  # what a run of book.pages.ch03.train_pairs carries
    num_heads: int
    accuracy: tuple[float, float]
    head_mass: torch.Tensor


# C9b's thresholds, from the claim, fixed before the runs (see c9b_specialisation_failures).
C9B_THRESHOLDS = {
    "solved": 0.97,  # accuracy on a relation the heads are meant to solve
    "on relation": 0.8,  # weight a specialised head puts on its relation...
    "off relation": 0.05,  # ...and at most on the other one
    "one head solves": 0.95,  # one head: the relation it picked
    "one head misses": 0.4,  # one head: the other relation (chance is 1/8)
    "one head focus": 0.6,  # one head: its weight on the relation it picked
    "one head ignores": 0.1,  # one head: its weight on the other
    "partner lead": 0.6,  # four heads: the head leading the partner search
}


def c9b_specialisation_failures(run_1: _Run, run_2: _Run, run_4: _Run) -> list[str]:
    """What contradicts C9b ("different heads learn different patterns") in one seed's runs
    with 1, 2 and 4 heads on the pairs task; an empty list when the pattern holds.

    With :data:`C9B_THRESHOLDS` ``t``: with two heads both relations are solved (accuracy >
    ``t["solved"]``) by one head each (> ``t["on relation"]`` of its weight on its relation,
    < ``t["off relation"]`` on the other); one head solves one relation and misses the other,
    focusing on the one it solves; four heads solve both, one head on the previous token and
    one leading the partner search.
    """
    t = C9B_THRESHOLDS
    for name, run, h in (("run_1", run_1, 1), ("run_2", run_2, 2), ("run_4", run_4, 4)):
        if run.num_heads != h:
            raise ValueError(f"{name} must be a run with {h} head(s), got {run.num_heads}")
    failures = []
    if min(run_2.accuracy) <= t["solved"]:
        failures.append(f"2 heads: accuracy {run_2.accuracy} does not solve both relations")
    prev_head = int(run_2.head_mass[:, 0].argmax())
    partner_head = 1 - prev_head
    prev, partner = run_2.head_mass[prev_head].tolist(), run_2.head_mass[partner_head].tolist()
    on, off = t["on relation"], t["off relation"]
    if not (prev[0] > on and prev[1] < off and partner[1] > on and partner[0] < off):
        failures.append(
            f"2 heads: head masses (previous, partner) {prev} and {partner}: not one head per "
            "relation"
        )
    if not (
        max(run_1.accuracy) > t["one head solves"] and min(run_1.accuracy) < t["one head misses"]
    ):
        failures.append(f"1 head: accuracy {run_1.accuracy}, not one relation solved and one not")
    if not (
        run_1.head_mass.max() > t["one head focus"]
        and run_1.head_mass.min() < t["one head ignores"]
    ):
        failures.append(f"1 head: masses {run_1.head_mass.tolist()} do not focus on one relation")
    if min(run_4.accuracy) <= t["solved"]:
        failures.append(f"4 heads: accuracy {run_4.accuracy} does not solve both relations")
    if not (run_4.head_mass[:, 0].max() > on and run_4.head_mass[:, 1].max() > t["partner lead"]):
        failures.append("4 heads: no head on the previous token or none leading the partner search")
    return failures


def assert_c9b_heads_specialise(run_1: _Run, run_2: _Run, run_4: _Run) -> None:
    """C9b on one seed: fails with every contradiction :func:`c9b_specialisation_failures`
    finds."""
    failures = c9b_specialisation_failures(run_1, run_2, run_4)
    assert not failures, "C9b does not hold: " + "; ".join(failures)


def c9b_verdict(failures_by_seed: Sequence[Sequence[str]], *, in_pretrained_model: bool) -> str:
    """C9b's verdict from :func:`c9b_specialisation_failures` on each seed.

    The claim has two parts: (A) heads trained on a task that needs several relations divide
    them between them, which the pairs task measures on every seed; (B) a pretrained model's
    (BERT's) heads do so on language, which ``in_pretrained_model`` says was measured and held
    (the chapter cannot train BERT: ``False``).

    - ``"reproduced"``: (A) holds on every seed and (B) was measured and held;
    - ``"partly"``: (A) holds on every seed but (B) was not shown, or (A) holds on some seeds
      only;
    - ``"not reproduced"``: (A) fails on every seed.
    """
    if not failures_by_seed:
        raise ValueError("failures_by_seed must hold one list per seed, got none")
    held = [not failures for failures in failures_by_seed]
    if not any(held):
        return "not reproduced"
    return "reproduced" if all(held) and in_pretrained_model else "partly"


# ------------------------------------------------------------------------------------------
# C10: how many heads
# ------------------------------------------------------------------------------------------

C10_MARGIN = 0.1  # from the claim: the interior optimum beats both ends by ten points
# Where the claim puts the optimum: the article's best h = 8 at d_model 512 is a head width of
# 64, and common practice keeps heads 64 to 128 wide. A best head width in this range is the
# claim's location; at another width only its shape is reproduced.
C10_PRACTICE_HEAD_WIDTH = (64, 128)


def _c10_shape_problem(accuracy_by_heads: Mapping[int, Sequence[float]], margin: float):
    """``(best head count, None)`` when quality rises then falls, else ``(best, why not)``."""
    if len(accuracy_by_heads) < 3:
        raise ValueError(
            f"accuracy_by_heads needs at least 3 head counts, got {len(accuracy_by_heads)}"
        )
    if any(len(v) == 0 for v in accuracy_by_heads.values()):
        raise ValueError("accuracy_by_heads: every head count needs at least one seed")
    means = {h: sum(v) / len(v) for h, v in sorted(accuracy_by_heads.items())}
    heads = list(means)
    best = max(heads, key=means.get)
    if best in (heads[0], heads[-1]):
        return best, (
            f"the best mean accuracy is at h = {best}, an end of the range {heads}: quality "
            "does not rise and then fall"
        )
    for end in (heads[0], heads[-1]):
        if means[best] - means[end] < margin:
            return best, (
                f"h = {best} ({means[best]:.3f}) beats h = {end} ({means[end]:.3f}) by less than "
                f"the margin {margin}"
            )
    return best, None


def assert_c10_rises_then_falls(
    accuracy_by_heads: Mapping[int, Sequence[float]], *, margin: float
) -> int:
    """C10: at fixed width, quality first rises, then falls, with the head count.

    ``accuracy_by_heads`` maps each head count ``h`` to its held-out accuracies, one per seed.
    The claim holds when the head count with the best mean accuracy is neither the smallest
    nor the largest tried, and its mean beats the mean at *both* ends by at least ``margin``
    (a margin fixed from the claim before the run, not from the numbers). Returns the best
    head count.
    """
    best, problem = _c10_shape_problem(accuracy_by_heads, margin)
    if problem:
        raise AssertionError(problem)
    return best


def _narrow_fits_worse(control: Mapping[int, tuple[float, float]]) -> bool:
    narrow, wide = control[max(control)], control[min(control)]
    return narrow[0] > wide[0] and narrow[1] < wide[1]


def assert_c10_control_narrow_heads_fit_worse(control: Mapping[int, tuple[float, float]]) -> None:
    """The control without RoPE: ``control[h] = (final training loss, mean accuracy)`` for two
    head counts; the one with more (narrower) heads must fit worse (higher loss, lower
    accuracy). A control of direction only (one seed per head count), no size."""
    if len(control) != 2:
        raise ValueError(f"control must hold two head counts, got {sorted(control)}")
    narrow, wide = max(control), min(control)
    assert _narrow_fits_worse(control), (
        f"without RoPE, h = {narrow} (loss {control[narrow][0]:.3f}, accuracy "
        f"{control[narrow][1]:.3f}) does not fit worse than h = {wide} (loss "
        f"{control[wide][0]:.3f}, accuracy {control[wide][1]:.3f})"
    )


def c10_verdict(
    accuracy_by_heads: Mapping[int, Sequence[float]],
    *,
    d_model: int,
    control: Mapping[int, tuple[float, float]],
    margin: float = C10_MARGIN,
) -> str:
    """C10's verdict: the claim's shape (quality rises then falls with the head count, by
    ``margin``), its mechanism (narrow heads fit worse also without RoPE: ``control`` as in
    :func:`assert_c10_control_narrow_heads_fit_worse`), and its location (the best head width
    ``d_model // best h`` within :data:`C10_PRACTICE_HEAD_WIDTH`).

    - ``"reproduced"``: shape, control and location hold;
    - ``"partly"``: the shape holds, but the control does not confirm it or the optimum sits
      at another head width (at the chapter's d_model 32 it must);
    - ``"not reproduced"``: quality does not rise then fall.
    """
    d_model = check_positive_int("d_model", d_model)
    if len(control) != 2:
        raise ValueError(f"control must hold two head counts, got {sorted(control)}")
    best, problem = _c10_shape_problem(accuracy_by_heads, margin)
    if problem:
        return "not reproduced"
    low, high = C10_PRACTICE_HEAD_WIDTH
    located = low <= d_model // best <= high
    return "reproduced" if located and _narrow_fits_worse(control) else "partly"


# ------------------------------------------------------------------------------------------
# MQA / GQA: the key/value cache
# ------------------------------------------------------------------------------------------


def _cache_problems(
    cache: Mapping[str, int], kv_heads: Mapping[str, int], num_heads: int
) -> tuple[list[str], list[str]]:
    """(names whose cache is not smaller than full MHA's, names not smaller by h / h_kv)."""
    full = cache["MHA"]
    if kv_heads["MHA"] != num_heads:
        raise ValueError(f"kv_heads['MHA'] must be num_heads={num_heads}, got {kv_heads['MHA']}")
    shared = [name for name in cache if name != "MHA"]
    not_smaller = [name for name in shared if not cache[name] < full]
    not_by_factor = [name for name in shared if cache[name] * num_heads != full * kv_heads[name]]
    return not_smaller, not_by_factor


def assert_kv_cache_shrinks(
    cache: Mapping[str, int], kv_heads: Mapping[str, int], num_heads: int
) -> None:
    """MQA/GQA: every shared-key/value cache (``cache[name]`` bytes with ``kv_heads[name]``
    key/value heads) is the full multi-head cache ``cache["MHA"]`` divided by
    ``num_heads / kv_heads[name]``, exactly."""
    not_smaller, not_by_factor = _cache_problems(cache, kv_heads, num_heads)
    assert not not_by_factor, (
        f"caches {[(n, cache[n]) for n in not_by_factor]} are not MHA's {cache['MHA']} bytes "
        f"divided by h / h_kv (h = {num_heads}, h_kv = {dict(kv_heads)})"
    )


def kv_cache_verdict(cache: Mapping[str, int], kv_heads: Mapping[str, int], num_heads: int) -> str:
    """The MQA/GQA claim ("sharing keys and values cuts the KV cache"), from the measured
    cache sizes: ``"reproduced"`` when each shrinks by exactly ``h / h_kv``, ``"partly"`` when
    each shrinks but not by that factor, ``"not reproduced"`` when one does not shrink."""
    not_smaller, not_by_factor = _cache_problems(cache, kv_heads, num_heads)
    if not_smaller:
        return "not reproduced"
    return "partly" if not_by_factor else "reproduced"


# ------------------------------------------------------------------------------------------
# The sceptic's sweeps: C8's shape, C9b's and C10's training re-run
# ------------------------------------------------------------------------------------------


def c8_sweep_run(*, seq_len: int, d_model: int, num_heads: int) -> Outcome:
    """C8 at one shape: the FLOPs of one head and of ``num_heads`` heads of a layer of width
    ``d_model`` on ``seq_len`` tokens (:func:`book.pages.ch03.mha_flops`), judged by
    :func:`c8_verdict`. No training: the knob is the shape."""
    one, many = mha_flops(seq_len, d_model, 1), mha_flops(seq_len, d_model, num_heads)
    numbers = {
        "shape": f"L {seq_len}, d_model {d_model}, h {num_heads}",
        "overhead": f"{c8_overhead(one, many):.2%}",
        "same matmuls": many.matmul == one.matmul,
    }
    return Outcome(c8_verdict(one, many), numbers)


C9B_HEADS = (1, 2, 4)  # the head counts C9b's checks compare


def c9b_sweep_run(*, seeds: Sequence[int], steps: int) -> Outcome:
    """C9b re-run: the page's pairs model with 1, 2 and 4 heads trained by
    :func:`book.pages.ch03.train_pairs` for ``steps`` steps on each of ``seeds`` (d_model 32,
    RoPE, as section 3.4), checked by :func:`c9b_specialisation_failures` and judged by
    :func:`c9b_verdict` (BERT's half not measured: ``in_pretrained_model=False``)."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    steps = check_positive_int("steps", steps)
    failures, per_seed = [], []
    for seed in seeds:
        runs = {h: train_pairs(num_heads=h, seed=seed, steps=steps) for h in C9B_HEADS}
        found = c9b_specialisation_failures(*(runs[h] for h in C9B_HEADS))
        failures.append(found)
        per_seed.append(
            {
                "seed": seed,
                "holds": not found,
                "accuracy (previous, partner)": {
                    f"{h} head{'s' * (h > 1)}": [round(a, 3) for a in runs[h].accuracy]
                    for h in C9B_HEADS
                },
                "failures": found,
            }
        )
    numbers = {
        "steps": steps,
        "seeds": seeds,
        "holds on": f"{sum(not f for f in failures)} of {len(seeds)} seeds",
        "per seed": per_seed,
    }
    return Outcome(c9b_verdict(failures, in_pretrained_model=False), numbers)


C10_HEADS = (1, 2, 4, 8, 16)  # section 3.5's head counts at d_model 32
C10_D_MODEL = 32
C10_CONTROL_HEADS = (2, 16)  # the control without RoPE: a wide and a narrow head count


def c10_sweep_run(*, seeds: Sequence[int], steps: int, control_steps: int) -> Outcome:
    """C10 re-run: the pairs model at d_model 32 with each head count of :data:`C10_HEADS`
    trained for ``steps`` steps on each of ``seeds`` (RoPE), and the control without RoPE
    (sinusoidal positions, seed 0, ``control_steps`` steps) at :data:`C10_CONTROL_HEADS`,
    judged by :func:`c10_verdict` on the held-out accuracy (both digits) and the control's
    (final loss over the last 50 steps, accuracy)."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    steps = check_positive_int("steps", steps)
    accuracy = {
        h: [train_pairs(num_heads=h, seed=s, steps=steps).mean_accuracy for s in seeds]
        for h in C10_HEADS
    }
    control = {}
    for h in C10_CONTROL_HEADS:
        run = train_pairs(num_heads=h, seed=0, steps=control_steps, positional="sinusoidal")
        window = run.losses[-50:]
        control[h] = (sum(window) / len(window), run.mean_accuracy)
    means = {h: sum(a) / len(a) for h, a in accuracy.items()}
    numbers = {
        "steps": steps,
        "seeds": seeds,
        "best h": max(means, key=means.get),
        "mean accuracy": ", ".join(f"h={h}: {m:.3f}" for h, m in means.items()),
        "per seed": {f"h={h}": [round(a, 3) for a in accs] for h, accs in accuracy.items()},
        "control without RoPE (final loss, accuracy)": {
            f"h={h}": [round(v, 3) for v in c] for h, c in control.items()
        },
    }
    return Outcome(c10_verdict(accuracy, d_model=C10_D_MODEL, control=control), numbers)


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def c9a_sweep_run(*, d_model: int, num_heads: int) -> Outcome:
    """C9a at one BERT size: the package's attention layer of width ``d_model`` with
    ``num_heads`` heads and with one head, against ``torch.nn.MultiheadAttention(d_model,
    num_heads)``'s independent count (built on the ``meta`` device, as section 3.4 does),
    judged by :func:`c9a_verdict`."""
    with torch.device("meta"):
        counts = {
            f"{num_heads} heads": _n_params(MultiHeadAttention(d_model, num_heads)),
            "1 head": _n_params(MultiHeadAttention(d_model, 1)),
        }
        independent = _n_params(nn.MultiheadAttention(d_model, num_heads))
    return Outcome(
        c9a_verdict(d_model, counts, independent),
        {
            "shape": f"d_model {d_model}, {num_heads} heads of d_k {d_model // num_heads}",
            "parameters": ", ".join(f"{k} {v:,}" for k, v in counts.items()),
            "nn.MultiheadAttention": f"{independent:,}",
        },
    )


def kv_cache_sweep_run(
    *, num_layers: int, num_heads: int, head_dim: int, seq_len: int, groups: int
) -> Outcome:
    """The MQA/GQA claim (:func:`kv_cache_verdict`) at one model shape, on what a cache really
    holds: the keys and values each of ``num_layers`` layers (``num_heads`` query heads of width
    ``head_dim``; ``num_heads``, ``groups`` or 1 key/value heads) computes for one sequence of
    ``seq_len`` tokens in fp16, measured on the ``meta`` device (shapes without memory) and
    checked against :func:`measure.memory.kv_cache_bytes`."""
    d = num_heads * head_dim
    kv_heads = {"MHA": num_heads, f"GQA-{groups}": groups, "MQA": 1}
    cache, formula = {}, {}
    with torch.device("meta"), torch.no_grad():
        x = torch.empty(1, seq_len, d, dtype=torch.float16)  # (B, L, D)
        for name, kv in kv_heads.items():
            layer = MultiHeadAttention(d, num_heads, num_kv_heads=kv).half()
            per_layer = layer.k_proj(x).nbytes + layer.v_proj(x).nbytes
            cache[name] = num_layers * per_layer
            formula[name] = kv_cache_bytes(num_layers, kv, head_dim, seq_len, bytes_per_element=2)
    return Outcome(
        kv_cache_verdict(cache, kv_heads, num_heads),
        {
            "shape": f"{num_layers} layers, {num_heads} heads of {head_dim}, {seq_len} tokens",
            "cache per sequence": ", ".join(f"{k} {v / 2**20:,.6g} MiB" for k, v in cache.items()),
            "equals the formula": cache == formula,
        },
    )


# The changes the verdicts are re-run under.
SCEPTIC_SWEEPS = (
    # C8: the chapter judges BERT-base's shape (L 512, d_model 768, h 12); the knob is the shape.
    Sweep(
        "C8",
        run=c8_sweep_run,
        baseline={"seq_len": 512, "d_model": 768, "num_heads": 12},
        perturbations=(
            Perturbation(
                "d 512, h 8", "the original Transformer's shape", {"d_model": 512, "num_heads": 8}
            ),
            Perturbation("L 64", "short sequences", {"seq_len": 64}),
            Perturbation("L 4096", "a long context at BERT-base's width", {"seq_len": 4096}),
            Perturbation(
                "d 128, h 16", "a narrow model with many heads", {"d_model": 128, "num_heads": 16}
            ),
            Perturbation("d 64, h 16", "a narrower one still", {"d_model": 64, "num_heads": 16}),
        ),
    ),
    # C9b: the chapter trains 1, 2 and 4 heads for 300 steps on seeds 0-2.
    Sweep(
        "C9b",
        run=c9b_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 300},
        perturbations=(
            Perturbation("seeds 3–5", "other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("900 steps", "a 3× longer budget", {"steps": 900}),
        ),
    ),
    # C9a: a configuration fact at BERT-base's shape; the knob is the other BERT sizes.
    Sweep(
        "C9a",
        run=c9a_sweep_run,
        baseline={"d_model": 768, "num_heads": 12},
        perturbations=(
            Perturbation("BERT-tiny", "d_model 128, 2 heads", {"d_model": 128, "num_heads": 2}),
            Perturbation("BERT-small", "d_model 512, 8 heads", {"d_model": 512, "num_heads": 8}),
            Perturbation(
                "BERT-large", "d_model 1024, 16 heads", {"d_model": 1024, "num_heads": 16}
            ),
        ),
    ),
    # MQA/GQA: the chapter sizes a 7B-class model's cache; the knob is the model's shape.
    Sweep(
        "MQA/GQA",
        run=kv_cache_sweep_run,
        baseline={
            "num_layers": 32,
            "num_heads": 32,
            "head_dim": 128,
            "seq_len": 4096,
            "groups": 8,
        },  # fmt: skip
        perturbations=(
            Perturbation(
                "70B shape", "80 layers, 64 heads, GQA-8", {"num_layers": 80, "num_heads": 64}
            ),
            Perturbation("32k tokens", "a context of 32,768 tokens", {"seq_len": 32768}),
            Perturbation(
                "small model",
                "6 layers, 8 heads of 64, 512 tokens, GQA-2",
                {"num_layers": 6, "num_heads": 8, "head_dim": 64, "seq_len": 512, "groups": 2},
            ),
        ),
    ),
    # C10: the chapter trains h in 1..16 for 300 steps on seeds 0-2, the control for 600.
    Sweep(
        "C10",
        run=c10_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 300, "control_steps": 600},
        perturbations=(
            Perturbation("seeds 3–5", "other seeds", {"seeds": [3, 4, 5]}),
            Perturbation(
                "900 steps",
                "a 3× longer budget (the control's too)",
                {"steps": 900, "control_steps": 1800},
            ),
        ),
    ),
)
