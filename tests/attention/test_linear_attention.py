"""Linear attention equals its quadratic formula in float64; chunked causal equals the RNN."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention.efficient._threads as threads_module
from attention.efficient.linear import (
    LinearAttentionState,
    elu_feature_map,
    linear_attention,
    linear_attention_step,
)
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import input_grads, random_qkv


def _phi(x):
    """elu(x) + 1 written out: x + 1 above zero, exp(x) below."""
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


def quadratic_linear_attention(q, k, v, causal=False, eps=1e-6):
    """φ(Q)φ(K)ᵀV / (φ(Q)φ(K)ᵀ1 + eps), the n × n weights made explicit, in float64."""
    q, k, v = (t.double() for t in (q, k, v))
    weights = _phi(q) @ _phi(k).transpose(-2, -1)  # (B, H, Lq, Lk)
    if causal:
        lq, lk = weights.shape[-2:]
        weights = weights * torch.ones(lq, lk, dtype=torch.float64).tril()
    return (weights @ v) / (weights.sum(dim=-1, keepdim=True) + eps)


def test_elu_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 101, dtype=torch.float64, requires_grad=True)
    phi = elu_feature_map(x)
    torch.testing.assert_close(phi, _phi(x))
    assert (phi > 0).all()
    (grad,) = torch.autograd.grad(phi.sum(), x)
    torch.testing.assert_close(grad, torch.where(x > 0, torch.ones_like(x), torch.exp(x)))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        elu_feature_map(torch.arange(3))


shapes = st.fixed_dictionaries(
    {
        "b": st.integers(1, 2),
        "h": st.integers(1, 2),
        "lq": st.integers(1, 30),
        "lk": st.integers(1, 30),
        "e": st.integers(1, 5),
        "ev": st.integers(1, 5),
        "chunk_size": st.sampled_from([1, 2, 3, 7, 8, 64]),
        "causal": st.booleans(),
    }
)


@settings(max_examples=50, deadline=None)
@given(s=shapes)
def test_matches_quadratic_formula_forward_and_gradients(s):
    lk = s["lq"] if s["causal"] else s["lk"]
    q, k, v = random_qkv(s["b"], s["h"], s["lq"], lk, s["e"], s["ev"], requires_grad=True)
    out = linear_attention(q, k, v, causal=s["causal"], chunk_size=s["chunk_size"])
    ref = quadratic_linear_attention(q, k, v, causal=s["causal"])
    assert out.shape == ref.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), chunk_size=st.sampled_from([1, 4, 6, 16, 64]))
def test_chunked_causal_equals_step_by_step_recurrence(n, chunk_size):
    q, k, v = random_qkv(2, 3, n, n, 4, 3)
    out, final = linear_attention(q, k, v, causal=True, chunk_size=chunk_size, return_state=True)
    state, steps = None, []
    for t in range(n):
        pos = slice(t, t + 1)
        out_t, state = linear_attention_step(q[:, :, pos], k[:, :, pos], v[:, :, pos], state)
        steps.append(out_t)
    torch.testing.assert_close(out, torch.cat(steps, dim=2), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(final.S, state.S)
    torch.testing.assert_close(final.z, state.z)


def test_prompt_then_generation_continues_the_state():
    """Process a prompt with the chunked form, then generate with steps: the same outputs as
    running the whole sequence causally."""
    q, k, v = random_qkv(1, 2, 13, 13, 4, 4)
    full = linear_attention(q, k, v, causal=True, chunk_size=4)
    prompt, state = linear_attention(
        q[:, :, :9], k[:, :, :9], v[:, :, :9], causal=True, chunk_size=4, return_state=True
    )
    torch.testing.assert_close(prompt, full[:, :, :9])
    for t in range(9, 13):
        pos = slice(t, t + 1)
        out_t, state = linear_attention_step(q[:, :, pos], k[:, :, pos], v[:, :, pos], state)
        torch.testing.assert_close(out_t, full[:, :, pos])


def test_non_causal_state_is_the_sums_over_all_keys():
    q, k, v = random_qkv(2, 2, 5, 7, 3, 4)
    _, state = linear_attention(q, k, v, return_state=True)
    torch.testing.assert_close(state.S, _phi(k).transpose(-2, -1) @ v)
    torch.testing.assert_close(state.z, _phi(k).sum(dim=-2))


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(causal):
    q, k, v = random_qkv(1, 2, 7, 7, 3, 2, requires_grad=True, seed=4)

    def f(q, k, v):
        return linear_attention(q, k, v, causal=causal, chunk_size=3)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_step_gradcheck():
    q, k, v = random_qkv(1, 2, 1, 1, 3, 2, requires_grad=True, seed=5)
    s0 = torch.rand(1, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    z0 = torch.rand(1, 2, 3, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, s0, z0):
        out, state = linear_attention_step(q, k, v, LinearAttentionState(s0, z0))
        return out, state.S, state.z

    assert torch.autograd.gradcheck(f, (q, k, v, s0, z0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_close_to_float32(dtype, causal):
    q, k, v = random_qkv(1, 2, 150, 150, 16, 16, dtype=torch.float32)
    qh, kh, vh = (t.to(dtype).requires_grad_() for t in (q, k, v))
    out = linear_attention(qh, kh, vh, causal=causal, chunk_size=32)
    assert out.dtype == dtype
    ref = quadratic_linear_attention(*(t.detach().float() for t in (qh, kh, vh)), causal=causal)
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    out.float().sum().backward()
    assert qh.grad.dtype == dtype and torch.isfinite(qh.grad).all()
    out_t, state = linear_attention_step(qh[:, :, :1], kh[:, :, :1], vh[:, :, :1])
    assert out_t.dtype == dtype and state.S.dtype == torch.float32


def test_causal_never_holds_a_state_per_position():
    """Chunked causal memory is O(n·C + n·E·Ev/C): no (n, E, Ev) cumulative sum and no n × n
    matrix is ever allocated."""
    n, e, c = 512, 16, 16
    q, k, v = random_qkv(1, 1, n, n, e, e, dtype=torch.float32, requires_grad=True)
    with AllocationProbe() as rec:
        out = linear_attention(q, k, v, causal=True, chunk_size=c)
        out.sum().backward()
    per_position_states = n * e * e * 4
    assert rec.largest * 4 <= per_position_states, rec.largest
    assert rec.largest * 4 <= n * n * 4, rec.largest


@pytest.mark.parametrize("causal", [False, True])
def test_threaded_path_equals_inline_path(monkeypatch, causal):
    """On a CPU with several threads, large calls split the heads over Python threads (the
    autograd graph is built in those threads); outputs, states and gradients are the same."""
    q, k, v = random_qkv(2, 3, 21, 21, 4, 5, requires_grad=True)
    kw = dict(causal=causal, chunk_size=4, return_state=True)
    out_inline, state_inline = linear_attention(q, k, v, **kw)
    grads_inline = input_grads(out_inline, (q, k, v))
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORK", 0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out, state = linear_attention(q, k, v, **kw)
        grads = input_grads(out, (q, k, v))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(out, out_inline, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state.S, state_inline.S, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state.z, state_inline.z, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, grads_inline, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_empty_sequences():
    q, k, v = random_qkv(1, 2, 0, 0, 3, 4)
    assert linear_attention(q, k, v, causal=True).shape == (1, 2, 0, 4)
    q, k, v = random_qkv(1, 2, 3, 0, 3, 4)
    assert torch.equal(linear_attention(q, k, v), torch.zeros(1, 2, 3, 4, dtype=q.dtype))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"chunk_size": 0}, ValueError, "chunk_size must be >= 1, got 0"),
        ({"chunk_size": 8.0}, TypeError, "chunk_size must be an int, got float"),
        ({"eps": -1e-3}, ValueError, "eps must be a finite float >= 0"),
        ({"eps": float("inf")}, ValueError, "eps must be a finite float >= 0"),
        ({"eps": "small"}, TypeError, "eps must be a float, got str"),
        ({"causal": None}, TypeError, "causal must be a bool, got NoneType"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, match):
    q, k, v = random_qkv(1, 1, 4, 4, 2, 2)
    with pytest.raises(error, match=match):
        linear_attention(q, k, v, **kwargs)


def test_bad_tensors_raise_clear_errors():
    q, k, v = random_qkv(1, 2, 4, 6, 3, 3)
    with pytest.raises(ValueError, match="causal linear attention needs as many queries as keys"):
        linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="query must have 4 dimensions"):
        linear_attention(q[0], k, v)
    with pytest.raises(ValueError, match="same last dim as query"):
        linear_attention(q, k[..., :2], v)
    with pytest.raises(TypeError, match="floating-point"):
        linear_attention(q, k, v.int())


def test_step_bad_inputs_raise_clear_errors():
    q, k, v = random_qkv(1, 2, 1, 1, 3, 4)
    with pytest.raises(ValueError, match="takes one position"):
        linear_attention_step(*random_qkv(1, 2, 2, 2, 3, 4))
    with pytest.raises(TypeError, match="state must be a LinearAttentionState or None, got tuple"):
        linear_attention_step(q, k, v, (torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3)))
    wrong = LinearAttentionState.zeros(1, 2, 3, 5)
    with pytest.raises(
        ValueError, match=r"state does not match the inputs: expected S \(1, 2, 3, 4\)"
    ):
        linear_attention_step(q, k, v, wrong)
    with pytest.raises(ValueError, match="state.z must have 3 dimensions"):
        linear_attention_step(
            q, k, v, LinearAttentionState(torch.zeros(1, 2, 3, 4), torch.zeros(3))
        )
    with pytest.raises(ValueError, match="value_dim must be >= 1, got 0"):
        LinearAttentionState.zeros(1, 2, 3, 0)
