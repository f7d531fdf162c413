"""Experiments of chapter 10: a capstone encoder on real digits, swapped one piece at a time.

- :class:`DigitsEncoder`: scikit-learn's 8 × 8 digits read as a sequence of 16 patches of
  2 × 2 pixels (:class:`attention.vision.PatchEmbedding`), a positional scheme
  (:mod:`attention.positional`: sinusoidal, learned, RoPE, ALiBi, or none), a pre-LN
  :class:`attention.blocks.Encoder` whose attention is one of four kinds (full, sliding window,
  linear, block-sparse; the kernels of :mod:`attention.efficient` through the ``attn_fn``
  adapters of :mod:`attention.efficient.adapters`), mean pooling and a linear head. Nothing in it is
  new code: it is the package's parts, assembled.
- :func:`train_digits`, :func:`train_grid`: the book's one loop
  (:func:`book.experiments.training.fit`) on the training split, accuracy on the whole test
  split, seeds as everywhere in the book.
  :func:`pixel_baseline` builds the models without attention that the chapter compares with.
- :func:`training_step_cost`, :func:`encoder_cost`: exact peak bytes (:mod:`measure.memory`)
  and the fastest wall time of one forward + backward; :func:`encoder_flops` counts an encoder's
  matrix-multiply FLOPs exactly, split into the part that grows with ``n²``.
- :data:`GUIDE`, :func:`decision_guide`: the chapter's decision guide, each row tied to the
  claims (this chapter's and the other chapters' recorded ones) that back it.
- ``assert_*``: the asserting functions of the chapter's claims; each raises
  ``AssertionError`` when its claim is false.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import Encoder
from attention.checks import check_choice, check_positive_int
from attention.dispatch import torch_sdpa
from attention.efficient.adapters import BigBirdAttnFn, LinearAttnFn, SlidingWindowAttnFn
from attention.masks import to_additive
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
)
from attention.vision import PatchEmbedding
from book.data import Digits
from book.experiments.training import torch_threads, train_classifier
from book.progress import progress as progress_bar
from measure.flops import matmul_flop_counter
from measure.memory import peak_extra_bytes
from measure.timing import min_seconds

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# The capstone model
# ------------------------------------------------------------------------------------------

IMAGE_SIZE = 8  # scikit-learn's digits are 8 × 8
PATCH_SIZE = 2  # 2 × 2 patches: a 4 × 4 grid of 16 tokens
GRID = IMAGE_SIZE // PATCH_SIZE
SEQ_LEN = GRID * GRID
NUM_CLASSES = 10
D_MODEL, NUM_HEADS, NUM_LAYERS, D_FF = 32, 4, 2, 64

POSITIONALS = ("none", "sinusoidal", "learned", "rope", "alibi")
ATTENTIONS = ("full", "window", "linear", "block-sparse")
WINDOW = GRID  # ±4 patches in reading order: the patch above and the one below are in reach
BLOCK = 2  # block-sparse: blocks of 2 patches (half a grid row)
LEARNED_STD = 1.0  # the learned table's initial scale (as attention.blocks.SequenceClassifier)


def attention_kernel(attention: str) -> Callable[..., Tensor]:
    """The ``attn_fn`` that computes attention kind ``attention`` with its own kernel:
    ``torch_sdpa`` (full), a window of ±``WINDOW`` keys, elu+1 linear attention, or BigBird
    blocks of ``BLOCK`` (one neighbour block each side, the first block global, one random)."""
    check_choice("attention", attention, ATTENTIONS)
    if attention == "full":
        return torch_sdpa
    if attention == "window":
        return SlidingWindowAttnFn(WINDOW, WINDOW)
    if attention == "linear":
        return LinearAttnFn()
    return BigBirdAttnFn(BLOCK, n_window=1, n_global=1, n_random=1)


def allowed_pairs(attention: str, seq_len: int = SEQ_LEN) -> Tensor:
    """Which keys each query may see under attention kind ``attention``: ``(L, L)`` bool,
    ``True`` = may attend (all ``True`` for full and linear attention)."""
    seq_len = check_positive_int("seq_len", seq_len)
    kernel = attention_kernel(attention)
    if attention == "full":
        return torch.ones(seq_len, seq_len, dtype=torch.bool)
    return kernel.allowed(seq_len)


class DigitsEncoder(nn.Module):
    """Images ``(B, 1, 8, 8)`` (or ``(B, 8, 8)``) → digit logits ``(B, 10)``.

    ``patches`` cuts each image into 16 patches of 2 × 2 and embeds each linearly (reading
    order: left to right, top to bottom); ``pos`` adds a sinusoidal or learned position code
    (RoPE rotates queries and keys inside every layer instead; ALiBi adds
    ``-slope_h · |i - j|`` to the scores of head ``h``; ``"none"`` leaves the model blind to
    where a patch is); ``encoder`` is a pre-LN :class:`attention.blocks.Encoder`; the head reads
    the mean over the 16 tokens.

    Args:
        positional: one of :data:`POSITIONALS`.
        attention: one of :data:`ATTENTIONS`.
        dense: compute the window and block-sparse kinds as full attention with their mask
            (the same function, checked in the chapter; faster than the kernels at 16 tokens).
            ``False`` uses the kernels (what the cost measurements use).
        learned_std: initial scale of the learned position table.
    """

    def __init__(
        self,
        positional: str = "learned",
        attention: str = "full",
        *,
        dense: bool = True,
        learned_std: float = LEARNED_STD,
        d_model: int = D_MODEL,
        num_heads: int = NUM_HEADS,
        num_layers: int = NUM_LAYERS,
        d_ff: int = D_FF,
    ) -> None:
        super().__init__()
        self.positional = check_choice("positional", positional, POSITIONALS)
        self.attention = check_choice("attention", attention, ATTENTIONS)
        if not learned_std > 0:
            raise ValueError(f"learned_std must be > 0, got {learned_std!r}")
        masked = dense and attention in ("window", "block-sparse")
        if positional == "alibi" and attention != "full" and not masked:
            raise ValueError(
                f"positional='alibi' adds a bias to the scores, which the {attention!r} kernel "
                f"cannot take; expected attention='full' (or dense=True for a masked kind)"
            )
        self.patches = PatchEmbedding(IMAGE_SIZE, PATCH_SIZE, 1, d_model)  # (B, 16, D)
        n = self.patches.num_patches
        self.pos: nn.Module | None = None
        rotary = None
        if positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d_model, max_len=n)
        elif positional == "learned":
            self.pos = LearnedPositionalEmbedding(d_model, max_len=n)
            nn.init.normal_(self.pos.weight, std=learned_std)
        elif positional == "rope":
            rotary = RotaryEmbedding(d_model // num_heads)
        mask = None
        if positional == "alibi":
            mask = alibi_bias(num_heads, n)  # (H, L, L) float, additive
        if masked:
            allowed = allowed_pairs(attention, n)  # (L, L) bool
            mask = allowed if mask is None else mask + to_additive(allowed)
        self.register_buffer("mask", mask, persistent=False)
        kernel = torch_sdpa if (masked or attention == "full") else attention_kernel(attention)
        self.encoder = Encoder(
            d_model, num_heads, d_ff, num_layers=num_layers, pre_ln=True, attn_fn=kernel,
            rotary=rotary,
        )  # fmt: skip
        self.head = nn.Linear(d_model, NUM_CLASSES)

    def forward(self, images: Tensor) -> Tensor:
        if images.dim() == 3:
            images = images.unsqueeze(1)  # (B, 1, 8, 8)
        x = self.patches(images)  # (B, 16, D)
        if self.pos is not None:
            x = self.pos(x)  # (B, 16, D)
        x = self.encoder(x, mask=self.mask)  # (B, 16, D), ends with a LayerNorm
        return self.head(x.mean(dim=1))  # (B, 10)


def pixel_baseline(kind: str, *, hidden: int = 64) -> nn.Module:
    """A model without attention on the 64 raw pixels: ``"linear"`` (multinomial logistic
    regression) or ``"mlp"`` (one hidden ReLU layer of ``hidden`` units). Images
    ``(B, 1, 8, 8)`` or ``(B, 8, 8)`` → logits ``(B, 10)``."""
    check_choice("kind", kind, ("linear", "mlp"))
    pixels = IMAGE_SIZE * IMAGE_SIZE
    if kind == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(pixels, NUM_CLASSES))
    hidden = check_positive_int("hidden", hidden)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(pixels, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES)
    )


# ------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------

STEPS, BATCH_SIZE, LR, CLIP = 200, 32, 5e-3, 1.0


@dataclass(frozen=True)
class DigitsRun:
    """One trained model: accuracy on the test split, the loss of every step, wall time."""

    label: str
    seed: int
    accuracy: float
    losses: list[float]
    seconds: float  # training wall time (shown, never asserted)
    n_params: int
    model: nn.Module = field(repr=False)


def digits_batches(
    data: Digits, batch_size: int | None = None
) -> Callable[..., tuple[Tensor, Tensor]]:
    """``make_batch(batch_size, generator) -> (images (B, 1, 8, 8), labels (B,))``, drawn with
    replacement from the training split (``batch_size`` given here fixes it:
    ``make_batch(generator)``)."""
    if batch_size is not None:
        batch_size = check_positive_int("batch_size", batch_size)
    images, labels = data.train_images.unsqueeze(1), data.train_labels  # (N, 1, 8, 8), (N,)

    def draw(size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(len(labels), (size,), generator=generator)  # (B,)
        return images[idx], labels[idx]

    if batch_size is None:
        return draw
    return lambda generator: draw(batch_size, generator)


def digit_accuracy(model: nn.Module, data: Digits) -> float:
    """Share of the test split's digits that ``model`` classifies right (eval mode, no grad)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = model(data.test_images.unsqueeze(1)).argmax(dim=-1)  # (N,)
    model.train(was_training)
    return float((predicted == data.test_labels).float().mean())


