"""book.experiments.parallel: runs side by side give exactly the numbers of a plain loop."""

from __future__ import annotations

import os
import sys
import time

import pytest
import torch

from book.experiments import parallel
from book.experiments.parallel import WORKERS_ENV, run_each, run_keyed, worker_count
from book.experiments.training import train_classifier
from book.pages.ch01 import LSTMClassifier, signal_batch

needs_fork = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="workers are forked on Linux only"
)


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "2")


def _train(seed: int):
    return train_classifier(
        lambda: LSTMClassifier(20, 4, 8, 8),
        lambda batch_size, generator: signal_batch(batch_size, 8, generator=generator),
        steps=15,
        lr=1e-2,
        seed=seed,
        eval_size=64,
        threads=1,
    )


@needs_fork
def test_training_side_by_side_is_bit_identical_to_a_loop(two_workers):
    looped = [_train(seed) for seed in (0, 1, 2)]
    side_by_side = run_each(_train, (0, 1, 2))
    for a, b in zip(looped, side_by_side, strict=True):
        assert a.losses == b.losses and a.accuracy == b.accuracy
        for (name, x), (_, y) in zip(
            a.model.state_dict().items(), b.model.state_dict().items(), strict=True
        ):
            assert torch.equal(x, y), name


@needs_fork
def test_runs_happen_in_other_processes_and_come_back_in_order(two_workers):
    def slow_first(i: int) -> tuple[int, int]:
        time.sleep(0.2 if i == 0 else 0.0)  # the first item finishes last
        return i, os.getpid()

    results = run_each(slow_first, range(5))  # a lambda-like closure: never pickled
    assert [i for i, _ in results] == list(range(5))
    assert os.getpid() not in {pid for _, pid in results}


@needs_fork
def test_a_worker_runs_nested_calls_in_itself(two_workers):
    def inner(i: int) -> list[int]:
        return run_each(lambda _: os.getpid(), range(3))

    for pids in run_each(inner, range(2)):
        assert len(set(pids)) == 1  # no pool inside a worker


@needs_fork
def test_an_error_in_a_run_reaches_the_caller(two_workers):
    def fails_on_two(i: int) -> int:
        if i == 2:
            raise ValueError(f"item {i} failed")
        return i

    with pytest.raises(ValueError, match="item 2 failed"):
        run_each(fails_on_two, range(4))


def test_the_parents_random_state_is_left_as_it_was(two_workers):
    torch.manual_seed(7)
    before = torch.get_rng_state()
    run_each(lambda seed: torch.manual_seed(seed) and torch.rand(3), (0, 1))
    if worker_count(2) > 1:
        assert torch.equal(torch.get_rng_state(), before)


def test_one_worker_runs_the_loop_in_this_process(monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "1")
    assert run_each(lambda _: os.getpid(), range(3)) == [os.getpid()] * 3


def test_worker_count(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv(WORKERS_ENV, "4")
    assert worker_count(10) == 4
    assert worker_count(3) == 3  # at most one per item
    assert worker_count(0) == 1
    monkeypatch.delenv(WORKERS_ENV)
    assert worker_count(1000) == parallel.available_cores()
    monkeypatch.setattr(sys, "platform", "darwin")  # not fork-safe: one process
    assert worker_count(10) == 1
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # children could not use it
    assert worker_count(10) == 1
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(parallel, "_in_worker", True)
    assert worker_count(10) == 1


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_bad_worker_setting_is_named(monkeypatch, bad):
    monkeypatch.setenv(WORKERS_ENV, bad)
    with pytest.raises(ValueError, match=f"{WORKERS_ENV} must be a whole number >= 1"):
        worker_count(4)


def test_run_each_rejects_what_it_cannot_call():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        run_each(3, [1, 2])
    assert run_each(str, []) == []


def test_run_keyed(two_workers):
    assert run_keyed(lambda k: k * 2, ("a", "b")) == {"a": "aa", "b": "bb"}
    with pytest.raises(ValueError, match="keys must be distinct"):
        run_keyed(str, (1, 1))


@needs_fork
def test_a_worker_draws_no_progress_bar(two_workers):
    from book.progress import progress

    def bar_state(i: int) -> tuple[bool, list[int]]:
        bar = progress(range(i), desc="inner")
        return bar.disable, list(bar)

    assert run_each(bar_state, (2, 3)) == [(True, [0, 1]), (True, [0, 1, 2])]
    if not os.environ.get("TQDM_DISABLE"):
        assert progress(range(1), desc="here").disable is False  # the parent still draws
