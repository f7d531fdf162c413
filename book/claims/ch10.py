"""Claims of chapter 10: thresholds, verdicts, asserting functions, the runs behind them.

The capstone classifier, its data, its attention kinds and the FLOP formula are defined on the
chapter's page (``chapters/10_application.py``, exported to :mod:`book.pages.ch10`); this
module holds what judges them:

- thresholds, each set from its claim (:data:`WORKING_ACCURACY`, :data:`TOLERANCE`,
  :data:`CLEAR_GAP`, :data:`QUADRATIC_LIMIT`, :data:`FAILS_BY`);
- ``s10_*_verdict``: the verdict of each claim (one of :data:`book.claims.VERDICTS`) as a
  function of the measured numbers, and ``assert_*``: each raises ``AssertionError`` when its
  claim is false (the chapter's prose is written for the verdict these guard);
- the runners: :func:`train_grid` (the seed loop over configurations, each run through
  :func:`book.experiments.training.train_classifier`), :func:`training_step_cost`,
  :func:`encoder_cost`, :func:`encoder_flops`, :func:`model_flops`;
- the decision guide (:data:`GUIDE`, :func:`decision_guide`, :func:`guide_markdown`), each row
  tied to the recorded claims that back it;
- the sceptic's sweep (:data:`SCEPTIC_SWEEPS`) of every claim that training decides: other
  seeds, three times the budget and the claim's own knob (RoPE's base, the window's reach),
  each run by a ``*_sweep_run`` that judges with the chapter's verdict function.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import Encoder
from attention.checks import check_positive_int
from book.claims import VERDICTS
from book.data import digits
from book.experiments.parallel import run_each
from book.experiments.training import ClassifierRun, train_classifier
from book.pages.ch05 import TRAIN_LEN, documents_of_length, topic_documents
from book.pages.ch05 import accuracy as document_accuracy
from book.pages.ch05 import classifier as document_classifier
from book.pages.ch10 import (
    D_FF,
    D_MODEL,
    LEARNED_STD,
    LONG_KINDS,
    LONG_LEN,
    LONG_TRAINING,
    NUM_HEADS,
    NUM_LAYERS,
    RECORD_SIZES,
    TRAINING,
    WINDOW,
    EncoderFlops,
    PatchClassifier,
    attention_kernel,
    cancer_records,
    draw_batches,
    long_kernel,
    pixel_baseline,
)
from book.progress import progress as progress_bar
from book.sceptic import Outcome, Perturbation, Sweep
from measure.flops import matmul_flop_counter
from measure.memory import peak_extra_bytes
from measure.timing import min_seconds

Tensor = torch.Tensor
REPRODUCED, PARTLY, NOT_REPRODUCED = VERDICTS

# ------------------------------------------------------------------------------------------
# Thresholds, each from its claim (fixed before the runs)
# ------------------------------------------------------------------------------------------

# §10 encoder, "a working classifier": every seed at 0.85 or more, eight and a half times
# chance on ten classes; a model that learned little (a few strokes) stays far below it.
WORKING_ACCURACY = 0.85
# "As good as" / "loses nothing": within 0.02 of mean accuracy, nine of the 450 test digits,
# about the spread between seeds of one configuration.
TOLERANCE = 0.02
# §10 relative, "loses": at least 0.05 below, more than twice the spread between seeds.
CLEAR_GAP = 0.05
# §10 O(n²), "not what makes a model expensive": the n² products under half of the FLOPs.
QUADRATIC_LIMIT = 0.5
# §10 guide, "useless on another task": at least this far below full attention (a quarter of
# the range of accuracy).
FAILS_BY = 0.25


def _mean(values: Sequence[float]) -> float:
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite numbers, at least one, got {values!r}")
    return statistics.fmean(values)


def _means(accuracy: Mapping[str, Sequence[float]], *labels: str) -> dict[str, float]:
    """Mean accuracy per label; ``KeyError`` naming a label that is not there."""
    for label in labels:
        if label not in accuracy:
            raise KeyError(f"{label!r} is not one of {list(accuracy)}")
    return {label: _mean(v) for label, v in accuracy.items()}


def _of_parts(held: Sequence[bool]) -> str:
    """All parts hold: reproduced; some: partly; none: not reproduced."""
    return REPRODUCED if all(held) else PARTLY if any(held) else NOT_REPRODUCED


# ------------------------------------------------------------------------------------------
# Training: the seed loop over configurations
# ------------------------------------------------------------------------------------------


def train_grid(
    builders: Mapping[str, Callable[[], nn.Module]],
    make_batch: Callable[[int, torch.Generator], tuple[Tensor, Tensor]],
    test: tuple[Tensor, Tensor],
    seeds: Sequence[int],
    *,
    progress: bool = False,
    desc: str = "trainings",
    **train_kwargs,
) -> dict[str, list[ClassifierRun]]:
    """``{label: [run per seed]}``: every builder trained with every seed by
    :func:`~book.experiments.training.train_classifier` (``train_kwargs`` pass through: steps,
    batch size, lr, clip, threads) and scored on the fixed ``test = (inputs, labels)``; the
    (label, seed) pairs run side by side (:func:`~book.experiments.parallel.run_each`: the
    numbers of a plain loop). ``progress`` shows one bar over the pairs."""
    pairs = [(label, seed) for label in builders for seed in seeds]

    def train(pair: tuple[str, int]) -> ClassifierRun:
        label, seed = pair
        return train_classifier(
            builders[label], make_batch, seed=seed, test=test, desc=label, **train_kwargs
        )

    done = run_each(train, pairs, desc=desc if progress else None)
    runs: dict[str, list[ClassifierRun]] = {label: [] for label in builders}
    for (label, _), run in zip(pairs, done, strict=True):
        runs[label].append(run)
    return runs


def accuracies(runs: Mapping[str, Sequence[ClassifierRun]]) -> dict[str, list[float]]:
    """``{label: [test accuracy per seed]}``."""
    return {label: [r.accuracy for r in rs] for label, rs in runs.items()}


# ------------------------------------------------------------------------------------------
# Cost: exact bytes, exact FLOPs, wall time
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepCost:
    """One forward + backward: ``peak_bytes`` (exact, inputs excluded, gradients included) and
    ``seconds`` (the fastest of a few calls; NaN when not timed)."""

    peak_bytes: int
    seconds: float


def _step(model: nn.Module, loss_of: Callable[[], Tensor]) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        loss_of().backward()

    return run


def training_step_cost(
    model: nn.Module, images: Tensor, labels: Tensor, *, repeats: int = 5, timed: bool = True
) -> StepCost:
    """Peak bytes and fastest time of one training step's forward + backward on a batch (the
    optimiser's update is left out: it is the same for every attention kind)."""
    model.train()
    step = _step(model, lambda: F.cross_entropy(model(images), labels))
    peak = peak_extra_bytes(step)
    seconds = min_seconds(step, repeats=repeats, warmup=1) if timed else math.nan
    model.zero_grad(set_to_none=True)
    model.eval()
    return StepCost(int(peak), seconds)


