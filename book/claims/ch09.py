"""Chapter 9's claims: thresholds, verdict functions and asserting functions.

- **Why softmax** (Q-softmax): :func:`softmax_verdict` per test length, :func:`q_softmax_verdict`
  over both; :func:`assert_softmax_not_beaten`, :func:`assert_breaks`.
- **C29, attention is not explanation**: :func:`c29_verdict` (rank agreement and adversarial
  attention), :func:`c29_repairs_verdict` (norm-based scores and rollout);
  :func:`assert_c29_not_faithful`.
- **C30, Pre-LN vs Post-LN**: :func:`run_failed` (what a failed run is), :func:`c30_verdict`;
  :func:`assert_gradient_predictions`, :func:`assert_c30_stability`.
- **§9 priors**: :func:`prior_wins`, :func:`priors_verdict`; :func:`assert_prior_wins`.
- :func:`assert_stated`: the verdict the chapter's prose states is the one computed.

Each ``assert_*`` raises ``AssertionError`` when its claim is false; each verdict function
returns one of :data:`book.claims.VERDICTS`. The models and tasks the claims rest on are on
the chapter's page (``book.pages.ch09``); the thresholds are here, set from the claims before
the runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from book.claims import VERDICTS
from book.data import digits
from book.experiments.seeds import spread
from book.experiments.training import train_classifier
from book.pages import ch09 as page
from book.sceptic import Outcome, Perturbation, Sweep

# --- 9.1 Why softmax ---------------------------------------------------------------------------
# "Best overall" is refuted by a normaliser whose mean accuracy beats softmax's by more than
# MARGIN (two points of accuracy, more than a seed moves softmax's own accuracy);
# confirmed only if every other one is more than MARGIN below.
MARGIN = 0.02
# A normaliser "breaks" when its mean accuracy is at least BREAK_GAP below softmax's: far more
# than any seed spread, a model that has not learnt the task in the same budget.
BREAK_GAP = 0.3

# --- 9.2 C29 -----------------------------------------------------------------------------------
# Attention "agrees" with leave-one-out at a mean Kendall tau of 0.5: three quarters of the row
# pairs in the same order.
MAX_AGREEMENT = 0.5
# An adversarial [CLS] distribution is "far" at a Jensen-Shannon divergence of 0.3 bits, a
# third of the way to no overlap at all (1 bit).
FAR = 0.3
# ... and leaves the output "unchanged" when the output distribution moves by at most 0.01 in
# total variation (one point of probability, moved between classes).
TOL = 0.01
# C29 holds if an adversary exists for at least half of the images ("for most inputs").
MIN_FRACTION = 0.5
# A repair is "more faithful" if its mean tau with leave-one-out gains 0.1 over raw attention's:
# about the seed-to-seed range of raw attention's own tau, so a smaller gain could be a seed's.
GAIN = 0.1

# --- 9.3 C30 -----------------------------------------------------------------------------------
# Xiong et al.'s predictions at initialisation: Post-LN's last-layer gradient does not depend on
# the depth (changes by at most FLAT times between 6 and 24 layers); Pre-LN's shrinks like
# 1/sqrt(L) (predicted 0.5 from 6 to 24 layers; we ask for at most SHRINK); Post-LN's grows with
# the width (at least GROW times from width 16 to 64).
FLAT, SHRINK, GROW = 1.5, 0.85, 1.2
# A run fails when its final loss is not at least FAIL_MARGIN (a fraction) below the loss of a
# uniform guess: it has not left the starting point.
FAIL_MARGIN = 0.05
# "More stable" and "warm-up rescues" each need a difference of at least MIN_GAP failed runs out
# of 6: one run is within what one unlucky seed does.
MIN_GAP = 2

# --- 9.4 priors --------------------------------------------------------------------------------
# A prior "wins" when the winner's mean held-out accuracy is at least WIN_GAP above the loser's
# (and its worst seed beats the loser's best).
WIN_GAP = 0.1


def _parts(held: Sequence[bool]) -> str:
    """All parts of a claim hold: reproduced; some: partly; none: not reproduced."""
    if all(held):
        return "reproduced"
    return "partly" if any(held) else "not reproduced"


# ------------------------------------------------------------------------------------------
# 9.1 Why softmax
# ------------------------------------------------------------------------------------------


def assert_softmax_not_beaten(
    accuracies: Mapping[str, Sequence[float]], *, margin: float, reference: str = "softmax"
) -> None:
    """No variant's mean accuracy exceeds the reference's by more than ``margin``."""
    ref = spread(accuracies[reference]).mean
    for name, values in accuracies.items():
        mean = spread(values).mean
        assert mean <= ref + margin, (
            f"{name} ({mean:.3f}) beats {reference} ({ref:.3f}) by more than {margin}"
        )


def assert_breaks(
    accuracies: Mapping[str, Sequence[float]], broken: Sequence[str], *, gap: float
) -> None:
    """Each variant in ``broken`` has a mean accuracy at least ``gap`` below softmax's."""
    ref = spread(accuracies["softmax"]).mean
    for name in broken:
        mean = spread(accuracies[name]).mean
        assert mean <= ref - gap, (
            f"{name} ({mean:.3f}) is not {gap} below softmax ({ref:.3f}): it does not break"
        )


