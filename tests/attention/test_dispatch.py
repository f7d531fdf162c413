"""attention.dispatch: every backend gives the reference's answer; "auto" picks as documented.

References: the package's dense attention, and the naive float64 formula (independent of it).
The "triton" backend's numbers are checked in tests/test_triton_flash.py (interpreter
subprocess); here only its refusal on the CPU. CUDA is faked with monkeypatch to test the
choice of "auto".
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.dispatch import (
    BACKENDS,
    attend,
    available_backends,
    backend_unavailable_reason,
    pick_backend,
    torch_sdpa,
)
from attention.functional import scaled_dot_product_attention
from attention.gpu import triton_flash
from attention.masks import causal_mask, padding_mask, to_additive
from tests.attention.inputs import random_qkv
from tests.reference import naive_attention_float64


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    lq=st.integers(1, 12),
    lk=st.integers(1, 12),
    causal=st.booleans(),
    kind=st.sampled_from(["none", "bool", "float", "padding"]),
    seed=st.integers(0, 2**16),
)
def test_torch_backend_matches_naive_float64(b, h, lq, lk, causal, kind, seed):
    q, k, v = random_qkv(b, h, lq, lk, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    allowed = torch.ones(lq, lk, dtype=torch.bool)
    mask = None
    if kind == "bool":  # random, some rows fully masked
        mask = torch.rand(b, 1, lq, lk, generator=g) < 0.6
        allowed = mask
    elif kind == "float":
        allowed = torch.rand(1, h, lq, lk, generator=g) < 0.6
        mask = to_additive(allowed, dtype=torch.float64)
    elif kind == "padding":
        mask = padding_mask(torch.randint(0, lk + 1, (b,), generator=g), lk)
        allowed = mask
    if causal:
        allowed = allowed & causal_mask(lq, lk)
    want = naive_attention_float64(q, k, v, allowed)
    got = attend(q, k, v, mask, causal=causal, backend="torch")
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    ref = attend(q, k, v, mask, causal=causal, backend="reference")
    torch.testing.assert_close(ref, want, rtol=1e-9, atol=1e-9)


def test_float_bias_is_added_not_just_used_as_a_mask():
    q, k, v = random_qkv(lq=5, lk=7)
    bias = torch.randn(1, 2, 5, 7, dtype=torch.float64)
    got = attend(q, k, v, bias, causal=True, backend="torch", scale=0.3)
    want = scaled_dot_product_attention(q, k, v, bias, causal=True, scale=0.3)
    torch.testing.assert_close(got, want)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = (t.requires_grad_() for t in random_qkv(lq=4, lk=6))
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1] = False
    out = torch_sdpa(q, k, v, mask)
    assert torch.all(out[:, :, 1] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert torch.all(q.grad[:, :, 1] == 0)


def test_half_precision_float_bias_is_accepted():
    q, k, v = random_qkv(lq=9, lk=9, dtype=torch.float32)
    bias = torch.zeros(9, 9, dtype=torch.float64)  # torch wants the query's dtype; we convert
    torch.testing.assert_close(attend(q, k, v, bias, backend="torch"), attend(q, k, v))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_backend_matches_reference(causal):
    q, k, v = random_qkv(lq=70, lk=70, e=16)
    got = attend(q, k, v, causal=causal, backend="flash")
    torch.testing.assert_close(
        got, naive_attention_float64(q, k, v, causal_mask(70) if causal else None)
    )


@pytest.mark.parametrize("backend", ["flash", "triton"])
def test_maskless_backends_refuse_a_mask(backend):
    q, k, v = random_qkv(lq=9, lk=9)
    with pytest.raises(ValueError, match="takes no mask"):
        attend(q, k, v, torch.ones(9, 9, dtype=torch.bool), backend=backend)


@pytest.mark.skipif(triton_flash.interpreter_mode(), reason="this process runs the interpreter")
def test_triton_backend_on_cpu_raises_saying_why():
    q, k, v = random_qkv(lq=9, lk=9, dtype=torch.float32)
    with pytest.raises(
        RuntimeError, match="backend 'triton' cannot run: .*(TRITON_INTERPRET|triton)"
    ):
        attend(q, k, v, backend="triton")
    assert "triton" not in available_backends("cpu")


def test_unknown_backend_is_refused():
    q, k, v = random_qkv(lq=9, lk=9)
    with pytest.raises(ValueError, match="backend must be one of"):
        attend(q, k, v, backend="cudnn")


def test_bad_mask_is_refused_before_any_backend_runs():
    q, k, v = random_qkv(lq=9, lk=9)
    with pytest.raises(ValueError, match="mask must cover every key"):
        attend(q, k, v, torch.ones(9, 1, dtype=torch.bool))


def test_reference_and_torch_are_always_available():
    names = available_backends("cpu")
    assert names[:2] == ["reference", "torch"]
    assert set(names) <= set(BACKENDS)
    assert "flash" in names


def test_auto_on_cpu_is_torch_and_equals_reference():
    q, k, v = random_qkv(lq=9, lk=9)
    assert pick_backend("cpu", torch.float32, 8) == "torch"
    torch.testing.assert_close(
        attend(q, k, v, causal=True), attend(q, k, v, causal=True, backend="reference")
    )


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend a Hopper GPU is present (no tensor is ever put on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))


@pytest.mark.skipif(
    not triton_flash.TRITON_AVAILABLE or triton_flash.interpreter_mode(),
    reason="needs triton in compiled (not interpreter) mode",
)
def test_auto_on_cuda_picks_triton_when_it_can(fake_cuda):
    assert backend_unavailable_reason("triton", "cuda", torch.bfloat16) is None
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        assert pick_backend("cuda", dtype, 128) == "triton"
    assert pick_backend("cuda", torch.float16, 40) == "triton"  # padded inside the kernel


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"has_mask": True}, "arbitrary mask"),
        ({"head_dim": 256}, "head dim > 128"),
        ({"dtype": torch.float64}, "float64"),
        ({"value_dim": 32}, "value width != query width"),
    ],
)
def test_auto_on_cuda_falls_back_to_torch(fake_cuda, kwargs, why):
    args = {"dtype": torch.float16, "head_dim": 64, **kwargs}
    assert pick_backend("cuda", args.pop("dtype"), args.pop("head_dim"), **args) == "torch", why


def test_auto_on_cuda_without_triton_is_torch(fake_cuda, monkeypatch):
    monkeypatch.setattr(triton_flash, "TRITON_AVAILABLE", False)
    assert pick_backend("cuda", torch.float16, 64) == "torch"
    assert "triton" not in available_backends("cuda")
