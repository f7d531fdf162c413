"""book.experiments.training: the seeded classifier loop and the loss-curve helpers."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from book.experiments.training import (
    first_step_below,
    fit,
    linear_warmup,
    moving_average,
    torch_threads,
    train_classifier,
)
from book.pages.ch01 import LSTMClassifier, signal_batch

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


def test_train_classifier_scores_a_given_test_set_exactly():
    """``test=(inputs, labels)``: the accuracy is on that set (here: every label flipped to a
    class the model never predicts, so 0), and a length mismatch is an error."""
    tokens, labels = _late_task(64, torch.Generator().manual_seed(5))
    build = lambda: LSTMClassifier(20, 4, 8, 8)  # noqa: E731
    run = train_classifier(build, _late_task, steps=40, lr=2e-2, seed=3, test=(tokens, labels))
    with torch.no_grad():
        expected = float((run.model(tokens).argmax(-1) == labels).float().mean())
    assert run.accuracy == expected > 0.8
    wrong = (run.model(tokens).argmax(-1) + 1) % 4
    assert train_classifier(build, _late_task, steps=40, lr=2e-2, seed=3,
                            test=(tokens, wrong)).accuracy == 0.0  # fmt: skip
    with pytest.raises(ValueError, match="test must be"):
        train_classifier(build, _late_task, steps=1, test=(tokens, labels[:3]))


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


# ------------------------------------------------------------------------------------------
# fit, the one loop
# ------------------------------------------------------------------------------------------


def _regression(generator):
    x = torch.randn(16, 3, generator=generator)
    return x, x @ torch.tensor([1.0, -2.0, 0.5])


def _mse(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x).squeeze(-1), y)


def test_fit_learns_logs_every_step_and_leaves_eval_mode():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    log = fit(model, _regression, _mse, steps=200, lr=5e-2, data_seed=1)
    assert len(log.losses) == 200 and log.losses[-1] < 1e-3 < log.losses[0]
    assert not model.training and log.seconds >= 0


def test_fit_same_data_seed_same_batches_and_same_result():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        runs.append(fit(model, _regression, _mse, steps=5, lr=1e-2, data_seed=7).losses)
    assert runs[0] == runs[1]
    torch.manual_seed(0)
    other = fit(torch.nn.Linear(3, 1), _regression, _mse, steps=5, lr=1e-2, data_seed=8)
    assert other.losses != runs[0]


def test_fit_clips_the_gradient_norm():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    before = model.weight.detach().clone()
    # One SGD-free check: with clip, Adam's first step is still lr-sized, but the clipped
    # gradient is what the optimizer sees.
    seen = []

    def loss_of(model, batch):
        loss = 1e6 * _mse(model, batch)
        model.weight.register_hook(lambda g: seen.append(g.norm().item()))
        return loss

    fit(model, _regression, loss_of, steps=1, lr=1e-3, data_seed=0, clip=1.0)
    assert seen and seen[0] > 1.0  # the raw gradient is large ...
    assert model.weight.grad is None or model.weight.grad.norm() <= 1.0 + 1e-6  # ... clipped
    assert not torch.equal(model.weight, before)


def test_fit_rejects_bad_arguments():
    model = torch.nn.Linear(3, 1)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        fit(lambda: model, _regression, _mse, steps=1, lr=1e-3, data_seed=0)
    with pytest.raises(TypeError, match="loss_of must be callable"):
        fit(model, _regression, None, steps=1, lr=1e-3, data_seed=0)
    with pytest.raises(ValueError, match="optimizer"):
        fit(model, _regression, _mse, steps=1, lr=1e-3, data_seed=0, optimizer="sgd")
    with pytest.raises(ValueError, match="clip"):
        fit(model, _regression, _mse, steps=1, lr=1e-3, data_seed=0, clip=0)


def test_linear_warmup_ramps_to_one_and_stays():
    factor = linear_warmup(4)
    assert [factor(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert linear_warmup(1)(0) == 1.0
    with pytest.raises(ValueError, match="warmup_steps"):
        linear_warmup(0)


def test_fit_schedule_sets_the_learning_rate_of_every_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt_lrs = []
    original = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        opt_lrs.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    torch.optim.Adam.step = step
    try:
        fit(model, _regression, _mse, steps=5, lr=0.1, data_seed=0, schedule=linear_warmup(4))
    finally:
        torch.optim.Adam.step = original
    assert opt_lrs == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1])
    # without a schedule: the same result as before the option existed
    torch.manual_seed(0)
    a = fit(torch.nn.Linear(3, 1), _regression, _mse, steps=5, lr=1e-2, data_seed=7).losses
    torch.manual_seed(0)
    b = fit(
        torch.nn.Linear(3, 1), _regression, _mse, steps=5, lr=1e-2, data_seed=7,
        schedule=lambda step: 1.0,
    ).losses  # fmt: skip
    assert a == b
    with pytest.raises(TypeError, match="schedule"):
        fit(model, _regression, _mse, steps=1, lr=1e-3, data_seed=0, schedule=0.5)
    with pytest.raises(ValueError, match="schedule"):
        fit(model, _regression, _mse, steps=1, lr=1e-3, data_seed=0, schedule=lambda s: -1.0)


def test_torch_threads_restores_the_thread_count_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="boom"), torch_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_flush_denormals_zeroes_denormals_inside_the_block_only():
    from book.experiments.training import flush_denormals

    tiny = torch.tensor([1e-39], dtype=torch.float32)  # a float32 denormal
    assert float(tiny * 1.0) > 0
    with flush_denormals() as supported:
        inside = float(tiny * 1.0)
    assert float(tiny * 1.0) > 0  # switched off again afterwards
    if supported:
        assert inside == 0.0
