"""flash_attention and chunked_attention equal dense attention, forward and backward, in O(n)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention.efficient._threads as threads_module
from attention.efficient.chunked import chunked_attention
from attention.efficient.flash import flash_attention
from attention.functional import scaled_dot_product_attention
from attention.masks import causal_mask
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import input_grads, random_qkv
from tests.reference import naive_attention_float64

ALIGNMENTS = ("top_left", "bottom_right")


def _dense_lse(q, k, causal, alignment):
    """log-sum-exp of each row of the scaled, masked dense scores, in float64."""
    q, k = q.double(), k.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
    if causal:
        allowed = causal_mask(q.shape[-2], k.shape[-2], causal_alignment=alignment)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.logsumexp(scores, dim=-1)  # (B, H, Lq); -inf for an empty row


shapes = st.fixed_dictionaries(
    {
        "b": st.integers(1, 2),
        "h": st.integers(1, 2),
        "lq": st.integers(1, 23),
        "lk": st.integers(1, 23),
        "e": st.integers(1, 5),
        "ev": st.integers(1, 5),
        "block_q": st.sampled_from([1, 2, 3, 5, 8, 64]),
        "block_k": st.sampled_from([1, 2, 4, 7, 16, 64]),
        "causal": st.booleans(),
        "alignment": st.sampled_from(ALIGNMENTS),
    }
)


@settings(max_examples=50, deadline=None)
@given(s=shapes)
def test_forward_and_lse_match_dense(s):
    q, k, v = random_qkv(s["b"], s["h"], s["lq"], s["lk"], s["e"], s["ev"])
    kw = dict(causal=s["causal"], causal_alignment=s["alignment"])
    out, lse = flash_attention(
        q, k, v, block_q=s["block_q"], block_k=s["block_k"], return_lse=True, **kw
    )
    ref = scaled_dot_product_attention(q, k, v, **kw)
    allowed = None
    if s["causal"]:
        allowed = causal_mask(s["lq"], s["lk"], causal_alignment=s["alignment"])
    assert out.shape == ref.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out, naive_attention_float64(q, k, v, allowed))
    assert lse.shape == (s["b"], s["h"], s["lq"])
    torch.testing.assert_close(lse, _dense_lse(q, k, s["causal"], s["alignment"]))


@settings(max_examples=40, deadline=None)
@given(s=shapes)
def test_gradients_match_dense(s):
    q, k, v = random_qkv(s["b"], s["h"], s["lq"], s["lk"], s["e"], s["ev"], requires_grad=True)
    kw = dict(causal=s["causal"], causal_alignment=s["alignment"])
    out = flash_attention(q, k, v, block_q=s["block_q"], block_k=s["block_k"], **kw)
    ref = scaled_dot_product_attention(q, k, v, **kw)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("causal,alignment", [(False, "top_left"), (True, "top_left"),
                                              (True, "bottom_right")])  # fmt: skip
def test_gradcheck_output_and_lse(causal, alignment):
    """torch.autograd.gradcheck of both outputs: the hand-written backward, including the
    gradient flowing into lse, against finite differences (float64, tiny shapes)."""
    q, k, v = random_qkv(1, 2, 5, 6, 3, 4, requires_grad=True, seed=3)

    def f(q, k, v):
        return flash_attention(
            q, k, v, causal=causal, causal_alignment=alignment, block_q=2, block_k=4,
            return_lse=True, scale=0.7,
        )  # fmt: skip

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_uses_the_custom_backward_and_saves_only_linear_tensors():
    """No autograd graph through the tile loop: one Function node whose saved tensors are q,
    k, v, out and lse (O(n)), and nothing of size Lq × Lk is ever allocated."""
    n, e = 256, 8
    q, k, v = random_qkv(1, 2, n, n, e, e, dtype=torch.float32, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), AllocationProbe() as rec:
        out = flash_attention(q, k, v, block_q=32, block_k=32)
        out.backward(torch.ones_like(out))
    node = out.grad_fn.next_functions[0][0]  # out = Function output viewed as (B, H, L, Ev)
    assert type(node).__name__ == "_FlashAttentionBackward"
    assert len(saved) == 5  # q, k, v, out, lse
    assert sum(saved) == 4 * 2 * n * e + 2 * n
    dense_scores_bytes = 2 * n * n * 4
    assert rec.largest * 8 <= dense_scores_bytes, rec.largest


def test_causal_skips_future_tiles_and_masks_only_the_diagonal():
    """With Lq = Lk = 4 blocks: 10 of the 16 tiles are computed (one matmul pair each) and
    only the 4 diagonal tiles are masked, in the forward; the backward likewise."""
    q, k, v = random_qkv(1, 1, 32, 32, 4, 4, dtype=torch.float32, requires_grad=True)
    with AllocationProbe() as rec:
        out = flash_attention(q, k, v, causal=True, block_q=8, block_k=8)
    matmuls = sum(c in ("bmm", "baddbmm", "baddbmm_") for c in rec.calls)
    assert matmuls == 2 * 10
    assert rec.calls.count("masked_fill_") == 4
    with AllocationProbe() as rec:
        out.backward(torch.ones_like(out))
    # per tile: recompute S, dV, dP, dQ, dK
    assert sum(c in ("bmm", "baddbmm", "baddbmm_") for c in rec.calls) == 5 * 10
    assert rec.calls.count("masked_fill_") == 4


@pytest.mark.parametrize("block_q,block_k", [(1, 1), (3, 5), (100, 100)])
def test_fully_masked_rows_give_zeros_minus_inf_lse_and_finite_grads(block_q, block_k):
    """Bottom-right causal with Lq > Lk: the first Lq - Lk queries see no key."""
    q, k, v = random_qkv(2, 2, 9, 4, 3, 5, requires_grad=True)
    out, lse = flash_attention(
        q, k, v, causal=True, causal_alignment="bottom_right", block_q=block_q,
        block_k=block_k, return_lse=True,
    )  # fmt: skip
    assert torch.equal(out[:, :, :5], torch.zeros_like(out[:, :, :5]))
    assert torch.isneginf(lse[:, :, :5]).all() and torch.isfinite(lse[:, :, 5:]).all()
    ref = scaled_dot_product_attention(q, k, v, causal=True, causal_alignment="bottom_right")
    torch.testing.assert_close(out, ref)
    grads = input_grads(out, (q, k, v))
    for got, want in zip(grads, input_grads(ref, (q, k, v)), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)
    assert torch.equal(grads[0][:, :, :5], torch.zeros_like(grads[0][:, :, :5]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_close_to_float32(dtype, causal):
    q, k, v = random_qkv(1, 2, 70, 70, 16, 16, dtype=torch.float32, requires_grad=True)
    qh, kh, vh = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(qh, kh, vh, causal=causal, block_q=16, block_k=32, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    ref = scaled_dot_product_attention(*(t.detach().to(dtype).float() for t in (q, k, v)),
                                       causal=causal)  # fmt: skip
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
    grads = input_grads(out, (qh, kh, vh))
    ref_grads = input_grads(scaled_dot_product_attention(q, k, v, causal=causal), (q, k, v))
    for got, want in zip(grads, ref_grads, strict=True):
        assert got.dtype == dtype and torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), want, rtol=5 * tol, atol=5 * tol)


def test_float32_close_to_float64_reference():
    q, k, v = random_qkv(2, 3, 300, 260, 32, 24, dtype=torch.float32)
    out = flash_attention(q, k, v, causal=True, causal_alignment="bottom_right")
    allowed = causal_mask(300, 260, causal_alignment="bottom_right")
    ref = naive_attention_float64(q, k, v, allowed)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_large_score_jumps_rescale_the_accumulator():
    """Scores that grow by far more than the lazy-rescaling threshold from one key tile to the
    next (and would overflow float32 without rescaling) are still exact."""
    q, k, v = random_qkv(1, 2, 8, 64, 4, 4, dtype=torch.float32)
    k = k * torch.linspace(0.1, 60.0, 64)[:, None]  # later keys: much larger scores
    out, lse = flash_attention(q, k, v, block_k=8, return_lse=True)
    ref = naive_attention_float64(q, k, v)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), _dense_lse(q, k, False, "top_left"))


def test_grouped_query_attention_matches_dense():
    q, k, v = random_qkv(2, 6, 11, 13, 4, 3, hk=2, requires_grad=True)
    out = flash_attention(q, k, v, causal=True, enable_gqa=True, block_q=4, block_k=5)
    ref = scaled_dot_product_attention(q, k, v, causal=True, enable_gqa=True)
    torch.testing.assert_close(out, ref)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


def test_custom_scale_and_non_contiguous_inputs():
    q, k, v = random_qkv(2, 7, 3, 3, 5, 4)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H=3, L=7, E) views, not contiguous
    out = flash_attention(q, k, v, scale=0.3, block_q=4, block_k=3)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, scale=0.3))


def test_threaded_path_equals_inline_path(monkeypatch):
    """On a CPU with several threads, large calls split the heads over Python threads; the
    result and gradients are the same, and the thread setting is restored."""
    q, k, v = random_qkv(1, 3, 40, 33, 4, 5, requires_grad=True)
    kw = dict(causal=True, block_q=8, block_k=16)
    out_inline = flash_attention(q, k, v, **kw)
    grads_inline = input_grads(out_inline, (q, k, v))
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORK", 0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = flash_attention(q, k, v, **kw)
        grads = input_grads(out, (q, k, v))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(out, out_inline, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, grads_inline, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_dispatch_modes_see_every_op(monkeypatch):
    """Dispatch modes are per thread: under one (memory or FLOP counting) the loop stays in
    the calling thread, so that the mode sees all of it."""
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORK", 0)
    q, k, v = random_qkv(1, 2, 32, 32, 4, 4, dtype=torch.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with AllocationProbe() as rec:
            flash_attention(q, k, v, block_q=8, block_k=8)
    finally:
        torch.set_num_threads(before)
    assert sum(c in ("bmm", "baddbmm", "baddbmm_") for c in rec.calls) == 2 * 16


def test_empty_sequences():
    q, k, v = random_qkv(1, 2, 0, 5, 3, 4)
    assert flash_attention(q, k, v).shape == (1, 2, 0, 4)
    q, k, v = random_qkv(1, 2, 3, 0, 3, 4)
    out, lse = flash_attention(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros(1, 2, 3, 4, dtype=out.dtype))
    assert torch.isneginf(lse).all()


# --- chunked_attention (Rabe & Staats) -------------------------------------------------------

chunk_shapes = st.fixed_dictionaries(
    {
        "lq": st.integers(1, 20),
        "lk": st.integers(1, 20),
        "query_chunk": st.sampled_from([1, 3, 8, 64]),
        "key_chunk": st.sampled_from([1, 4, 7, 64]),
        "causal": st.booleans(),
        "alignment": st.sampled_from(ALIGNMENTS),
    }
)


@settings(max_examples=40, deadline=None)
@given(s=chunk_shapes)
def test_chunked_forward_and_gradients_match_dense(s):
    q, k, v = random_qkv(2, 2, s["lq"], s["lk"], 3, 4, requires_grad=True)
    kw = dict(causal=s["causal"], causal_alignment=s["alignment"])
    out = chunked_attention(q, k, v, query_chunk=s["query_chunk"], key_chunk=s["key_chunk"], **kw)
    ref = scaled_dot_product_attention(q, k, v, **kw)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_chunked_checkpoints_each_query_chunk():
    """Autograd keeps no score-sized tensor: the checkpointed chunks save only their inputs."""
    n = 128
    q, k, v = random_qkv(1, 2, n, n, 8, 8, dtype=torch.float32, requires_grad=True)
    largest = []

    def pack(t):
        largest.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = chunked_attention(q, k, v, query_chunk=16, key_chunk=32)
    assert max(largest) <= 2 * n * 8  # q, k, v sized; a chunk of scores would be 2·16·128
    out.backward(torch.ones_like(out))
    assert torch.isfinite(q.grad).all()


def test_chunked_threaded_path_equals_inline_path(monkeypatch):
    """Checkpointed chunks built in worker threads give the same outputs and gradients."""
    q, k, v = random_qkv(2, 2, 19, 23, 3, 4, requires_grad=True)
    kw = dict(query_chunk=5, key_chunk=6, causal=True, causal_alignment="bottom_right")
    out_inline = chunked_attention(q, k, v, **kw)
    grads_inline = input_grads(out_inline, (q, k, v))
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORK", 0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = chunked_attention(q, k, v, **kw)
        grads = input_grads(out, (q, k, v))
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(out, out_inline, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, grads_inline, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_chunked_empty_sequences():
    q, k, v = random_qkv(1, 2, 0, 5, 3, 4)
    assert chunked_attention(q, k, v).shape == (1, 2, 0, 4)
    q, k, v = random_qkv(1, 2, 3, 0, 3, 4)
    assert torch.equal(chunked_attention(q, k, v), torch.zeros(1, 2, 3, 4, dtype=q.dtype))


def test_chunked_half_precision_and_no_grad():
    q, k, v = random_qkv(1, 2, 30, 30, 8, 8, dtype=torch.float32)
    with torch.no_grad():
        out = chunked_attention(*(t.half() for t in (q, k, v)), query_chunk=7, key_chunk=9)
    assert out.dtype == torch.float16
    ref = scaled_dot_product_attention(*(t.half().float() for t in (q, k, v)))
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


# --- bad arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"block_q": 0}, ValueError, "block_q must be >= 1, got 0"),
        ({"block_k": -3}, ValueError, "block_k must be >= 1"),
        ({"block_q": 2.0}, TypeError, "block_q must be an int, got float"),
        ({"block_k": "64"}, TypeError, "block_k must be an int, got str"),
        ({"block_q": True}, TypeError, "block_q must be an int, got bool"),
        ({"scale": "big"}, TypeError, "scale must be a float or None, got str"),
        ({"scale": float("nan")}, ValueError, "scale must be finite"),
        ({"causal": 1}, TypeError, "causal must be a bool, got int"),
        ({"causal_alignment": "center"}, ValueError, "causal_alignment must be one of"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, match):
    q, k, v = random_qkv(1, 1, 4, 4, 2, 2)
    with pytest.raises(error, match=match):
        flash_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"query_chunk": 0}, ValueError, "query_chunk must be >= 1, got 0"),
        ({"key_chunk": 1.5}, TypeError, "key_chunk must be an int, got float"),
        ({"causal": "yes"}, TypeError, "causal must be a bool, got str"),
        ({"scale": [1.0]}, TypeError, "scale must be a float or None, got list"),
    ],
)
def test_chunked_bad_arguments_raise_clear_errors(kwargs, error, match):
    q, k, v = random_qkv(1, 1, 4, 4, 2, 2)
    with pytest.raises(error, match=match):
        chunked_attention(q, k, v, **kwargs)


@pytest.mark.parametrize("fn", [flash_attention, chunked_attention])
def test_bad_tensors_raise_clear_errors(fn):
    q, k, v = random_qkv(1, 2, 4, 5, 3, 3)
    with pytest.raises(ValueError, match=r"query must have 4 dimensions"):
        fn(q[0], k, v)
    with pytest.raises(ValueError, match=r"key must have 4 dimensions"):
        fn(q, k[0, 0], v)
    with pytest.raises(TypeError, match="value must be a torch.Tensor"):
        fn(q, k, v.tolist())
    with pytest.raises(TypeError, match="floating-point"):
        fn(q, k, v.long())
    with pytest.raises(ValueError, match="same last dim as query"):
        fn(q, k[..., :2], v)
    with pytest.raises(ValueError, match="as many positions as key"):
        fn(q, k, v[:, :, :4])
    with pytest.raises(ValueError, match="enable_gqa"):
        fn(q, k[:, :1], v[:, :1])