def softmax_verdict(accuracies: Mapping[str, Sequence[float]], *, margin: float) -> str:
    """At one test length (``variant -> accuracy per seed``): ``reproduced`` when softmax's mean
    beats every other's by more than ``margin``; ``not reproduced`` when some other beats
    softmax's by more than ``margin``; else (some within ``margin``) ``partly``."""
    ref = spread(accuracies["softmax"]).mean
    others = [spread(v).mean for n, v in accuracies.items() if n != "softmax"]
    if any(m > ref + margin for m in others):
        return "not reproduced"
    if all(m < ref - margin for m in others):
        return "reproduced"
    return "partly"


def q_softmax_verdict(
    by_length: Mapping[int, Mapping[str, Sequence[float]]], *, margin: float
) -> str:
    """The claim "softmax is the best normaliser overall", over the test lengths
    (``length -> variant -> accuracy per seed``): :func:`softmax_verdict` at each;
    ``reproduced`` if it is reproduced at every length, ``not reproduced`` if at none (every
    length: some normaliser beats softmax), else ``partly``."""
    if not by_length:
        raise ValueError("by_length must hold at least one test length, got none")
    verdicts = [softmax_verdict(acc, margin=margin) for acc in by_length.values()]
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if all(v == "not reproduced" for v in verdicts):
        return "not reproduced"
    return "partly"


# ------------------------------------------------------------------------------------------
# 9.2 C29
# ------------------------------------------------------------------------------------------


def assert_c29_not_faithful(
    agreement: float,
    adversarial_fraction: float,
    control_fraction: float,
    *,
    max_agreement: float,
    min_fraction: float,
) -> None:
    """C29 holds when attention ranks the rows unlike leave-one-out (mean Kendall τ below
    ``max_agreement``), the trivial adversaries (uniform, permuted weights) meet the adversary
    criterion for fewer than ``min_fraction`` of the images (``control_fraction``), and the
    searched adversary meets it for at least ``min_fraction`` of the images on which no control
    does (``adversarial_fraction``)."""
    assert agreement < max_agreement, (
        f"attention agrees with leave-one-out (mean Kendall τ {agreement:.2f} >= "
        f"{max_agreement}): here the weights do rank the rows as their removal does"
    )
    assert control_fraction < min_fraction, (
        f"uniform or permuted weights already meet the criterion for {control_fraction:.2f} of "
        f"the images (>= {min_fraction}): the output hardly depends on these weights"
    )
    assert adversarial_fraction >= min_fraction, (
        f"only {adversarial_fraction:.2f} of the images the controls fail on have a different "
        f"attention with the same prediction (< {min_fraction}): the weights are not "
        f"interchangeable"
    )