def sweep_encoder(
    attention: str | None,
    *,
    d_model: int = D_MODEL,
    num_heads: int = NUM_HEADS,
    num_layers: int = NUM_LAYERS,
    d_ff: int = D_FF,
    seed: int = 0,
) -> Encoder:
    """The capstone's encoder alone with attention kind ``attention`` computed by its kernel
    (:func:`book.pages.ch10.attention_kernel`); ``None``: the package's written-out reference
    attention, which forms the ``n × n`` weights."""
    kernel = None if attention is None else attention_kernel(attention)
    torch.manual_seed(seed)
    return Encoder(d_model, num_heads, d_ff, num_layers=num_layers, pre_ln=True, attn_fn=kernel)


def encoder_cost(
    attention: str | None, seq_len: int, *, repeats: int = 3, timed: bool = True
) -> StepCost:
    """Forward + backward of :func:`sweep_encoder` on one random sequence ``(1, L, D)``."""
    seq_len = check_positive_int("seq_len", seq_len)
    encoder = sweep_encoder(attention)
    x = torch.randn(1, seq_len, D_MODEL, generator=torch.Generator().manual_seed(1))  # (1, L, D)
    step = _step(encoder, lambda: encoder(x).square().mean())
    peak = peak_extra_bytes(step)
    seconds = min_seconds(step, repeats=repeats, warmup=1) if timed else math.nan
    return StepCost(int(peak), seconds)


def encoder_flops(seq_len: int) -> EncoderFlops:
    """The FLOPs of :func:`book.pages.ch10.encoder_flops_formula`, counted by torch's FLOP
    counter on a forward pass of the written-out encoder (:func:`sweep_encoder` with ``None``).
    The quadratic part is what the counter books under batched products (``aten.bmm``):
    ``Q Kᵀ`` and ``weights · V``; every projection and the feed-forward are ``aten.addmm``."""
    seq_len = check_positive_int("seq_len", seq_len)
    encoder = sweep_encoder(None)
    x = torch.randn(1, seq_len, D_MODEL, generator=torch.Generator().manual_seed(1))
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        encoder(x)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    return EncoderFlops(seq_len, int(counter.get_total_flops()), by_op.get("aten.bmm", 0))


def long_task_costs(seq_len: int, *, batch_size: int = 16) -> dict[str, tuple[int, int]]:
    """``{kind: (forward FLOPs per document, peak bytes)}`` for chapter 5's document classifier
    with each of :data:`book.pages.ch10.LONG_KINDS` reading ``seq_len`` tokens: FLOPs from
    torch's counter on one document (full attention through the written-out reference, whose
    ``n × n`` products the counter sees), and the exact peak bytes of a forward pass (no
    gradients) on ``batch_size`` documents with the kernel that trains."""
    seq_len = check_positive_int("seq_len", seq_len)
    tokens, _ = documents_of_length(seq_len)(batch_size, torch.Generator().manual_seed(0))
    out = {}
    for kind in LONG_KINDS:
        torch.manual_seed(0)
        flops = model_flops(document_classifier(long_kernel(kind, written_out=True)), tokens[:1])
        torch.manual_seed(0)
        model = document_classifier(long_kernel(kind)).eval()

        def read(model=model) -> None:
            with torch.no_grad():
                model(tokens)

        out[kind] = (flops, int(peak_extra_bytes(read)))
    return out


