"""book.data: the bundled real data sets, loaded offline and split reproducibly."""

from __future__ import annotations

import pytest
import torch

from book.data import CharVocab, breast_cancer, char_windows, digits, package_file, pydoc_text


def test_digits_are_the_bundled_1797_images_split_per_class():
    d = digits()
    n = len(d.train_labels) + len(d.test_labels)
    assert n == 1797 and d.train_images.shape[1:] == (8, 8)
    assert d.train_images.dtype == torch.float32 and float(d.train_images.max()) == 1.0
    assert set(d.test_labels.tolist()) == set(range(10)) == set(d.train_labels.tolist())
    assert 0.2 < len(d.test_labels) / n < 0.3
    again = digits()
    assert torch.equal(again.test_labels, d.test_labels)
    assert not torch.equal(digits(seed=1).test_images, d.test_images)
    with pytest.raises(ValueError, match="test_fraction"):
        digits(test_fraction=1.0)


def test_digits_and_breast_cancer_equal_scikit_learns_loaders():
    """Read from scikit-learn's bundled files without importing it: the same numbers as its
    own loaders give."""
    from sklearn.datasets import load_breast_cancer, load_digits

    raw = load_digits()
    d = digits()
    images = torch.cat([d.train_images, d.test_images])  # (1797, 8, 8)
    labels = torch.cat([d.train_labels, d.test_labels])
    expected = torch.tensor(raw.images, dtype=torch.float32) / 16.0  # (1797, 8, 8)
    # the split reorders the images: compare them as sorted multisets of (label, pixels)
    key = lambda x, y: sorted(zip(y.tolist(), x.flatten(1).tolist(), strict=True))  # noqa: E731
    assert key(images, labels) == key(expected, torch.tensor(raw.target))
    features, cancer = breast_cancer()
    raw = load_breast_cancer()
    assert features.shape == (569, 30) and features.dtype == torch.float64
    assert torch.equal(features, torch.tensor(raw.data))
    assert torch.equal(cancer, torch.tensor(raw.target)) and cancer.dtype == torch.int64


def test_package_file_names_what_is_missing():
    with pytest.raises(ModuleNotFoundError, match="no_such_package_x must be installed"):
        package_file("no_such_package_x", "data.csv")
    with pytest.raises(FileNotFoundError, match="ships no data file datasets/nothing.csv"):
        package_file("sklearn", "datasets", "nothing.csv")


def test_pydoc_text_is_long_english_and_round_trips_through_the_vocabulary():
    text = pydoc_text()
    assert len(text) > 400_000 and "assignment" in text
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text[:1000])
    assert vocab.decode(ids) == text[:1000] and int(ids.max()) < vocab.size
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CharVocab.from_text("abc").encode("abd")


def test_char_windows_shift_targets_by_one():
    ids = torch.arange(100)
    x, y = char_windows(ids, length=10, batch_size=4, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10)
    assert torch.equal(y, x + 1)
    with pytest.raises(ValueError, match="longer than length"):
        char_windows(ids[:5], length=10, batch_size=1, generator=torch.Generator())


def test_co2_monthly_is_the_bundled_mauna_loa_record_with_a_trend_and_a_yearly_cycle():
    from book.data import co2_monthly

    s = co2_monthly()
    assert s.start == "1958-03" and s.unit == "ppm"
    assert s.values.shape == s.month.shape == (526,)  # March 1958 .. December 2001
    assert s.values.dtype == torch.float64 and not bool(s.values.isnan().any())
    assert s.month[:3].tolist() == [2, 3, 4] and s.month[-1] == 11  # March, April, ...
    assert torch.equal(s.month, (torch.arange(526) + 2) % 12)  # no month skipped
    assert 310 < float(s.values[:12].mean()) < 320 < 360 < float(s.values[-12:].mean()) < 375
    # The yearly cycle: within each full year, the May peak stands above the October trough.
    years = s.values[10 : 10 + 12 * 43].view(43, 12)  # Jan .. Dec, 1959 .. 2001
    assert bool((years[:, 4] > years[:, 9] + 3).all())