def c29_verdict(
    agreements: Sequence[float],
    adversarial_fractions: Sequence[float],
    control_fractions: Sequence[float],
    *,
    max_agreement: float,
    min_fraction: float,
) -> str:
    """C29 over seeds (one value per seed in each sequence). Part (i): attention's mean
    Kendall τ with leave-one-out is below ``max_agreement`` in every seed (``agreements``).
    Part (ii), against Wiegreffe & Pinter's controls: the trivial adversaries (uniform or
    permuted ``[CLS]`` weights) meet the criterion for fewer than ``min_fraction`` of the images
    (``control_fractions``: else the output hardly depends on these weights and the test says
    nothing about attention), and the searched adversary meets it for at least
    ``min_fraction`` of the images on which no control does (``adversarial_fractions``), in
    every seed. Both: reproduced; one: partly; neither: not reproduced."""
    if not (len(agreements) == len(adversarial_fractions) == len(control_fractions) > 0):
        raise ValueError(
            f"agreements, adversarial_fractions and control_fractions need one value per seed, "
            f"got {len(agreements)}, {len(adversarial_fractions)} and {len(control_fractions)}"
        )
    informative = max(control_fractions) < min_fraction
    found = min(adversarial_fractions) >= min_fraction
    return _parts([max(agreements) < max_agreement, informative and found])


def c29_repairs_verdict(
    attention: Sequence[float], repairs: Mapping[str, Sequence[float]], *, gain: float
) -> str:
    """The claim "norm-based scores and rollout are more faithful than the raw weights": each
    repair's mean Kendall τ with leave-one-out (``repairs``: name -> τ per seed) must be at least
    ``gain`` above raw attention's (``attention``: τ per seed). Every repair: reproduced;
    some: partly; none: not reproduced."""
    if not repairs:
        raise ValueError("repairs must name at least one score, got none")
    base = spread(attention).mean
    return _parts([spread(v).mean - base >= gain for v in repairs.values()])


# ------------------------------------------------------------------------------------------
# 9.3 C30
# ------------------------------------------------------------------------------------------


def run_failed(final: float, *, start_loss: float, margin: float = FAIL_MARGIN) -> bool:
    """A run failed (diverged or never learnt) if its ``final`` loss is not at least
    ``margin`` (a fraction) below ``start_loss`` — the loss of a uniform guess, ``ln vocab`` —
    or is not finite (NaN and inf fail)."""
    return not final < (1 - margin) * start_loss


def assert_gradient_predictions(
    post_by_depth: Mapping[int, float],
    pre_by_depth: Mapping[int, float],
    post_by_width: Mapping[int, float],
    *,
    flat: float,
    shrink: float,
    grow: float,
) -> None:
    """Xiong et al. (2020)'s predictions for the last layer's gradient at initialisation
    (``depth -> norm`` or ``width -> norm``): Post-LN's does not depend on the depth (largest
    / smallest ≤ ``flat``); Pre-LN's shrinks with it (deepest / shallowest ≤ ``shrink``);
    Post-LN's grows with the width (widest / narrowest ≥ ``grow``)."""
    ratio = max(post_by_depth.values()) / min(post_by_depth.values())
    assert ratio <= flat, (
        f"Post-LN's last-layer gradient changes with depth by {ratio:.2f}x (> {flat}): "
        f"{dict(post_by_depth)}"
    )
    shallow, deep = min(pre_by_depth), max(pre_by_depth)
    ratio = pre_by_depth[deep] / pre_by_depth[shallow]
    assert ratio <= shrink, (
        f"Pre-LN's last-layer gradient does not shrink with depth: {deep} layers / {shallow} "
        f"layers = {ratio:.2f} (> {shrink})"
    )
    narrow, wide = min(post_by_width), max(post_by_width)
    ratio = post_by_width[wide] / post_by_width[narrow]
    assert ratio >= grow, (
        f"Post-LN's last-layer gradient does not grow with width: width {wide} / width "
        f"{narrow} = {ratio:.2f} (< {grow})"
    )


def _stability_parts(
    failures: Mapping[tuple[str, int], int], min_gap: int
) -> tuple[int, int, list[int], bool, bool]:
    post0, pre0 = failures[("Post-LN", 0)], failures[("Pre-LN", 0)]
    warm = [v for (layout, w), v in failures.items() if layout == "Post-LN" and w > 0]
    more_stable = post0 - pre0 >= min_gap
    rescued = bool(warm) and post0 - min(warm) >= min_gap
    return post0, pre0, warm, more_stable, rescued


