"""Training helpers shared by the chapters: a seeded classifier training loop and the
smoothing of its loss curves.

- :func:`train_classifier`: Adam, gradient clipping, and seeds arranged so that two models
  trained with the same seed see exactly the same batches; accuracy on a held-out batch.
- :func:`moving_average`, :func:`first_step_below`: a noisy loss curve smoothed, and the step
  at which it first stays under a threshold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention._checks import check_positive_int

Tensor = torch.Tensor


@dataclass(frozen=True)
class ClassifierRun:
    """What :func:`train_classifier` measured."""

    losses: list[float]  # training loss at every step
    accuracy: float  # on the held-out batch after training
    n_params: int
    seconds: float  # wall-clock training time (shown, never asserted)
    model: nn.Module


def train_classifier(
    build: Callable[[], nn.Module],
    make_batch: Callable[[int, torch.Generator], tuple[Tensor, Tensor]],
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    clip: float = 1.0,
    seed: int = 0,
    eval_size: int = 512,
    progress: bool = False,
    desc: str = "training",
) -> ClassifierRun:
    """Train ``build()`` with Adam and gradient clipping; evaluate accuracy on held-out data.

    ``make_batch(batch_size, generator) -> (tokens (B, L), labels (B,))``. The parameters come
    from ``torch.manual_seed(seed)``; the training batches from a generator seeded with
    ``seed + 1`` and the held-out batch from one seeded with ``seed + 2``, so that two models
    trained with the same seed see exactly the same examples in the same order.
    """
    if isinstance(build, nn.Module) or not callable(build):
        raise TypeError(
            f"build must be a function that returns a new model (so that the seed sets its "
            f"initial weights), got {type(build).__name__}"
        )
    if not callable(make_batch):
        raise TypeError(f"make_batch must be callable, got {type(make_batch).__name__}")
    steps = check_positive_int("steps", steps)
    batch_size = check_positive_int("batch_size", batch_size)
    eval_size = check_positive_int("eval_size", eval_size)
    torch.manual_seed(seed)
    model = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(seed + 1)
    iterator = range(steps)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc=desc)
    losses = []
    start = time.perf_counter()
    model.train()
    for _ in iterator:
        tokens, labels = make_batch(batch_size, data)
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # Clipping is standard practice for LSTMs: it keeps a rare exploding step from
        # wrecking the run, and it is applied to every model alike.
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    tokens, labels = make_batch(eval_size, torch.Generator().manual_seed(seed + 2))
    with torch.no_grad():
        accuracy = float((model(tokens).argmax(-1) == labels).float().mean())
    n_params = sum(p.numel() for p in model.parameters())
    return ClassifierRun(losses, accuracy, n_params, seconds, model)


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
