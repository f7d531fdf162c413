"""Tests of the benchmark ``python -m bench``: the quick run end to end, its JSON, the paired
timing and the target logic. (Its measurement tools are tested in tests/measure/.)"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.methods import CASES, GROWTH_COSTS, METHODS, MODES, QUICK, REFERENCE
from bench.report import evaluate_targets, format_markdown, memory_slope, write_plot
from bench.runner import SCHEMA, paired_ratio, time_group

pytestmark = pytest.mark.slow  # runs the benchmark's quick mode

ROOT = Path(__file__).resolve().parents[2]
RECORD_KEYS = {
    "method", "case", "mode", "n", "times_s", "median_s", "reference", "ratio_to_reference",
    "ratios", "peak_extra_bytes", "flops", "gflops", "fraction_of_matmul",
}  # fmt: skip


# ------------------------------------------------------------------------ the quick run


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[dict, Path, str]:
    """``python -m bench --quick`` in a subprocess, writing to a temporary folder."""
    out_dir = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out-dir", str(out_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out_dir / "cpu_results_quick.json").read_text())
    return results, out_dir, proc.stdout


def test_quick_run_writes_json_and_png(quick_run):
    results, out_dir, stdout = quick_run
    png = (out_dir / "cpu_results_quick.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "fraction of the fp32 matmul rate" in stdout
    for t in results["targets"]:
        assert f"[{t['status']}] {t['description']}" in stdout


def test_quick_json_schema(quick_run):
    results, _, _ = quick_run
    assert results["schema"] == SCHEMA and results["mode"] == "quick"
    assert results["config"]["lengths"] == list(QUICK.lengths)
    assert results["matmul"]["gflops"] > 0 and results["elapsed_s"] > 0
    assert results["errors"] == [], results["errors"]
    assert set(results["methods"]) == {m.name for m in METHODS}
    ran = {m.name for m in METHODS}
    seen = set()
    for r in results["results"]:
        assert set(r) == RECORD_KEYS
        assert r["mode"] in MODES and r["case"] in CASES and r["reference"] == REFERENCE[r["case"]]
        assert len(r["times_s"]) >= QUICK.min_repeats and all(t > 0 for t in r["times_s"])
        assert r["median_s"] == statistics.median(r["times_s"])
        # Every method of a case was timed in the same rounds as every other one.
        assert set(r["ratios"]) == {
            o["method"]
            for o in results["results"]
            if (o["case"], o["mode"], o["n"]) == (r["case"], r["mode"], r["n"])
        } - {r["method"]}
        if r["method"] == r["reference"]:
            assert r["ratio_to_reference"] == 1.0
        else:
            assert r["ratio_to_reference"] == r["ratios"][r["reference"]] > 0
        assert r["peak_extra_bytes"] > 0
        assert r["fraction_of_matmul"] == pytest.approx(
            r["flops"] / r["median_s"] / 1e9 / results["matmul"]["gflops"]
        )
        seen.add((r["method"], r["mode"], r["n"]))
    # Every method ran at every quick length, in both modes.
    assert seen == {(m, mode, n) for m in ran for mode in MODES for n in QUICK.lengths}
    # Paired growth: every sub-quadratic method, every doubling within the lengths, both modes.
    growth_methods = {m.name for m in METHODS if m.cost in GROWTH_COSTS} & ran
    expected = {(m, mode, n) for m in growth_methods for mode in MODES for n in QUICK.lengths[:-1]}
    assert {(g["method"], g["mode"], g["n"]) for g in results["growth"]} == expected
    for g in results["growth"]:
        assert len(g["times_n_s"]) == len(g["times_2n_s"]) >= QUICK.min_repeats
        assert g["growth"] == paired_ratio(g["times_2n_s"], g["times_n_s"])
    ids = [t["id"] for t in results["targets"]]
    assert len(ids) == 9 and len(set(ids)) == 9
    assert all(t["status"] in ("PASS", "MISS", "SKIP") for t in results["targets"])


def test_markdown_cli_renders_the_results(quick_run):
    _, out_dir, _ = quick_run
    json_path = out_dir / "cpu_results_quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--markdown", str(json_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| method | n=64 | n=128 | n=256 |" in proc.stdout
    assert "| method | n=64->128 | n=128->256 |" in proc.stdout
    assert "| sliding window, forward+backward |" in proc.stdout
    assert proc.stdout.count("| target |") == 1


# --------------------------------------------------------------------------------- FLOPs


# ------------------------------------------------------------------------ paired timing


def test_paired_ratio_is_the_median_of_per_round_ratios():
    # Round 2 was a slow spell for both methods: the pair keeps its ratio.
    assert paired_ratio([2.0, 20.0, 3.0], [1.0, 10.0, 1.0]) == 2.0
    with pytest.raises(ValueError, match="paired times"):
        paired_ratio([1.0], [1.0, 2.0])


def test_time_group_interleaves_rounds_in_rotated_order():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    inputs = dict.fromkeys(calls, tuple(torch.zeros(1) for _ in range(4)))
    times, errors = time_group(
        calls, inputs, warmup=True, min_repeats=3, max_repeats=3, budget_s=0.0
    )
    assert errors == {}
    assert all(len(t) == 3 for t in times.values())
    assert order == list("abcabcbcacab")  # warm-up, then rounds 0, 1, 2


# ------------------------------------------------------------------------------- targets


def _synthetic_results(flash_ratio: float, flash_memory: dict[int, int]) -> dict:
    """A results dict with just enough records for the flash targets."""
    records = []
    for n, mem in flash_memory.items():
        for mode in MODES:
            records.append({
                "method": "flash", "mode": mode, "n": n, "median_s": 1.0,
                "ratio_to_reference": flash_ratio, "ratios": {"sdpa": flash_ratio},
                "peak_extra_bytes": mem,
            })  # fmt: skip
    return {
        "config": {"lengths": sorted(flash_memory), "ratio_min_n": 2048, "n_target": 8192,
                   "slope_ns": [4096, 8192], "window": 256},
        "results": records,
    }  # fmt: skip


def test_targets_pass_miss_and_skip():
    linear_memory = {2048: 1 << 20, 4096: 2 << 20, 8192: 4 << 20}
    targets = {t["id"]: t for t in evaluate_targets(_synthetic_results(1.2, linear_memory))}
    assert targets["flash_forward"]["status"] == "PASS"
    assert targets["flash_forward"]["value"] == 1.2
    assert targets["flash_memory_slope_forward"]["value"] == pytest.approx(1.0)
    assert targets["flash_memory_slope_forward"]["status"] == "PASS"
    assert targets["linear_causal"]["status"] == "SKIP"  # not in these results
    assert targets["sliding_window_speedup"]["status"] == "SKIP"

    quadratic_memory = {2048: 1 << 20, 4096: 4 << 20, 8192: 16 << 20}
    targets = {t["id"]: t for t in evaluate_targets(_synthetic_results(1.6, quadratic_memory))}
    assert targets["flash_forward"]["status"] == "MISS"
    assert targets["flash_forward_backward"]["status"] == "PASS"  # 1.6 <= 1.7
    assert targets["flash_memory_slope_forward_backward"]["value"] == pytest.approx(2.0)
    assert targets["flash_memory_slope_forward_backward"]["status"] == "MISS"


def test_sliding_window_scaling_target_takes_the_worst_paired_forward_doubling():
    results = _synthetic_results(1.2, {2048: 1, 4096: 2})
    results["growth"] = [
        {"method": "sliding_window", "mode": "forward", "n": 1024, "growth": 2.1},
        {"method": "sliding_window", "mode": "forward", "n": 2048, "growth": 2.25},
        {"method": "sliding_window", "mode": "forward_backward", "n": 2048, "growth": 3.9},
        {"method": "linear", "mode": "forward", "n": 2048, "growth": 9.0},  # another method
    ]
    targets = {t["id"]: t for t in evaluate_targets(results)}
    forward = targets["sliding_window_scaling"]
    assert (forward["value"], forward["status"]) == (2.25, "PASS")
    assert "n=1024->2048: 2.10, n=2048->4096: 2.25" in forward["detail"]
    results["growth"][1]["growth"] = 2.4
    targets = {t["id"]: t for t in evaluate_targets(results)}
    assert targets["sliding_window_scaling"]["status"] == "MISS"
    del results["growth"]  # a results file without growth records: not measured
    targets = {t["id"]: t for t in evaluate_targets(results)}
    assert targets["sliding_window_scaling"]["status"] == "SKIP"


def test_memory_slope_needs_both_lengths():
    idx = {("flash", "forward", 4096): {"peak_extra_bytes": 100}}
    assert memory_slope(idx, "flash", "forward", 4096, 8192) is None
    idx[("flash", "forward", 8192)] = {"peak_extra_bytes": 100 * 2**1.5}
    assert math.isclose(memory_slope(idx, "flash", "forward", 4096, 8192), 1.5)


def test_markdown_and_plot_from_the_quick_results(quick_run, tmp_path):
    results, _, _ = quick_run
    text = format_markdown(results)
    assert "peak extra memory in MiB" in text and "| target | measured |" in text
    write_plot(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000
