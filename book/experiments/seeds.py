"""Verdicts over several seeds: run an experiment once per seed and summarise the spread.

Where training decides a verdict, the book runs at least three seeds (:data:`SEEDS`) and
reports the mean with the minimum and maximum, in the text and in the figures
(:func:`book.plotting.plot_spread`, :func:`book.plotting.plot_bar_spread`)::

    accuracies = over_seeds(lambda seed: train(seed=seed).accuracy, SEEDS)
    s = spread(accuracies)
    print(s)  # 0.85 (min 0.71, max 1.00) over 3 seeds
    assert s.min > chance + margin  # a threshold set from the claim, before the run
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from book.experiments.parallel import run_each

T = TypeVar("T")

# The book's default seeds: three, the fewest that show a spread.
SEEDS = (0, 1, 2)


def make_deterministic(seed: int = 0) -> None:
    """Seed torch's global generator and allow deterministic algorithms only (every chapter).

    Torch's deterministic mode also fills each new uninitialised tensor with NaN by default
    (``torch.utils.deterministic.fill_uninitialized_memory``), so that code reading memory it
    never wrote gives the same answer on every run. That fill is a pass over every allocation,
    which a training loop that allocates many small tensors each step (an LSTM's states) pays
    at every step. It is switched off here.
    What it guards against, code reading memory it never wrote, would instead show up as
    numbers that change from run to run, and nbval's comparison of the chapters' checked
    outputs with a fresh run catches those.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False


@dataclass(frozen=True)
class Spread:
    """A measurement repeated over seeds: the values, their mean, sample std, min and max."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        """Sample standard deviation (0 for a single value)."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def format(self, spec: str = ".2f") -> str:
        """``"0.85 (min 0.71, max 1.00) over 3 seeds"`` with every number in ``spec``."""
        seeds = "seed" if self.n == 1 else "seeds"
        return (
            f"{self.mean:{spec}} (min {self.min:{spec}}, max {self.max:{spec}}) "
            f"over {self.n} {seeds}"
        )

    def __str__(self) -> str:
        return self.format()


def spread(values: Iterable[float]) -> Spread:
    """The :class:`Spread` of ``values`` (finite numbers, at least one)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"values must be numbers, got {type(values).__name__}")
    numbers = []
    for idx, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"values[{idx}] must be a number, got {type(v).__name__} ({v!r})")
        if not math.isfinite(v):
            raise ValueError(f"values[{idx}] must be finite, got {v}")
        numbers.append(float(v))
    if not numbers:
        raise ValueError("values must hold at least one number, got none")
    return Spread(tuple(numbers))


def over_seeds(
    run: Callable[[int], T],
    seeds: Sequence[int] = SEEDS,
    *,
    progress: bool = False,
    desc: str = "seeds",
) -> list[T]:
    """``[run(seed) for seed in seeds]``, the seeds side by side
    (:func:`~book.experiments.parallel.run_each`: ``run`` must seed what it draws, as the
    book's training functions do), with a progress bar if asked."""
    if not callable(run):
        raise TypeError(f"run must be callable (seed -> result), got {type(run).__name__}")
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds!r}")
    return run_each(run, seeds, desc=desc if progress else None)
