"""Real data that ships inside installed packages: nothing here touches the network.

- :func:`digits`: scikit-learn's bundled handwritten digits (1 797 real 8 × 8 greyscale
  images, 17 grey levels 0–16, classes 0–9; the UCI "optdigits" test set), as tensors, with a fixed,
  seeded, class-balanced train/test split.
- :func:`breast_cancer`: scikit-learn's bundled Wisconsin diagnostic breast-cancer records
  (569 biopsies, 30 measurements each, malignant or benign), as tensors.
- :func:`pydoc_text`: Python's own ``pydoc_data.topics`` (the help texts of the language
  reference, ≈ 465 k characters of English), for character-level language models;
  :class:`CharVocab` maps it to token ids.
- :func:`co2_monthly`: the Mauna Loa CO₂ record bundled with statsmodels (weekly, March 1958 to
  December 2001), as monthly means with each month's calendar position: a real series with a
  strong trend and a strong yearly cycle, for forecasting.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attention.checks import check_positive_int

Tensor = torch.Tensor


@dataclass(frozen=True)
class Digits:
    """Images ``(N, 8, 8)`` float32 in [0, 1] and labels ``(N,)`` int64, split in two."""

    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor


def package_file(package: str, *parts: str) -> Path:
    """The path of a data file inside the installed ``package``, found without importing it.

    scikit-learn's bundled data sets are plain CSV files, and importing scikit-learn (for its
    loaders) takes most of a second; a chapter reads the files directly instead.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"{package} must be installed: it ships the data file {'/'.join(parts)}"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(
            f"{package} ships no data file {'/'.join(parts)} (looked at {path})"
        )
    return path


def digits(*, test_fraction: float = 0.25, seed: int = 0) -> Digits:
    """scikit-learn's digits as tensors, split per class so both parts hold every digit.

    Pixel values 0–16 are divided by 16. The split is a seeded permutation within each class
    (``seed``): the same seed always gives the same split.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    # One row per image: 64 grey levels in reading order, then the digit (as sklearn's
    # load_digits reads it).
    rows = np.loadtxt(package_file("sklearn", "datasets", "data", "digits.csv.gz"), delimiter=",")
    images = torch.tensor(rows[:, :-1], dtype=torch.float32).reshape(-1, 8, 8) / 16.0  # (N, 8, 8)
    labels = torch.tensor(rows[:, -1], dtype=torch.int64)  # (N,)
    generator = torch.Generator().manual_seed(seed)
    train, test = [], []
    for c in range(10):
        idx = torch.nonzero(labels == c).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_test = round(len(idx) * test_fraction)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    train_idx, test_idx = torch.cat(train).sort().values, torch.cat(test).sort().values
    return Digits(images[train_idx], labels[train_idx], images[test_idx], labels[test_idx])


def breast_cancer() -> tuple[Tensor, Tensor]:
    """scikit-learn's Wisconsin diagnostic breast-cancer records: ``features (569, 30)``
    float64 and ``labels (569,)`` int64 (0 = malignant, 1 = benign), in the file's order.

    The 30 columns, in scikit-learn's order, are ten measurements of the cell nuclei in a
    biopsy image (radius, texture, perimeter, area, smoothness, compactness, concavity,
    concave points, symmetry, fractal dimension) as their mean, then their standard error,
    then their worst value.
    """
    path = package_file("sklearn", "datasets", "data", "breast_cancer.csv")
    rows = np.loadtxt(path, delimiter=",", skiprows=1)  # the first line: sizes and class names
    return torch.tensor(rows[:, :-1]), torch.tensor(rows[:, -1], dtype=torch.int64)


def pydoc_text() -> str:
    """The text of ``pydoc_data.topics`` (stdlib), topics joined in sorted order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


@dataclass(frozen=True)
class CharVocab:
    """A character vocabulary: ``encode`` a string to ids ``(L,)``, ``decode`` ids back."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        if not isinstance(text, str) or not text:
            raise ValueError("text must be a non-empty str")
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(index))
        if unknown:
            raise ValueError(f"text holds characters outside the vocabulary: {unknown[:10]}")
        return torch.tensor([index[c] for c in text], dtype=torch.int64)  # (L,)

    def decode(self, ids: Tensor) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        if any(not 0 <= i < self.size for i in ids):
            raise ValueError(f"ids must be in [0, {self.size}), got one outside")
        return "".join(self.chars[i] for i in ids)


def char_windows(ids: Tensor, *, length: int, batch_size: int, generator: torch.Generator):
    """A batch of random windows for next-token training: ``inputs (B, L)``, ``targets (B, L)``
    where ``targets[:, t] = inputs[:, t + 1]`` in the text."""
    length = check_positive_int("length", length)
    batch_size = check_positive_int("batch_size", batch_size)
    if ids.dim() != 1 or len(ids) <= length:
        raise ValueError(f"ids must be 1-D and longer than length={length}, got {tuple(ids.shape)}")
    starts = torch.randint(0, len(ids) - length, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(length + 1)  # (L+1,)
    windows = ids[starts[:, None] + offsets]  # (B, L+1)
    return windows[:, :-1], windows[:, 1:]


@dataclass(frozen=True)
class MonthlySeries:
    """A monthly series: ``values (T,)`` float64, ``month (T,)`` int64 (0 = January … 11 =
    December, the calendar position of each value), the first month as ``"YYYY-MM"``."""

    values: Tensor
    month: Tensor
    start: str
    unit: str


def co2_monthly() -> MonthlySeries:
    """Atmospheric CO₂ at Mauna Loa in ppm, monthly, March 1958 – December 2001 (526 months).

    statsmodels ships the weekly record (2 284 weeks, Keeling and Whorf's flask and continuous
    measurements) inside the package: ``statsmodels.datasets.co2``. The 59 missing weeks are
    filled by linear interpolation in time, then the weeks are averaged per calendar month.
    """
    from statsmodels.datasets import co2  # reads a CSV file inside the package

    weekly = co2.load_pandas().data["co2"]  # pandas Series indexed by week
    monthly = weekly.interpolate(method="time").resample("MS").mean()
    values = torch.tensor(monthly.to_numpy(), dtype=torch.float64)  # (T,)
    month = torch.tensor(monthly.index.month.to_numpy() - 1, dtype=torch.int64)  # (T,)
    start = f"{monthly.index[0].year:04d}-{monthly.index[0].month:02d}"
    return MonthlySeries(values, month, start, "ppm")