def assert_c30_stability(
    failures: Mapping[tuple[str, int], int], *, total: int, min_gap: int
) -> None:
    """``failures[(layout, warmup)]`` = failed runs out of ``total``. Pre-LN without warm-up
    fails at least ``min_gap`` fewer times than Post-LN without warm-up, and warm-up cuts
    Post-LN's failures by at least ``min_gap``."""
    post0, pre0, warm, more_stable, rescued = _stability_parts(failures, min_gap)
    assert more_stable, (
        f"without warm-up Post-LN failed {post0}/{total}, Pre-LN {pre0}/{total}: "
        f"Pre-LN is not more stable by {min_gap}"
    )
    assert rescued, f"warm-up does not rescue Post-LN: {post0}/{total} without, {warm} with"


def c30_verdict(failures: Mapping[tuple[str, int], int], *, min_gap: int) -> str:
    """C30 from the failed runs per ``(layout, warmup)``: part (i), Pre-LN without warm-up fails
    at least ``min_gap`` fewer times than Post-LN without; part (ii), warm-up cuts Post-LN's
    failures by at least ``min_gap``. Both: reproduced; one: partly; neither: not
    reproduced."""
    *_, more_stable, rescued = _stability_parts(failures, min_gap)
    return _parts([more_stable, rescued])


# ------------------------------------------------------------------------------------------
# 9.4 priors
# ------------------------------------------------------------------------------------------


def prior_wins(winner: Sequence[float], loser: Sequence[float], *, gap: float) -> bool:
    """The winner's mean accuracy is at least ``gap`` above the loser's, and its worst seed
    above the loser's best."""
    w, lo = spread(winner), spread(loser)
    return w.mean >= lo.mean + gap and w.min > lo.max


def assert_prior_wins(
    winner: Sequence[float], loser: Sequence[float], *, gap: float, what: str
) -> None:
    """:func:`prior_wins`, with a message that says which half failed."""
    w, lo = spread(winner), spread(loser)
    assert w.mean >= lo.mean + gap, f"{what}: {w.mean:.3f} is not {gap} above {lo.mean:.3f}"
    assert w.min > lo.max, (
        f"{what}: the winner's worst seed {w.min:.3f} <= the loser's best {lo.max:.3f}"
    )


def priors_verdict(runs: Mapping[tuple[str, str], Sequence[float]], *, gap: float) -> str:
    """§9 priors from ``(task, mixer) -> accuracy per seed``: part (i), the convolution beats
    attention on ``"motif"`` (:func:`prior_wins`); part (ii), attention beats the convolution
    on ``"ends"``. Both: reproduced; one: partly; neither: not reproduced."""
    return _parts(
        [
            prior_wins(runs[("motif", "convolution")], runs[("motif", "attention")], gap=gap),
            prior_wins(runs[("ends", "attention")], runs[("ends", "convolution")], gap=gap),
        ]
    )


# ------------------------------------------------------------------------------------------
# The prose and the computed verdict
# ------------------------------------------------------------------------------------------


def assert_stated(claim_id: str, computed: str, *, stated: str) -> None:
    """The verdict the chapter's prose states (``stated``) is the one its verdict function
    computed: when a change to the experiment changes the verdict, the notebook stops here
    until the prose is rewritten."""
    for name, value in (("computed", computed), ("stated", stated)):
        if value not in VERDICTS:
            raise ValueError(f"{name} must be one of {list(VERDICTS)}, got {value!r}")
    assert computed == stated, (
        f"{claim_id}: the prose states {stated!r} but the run gives {computed!r}: rewrite the "
        f"verdict's paragraph (and the stated= here) for what the numbers show"
    )


# ------------------------------------------------------------------------------------------
# The sceptic's sweeps
# ------------------------------------------------------------------------------------------


