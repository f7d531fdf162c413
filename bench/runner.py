"""Run the benchmark: interleaved timing rounds per (case, length, mode), then memory.

Paired ratios: within one (case, n, mode), every timed round calls each method of the case
once, one after the other (the order rotates from round to round), so a method and the case's
reference always run seconds apart, under the same machine load. The ratio of a method to
another is the median over rounds of ``t_method / t_other`` of the same round: a slow spell
of the machine moves both times of a pair, and the median drops the pairs it split.

Growth per doubling, paired the same way: for each sub-quadratic method, rounds that call it
at ``n`` and at ``2n`` and nothing else, so ``t(2n)/t(n)`` is a median of per-round ratios too
(not a ratio of medians taken minutes apart, each next to whatever else its case runs).
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from measure.flops import FORWARD_BACKWARD_FACTOR, matmul_rate
from measure.memory import peak_extra_bytes

from .methods import (
    CASES,
    GROWTH_COSTS,
    METHODS,
    MODES,
    REFERENCE,
    BenchConfig,
    Method,
    make_inputs,
)

Tensor = torch.Tensor

SCHEMA = "attention-bench/2"


def _one_call(fn, inputs: tuple[Tensor, ...], mode: str) -> Callable[[], None]:
    """A no-argument call of ``fn`` on ``inputs``: the forward under ``no_grad``, or the
    forward then ``backward`` of the upstream gradient (parameter gradients are reset
    beforehand by :func:`_reset_grads`, outside the timed region)."""
    q, k, v, grad_out = inputs
    if mode == "forward":

        def call() -> None:
            with torch.no_grad():
                fn(q, k, v)

    else:

        def call() -> None:
            fn(q, k, v).backward(grad_out)

    return call


def _reset_grads(inputs: tuple[Tensor, ...]) -> None:
    for t in inputs[:3]:
        t.grad = None


def _timed(call: Callable[[], None], inputs: tuple[Tensor, ...]) -> float:
    """Seconds one call takes, its inputs' gradients reset beforehand (outside the timing)."""
    _reset_grads(inputs)
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _error(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


def paired_ratio(times_a: list[float], times_b: list[float]) -> float:
    """Median over rounds of ``a / b``, the two lists being times of the same rounds."""
    if len(times_a) != len(times_b) or not times_a:
        raise ValueError(
            f"paired times must be two non-empty lists of one length, got {len(times_a)} "
            f"and {len(times_b)}"
        )
    return statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))