def train_digits(
    build: Callable[[], nn.Module],
    data: Digits,
    *,
    seed: int,
    label: str = "model",
    steps: int = STEPS,
    batch_size: int = BATCH_SIZE,
    lr: float = LR,
    threads: int | None = 1,
) -> DigitsRun:
    """Train ``build()`` on the training split with the book's
    :func:`~book.experiments.training.train_classifier` (Adam, clipping at 1), then measure
    accuracy on the whole test split.

    The book's seed convention: parameters from ``torch.manual_seed(seed)``, batches from a
    generator seeded ``seed + 1`` — two models trained with the same seed see the same images
    in the same order. (``train_classifier``'s own accuracy, on a batch of training images, is
    not used.)
    """
    run = train_classifier(
        build,
        digits_batches(data),
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        clip=CLIP,
        seed=seed,
        eval_size=1,
        threads=threads,
        desc=label,
    )
    with torch_threads(threads):
        accuracy = digit_accuracy(run.model, data)
    return DigitsRun(label, seed, accuracy, run.losses, run.seconds, run.n_params, run.model)


def train_grid(
    builders: Mapping[str, Callable[[], nn.Module]],
    data: Digits,
    seeds: Sequence[int],
    *,
    progress: bool = False,
    desc: str = "trainings",
    **train_kwargs,
) -> dict[str, list[DigitsRun]]:
    """``{label: [run per seed]}`` for every builder (:func:`train_digits` keywords pass
    through); ``progress`` shows one bar over the (label, seed) pairs."""
    runs: dict[str, list[DigitsRun]] = {label: [] for label in builders}
    pairs = [(label, seed) for label in builders for seed in seeds]
    iterator = progress_bar(pairs, desc=desc, leave=False) if progress else pairs
    for label, seed in iterator:
        runs[label].append(
            train_digits(builders[label], data, seed=seed, label=label, **train_kwargs)
        )
    return runs