def softmax_sweep_run(
    *,
    seeds: Sequence[int],
    steps: int,
    lr: float,
    lengths: Sequence[int] = (8, 32),
    test_size: int = 1000,
) -> Outcome:
    """Q-softmax's verdict (:func:`q_softmax_verdict`) as the chapter computes it: every
    normaliser of :data:`book.pages.ch09.VARIANTS` trained by :func:`train_normaliser` at 8
    pairs for ``steps`` at learning rate ``lr`` per seed, tested at each of ``lengths``."""
    acc = {n: {name: [] for name in page.VARIANTS} for n in lengths}
    for name in page.VARIANTS:
        for seed in seeds:
            model, _ = page.train_normaliser(name, seed=seed, n_pairs=lengths[0], steps=steps,
                                             lr=lr, batch_size=64)  # fmt: skip
            for n in lengths:
                acc[n][name].append(page.retrieval_accuracy(model, n_pairs=n, seed=seed + 2,
                                                            size=test_size))  # fmt: skip
    verdict = q_softmax_verdict(acc, margin=MARGIN)
    numbers = {f"{name} @{n}": round(spread(v).mean, 3) for n, a in acc.items()
               for name, v in a.items()}  # fmt: skip
    return Outcome(verdict, numbers)


def c30_sweep_run(
    *,
    seeds: Sequence[int],
    steps: int,
    depth: int,
    lrs: Sequence[float],
    warmup: int = 40,
    init: str = "torch",
) -> Outcome:
    """C30's verdict (:func:`c30_verdict`) as the chapter computes it: failed runs
    (:func:`run_failed` on the mean loss of the last 20 steps) of ``depth``-layer stacks,
    Post-LN without and with ``warmup`` steps of warm-up and Pre-LN without, one run per
    (learning rate in ``lrs``, seed), initialised by ``init`` (``"torch"`` or ``"xavier"``)."""
    setup = {"steps": steps, "batch_size": 16, "length": 8, "d_model": 16, "vocab": 16}
    setup |= {"init": init}
    failures, best = {}, {}
    for pre, warm in ((False, 0), (False, warmup), (True, 0)):
        runs = page.train_depth(depth, pre_ln=pre, lrs=lrs, warmup=warm, seeds=seeds, **setup)
        key = ("Pre-LN" if pre else "Post-LN", warm)
        finals = [page.final_loss(losses) for losses in runs.values()]
        failures[key] = sum(run_failed(f, start_loss=math.log(16)) for f in finals)
        low = min(finals)  # inf: every run went non-finite
        best[f"{key[0]} warm-up {warm} best final loss"] = round(low, 3) if low < 1e9 else None
    numbers = {f"{layout} warm-up {w}": v for (layout, w), v in failures.items()}
    numbers |= {"runs": len(lrs) * len(seeds), "depth": depth, "steps": steps, "init": init}
    numbers |= best
    return Outcome(c30_verdict(failures, min_gap=MIN_GAP), numbers)


def c29_measure(
    *,
    seeds: Sequence[int],
    steps: int,
    num_layers: int = 2,
    n_images: int = 200,
    n_adversarial: int = 64,
) -> dict[str, list[float]]:
    """C29's numbers per seed, as the chapter computes them: ``tau`` (attention's mean Kendall
    τ with leave-one-out over ``n_images`` test images), ``controls`` (share of
    ``n_adversarial`` images on which uniform or permuted ``[CLS]`` weights meet the
    criterion), ``beyond`` (share of the images no control passes on which the searched
    adversary does), ``found`` (the adversary's share of all images), ``accuracy``."""
    data = digits()
    images = data.test_images[:n_images]
    out: dict[str, list[float]] = {k: [] for k in ("tau", "controls", "beyond", "found",
                                                    "accuracy")}  # fmt: skip
    for seed in seeds:
        run = train_classifier(lambda: page.DigitsAttention(num_layers=num_layers),
                               page.sampler(data.train_images, data.train_labels), seed=seed,
                               test=(data.test_images, data.test_labels), threads=1,
                               steps=steps, batch_size=32, lr=3e-3)  # fmt: skip
        scores = page.importances(run.model, images)
        adv = page.adversarial_attention(run.model, images[:n_adversarial], tol=TOL)
        found = page.meets_criterion(adv, far=FAR, tol=TOL)  # (n,)
        trivial = page.trivial_adversaries(run.model, images[:n_adversarial], seed=seed)
        control = torch.stack([page.meets_criterion(a, far=FAR, tol=TOL)
                               for a in trivial.values()]).any(0)  # fmt: skip
        out["tau"].append(page.mean_rank_correlation(scores["attention"],
                                                     scores["leave-one-out"]))  # fmt: skip
        out["controls"].append(float(control.float().mean()))
        rest = ~control
        out["beyond"].append(float(found[rest].float().mean()) if rest.any() else 0.0)
        out["found"].append(float(found.float().mean()))
        out["accuracy"].append(run.accuracy)
    return out