def time_group(
    calls: dict[str, Callable[[], None]],
    inputs: dict[str, tuple[Tensor, ...]],
    *,
    warmup: bool,
    min_repeats: int,
    max_repeats: int,
    budget_s: float,
    collect_garbage: bool = True,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Interleaved rounds: each round times every call once, in an order rotated by one each
    round. Stops after ``min_repeats`` rounds once ``budget_s`` is spent, or at
    ``max_repeats``. ``inputs[name]`` are the tensors ``calls[name]`` runs on (their
    gradients are reset before each call, outside the timing).

    Returns name -> the times of rounds 0, 1, ... (seconds), and name -> error message for a
    call that raised: it is dropped from the group (one broken variant must not end a
    ten-minute run; the error is reported).
    """
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, str] = {}

    def attempt(name: str) -> float | None:
        try:
            return _timed(calls[name], inputs[name])
        except Exception as err:  # noqa: BLE001 - reported, not hidden
            errors[name] = _error(err)
            names.remove(name)
            times.pop(name)
            return None

    if collect_garbage:  # a full collection costs tens of ms: not worth it for toy sizes
        gc.collect()
    gc.disable()  # a garbage collection inside a timed call would be charged to the method
    try:
        if warmup:
            for name in list(names):
                attempt(name)
        start = time.perf_counter()
        rounds = 0
        while (
            names
            and rounds < max_repeats
            and (rounds < min_repeats or time.perf_counter() - start < budget_s)
        ):
            shift = rounds % len(names)
            for name in names[shift:] + names[:shift]:
                elapsed = attempt(name)
                if elapsed is not None:
                    times[name].append(elapsed)
            # A call that failed mid-round leaves the others one time ahead: drop the round's
            # extra times so that every list stays paired round by round.
            length = min(len(t) for t in times.values()) if times else 0
            for t in times.values():
                del t[length:]
            rounds += 1
    finally:
        gc.enable()
    return times, errors


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _environment() -> dict:
    try:
        load = os.getloadavg()
    except OSError:  # not on every platform
        load = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_at_start": load,
    }


def run_case(
    case: str,
    mode: str,
    n: int,
    methods: list[Method],
    config: BenchConfig,
    gflops: float,
) -> tuple[list[dict], list[dict]]:
    """Time and measure the methods of one case at length ``n``.

    Returns one record per method that ran, and one ``{method, mode, n, error}`` per method
    that raised (it is left out of the records).
    """
    inputs = make_inputs(n, config, requires_grad=mode == "forward_backward")
    calls, errors = {}, {}
    for m in methods:
        try:
            calls[m.name] = _one_call(m.make(n, config), inputs, mode)
        except Exception as err:  # noqa: BLE001 - reported, not hidden
            errors[m.name] = _error(err)
    times, timing_errors = time_group(
        calls,
        dict.fromkeys(calls, inputs),
        warmup=n <= config.warmup_max_n,
        min_repeats=config.min_repeats,
        max_repeats=config.max_repeats,
        budget_s=config.budget_s,
        collect_garbage=config.collect_garbage,
    )
    errors.update(timing_errors)
    records = []
    factor = 1.0 if mode == "forward" else FORWARD_BACKWARD_FACTOR
    reference = REFERENCE[case]
    for m in methods:
        if m.name not in times:
            continue
        _reset_grads(inputs)
        try:
            peak = peak_extra_bytes(calls[m.name])
        except Exception as err:  # noqa: BLE001 - reported, not hidden
            errors[m.name] = "memory measurement: " + _error(err)
            continue
        finally:
            _reset_grads(inputs)
        median = statistics.median(times[m.name])
        flops = m.flops(n, config) * factor
        ratios = {
            other: paired_ratio(times[m.name], times[other]) for other in times if other != m.name
        }
        records.append(
            {
                "method": m.name,
                "case": case,
                "mode": mode,
                "n": n,
                "times_s": times[m.name],
                "median_s": median,
                "reference": reference,
                "ratio_to_reference": 1.0 if m.name == reference else ratios.get(reference),
                "ratios": ratios,
                "peak_extra_bytes": peak,
                "flops": flops,
                "gflops": flops / median / 1e9,
                "fraction_of_matmul": flops / median / 1e9 / gflops,
            }
        )
    failures = [{"method": k, "mode": mode, "n": n, "error": v} for k, v in errors.items()]
    return records, failures


def run_growth(method: Method, mode: str, n: int, config: BenchConfig) -> dict:
    """Paired ``t(2n) / t(n)`` of one method: rounds that time it at ``n`` and ``2n`` only.

    Returns ``{method, mode, n, times_n_s, times_2n_s, growth}`` (``growth`` the median of the
    per-round ratios), or ``{method, mode, n, error}`` if a call raised.
    """
    record = {"method": method.name, "mode": mode, "n": n}
    calls, inputs = {}, {}
    try:
        for key, length in (("n", n), ("2n", 2 * n)):
            inputs[key] = make_inputs(length, config, requires_grad=mode == "forward_backward")
            calls[key] = _one_call(method.make(length, config), inputs[key], mode)
    except Exception as err:  # noqa: BLE001 - reported, not hidden
        return {**record, "error": _error(err)}
    times, errors = time_group(
        calls,
        inputs,
        warmup=2 * n <= config.warmup_max_n,
        min_repeats=config.min_repeats,
        max_repeats=config.max_repeats,
        budget_s=config.growth_budget_s,
        collect_garbage=config.collect_garbage,
    )
    if errors:
        return {**record, "error": "; ".join(f"{k}: {v}" for k, v in errors.items())}
    growth = paired_ratio(times["2n"], times["n"])
    return {**record, "times_n_s": times["n"], "times_2n_s": times["2n"], "growth": growth}


def run_benchmark(config: BenchConfig, *, log: Callable[[str], None] = _log) -> dict:
    """The whole benchmark in this process: the matmul rate, then every case, length and mode.

    Returns the JSON-ready results (see ``bench/README.md`` for the schema).
    """
    wall = time.perf_counter()
    environment = _environment()  # the load average before the benchmark adds its own
    torch.manual_seed(0)
    log(f"bench ({config.mode}): torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads")  # fmt: skip
    matmul = matmul_rate(config.matmul_size, config.matmul_repeats, config.dtype)
    log(f"matmul rate: {matmul['gflops']:.1f} GFLOP/s (fp32 {config.matmul_size}^2 torch.mm)")
    records: list[dict] = []
    errors: list[dict] = []
    for mode in MODES:
        for case in CASES:
            for n in config.lengths:
                members = [m for m in METHODS if m.case == case and m.runs_at(n, mode, config)]
                if not members:
                    continue
                start = time.perf_counter()
                done, failed = run_case(case, mode, n, members, config, matmul["gflops"])
                records += done
                errors += failed
                for e in failed:
                    log(f"  ERROR {e['method']} ({mode}, n={n}): {e['error']}")
                now = time.perf_counter()
                log(
                    f"  {mode:16s} {case:8s} n={n:6d}: {len(members)} methods, "
                    f"{now - start:6.1f} s (total {now - wall:6.0f} s)"
                )
    growth: list[dict] = []
    for mode in MODES:
        for m in METHODS:
            if m.cost not in GROWTH_COSTS:
                continue
            for n in config.lengths:
                if 2 * n not in config.lengths or not m.runs_at(2 * n, mode, config):
                    continue
                start = time.perf_counter()
                record = run_growth(m, mode, n, config)
                if "error" in record:
                    errors.append(record)
                    log(f"  ERROR {m.name} growth ({mode}, n={n}): {record['error']}")
                    continue
                growth.append(record)
                now = time.perf_counter()
                log(
                    f"  {mode:16s} growth {m.name:15s} n={n:6d}->{2 * n:6d}: "
                    f"{record['growth']:.2f} ({now - start:5.1f} s, total {now - wall:6.0f} s)"
                )
    return {
        "schema": SCHEMA,
        "mode": config.mode,
        "config": {
            "batch_size": config.batch_size,
            "num_heads": config.num_heads,
            "head_dim": config.head_dim,
            "dtype": str(config.dtype).removeprefix("torch."),
            "lengths": list(config.lengths),
            "window": config.window,
            "window_left": config.left,
            "window_right": config.right,
            "block_size": config.block_size,
            "max_n": config.max_n,
            "min_repeats": config.min_repeats,
            "max_repeats": config.max_repeats,
            "budget_s": config.budget_s,
            "growth_budget_s": config.growth_budget_s,
            "warmup_max_n": config.warmup_max_n,
            "collect_garbage": config.collect_garbage,
            "ratio_min_n": config.ratio_min_n,
            "n_target": config.n_target,
            "slope_ns": list(config.slope_ns),
        },
        "environment": environment,
        "matmul": matmul,
        "methods": {
            m.name: {"label": m.label, "case": m.case, "reference": REFERENCE[m.case]}
            for m in METHODS
        },
        "results": records,
        "growth": growth,
        "errors": errors,
        "elapsed_s": time.perf_counter() - wall,
    }