def accuracies(runs: Mapping[str, Sequence[DigitsRun]]) -> dict[str, list[float]]:
    """``{label: [accuracy per seed]}``."""
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
    """The capstone's encoder alone with attention kind ``attention`` computed by its kernel;
    ``None``: the package's written-out reference attention, which forms the ``n × n``
    weights."""
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


@dataclass(frozen=True)
class EncoderFlops:
    """Forward matrix-multiply FLOPs of an encoder on one sequence of ``seq_len`` tokens:
    ``total`` and ``quadratic`` (the ``Q Kᵀ`` and ``weights · V`` products, ``∝ n²``)."""

    seq_len: int
    total: int
    quadratic: int

    @property
    def share(self) -> float:
        """The part of the compute that grows with ``n²``."""
        return self.quadratic / self.total


def encoder_flops_formula(
    seq_len: int, *, d_model: int = D_MODEL, d_ff: int = D_FF, num_layers: int = NUM_LAYERS
) -> EncoderFlops:
    """Per layer: four projections ``8·n·d²``, the feed-forward ``4·n·d·d_ff`` and the two
    ``n × n`` products ``4·n²·d`` (two FLOPs per multiply-add; heads change nothing)."""
    n, d = check_positive_int("seq_len", seq_len), check_positive_int("d_model", d_model)
    d_ff = check_positive_int("d_ff", d_ff)
    num_layers = check_positive_int("num_layers", num_layers)
    linear = 8 * n * d * d + 4 * n * d * d_ff
    quadratic = 4 * n * n * d
    return EncoderFlops(n, num_layers * (linear + quadratic), num_layers * quadratic)


def encoder_flops(seq_len: int) -> EncoderFlops:
    """The same, counted by torch's FLOP counter on a forward pass of the written-out encoder
    (:func:`sweep_encoder` with ``None``). The quadratic part is what the counter books under
    batched products (``aten.bmm``): ``Q Kᵀ`` and ``weights · V``; every projection and the
    feed-forward are ``aten.addmm``."""
    seq_len = check_positive_int("seq_len", seq_len)
    encoder = sweep_encoder(None)
    x = torch.randn(1, seq_len, D_MODEL, generator=torch.Generator().manual_seed(1))
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        encoder(x)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    return EncoderFlops(seq_len, int(counter.get_total_flops()), by_op.get("aten.bmm", 0))