def c29_sweep_run(**kwargs) -> Outcome:
    """C29's verdict (:func:`c29_verdict`) from :func:`c29_measure` ``(**kwargs)``."""
    m = c29_measure(**kwargs)
    verdict = c29_verdict(m["tau"], m["beyond"], m["controls"], max_agreement=MAX_AGREEMENT,
                          min_fraction=MIN_FRACTION)  # fmt: skip
    key = {"tau max": max(m["tau"]), "controls max": max(m["controls"]),
           "beyond min": min(m["beyond"]), "found mean": spread(m["found"]).mean,
           "accuracy mean": spread(m["accuracy"]).mean}  # fmt: skip
    per_seed = {k: [round(x, 3) for x in v] for k, v in m.items()}
    knobs = {"layers": kwargs.get("num_layers", 2), "steps": kwargs["steps"]}
    return Outcome(verdict, knobs | {k: round(v, 3) for k, v in key.items()} | per_seed)


def c29_repairs_sweep_run(
    *, seeds: Sequence[int], steps: int, num_layers: int = 2, n_images: int = 200
) -> Outcome:
    """C29 repairs' verdict (:func:`c29_repairs_verdict`) as the chapter computes it: the digits
    classifier (``num_layers`` layers, ``steps`` steps) trained per seed, then the mean Kendall
    τ with leave-one-out over ``n_images`` test images of raw attention, the norm-based score
    and rollout (gradient × input shown, not judged)."""
    data = digits()
    images = data.test_images[:n_images]
    names = ("attention", "norm ‖α·f(x)‖", "rollout", "gradient × input")
    tau: dict[str, list[float]] = {m: [] for m in names}
    accuracy = []
    for seed in seeds:
        run = train_classifier(lambda: page.DigitsAttention(num_layers=num_layers),
                               page.sampler(data.train_images, data.train_labels), seed=seed,
                               test=(data.test_images, data.test_labels), threads=1,
                               steps=steps, batch_size=32, lr=3e-3)  # fmt: skip
        scores = page.importances(run.model, images)
        for m in names:
            tau[m].append(page.mean_rank_correlation(scores[m], scores["leave-one-out"]))
        accuracy.append(run.accuracy)
    repairs = {m: tau[m] for m in ("norm ‖α·f(x)‖", "rollout")}
    verdict = c29_repairs_verdict(tau["attention"], repairs, gain=GAIN)
    base = spread(tau["attention"]).mean
    numbers: dict = {"layers": num_layers, "steps": steps}
    numbers |= {f"tau {m}": round(spread(v).mean, 3) for m, v in tau.items()}
    numbers |= {f"gain {m}": round(spread(v).mean - base, 3) for m, v in repairs.items()}
    numbers["accuracy mean"] = round(spread(accuracy).mean, 3)
    numbers |= {f"per seed {m}": [round(x, 3) for x in v] for m, v in tau.items()}
    return Outcome(verdict, numbers)


# The ends task does not depend on the motif's data size or budget: computed once per
# (seeds, steps) in a sweep's process and reused by its settings.
_ENDS_RUNS: dict[tuple, dict[str, list[float]]] = {}


def _ends_runs(seeds: Sequence[int], steps: int) -> dict[str, list[float]]:
    key = (tuple(seeds), steps)
    if key not in _ENDS_RUNS:
        _ENDS_RUNS[key] = {m: [page.mixer_accuracy("ends", m, seed=s, n_train=None, steps=steps)
                               for s in seeds] for m in ("convolution", "attention")}  # fmt: skip
    return _ENDS_RUNS[key]


