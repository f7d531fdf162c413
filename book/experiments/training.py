"""The book's one training loop, with seeds arranged so that comparisons are fair.

- :func:`fit`: the loop every chapter uses (Adam or AdamW, optional gradient clipping, a loss
  history, a progress bar, a seeded data generator, optionally a fixed number of threads).
- :func:`train_classifier`: :func:`fit` for ``tokens -> class`` tasks, with the seed
  convention of the book (parameters from ``seed``, training batches from ``seed + 1``, the
  held-out batch from ``seed + 2``) and accuracy on the held-out batch.
- :func:`torch_threads`: run a block with a given number of torch threads.
- :func:`flush_denormals`: run a block with denormal floats treated as zero (:func:`fit` does).
- :func:`linear_warmup`: a learning-rate schedule for :func:`fit` (``schedule=``) that ramps
  the rate up linearly over the first steps.
- :func:`moving_average`, :func:`first_step_below`: a noisy loss curve smoothed, and the step
  at which it first stays under a threshold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention.checks import check_choice, check_positive_int
from book.progress import progress as progress_bar

Tensor = torch.Tensor

OPTIMIZERS = ("adam", "adamw")


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op torch threads (``None``: unchanged), then restore.

    For the book's tiny models one thread is fastest: splitting a (64 × 12 × 32) matrix product
    across threads costs more in synchronisation than it saves, and on a busy machine, where a
    thread may wait for a core another process holds, far more.
    """
    if n is None:
        yield
        return
    check_positive_int("threads", n)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def flush_denormals() -> Iterator[bool]:
    """Run the block with denormal floats flushed to zero (``torch.set_flush_denormal``), then
    switch flushing off again (torch's default); yields whether this CPU supports it.

    A gradient that vanishes over hundreds of recurrent steps passes through denormal numbers
    (below about 1.2e-38 in float32), and x86 CPUs compute on those in microcode, many times
    slower: an LSTM training step over 500 tokens is several times slower with them. No
    trained result in the book depends on numbers that small.
    """
    supported = torch.set_flush_denormal(True)
    try:
        yield supported
    finally:
        torch.set_flush_denormal(False)


def linear_warmup(warmup_steps: int) -> Callable[[int], float]:
    """A schedule for :func:`fit`: the factor ``(step + 1) / warmup_steps`` for the first
    ``warmup_steps`` steps (so the first step already moves, and step ``warmup_steps - 1`` uses
    the full rate), then 1."""
    warmup_steps = check_positive_int("warmup_steps", warmup_steps)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps)

    return factor


@dataclass(frozen=True)
class TrainLog:
    """What :func:`fit` recorded."""

    losses: list[float]  # training loss at every step
    seconds: float  # wall-clock training time (shown, never asserted)


