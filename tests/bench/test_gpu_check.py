"""``bench/gpu_check.py``, the one script a GPU session runs, tested where there is no GPU: its
clean exit, and a rehearsal of every phase on the CPU through Triton's interpreter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # runs the device script (Triton interpreter)

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_gpu_check_script_exits_cleanly_without_a_gpu():
    script = str(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, script, "--out", os.devnull],
        env=dict(env, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no CUDA device" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke run is the no-GPU rehearsal")
def test_gpu_check_smoke_run_passes_every_phase(tmp_path):
    """The device script rehearsed on the CPU (interpreter, toy sizes), so that the few minutes
    of a GPU session are not lost to a bug in the script itself."""
    script = str(SCRIPT)
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, script, "--smoke", "--out", str(out)],
        env=dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["failures"] == []
    phases = ("triton_correctness", "timing", "dispatch", "variants", "flex", "sweep")
    assert set(phases) <= set(results["phases"])
    assert all(results["phases"][phase] for phase in phases)  # each phase recorded something