def priors_sweep_run(
    *, seeds: Sequence[int], n_train: int | None, steps: int, ends_steps: int = 300
) -> Outcome:
    """§9 priors' verdict (:func:`priors_verdict`) as the chapter computes it, with the motif's
    data size as the knob: both mixers trained on the motif task from ``n_train`` fixed
    examples (``None``: fresh examples at every step) for ``steps`` steps, and on the ends task
    (fresh data, ``ends_steps`` steps), per seed (:func:`book.pages.ch09.mixer_accuracy`)."""
    runs = {("motif", m): [page.mixer_accuracy("motif", m, seed=s, n_train=n_train, steps=steps)
                           for s in seeds] for m in ("convolution", "attention")}  # fmt: skip
    runs |= {("ends", m): v for m, v in _ends_runs(seeds, ends_steps).items()}
    verdict = priors_verdict(runs, gap=WIN_GAP)
    numbers: dict = {"examples": "fresh" if n_train is None else n_train, "steps": steps}
    numbers |= {f"{t} {m}": round(spread(v).mean, 3) for (t, m), v in runs.items()}
    numbers |= {f"{t} {m} range": f"{min(v):.3f}-{max(v):.3f}" for (t, m), v in runs.items()
                if t == "motif"}  # fmt: skip
    numbers["locality wins"] = prior_wins(runs[("motif", "convolution")],
                                          runs[("motif", "attention")], gap=WIN_GAP)  # fmt: skip
    return Outcome(verdict, numbers)


SCEPTIC_SWEEPS = (
    Sweep(
        "Q-softmax",
        run=softmax_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 200, "lr": 3e-3},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("600 steps", "a 3× longer training budget", {"steps": 600}),
            Perturbation("lr 0.01", "learning rate 0.01 instead of 0.003", {"lr": 1e-2}),
        ),
    ),
    Sweep(
        "C29",
        run=c29_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 150, "num_layers": 2},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("450 steps", "a 3× longer training budget", {"steps": 450}),
            Perturbation(
                "1 layer", "a one-layer classifier (the issue's case)", {"num_layers": 1}
            ),  # fmt: skip
        ),
    ),
    Sweep(
        "C30",
        run=c30_sweep_run,
        baseline={
            "seeds": [0, 1, 2],
            "steps": 150,
            "depth": 12,
            "lrs": [1e-3, 1e-2],
            "init": "torch",
        },
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("depth 6", "6 layers instead of 12 (the claim's knob)", {"depth": 6}),
            Perturbation("depth 24", "24 layers instead of 12 (the claim's knob)", {"depth": 24}),
            Perturbation("450 steps", "a 3× longer training budget", {"steps": 450}),
            Perturbation(
                "Xavier init",
                "Xavier-uniform weight matrices instead of torch's defaults",
                {"init": "xavier"},
            ),
            Perturbation(
                "lr 0.003, 0.03",
                "learning rates 0.003 and 0.03 instead of 0.001 and 0.01",
                {"lrs": [3e-3, 3e-2]},
            ),  # fmt: skip
        ),
    ),
    Sweep(
        "C29 repairs",
        run=c29_repairs_sweep_run,
        baseline={"seeds": [0, 1, 2], "steps": 150, "num_layers": 2},
        perturbations=(
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
            Perturbation("450 steps", "a 3× longer training budget", {"steps": 450}),
            Perturbation(
                "4 layers", "four layers: more mixing for rollout to follow", {"num_layers": 4}
            ),
            Perturbation(
                "4 layers, seeds 3–5",
                "four layers, three other seeds",
                {"num_layers": 4, "seeds": [3, 4, 5]},
            ),
        ),
    ),
    Sweep(
        "§9 priors",
        run=priors_sweep_run,
        baseline={"seeds": [0, 1, 2], "n_train": 64, "steps": 200},
        perturbations=(
            Perturbation("256 examples", "a motif training set of 256", {"n_train": 256}),
            Perturbation("1024 examples", "a motif training set of 1024", {"n_train": 1024}),
            Perturbation(
                "fresh data", "fresh motif examples at every step", {"n_train": None}
            ),  # fmt: skip
            Perturbation(
                "fresh data, 600 steps",
                "fresh motif examples at every step, a 3× longer budget",
                {"n_train": None, "steps": 600},
            ),
            Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]}),
        ),
    ),
)
