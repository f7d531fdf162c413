"""The Triton flash-attention kernels, on the CPU through Triton's interpreter.

``TRITON_INTERPRET=1`` only takes effect for kernels decorated after it is set, and other test
files (run in the same pytest-xdist worker) may import triton or this package first. So the
kernel checks run in a fresh subprocess, this file run as a script with the variable set; it
prints one JSON line of measured errors that the tests below assert on. Input validation and
the "cannot run here" errors are tested in-process.

Reference: the package's dense attention in float64 (outputs and gradients). bfloat16 is not
tested here (the interpreter's bf16 dot is wrong); bench/gpu_check.py tests it on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

# (name, B, H, Lq, Lk, E, causal, dtype, scale, layout). Lengths that are not multiples of the
# interpreter's 16-wide tiles exercise the boundary masks; Lq != Lk and E not a power of two
# exercise the padding paths; "bhle" passes (B, L, H, E) tensors viewed as (B, H, L, E).
CASES = [
    ("fp32_L17_d16", 1, 2, 17, 17, 16, False, "float32", None, "bhle"),
    ("fp32_causal_L64_d32", 1, 2, 64, 64, 32, True, "float32", None, "bhle"),
    ("fp32_causal_L100_d64", 1, 2, 100, 100, 64, True, "float32", None, "bhle"),
    ("fp16_L100_d32", 1, 2, 100, 100, 32, False, "float16", None, "bhle"),
    ("fp16_causal_L100_d16", 1, 2, 100, 100, 16, True, "float16", None, "bhle"),
    ("fp16_cross_Lq33_Lk70_d20", 2, 2, 33, 70, 20, False, "float16", 0.3, "blhe"),
    ("fp32_causal_Lq70_Lk33_d16", 2, 1, 70, 33, 16, True, "float32", None, "blhe"),
    ("fp32_causal_L1_d16", 1, 2, 1, 1, 16, True, "float32", None, "bhle"),
    ("fp16_causal_L40_d8", 1, 1, 40, 40, 8, True, "float16", None, "bhle"),
]
TOL = {"float32": 1e-4, "float16": 5e-3}  # max error / max(1, max |reference|)


def _worker() -> None:
    """Runs in the subprocess (TRITON_INTERPRET=1): measure every case, print JSON."""
    from attention.dispatch import attend
    from attention.functional import scaled_dot_product_attention
    from attention.gpu.triton_flash import interpreter_mode, triton_flash_attention

    results = {"interpreter": interpreter_mode(), "cases": {}}
    torch.manual_seed(0)
    for name, b, h, lq, lk, e, causal, dtype_name, scale, layout in CASES:
        dtype = getattr(torch, dtype_name)

        def make(n, b=b, h=h, e=e, layout=layout, dtype=dtype):
            if layout == "blhe":  # strided view, as produced by splitting heads
                return torch.randn(b, n, h, e).to(dtype).transpose(1, 2)
            return torch.randn(b, h, n, e).to(dtype)

        q, k, v = make(lq), make(lk), make(lk)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = triton_flash_attention(*leaves, causal=causal, scale=scale)
        d_out = torch.randn(out.shape).to(dtype)
        out.backward(d_out)
        ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref = scaled_dot_product_attention(*ref_leaves, causal=causal, scale=scale)
        ref.backward(d_out.double())
        case = {"dtype": dtype_name, "shape_ok": tuple(out.shape) == (b, h, lq, e)}
        case["dtype_ok"] = out.dtype == dtype and all(t.grad.dtype == dtype for t in leaves)
        for label, got, want in [("out", out, ref)] + [
            (f"d{n}", t.grad, r.grad) for n, t, r in zip("qkv", leaves, ref_leaves, strict=True)
        ]:
            got = got.double()
            case[label] = {
                "err": (got - want).abs().max().item(),
                "scale": max(1.0, want.abs().max().item()),
                "finite": bool(torch.isfinite(got).all()),
            }
        results["cases"][name] = case

    # Determinism: no atomics, so two backward passes agree bit for bit.
    q, k, v = (torch.randn(1, 2, 50, 32, requires_grad=True) for _ in range(3))
    grads = []
    for _ in range(2):
        out = triton_flash_attention(q, k, v, causal=True)
        grads.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    results["deterministic"] = all(
        torch.equal(a, b) for a, b in zip(grads[0], grads[1], strict=True)
    )

    # The dispatcher's "triton" backend runs the same kernel.
    q, k, v = (torch.randn(2, 2, 30, 16) for _ in range(3))
    got = attend(q, k, v, causal=True, backend="triton")
    want = scaled_dot_product_attention(q, k, v, causal=True)
    results["dispatch_err"] = (got - want).abs().max().item()
    print(json.dumps(results))


if __name__ == "__main__":
    _worker()
    sys.exit(0)


triton = pytest.importorskip("triton", reason="triton is not installed")

from attention.gpu import triton_flash  # noqa: E402
from attention.gpu.triton_flash import (  # noqa: E402
    attention_flops,
    choose_configs,
    triton_flash_attention,
    triton_unavailable_reason,
)
from tests.attention.inputs import random_qkv  # noqa: E402

pytestmark = [pytest.mark.triton, pytest.mark.slow]


@pytest.fixture(scope="module")
def interpreted():
    """Run the worker once for the module (about 30 s on one core)."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    proc = subprocess.run(
        [sys.executable, __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_worker_ran_in_interpreter_mode(interpreted):
    assert interpreted["interpreter"] is True


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_forward_and_gradients_match_float64_reference(interpreted, name):
    case = interpreted["cases"][name]
    assert case["shape_ok"] and case["dtype_ok"]
    tol = TOL[case["dtype"]]
    for label in ("out", "dq", "dk", "dv"):
        m = case[label]
        assert m["finite"], f"{name}: {label} has NaN/inf"
        assert m["err"] <= tol * m["scale"], f"{name}: {label} max error {m['err']:.2e}"


def test_backward_is_deterministic(interpreted):
    assert interpreted["deterministic"]


def test_dispatch_triton_backend_matches_reference(interpreted):
    assert interpreted["dispatch_err"] < 1e-5


# --- in-process: validation and availability ---------------------------------------------------


SIZES = dict(b=1, h=2, lq=8, lk=8, e=16, dtype=torch.float32)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"dtype": torch.float64}, TypeError, "float16, bfloat16 or float32"),
        ({"e": 256}, ValueError, "head dim must be <= 128"),
        ({"hk": 1}, ValueError, "enable_gqa"),
    ],
)
def test_bad_inputs_are_refused_with_named_argument(kwargs, error, words):
    with pytest.raises(error, match=words):
        triton_flash_attention(*random_qkv(**{**SIZES, **kwargs}))


