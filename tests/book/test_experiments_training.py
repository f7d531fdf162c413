"""book.experiments.training: the seeded classifier loop and the loss-curve helpers."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from book.experiments.ch01 import LSTMClassifier, signal_batch
from book.experiments.training import first_step_below, moving_average, train_classifier

# ------------------------------------------------------------------------------------------
# train_classifier (on chapter 1's signal task)
# ------------------------------------------------------------------------------------------


def _late_task(batch_size, generator):
    return signal_batch(batch_size, 8, signal_positions=(-2, 8), generator=generator)


def test_train_classifier_learns_a_short_task_and_is_deterministic():
    def build():
        return LSTMClassifier(20, 4, 8, 8)

    run = train_classifier(build, _late_task, steps=40, lr=2e-2, seed=3, eval_size=256)
    assert run.accuracy > 0.9  # chance is 0.25
    assert len(run.losses) == 40 and run.losses[-1] < run.losses[0]
    assert run.n_params == sum(p.numel() for p in build().parameters())
    again = train_classifier(build, _late_task, steps=40, lr=2e-2, seed=3, eval_size=256)
    assert again.losses == run.losses and again.accuracy == run.accuracy


def test_train_classifier_gives_every_model_the_same_batches():
    seen: dict[str, list[torch.Tensor]] = {"a": [], "b": []}

    def recording(name, batch_size, generator):
        tokens, labels = _late_task(batch_size, generator)
        seen[name].append(tokens)
        return tokens, labels

    for name, hidden in (("a", 4), ("b", 8)):
        train_classifier(
            lambda h=hidden: LSTMClassifier(20, 4, 4, h),
            functools.partial(recording, name),
            steps=3,
            eval_size=8,
        )
    assert len(seen["a"]) == 4  # 3 training batches and the held-out one
    assert all(torch.equal(a, b) for a, b in zip(seen["a"], seen["b"], strict=True))


def test_train_classifier_rejects_bad_arguments():
    with pytest.raises(TypeError, match="build must be a function"):
        train_classifier(LSTMClassifier(20, 4, 4, 4), _late_task, steps=1)
    with pytest.raises(TypeError, match="make_batch must be callable"):
        train_classifier(lambda: LSTMClassifier(20, 4, 4, 4), None, steps=1)
    with pytest.raises(ValueError, match="steps"):
        train_classifier(lambda: LSTMClassifier(20, 4, 4, 4), _late_task, steps=0)


# ------------------------------------------------------------------------------------------
# curve helpers
# ------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.floats(-10, 10), min_size=1, max_size=30), window=st.integers(1, 8))
def test_moving_average_matches_slices(values, window):
    got = moving_average(values, window)
    for i, g in enumerate(got):
        chunk = values[max(0, i - window + 1) : i + 1]
        assert g == pytest.approx(sum(chunk) / len(chunk), abs=1e-9)


def test_first_step_below():
    losses = [5.0] * 10 + [1.0] * 10
    # The 4-step mean first drops below 3 when 3 of the last 4 values are 1.0: step 12.
    assert first_step_below(losses, 3.0, window=4) == 12
    assert first_step_below(losses, 0.5, window=4) is None
    assert first_step_below([0.0, 0.0], 1.0, window=4) is None