def step_peaks_at(seq_len: int, *, batch_size: int = 32) -> dict[str, int]:
    """Peak bytes of a training step (batch ``batch_size``) of the chapter's classifier with
    full attention and with the three efficient kernels, on images of the digits' layout
    stretched to ``seq_len`` patches: a grid of ``seq_len / 4`` rows of 4 patches (at 16, the
    8 × 8 digits; bytes do not depend on the pixel values, so the images are random)."""
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len % 4:
        raise ValueError(f"seq_len must be a multiple of 4 (rows of 4 patches), got {seq_len}")
    size = (seq_len // 4 * 2, 8)
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(batch_size, 1, *size, generator=generator)  # (B, 1, H, 8)
    labels = torch.randint(10, (batch_size,), generator=generator)  # (B,)
    kinds = {"full": {}, "window ±4": {"attention": "window", "dense": False},
             "linear": {"attention": "linear"},
             "block-sparse": {"attention": "block-sparse", "dense": False}}  # fmt: skip
    peaks = {}
    for label, config in kinds.items():
        torch.manual_seed(0)
        model = PatchClassifier(image_size=size, **config)
        peaks[label] = training_step_cost(model, images, labels, timed=False).peak_bytes
    return peaks


def model_flops(model: nn.Module, images: Tensor) -> int:
    """Forward matrix-multiply FLOPs of ``model`` on ``images`` (torch's counter)."""
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        model(images)
    return int(counter.get_total_flops())


# ------------------------------------------------------------------------------------------
# Verdicts and asserting functions
# ------------------------------------------------------------------------------------------


def s10_encoder_verdict(accuracy: Sequence[float], *, threshold: float = WORKING_ACCURACY) -> str:
    """§10 encoder: every seed at ``threshold`` or above → reproduced; some seeds → partly (a
    classifier that works only with a lucky start); none → not reproduced."""
    _mean(accuracy)
    return _of_parts([a >= threshold for a in accuracy])


def assert_working_classifier(accuracy: Sequence[float], *, threshold: float) -> None:
    """§10 encoder: every seed classifies at least ``threshold`` of the test digits right."""
    _mean(accuracy)
    worst = min(accuracy)
    assert worst >= threshold, (
        f"not a working classifier: the worst seed reaches {worst:.3f} < {threshold} "
        f"(seeds: {[round(a, 3) for a in accuracy]})"
    )


def assert_as_good_as_best(
    name: str, accuracy: Mapping[str, Sequence[float]], *, tolerance: float
) -> None:
    """``name``'s mean accuracy is within ``tolerance`` of the best mean among all labels."""
    means = _means(accuracy, name)
    best = max(means, key=means.get)
    assert means[name] >= means[best] - tolerance, (
        f"{name} ({means[name]:.3f}) is more than {tolerance} below the best, {best} "
        f"({means[best]:.3f})"
    )


def s10_positions_verdict(
    accuracy: Mapping[str, Sequence[float]],
    *,
    learned: Sequence[str] = ("learned",),
    tolerance: float = TOLERANCE,
) -> str:
    """§10 positions: each learned table in ``learned`` (one per initial scale, if several) is
    within ``tolerance`` of the best other encoding, or above it. All of them → reproduced;
    some (the table is enough only from a good start) → partly; none → not reproduced."""
    means = _means(accuracy, *learned)
    others = {k: v for k, v in means.items() if k not in learned}
    if not others:
        raise ValueError(f"accuracy holds no encoding besides {list(learned)}")
    best = max(others.values())
    return _of_parts([means[label] >= best - tolerance for label in learned])


def assert_worse_by(
    name: str, reference: str, accuracy: Mapping[str, Sequence[float]], *, margin: float
) -> None:
    """``name``'s mean accuracy is at least ``margin`` below ``reference``'s."""
    means = _means(accuracy, name, reference)
    gap = means[reference] - means[name]
    assert gap >= margin, (
        f"{name} is only {gap:.3f} below {reference} (expected a gap of at least {margin})"
    )


def s10_relative_verdict(
    accuracy: Mapping[str, Sequence[float]],
    *,
    relative: Sequence[str] = ("RoPE", "ALiBi"),
    absolute: Sequence[str] = ("sinusoidal", "learned"),
    margin: float = CLEAR_GAP,
) -> str:
    """§10 relative: each relative scheme's mean is at least ``margin`` below the better
    absolute scheme's. Both → reproduced; one → partly; none → not reproduced."""
    means = _means(accuracy, *relative, *absolute)
    best = max(means[k] for k in absolute)
    return _of_parts([best - means[k] >= margin for k in relative])


def assert_no_loss_beyond(
    name: str, reference: str, accuracy: Mapping[str, Sequence[float]], *, tolerance: float
) -> None:
    """``name`` loses at most ``tolerance`` of mean accuracy against ``reference``."""
    means = _means(accuracy, name, reference)
    gap = means[reference] - means[name]
    assert gap <= tolerance, (
        f"{name} loses {gap:.3f} of mean accuracy against {reference} (tolerance {tolerance})"
    )


def s10_no_loss_verdict(
    name: str,
    accuracy: Mapping[str, Sequence[float]],
    *,
    reference: str = "full",
    tolerance: float = TOLERANCE,
) -> str:
    """§10 window, §10 block-sparse: ``name`` loses at most ``tolerance`` of mean accuracy
    against ``reference`` → reproduced; more → not reproduced (the claim has one part)."""
    means = _means(accuracy, name, reference)
    return REPRODUCED if means[reference] - means[name] <= tolerance else NOT_REPRODUCED


def s10_linear_verdict(
    accuracy: Mapping[str, Sequence[float]],
    *,
    name: str = "linear",
    reference: str = "full",
    tolerance: float = TOLERANCE,
) -> str:
    """§10 linear, "linear attention costs some accuracy": its mean is more than ``tolerance``
    below ``reference``'s and every seed of it below every seed of ``reference`` →
    reproduced; only the mean → partly; neither → not reproduced."""
    means = _means(accuracy, name, reference)
    if means[reference] - means[name] <= tolerance:
        return NOT_REPRODUCED
    separated = max(accuracy[name]) < min(accuracy[reference])
    return REPRODUCED if separated else PARTLY


def assert_quadratic_part_small(flops: EncoderFlops, *, below: float) -> None:
    """§10 O(n²): at this length the ``n²`` products are less than ``below`` of the compute."""
    assert flops.share < below, (
        f"at n = {flops.seq_len} the n² products are {flops.share:.1%} of the FLOPs "
        f"(expected < {below:.0%})"
    )


def _not_costlier(peaks: Mapping[str, int], full: str, tolerance: float = 0.0) -> dict[str, int]:
    """The kinds whose peak bytes are below ``full``'s (times ``1 + tolerance``)."""
    if full not in peaks:
        raise KeyError(f"{full!r} is not one of {list(peaks)}")
    return {k: v for k, v in peaks.items() if k != full and peaks[full] > v * (1 + tolerance)}


def assert_full_attention_not_costlier(
    peaks: Mapping[str, int], *, full: str = "full", tolerance: float = 0.0
) -> None:
    """Full attention's peak bytes are at most every other kind's (times ``1 + tolerance``)."""
    worse = _not_costlier(peaks, full, tolerance)
    assert not worse, (
        f"{full} attention holds {peaks[full]:,} bytes at its peak, more than "
        + ", ".join(f"{k} ({v:,})" for k, v in worse.items())
    )


def s10_quadratic_verdict(
    flops: EncoderFlops,
    step_peaks: Mapping[str, int],
    long_peaks: Mapping[str, int],
    *,
    below: float = QUADRATIC_LIMIT,
    full: str = "full",
    long_full: str = "full, fused",
) -> str:
    """§10 O(n²), two parts: at the task's length the ``n²`` products are under ``below`` of
    the FLOPs, and full attention's memory is at most every efficient kind's (both in the
    training step, ``step_peaks``, and on long inputs, ``long_peaks``). Both → reproduced;
    one → partly; neither → not reproduced."""
    compute = flops.share < below
    memory = not _not_costlier(step_peaks, full) and not _not_costlier(long_peaks, long_full)
    return _of_parts([compute, memory])


def s10_fashion_verdict(
    accuracy: Mapping[str, Sequence[float]],
    flops: Mapping[str, int],
    *,
    baseline: str = "MLP",
    encoder: str,
    tolerance: float = TOLERANCE,
) -> str:
    """§10 fashion, "a model without attention can do as well for far less": ``baseline``'s
    mean accuracy is within ``tolerance`` of ``encoder``'s (or above), and its forward FLOPs
    are fewer. Both → reproduced; one → partly; neither → not reproduced."""
    means = _means(accuracy, baseline, encoder)
    for label in (baseline, encoder):
        if label not in flops:
            raise KeyError(f"flops has no {label!r}: {list(flops)}")
    as_good = means[baseline] >= means[encoder] - tolerance
    cheaper = flops[baseline] < flops[encoder]
    return _of_parts([as_good, cheaper])


def s10_tradeoff_verdict(
    accuracy: Mapping[str, Sequence[float]],
    flops: Mapping[str, int],
    *,
    full: str = "full",
    working: float = WORKING_ACCURACY,
    margin: float = CLEAR_GAP,
) -> str:
    """§10 trade-off, "on long inputs the efficient kinds buy their savings with accuracy when
    a far token decides". Full attention must solve the task (mean at least ``working``), else
    there is nothing to trade against: not reproduced. Then one part per other kind: it counts
    fewer ``flops`` than ``full`` *and* its mean accuracy is at least ``margin`` below. Every
    kind → reproduced; some → partly (a kind that saves compute at no cost in accuracy, or
    saves nothing); none → not reproduced."""
    means = _means(accuracy, full)
    missing = [k for k in accuracy if k not in flops]
    if missing:
        raise KeyError(f"flops has no {missing}: {list(flops)}")
    kinds = [k for k in accuracy if k != full]
    if not kinds:
        raise ValueError(f"accuracy holds no kind besides {full!r}")
    if means[full] < working:
        return NOT_REPRODUCED
    return _of_parts([flops[k] < flops[full] and means[full] - means[k] >= margin for k in kinds])


def s10_own_data_verdict(
    accuracy: Mapping[str, Sequence[float]],
    *,
    encoder: str = "encoder, learned positions",
    baseline: str = "logistic regression",
    no_positions: str = "encoder, no positions",
    tolerance: float = TOLERANCE,
) -> str:
    """§10 own data, two parts with the chapter's rules: the encoder is as good as the linear
    ``baseline`` (its mean at most ``tolerance`` below, §10 fashion's rule), and its positions
    matter (without them the mean loses more than ``tolerance``, §10 linear's rule for "costs
    some accuracy"). Both → reproduced; one → partly; neither → not reproduced."""
    means = _means(accuracy, encoder, baseline, no_positions)
    as_good = means[encoder] >= means[baseline] - tolerance
    positions = means[encoder] - means[no_positions] > tolerance
    return _of_parts([as_good, positions])


# ------------------------------------------------------------------------------------------
# The decision guide
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuideRow:
    """A situation, the choice for it, and the claim ids whose recorded numbers back it (an
    id such as ``"C19"`` stands for every recorded sub-claim ``C19 …``)."""

    situation: str
    choice: str
    cites: tuple[str, ...]


@dataclass(frozen=True)
class Evidence:
    """A recorded claim cited by a row."""

    claim_id: str
    chapter: int
    verdict: str
    measured: str

    def text(self) -> str:
        return f"{self.claim_id} (ch. {self.chapter}, {self.verdict}): {self.measured}"


@dataclass(frozen=True)
class BackedRow:
    row: GuideRow
    evidence: tuple[Evidence, ...]
    missing: tuple[str, ...]  # cited ids no notebook has recorded yet


GUIDE: tuple[GuideRow, ...] = (
    GuideRow(
        "Small inputs of fixed size and layout (a few dozen tokens, like 8 × 8 digits)",
        "Try a model without attention first (a linear model or an MLP); if you use attention, "
        "full attention with learned absolute positions",
        ("§10 fashion", "§10 positions", "§10 own data"),
    ),
    GuideRow(
        "Any sequence shorter than about 2·d_model + d_ff tokens",
        "Full attention, through a fused kernel (torch's scaled_dot_product_attention): the n² "
        "products are under half the compute, and the kernel's memory grows like n",
        ("§10 O(n²)", "C18"),
    ),
    GuideRow(
        "Long sequences whose dependencies are local (within a known window)",
        "A sliding window (or block-sparse attention that keeps the neighbours): same accuracy, "
        "compute and memory linear in n",
        ("§10 window", "§10 block-sparse", "C19 cost"),
    ),
    GuideRow(
        "Long sequences where a few far-apart tokens decide (a topic at the start, a verdict "
        "at the end)",
        "Never a bare window, not even a stack of them: full attention, or make the token that "
        "reads the answer global (a global token elsewhere did not learn to relay in our budget)",
        ("§10 trade-off", "C19 window", "C19 window depth", "C19 global relay", "C17"),
    ),
    GuideRow(
        "Tasks that need many precise lookups (copying, retrieval, recall)",
        "Softmax attention; linear attention's weights have rank at most the head width and it "
        "learns such lookups more slowly",
        ("C19 linear", "§10 linear"),
    ),
    GuideRow(
        "Inputs whose length changes, or grows past what was trained",
        "RoPE (it degrades more gracefully); not a learned table (it stops at its last row) "
        "nor sinusoids alone (quality drops past the training length)",
        ("C15", "C14", "§4 learned PE"),
    ),
    GuideRow(
        "2-D inputs read as a sequence (image patches), or an encoder that needs direction",
        "A learned position table; symmetric ALiBi cannot tell left from right, and RoPE needs "
        "its base fitted to the length (base 10000 leaves half of a narrow head unused on 16 "
        "tokens; fitted, it matches sinusoids, still below the learned table)",
        ("§10 positions", "§10 relative"),
    ),
    GuideRow(
        "Several relations to track at once (the previous token and a matching partner)",
        "Several heads, one per relation, without shrinking the head width to a handful",
        ("C9b", "C10"),
    ),
    GuideRow(
        "Decoders that generate text",
        "A causal mask, always, and a test that position 0 attends only to itself",
        ("C20", "C21"),
    ),
    GuideRow(
        "Batches of unequal lengths",
        "A padding mask on the keys, combined with the causal mask when there is one",
        ("C22",),
    ),
    GuideRow(
        "Training in float16",
        "Keep the softmax in float32 and watch the largest score",
        ("C23",),
    ),
    GuideRow(
        "Exact attention on long sequences, memory-bound",
        "A fused, tiled kernel (FlashAttention, torch's scaled_dot_product_attention) or "
        "checkpointing: the same result without the n × n table",
        ("C24", "§10 O(n²)", "C19 cost"),
    ),
    GuideRow(
        "Large images, dense prediction",
        "Windowed attention with shifted windows (Swin)",
        ("C25",),
    ),
    GuideRow(
        "Strongly periodic or trending time series",
        "Compare with a tuned LSTM or TCN before choosing attention",
        ("C26",),
    ),
    GuideRow(
        "Text with images",
        "Project both to one width, then cross-attention (or a CLIP-style contrastive head)",
        ("C27",),
    ),
    GuideRow(
        "Writing multi-head attention yourself",
        "Compare with torch.nn.MultiheadAttention on the same weights; shape tests do not "
        "catch a wrong view/transpose",
        ("C28",),
    ),
    GuideRow(
        "Explaining a prediction",
        "Check attention weights against gradient or leave-one-out importance before reading "
        "them as an explanation",
        ("C29",),
    ),
    GuideRow(
        "Deep stacks",
        "Compare Pre-LN and Post-LN (with and without warm-up) by their divergences before "
        "committing to one",
        ("C30",),
    ),
)

_NUMBER = re.compile(r"\d")


def _matches(cite: str, claim_id: str) -> bool:
    """``"C19"`` cites ``"C19"``, ``"C19 window"`` and ``"C19a"``, never ``"C190"``; any
    other id cites only itself."""
    if cite == claim_id:
        return True
    if re.fullmatch(r"C\d{1,2}", cite):
        return claim_id.startswith(cite) and not claim_id[len(cite)].isdigit()
    return False


def decision_guide(
    recorded: Iterable[Evidence], rows: Sequence[GuideRow] = GUIDE
) -> list[BackedRow]:
    """Each row with the recorded claims it cites (in the order cited) and the ids that
    nothing recorded yet."""
    recorded = list(recorded)
    out = []
    for row in rows:
        found, missing = [], []
        for cite in row.cites:
            hits = [e for e in recorded if _matches(cite, e.claim_id)]
            if hits:
                found.extend(e for e in hits if e not in found)
            else:
                missing.append(cite)
        out.append(BackedRow(row, tuple(found), tuple(missing)))
    return out


def guide_markdown(guide: Sequence[BackedRow]) -> str:
    """The rows that have evidence as a Markdown table (situation, choice, evidence), then the
    rows still waiting for theirs."""

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["| situation | choose | measured in this book |", "| --- | --- | --- |"]
    waiting = []
    for backed in guide:
        if not backed.evidence:
            waiting.append(backed)
            continue
        evidence = "<br>".join(cell(e.text()) for e in backed.evidence)
        lines.append(f"| {cell(backed.row.situation)} | {cell(backed.row.choice)} | {evidence} |")
    if waiting:
        lines += ["", "Rows waiting for their chapter's recorded claims:", ""]
        lines += [
            f"- {cell(b.row.situation)} → {cell(b.row.choice)} (cites "
            f"{', '.join(b.missing)}: not yet recorded)"
            for b in waiting
        ]
    return "\n".join(lines)


def assert_guide_backed(guide: Sequence[BackedRow], *, required: Iterable[str] = ()) -> None:
    """§10 guide: every row shown has evidence, every piece of evidence quotes a number, and
    every id in ``required`` is among the evidence (recorded, so the row it backs is shown)."""
    shown = [b for b in guide if b.evidence]
    assert shown, "no row of the guide is backed by a recorded claim"
    for b in shown:
        for e in b.evidence:
            assert _NUMBER.search(e.measured), (
                f"evidence {e.claim_id} for {b.row.situation!r} quotes no number: {e.measured!r}"
            )
    cited = {e.claim_id for b in shown for e in b.evidence}
    absent = [r for r in required if r not in cited]
    assert not absent, f"the guide lacks evidence from {absent} (not recorded, or not cited)"


WINDOW_VS_FULL = re.compile(
    r"accuracy (?P<window>\d+(?:\.\d+)?) \([^)]*\) vs (?P<full>\d+(?:\.\d+)?) full"
)


def _window_elsewhere(elsewhere: Evidence) -> tuple[float, float] | None:
    """(window, full) accuracy from a recorded "…: accuracy A (…) vs F full", or None."""
    found = WINDOW_VS_FULL.search(elsewhere.measured)
    return (float(found["window"]), float(found["full"])) if found else None


def assert_depends_on_task(
    here: Mapping[str, Sequence[float]],
    elsewhere: Evidence,
    *,
    kind: str = "window ±4",
    reference: str = "full",
    tolerance: float,
    fails_by: float = FAILS_BY,
) -> None:
    """§10 guide: no attention kind is best everywhere. ``kind`` is as good as ``reference``
    on this chapter's task (within ``tolerance``), while ``elsewhere`` — another chapter's
    recorded claim, whose measurement starts "…: accuracy A (…) vs F full" — shows the same
    kind at least ``fails_by`` below full attention on its task. The numbers decide, not that
    claim's verdict: chapter 5's C19 window records the window's failure itself, whatever
    the verdict says of the rest."""
    assert_no_loss_beyond(kind, reference, here, tolerance=tolerance)
    found = _window_elsewhere(elsewhere)
    assert found, (
        f"{elsewhere.claim_id} records no 'accuracy A (...) vs F full' measurement: no recorded "
        f"task on which {kind} fails ({elsewhere.measured!r})"
    )
    window, full = found
    assert full - window >= fails_by, (
        f"{elsewhere.claim_id}: the window reached {window:.2f} against {full:.2f} for full "
        f"attention, less than {fails_by} below: no recorded task on which {kind} fails"
    )


def s10_guide_verdict(
    here: Mapping[str, Sequence[float]],
    elsewhere: Evidence,
    *,
    kind: str = "window ±4",
    reference: str = "full",
    tolerance: float = TOLERANCE,
    fails_by: float = FAILS_BY,
) -> str:
    """§10 guide, "which kind is best depends on the task": ``kind`` matches ``reference``
    here (within ``tolerance``) and fails elsewhere (at least ``fails_by`` below full attention
    in ``elsewhere``'s recorded numbers) → reproduced. Anything else → not reproduced: a kind
    good on both tasks, or bad on both, shows no dependence on the task (and a record without
    the numbers shows nothing)."""
    means = _means(here, kind, reference)
    found = _window_elsewhere(elsewhere)
    if found is None:
        return NOT_REPRODUCED
    good_here = means[reference] - means[kind] <= tolerance
    fails_there = found[1] - found[0] >= fails_by
    return REPRODUCED if good_here and fails_there else NOT_REPRODUCED


# ------------------------------------------------------------------------------------------
# The sceptic's sweep: the training-decided claims of §10.2–10.4 under other seeds, a 3×
# budget and each claim's own knob (RoPE's base, the window's reach)
# ------------------------------------------------------------------------------------------

# The chapter's configurations (§10.3, §10.4), as keyword arguments of PatchClassifier.
POSITION_CONFIGS: dict[str, dict] = {
    "none": {"positional": "none"},
    "sinusoidal": {"positional": "sinusoidal"},
    "learned": {"positional": "learned"},
    "RoPE": {"positional": "rope"},
    "ALiBi": {"positional": "alibi"},
}
ATTENTION_CONFIGS: dict[str, dict] = {
    "full": {},
    "window ±4": {"attention": "window"},
    "linear": {"attention": "linear"},
    "block-sparse": {"attention": "block-sparse"},
}
_RUNS: dict[tuple, float] = {}  # one sweep reuses the runs another already made


@functools.cache
def _digits_split() -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    data = digits()
    return (
        (data.train_images.unsqueeze(1), data.train_labels),  # (N, 1, 8, 8), (N,)
        (data.test_images.unsqueeze(1), data.test_labels),  # (450, 1, 8, 8), (450,)
    )


def digits_accuracy(config: Mapping[str, object], seed: int, steps: int) -> float:
    """Test accuracy of the chapter's ``PatchClassifier(**config)`` trained as the chapter
    trains it (``TRAINING``, ``steps`` steps) with ``seed``; remembered, so a sweep that needs
    the same run again (another claim's baseline) does not train it twice."""
    key = (tuple(sorted(config.items())), seed, steps)
    if key not in _RUNS:
        train, test = _digits_split()
        run = train_classifier(
            functools.partial(PatchClassifier, **config),
            draw_batches(*train),
            seed=seed,
            test=test,
            **(TRAINING | {"steps": steps}),
        )
        _RUNS[key] = float(run.accuracy)
    return _RUNS[key]


def _grid(configs: Mapping[str, Mapping], seeds: Sequence[int], steps: int) -> dict:
    pairs = [(label, seed) for label in configs for seed in seeds]
    out: dict[str, list[float]] = {label: [] for label in configs}
    for label, seed in progress_bar(pairs, desc="runs", leave=False):
        out[label].append(digits_accuracy(configs[label], seed, steps))
    return out


def _numbers(accuracy: Mapping[str, Sequence[float]]) -> dict[str, str]:
    return {k: f"{_mean(v):.3f} ({min(v):.3f}-{max(v):.3f})" for k, v in accuracy.items()}


def _position_grid(
    seeds: Sequence[int],
    steps: int,
    rope_base: float,
    labels: Sequence[str],
    learned_std: float = LEARNED_STD,
) -> dict[str, list[float]]:
    configs = {k: dict(POSITION_CONFIGS[k]) for k in labels}
    if "RoPE" in configs and rope_base != 10000.0:
        configs["RoPE"]["rope_base"] = float(rope_base)
    if "learned" in configs and learned_std != LEARNED_STD:
        configs["learned"]["learned_std"] = float(learned_std)
    return _grid(configs, seeds, steps)


def positions_sweep_run(
    *, seeds: list[int], steps: int, rope_base: float, learned_std: float
) -> Outcome:
    """§10 positions: the five encodings trained on ``seeds`` for ``steps`` steps, RoPE with
    base ``rope_base``, the learned table starting at standard deviation ``learned_std``,
    judged by :func:`s10_positions_verdict`; the numbers: each encoding's mean (min-max), and
    the learned table's margin over the best other encoding."""
    labels = list(POSITION_CONFIGS)
    accuracy = _position_grid(seeds, steps, rope_base, labels, learned_std)
    others = {k: _mean(v) for k, v in accuracy.items() if k != "learned"}
    numbers = _numbers(accuracy)
    numbers["margin"] = round(_mean(accuracy["learned"]) - max(others.values()), 3)
    numbers["learned_std"] = float(learned_std)
    return Outcome(s10_positions_verdict(accuracy), numbers)


def relative_sweep_run(*, seeds: list[int], steps: int, rope_base: float) -> Outcome:
    """§10 relative: RoPE (base ``rope_base``), ALiBi and the absolute schemes on ``seeds``,
    ``steps`` steps, judged by :func:`s10_relative_verdict`; the numbers: each scheme's mean
    (min-max), how far each relative scheme is below the better absolute one, and the base."""
    labels = ("sinusoidal", "learned", "RoPE", "ALiBi")
    accuracy = _position_grid(seeds, steps, rope_base, labels)
    best = max(_mean(accuracy[k]) for k in ("sinusoidal", "learned"))
    numbers = _numbers(accuracy)
    numbers |= {f"{k} gap": round(best - _mean(accuracy[k]), 3) for k in ("RoPE", "ALiBi")}
    numbers["rope_base"] = float(rope_base)
    return Outcome(s10_relative_verdict(accuracy), numbers)


def encoder_sweep_run(*, seeds: list[int], steps: int) -> Outcome:
    """§10 encoder: the capstone (learned positions, full attention) on ``seeds``, judged by
    :func:`s10_encoder_verdict`."""
    accuracy = _grid({"full": {}}, seeds, steps)["full"]
    return Outcome(s10_encoder_verdict(accuracy), {"accuracy": _numbers({"a": accuracy})["a"]})


def _attention_outcome(name: str, config: Mapping, seeds: Sequence[int], steps: int) -> tuple:
    accuracy = _grid({"full": {}, name: config}, seeds, steps)
    numbers = _numbers(accuracy)
    numbers["loss"] = round(_mean(accuracy["full"]) - _mean(accuracy[name]), 3)
    return accuracy, numbers


def window_sweep_run(*, seeds: list[int], steps: int, window: int) -> Outcome:
    """§10 window: a window of ±``window`` patches against full attention on ``seeds``,
    ``steps`` steps, judged by :func:`s10_no_loss_verdict`."""
    config = {"attention": "window"} | ({} if window == WINDOW else {"window": window})
    name = f"window ±{window}"
    accuracy, numbers = _attention_outcome(name, config, seeds, steps)
    return Outcome(s10_no_loss_verdict(name, accuracy), numbers)


def block_sparse_sweep_run(*, seeds: list[int], steps: int) -> Outcome:
    """§10 block-sparse against full attention, judged by :func:`s10_no_loss_verdict`."""
    accuracy, numbers = _attention_outcome(
        "block-sparse", ATTENTION_CONFIGS["block-sparse"], seeds, steps
    )
    return Outcome(s10_no_loss_verdict("block-sparse", accuracy), numbers)


def linear_sweep_run(*, seeds: list[int], steps: int) -> Outcome:
    """§10 linear against full attention, judged by :func:`s10_linear_verdict`."""
    accuracy, numbers = _attention_outcome("linear", ATTENTION_CONFIGS["linear"], seeds, steps)
    return Outcome(s10_linear_verdict(accuracy), numbers)


def fashion_sweep_run(*, seeds: list[int], steps: int) -> Outcome:
    """§10 fashion: the MLP on the raw pixels (the page's ``pixel_baseline("mlp")``) against
    the best of the four attention kinds with learned positions (the chapter's best encoder is
    one of them: every other position scheme stays below the learned table under the sweep
    of §10 positions), on ``seeds``, ``steps`` steps; judged by :func:`s10_fashion_verdict`
    with forward FLOPs per image from torch's counter."""
    accuracy = _grid(ATTENTION_CONFIGS, seeds, steps)
    best = max(accuracy, key=lambda k: _mean(accuracy[k]))
    train, test = _digits_split()
    mlp = [
        float(
            train_classifier(
                functools.partial(pixel_baseline, "mlp"),
                draw_batches(*train),
                seed=seed,
                test=test,
                **(TRAINING | {"steps": steps}),
            ).accuracy
        )
        for seed in seeds
    ]
    image = test[0][:1]  # (1, 1, 8, 8)
    flops = {"MLP": model_flops(pixel_baseline("mlp"), image)}
    flops[best] = model_flops(PatchClassifier(**ATTENTION_CONFIGS[best]), image)
    judged = {"MLP": mlp, best: accuracy[best]}
    numbers = _numbers(judged) | {
        "best encoder": best,
        "gap": round(_mean(mlp) - _mean(accuracy[best]), 3),
    }
    numbers["flops MLP"], numbers["flops encoder"] = flops["MLP"], flops[best]
    return Outcome(s10_fashion_verdict(judged, flops, encoder=best), numbers)


def guide_sweep_run(*, seeds: list[int], steps: int, window: int) -> Outcome:
    """§10 guide: the window (±``window`` patches) against full attention on the digits, on
    ``seeds`` for ``steps`` steps, and chapter 5's recorded C19 window (read from its executed
    notebook through the claims index; that side has its own sweep there), judged by
    :func:`s10_guide_verdict`."""
    from book.claims_index import recorded_claims

    config = {"attention": "window"} | ({} if window == WINDOW else {"window": window})
    name = f"window ±{window}"
    accuracy, numbers = _attention_outcome(name, config, seeds, steps)
    found = [c for c in recorded_claims() if c.claim_id == "C19 window"]
    if not found:
        raise LookupError("chapter 5's notebook records no C19 window")
    elsewhere = Evidence("C19 window", 5, found[0].verdict, found[0].measured)
    numbers["C19 window"] = elsewhere.measured
    return Outcome(s10_guide_verdict(accuracy, elsewhere, kind=name), numbers)


def quadratic_sweep_run(*, seq_len: int, long_len: int) -> Outcome:
    """§10 O(n²) at a task length of ``seq_len`` tokens (the n² share of the encoder's FLOPs,
    counted; the training step's peak bytes, :func:`step_peaks_at`) and on a long input of
    ``long_len`` tokens (:func:`encoder_cost`, untimed), judged by
    :func:`s10_quadratic_verdict`."""
    flops = encoder_flops(seq_len)
    step_peaks = step_peaks_at(seq_len)
    long_peaks = {
        label: encoder_cost(kind, long_len, timed=False).peak_bytes
        for label, kind in (("full, fused", "full"), ("window ±4", "window"),
                            ("linear", "linear"), ("block-sparse", "block-sparse"))
    }  # fmt: skip
    numbers = {"n² share": round(flops.share, 3)}
    numbers |= {f"step KiB {k}": round(v / 1024) for k, v in step_peaks.items()}
    numbers |= {f"long MiB {k}": round(v / 2**20, 2) for k, v in long_peaks.items()}
    numbers |= {"seq_len": seq_len, "long_len": long_len}
    return Outcome(s10_quadratic_verdict(flops, step_peaks, long_peaks), numbers)


_LONG_MODELS: dict[tuple, nn.Module] = {}


def long_task_accuracy(kind: str, seed: int, steps: int, seq_len: int) -> float:
    """Accuracy on 256 fixed ``seq_len``-token documents (generator seed 10, as the chapter) of
    chapter 5's classifier with attention ``kind``, trained as the chapter trains it
    (``LONG_TRAINING``, chapter 5's recipe at 128 tokens, with ``steps`` steps, the window and
    BigBird through their masks) from ``seed`` and read with the kind's kernel; the trained
    model is remembered within a process, so reading other lengths is cheap."""
    key = (kind, seed, steps)
    if key not in _LONG_MODELS:
        trained = train_classifier(
            functools.partial(document_classifier, long_kernel(kind, dense=True)),
            documents_of_length(TRAIN_LEN),
            seed=seed,
            **(LONG_TRAINING | {"steps": steps}),
        ).model
        reader = document_classifier(long_kernel(kind)).eval()  # the same weights, the kernel
        reader.load_state_dict(trained.state_dict())
        _LONG_MODELS[key] = reader
    test = topic_documents(256, seq_len, generator=torch.Generator().manual_seed(10))
    return float(document_accuracy(_LONG_MODELS[key], test))


def tradeoff_sweep_run(*, seeds: list[int], steps: int, seq_len: int) -> Outcome:
    """§10 trade-off: the four kinds of :data:`book.pages.ch10.LONG_KINDS` trained on ``seeds``
    for ``steps`` steps at 128 tokens and read at ``seq_len``, judged by
    :func:`s10_tradeoff_verdict` with the forward FLOPs of :func:`long_task_costs`; the
    numbers: accuracy mean (min-max), MFLOP per document and peak MiB of reading 16 documents
    per kind."""
    pairs = [(kind, seed) for kind in LONG_KINDS for seed in seeds]
    accuracy: dict[str, list[float]] = {kind: [] for kind in LONG_KINDS}
    for kind, seed in progress_bar(pairs, desc="runs", leave=False):
        accuracy[kind].append(long_task_accuracy(kind, seed, steps, seq_len))
    costs = long_task_costs(seq_len)
    numbers = _numbers(accuracy)
    numbers |= {f"MFLOP {k}": round(f / 1e6, 2) for k, (f, _) in costs.items()}
    numbers |= {f"MiB {k}": round(p / 2**20, 2) for k, (_, p) in costs.items()}
    numbers["read at"] = seq_len
    flops = {k: f for k, (f, _) in costs.items()}
    return Outcome(s10_tradeoff_verdict(accuracy, flops), numbers)


RECORD_CONFIGS = ("encoder, learned positions", "encoder, no positions", "logistic regression")


def record_builders() -> dict[str, Callable[[], nn.Module]]:
    """The three models of §10.8, built as the page builds them (``RECORD_SIZES``)."""
    return {
        "encoder, learned positions": functools.partial(PatchClassifier, *RECORD_SIZES),
        "encoder, no positions": functools.partial(
            PatchClassifier, *RECORD_SIZES, positional="none"
        ),
        "logistic regression": functools.partial(pixel_baseline, "linear", 2, 30),
    }


def records_sweep_run(*, seeds: list[int], steps: int, split_seed: int) -> Outcome:
    """§10 own data: the three models of §10.8 on the breast-cancer records split with
    ``split_seed``, trained on ``seeds`` for ``steps`` steps (``TRAINING`` otherwise), judged
    by :func:`s10_own_data_verdict`; the numbers: each model's mean (min-max), the encoder's
    margin over logistic regression and over itself without positions."""
    train, test = cancer_records(seed=split_seed)
    runs = train_grid(
        record_builders(), draw_batches(*train), test, seeds, **(TRAINING | {"steps": steps})
    )
    accuracy = accuracies(runs)
    numbers = _numbers(accuracy)
    encoder = _mean(accuracy["encoder, learned positions"])
    numbers["vs logistic"] = round(encoder - _mean(accuracy["logistic regression"]), 3)
    numbers["vs no positions"] = round(encoder - _mean(accuracy["encoder, no positions"]), 3)
    numbers["split_seed"] = split_seed
    return Outcome(s10_own_data_verdict(accuracy), numbers)


_SEEDS = Perturbation("seeds 3–5", "three other seeds", {"seeds": [3, 4, 5]})
_BUDGET = Perturbation("600 steps", "a 3× longer training budget", {"steps": 600})
_BASE = {"seeds": [0, 1, 2], "steps": 200}  # what the chapter shows: TRAINING, seeds 0-2
_SMALL_START = Perturbation(
    "start 0.02",
    "the learned table's usual small start (standard deviation 0.02, as in GPT-2 and ViT) "
    "instead of the tokens' scale (1)",
    {"learned_std": 0.02},
)
_ROPE_16 = Perturbation(
    "RoPE base 16",
    "RoPE's base tuned to 16 tokens: with base 10000 and head width 8, two of the four "
    "channel pairs turn less than 0.15 rad across the 16 tokens",
    {"rope_base": 16.0},
)

SCEPTIC_SWEEPS = (
    Sweep("§10 encoder", run=encoder_sweep_run, baseline=_BASE, perturbations=(_SEEDS, _BUDGET)),
    Sweep(
        "§10 positions",
        run=positions_sweep_run,
        baseline=_BASE | {"rope_base": 10000.0, "learned_std": LEARNED_STD},
        perturbations=(_SEEDS, _BUDGET, _ROPE_16, _SMALL_START),
    ),
    Sweep(
        "§10 relative",
        run=relative_sweep_run,
        baseline=_BASE | {"rope_base": 10000.0},
        perturbations=(_SEEDS, _BUDGET, _ROPE_16),
    ),
    Sweep(
        "§10 window",
        run=window_sweep_run,
        baseline=_BASE | {"window": WINDOW},
        perturbations=(
            _SEEDS,
            _BUDGET,
            Perturbation(
                "window ±1",
                "a window of ±1 patch (the claim's knob): does the task need the window at all?",
                {"window": 1},
            ),
        ),
    ),
    Sweep(
        "§10 block-sparse",
        run=block_sparse_sweep_run,
        baseline=_BASE,
        perturbations=(_SEEDS, _BUDGET),
    ),
    Sweep("§10 linear", run=linear_sweep_run, baseline=_BASE, perturbations=(_SEEDS, _BUDGET)),
    Sweep("§10 fashion", run=fashion_sweep_run, baseline=_BASE, perturbations=(_SEEDS, _BUDGET)),
    Sweep(
        "§10 guide",
        run=guide_sweep_run,
        baseline=_BASE | {"window": WINDOW},
        perturbations=(
            _SEEDS,
            _BUDGET,
            Perturbation(
                "window ±1",
                "a window of ±1 patch on the digits: still as good as full attention there?",
                {"window": 1},
            ),
        ),
    ),
    Sweep(
        "§10 O(n²)",
        run=quadratic_sweep_run,
        baseline={"seq_len": 16, "long_len": 2048},
        perturbations=(
            Perturbation("task 64 tokens", "a task four times longer", {"seq_len": 64}),
            Perturbation(
                "task 256 tokens",
                "a task past n* = 128, where n² is most of the compute",
                {"seq_len": 256},
            ),
            Perturbation("long 4096", "memory on inputs twice as long", {"long_len": 4096}),
        ),
    ),
    Sweep(
        "§10 trade-off",
        run=tradeoff_sweep_run,
        baseline={"seeds": [0], "steps": LONG_TRAINING["steps"], "seq_len": LONG_LEN},
        perturbations=(
            Perturbation("seeds 1–3", "three other seeds", {"seeds": [1, 2, 3]}),
            Perturbation("600 steps", "a 3× longer training budget", {"steps": 600}),
            Perturbation("read at 256", "documents half as long", {"seq_len": 256}),
            Perturbation("read at 1024", "documents twice as long", {"seq_len": 1024}),
        ),
    ),
    Sweep(
        "§10 own data",
        run=records_sweep_run,
        baseline=_BASE | {"split_seed": 0},
        perturbations=(
            _SEEDS,
            _BUDGET,
            Perturbation("split seed 1", "another train/test split", {"split_seed": 1}),
        ),
    ),
)