def crossover_length(*, d_model: int = D_MODEL, d_ff: int = D_FF) -> int:
    """The length at which the ``n²`` products are half of an encoder layer's forward FLOPs:
    ``4·n²·d = 8·n·d² + 4·n·d·d_ff``, i.e. ``n = 2·d + d_ff``."""
    return 2 * check_positive_int("d_model", d_model) + check_positive_int("d_ff", d_ff)


def model_flops(model: nn.Module, images: Tensor) -> int:
    """Forward matrix-multiply FLOPs of ``model`` on ``images`` (torch's counter)."""
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        model(images)
    return int(counter.get_total_flops())


# ------------------------------------------------------------------------------------------
# The claims' asserting functions
# ------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite numbers, at least one, got {values!r}")
    return statistics.fmean(values)


def assert_working_classifier(accuracy: Sequence[float], *, threshold: float) -> None:
    """§10 encoder: every seed classifies at least ``threshold`` of the test digits right."""
    _mean(accuracy)
    worst = min(accuracy)
    assert worst >= threshold, (
        f"not a working classifier: the worst seed reaches {worst:.3f} < {threshold} "
        f"(seeds: {[round(a, 3) for a in accuracy]})"
    )


def _means(accuracy: Mapping[str, Sequence[float]], *labels: str) -> dict[str, float]:
    """Mean accuracy per label; ``KeyError`` naming a label that is not there."""
    for label in labels:
        if label not in accuracy:
            raise KeyError(f"{label!r} is not one of {list(accuracy)}")
    return {label: _mean(v) for label, v in accuracy.items()}


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


def assert_worse_by(
    name: str, reference: str, accuracy: Mapping[str, Sequence[float]], *, margin: float
) -> None:
    """``name``'s mean accuracy is at least ``margin`` below ``reference``'s."""
    means = _means(accuracy, name, reference)
    gap = means[reference] - means[name]
    assert gap >= margin, (
        f"{name} is only {gap:.3f} below {reference} (expected a gap of at least {margin})"
    )


def assert_no_loss_beyond(
    name: str, reference: str, accuracy: Mapping[str, Sequence[float]], *, tolerance: float
) -> None:
    """``name`` loses at most ``tolerance`` of mean accuracy against ``reference``."""
    means = _means(accuracy, name, reference)
    gap = means[reference] - means[name]
    assert gap <= tolerance, (
        f"{name} loses {gap:.3f} of mean accuracy against {reference} (tolerance {tolerance})"
    )


def assert_quadratic_part_small(flops: EncoderFlops, *, below: float) -> None:
    """§10 O(n²): at this length the ``n²`` products are less than ``below`` of the compute."""
    assert flops.share < below, (
        f"at n = {flops.seq_len} the n² products are {flops.share:.1%} of the FLOPs "
        f"(expected < {below:.0%})"
    )


def assert_full_attention_not_costlier(
    peaks: Mapping[str, int], *, full: str = "full", tolerance: float = 0.0
) -> None:
    """Full attention's peak bytes are at most every other kind's (times ``1 + tolerance``)."""
    if full not in peaks:
        raise KeyError(f"{full!r} is not one of {list(peaks)}")
    worse = {k: v for k, v in peaks.items() if k != full and peaks[full] > v * (1 + tolerance)}
    assert not worse, (
        f"{full} attention holds {peaks[full]:,} bytes at its peak, more than "
        + ", ".join(f"{k} ({v:,})" for k, v in worse.items())
    )


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
        ("§10 fashion", "§10 positions"),
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
        ("C19 window", "C19 global", "C17"),
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
        "Absolute positions (learned or sinusoidal); symmetric ALiBi cannot tell left from "
        "right, and RoPE's distance in reading order is not distance in the image",
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


# "Useless on another task": at least this far below full attention (a quarter of the range).
FAILS_BY = 0.25
WINDOW_VS_FULL = re.compile(
    r"accuracy (?P<window>\d+(?:\.\d+)?) \([^)]*\) vs (?P<full>\d+(?:\.\d+)?) full"
)


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
    claim's verdict: chapter 5's C19 window is "partly" because depth did not repair the
    window, while the window's failure itself was measured."""
    assert_no_loss_beyond(kind, reference, here, tolerance=tolerance)
    found = WINDOW_VS_FULL.search(elsewhere.measured)
    assert found, (
        f"{elsewhere.claim_id} records no 'accuracy A (...) vs F full' measurement: no recorded "
        f"task on which {kind} fails ({elsewhere.measured!r})"
    )
    window, full = float(found["window"]), float(found["full"])
    assert full - window >= fails_by, (
        f"{elsewhere.claim_id}: the window reached {window:.2f} against {full:.2f} for full "
        f"attention, less than {fails_by} below: no recorded task on which {kind} fails"
    )