def test_value_width_must_match_query_width():
    q, k, _ = random_qkv(**SIZES)
    with pytest.raises(ValueError, match="value must have the query's last dim"):
        triton_flash_attention(q, k, torch.randn(1, 2, 8, 32))


def test_integer_tensor_is_refused():
    q, k, v = random_qkv(**SIZES)
    with pytest.raises(TypeError, match="query must be a floating-point tensor"):
        triton_flash_attention(q.long(), k, v)


@pytest.mark.skipif(triton_flash.interpreter_mode(), reason="this process runs the interpreter")
def test_cpu_tensors_without_interpreter_raise_runtime_error_saying_why():
    reason = triton_unavailable_reason("cpu")
    assert reason is not None and "TRITON_INTERPRET" in reason
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        triton_flash_attention(*random_qkv(**SIZES))


def test_missing_triton_is_reported(monkeypatch):
    monkeypatch.setattr(triton_flash, "TRITON_AVAILABLE", False)
    assert "not installed" in triton_unavailable_reason("cuda")


def test_configs_respect_tile_divisibility():
    # The causal split needs the looping tile to divide the fixed one (see KernelConfig).
    for e in (16, 64, 128):
        for dtype in triton_flash.SUPPORTED_DTYPES:
            for cfgs in (choose_configs(e, dtype), triton_flash._CONFIGS_SMALL):
                cfgs.validate()  # raises if invalid
                assert cfgs.forward.block_m % cfgs.forward.block_n == 0
                assert cfgs.dkdv.block_n % cfgs.dkdv.block_m == 0


def test_bad_config_is_refused():
    bad = triton_flash.FlashConfigs(
        forward=triton_flash.KernelConfig(48, 32),
        dkdv=triton_flash.KernelConfig(16, 32),
        dq=triton_flash.KernelConfig(32, 16),
    )
    with pytest.raises(ValueError, match="forward config"):
        bad.validate()


def test_attention_flops_counts_two_matmuls_and_halves_causal():
    # Q Kᵀ and P V: 2 * (2 * Lq * Lk * E) per head.
    assert attention_flops(2, 3, 5, 7, 11, causal=False) == 2 * 3 * 2 * (2 * 5 * 7 * 11)
    assert attention_flops(1, 1, 64, 64, 8, causal=True) == 4 * 64 * 64 * 8 / 2