def fit(
    model: nn.Module,
    make_batch: Callable[[torch.Generator], Any],
    loss_of: Callable[[nn.Module, Any], Tensor],
    *,
    steps: int,
    lr: float,
    data_seed: int,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    clip: float | None = None,
    threads: int | None = None,
    progress: bool = False,
    desc: str = "training",
    schedule: Callable[[int], float] | None = None,
) -> TrainLog:
    """Train ``model`` in place for ``steps`` steps; return the loss of every step.

    Args:
        model: left in ``eval()`` mode afterwards.
        make_batch: ``make_batch(generator) -> batch``; called once per step with one generator
            seeded with ``data_seed``, so that every model trained with the same ``data_seed``
            sees exactly the same batches in the same order.
        loss_of: ``loss_of(model, batch) -> scalar loss``.
        optimizer: ``"adam"`` or ``"adamw"`` (with ``weight_decay``).
        clip: the largest gradient norm (``nn.utils.clip_grad_norm_``); ``None``: no clipping.
        threads: torch threads while training (see :func:`torch_threads`).
        progress: show a progress bar labelled ``desc``.
        schedule: ``schedule(step) -> factor``: step ``step`` (from 0) uses ``lr * factor``
            (e.g. :func:`linear_warmup`); ``None``: the constant ``lr``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, fn in (("make_batch", make_batch), ("loss_of", loss_of)):
        if not callable(fn):
            raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    steps = check_positive_int("steps", steps)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be a positive number or None, got {clip!r}")
    if schedule is not None and not callable(schedule):
        raise TypeError(f"schedule must be callable (step -> factor) or None, got {schedule!r}")
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    data = torch.Generator().manual_seed(data_seed)
    iterator = progress_bar(range(steps), desc=desc, leave=False) if progress else range(steps)
    losses = []
    with torch_threads(threads), flush_denormals():
        start = time.perf_counter()
        model.train()
        for step in iterator:
            loss = loss_of(model, make_batch(data))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            if schedule is not None:
                factor = float(schedule(step))
                if not (math.isfinite(factor) and factor >= 0):
                    raise ValueError(
                        f"schedule({step}) must be a finite number >= 0, got {factor!r}"
                    )
                for group in opt.param_groups:
                    group["lr"] = lr * factor
            opt.step()
            losses.append(loss.item())
        seconds = time.perf_counter() - start
        model.eval()
    return TrainLog(losses, seconds)


@dataclass(frozen=True)
class ClassifierRun:
    """What :func:`train_classifier` measured."""

    losses: list[float]  # training loss at every step
    accuracy: float  # on the held-out batch after training
    n_params: int
    seconds: float  # wall-clock training time (shown, never asserted)
    model: nn.Module


def _classification_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    tokens, labels = batch
    return F.cross_entropy(model(tokens), labels)


def train_classifier(
    build: Callable[[], nn.Module],
    make_batch: Callable[[int, torch.Generator], tuple[Tensor, Tensor]],
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    clip: float | None = 1.0,
    seed: int = 0,
    eval_size: int = 512,
    test: tuple[Tensor, Tensor] | None = None,
    threads: int | None = None,
    progress: bool = False,
    desc: str = "training",
) -> ClassifierRun:
    """Train ``build()`` with Adam (and gradient clipping) by :func:`fit`; held-out accuracy.

    ``make_batch(batch_size, generator) -> (tokens (B, L), labels (B,))``. The parameters come
    from ``torch.manual_seed(seed)``; the training batches from a generator seeded with
    ``seed + 1`` and the held-out batch from one seeded with ``seed + 2``, so that two models
    trained with the same seed see exactly the same examples in the same order. Clipping at 1
    is standard practice for LSTMs (a rare exploding step cannot wreck the run) and is applied
    to every model alike.

    ``test = (inputs, labels)``, when given, is the held-out set instead (a fixed data set's
    test split, such as the digits'); ``eval_size`` is then unused.
    """
    if isinstance(build, nn.Module) or not callable(build):
        raise TypeError(
            f"build must be a function that returns a new model (so that the seed sets its "
            f"initial weights), got {type(build).__name__}"
        )
    if not callable(make_batch):
        raise TypeError(f"make_batch must be callable, got {type(make_batch).__name__}")
    batch_size = check_positive_int("batch_size", batch_size)
    eval_size = check_positive_int("eval_size", eval_size)
    torch.manual_seed(seed)
    model = build()
    log = fit(
        model,
        lambda generator: make_batch(batch_size, generator),
        _classification_loss,
        steps=steps,
        lr=lr,
        data_seed=seed + 1,
        clip=clip,
        threads=threads,
        progress=progress,
        desc=desc,
    )
    if test is None:
        tokens, labels = make_batch(eval_size, torch.Generator().manual_seed(seed + 2))
    else:
        tokens, labels = test
        if len(tokens) != len(labels):
            raise ValueError(
                f"test must be (inputs, labels) of one length, got {len(tokens)} inputs and "
                f"{len(labels)} labels"
            )
    with torch.no_grad(), torch_threads(threads):
        accuracy = float((model(tokens).argmax(-1) == labels).float().mean())
    n_params = sum(p.numel() for p in model.parameters())
    return ClassifierRun(log.losses, accuracy, n_params, log.seconds, model)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` values (shorter at the start): smooths a noisy loss curve."""
    window = check_positive_int("window", window)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def first_step_below(values: list[float], threshold: float, window: int = 20) -> int | None:
    """First step at which the ``window``-step moving average is below ``threshold``, or None.

    Steps before a full window is available are skipped (a single lucky batch does not count).
    """
    smooth = moving_average(values, window)
    for step in range(window - 1, len(smooth)):
        if smooth[step] < threshold:
            return step
    return None
