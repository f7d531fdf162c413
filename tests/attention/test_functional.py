"""attention.functional against torch's own SDPA, the float64 formula, and the properties
attention must have (equivariance, causality, dropout in expectation)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.functional import safe_softmax, scaled_dot_product_attention
from tests.reference import naive_attention_float64

FAST = settings(max_examples=40, deadline=None)
f64 = torch.float64


def _randn(*shape, seed=0, dtype=f64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _tril(lq: int, lk: int, alignment: str = "top_left") -> torch.Tensor:
    """Independent causal reference: torch.tril with the diagonal shifted for bottom-right."""
    diagonal = lk - lq if alignment == "bottom_right" else 0
    return torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=diagonal)


@st.composite
def attention_case(draw, *, masks=True):
    """Shapes (with GQA), an optional bool or float mask of a broadcastable shape, causal."""
    b = draw(st.integers(1, 2))
    hk = draw(st.integers(1, 2))
    h = hk * draw(st.integers(1, 3))
    lq, lk = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    e, ev = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, e, generator=g, dtype=f64)
    k = torch.randn(b, hk, lk, e, generator=g, dtype=f64)
    v = torch.randn(b, hk, lk, ev, generator=g, dtype=f64)
    kind = draw(st.sampled_from(["none", "bool", "float"])) if masks else "none"
    mask = None
    if kind != "none":
        rank = draw(st.integers(2, 4))
        full = (b, h, lq, lk)[4 - rank :]
        # Each leading dim is either full or 1 (broadcast); the key dim is always full.
        shape = [d if draw(st.booleans()) else 1 for d in full[:-1]] + [lk]
        keep = torch.rand(shape, generator=g) < draw(st.sampled_from([0.3, 0.7, 1.0]))
        if kind == "bool":
            mask = keep
        else:
            mask = torch.randn(shape, generator=g, dtype=f64).masked_fill(~keep, float("-inf"))
    causal = draw(st.booleans())
    alignment = draw(st.sampled_from(["top_left", "bottom_right"]))
    scale = draw(st.sampled_from([None, 0.5, 2.0]))
    return q, k, v, mask, causal, alignment, scale


def _torch_reference(q, k, v, mask, causal, alignment, scale):
    """torch SDPA with the causal mask folded into attn_mask (torch refuses both at once)."""
    lq, lk = q.shape[-2], k.shape[-2]
    attn_mask = mask
    if causal:
        allowed = _tril(lq, lk, alignment)
        if mask is None:
            attn_mask = allowed
        elif mask.dtype == torch.bool:
            attn_mask = mask & allowed
        else:
            attn_mask = mask.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )


@FAST
@given(case=attention_case())
def test_matches_torch_sdpa(case):
    q, k, v, mask, causal, alignment, scale = case
    out = scaled_dot_product_attention(
        q, k, v, mask, causal=causal, causal_alignment=alignment, scale=scale, enable_gqa=True
    )
    ref = _torch_reference(q, k, v, mask, causal, alignment, scale)
    assert out.shape == ref.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


@FAST
@given(case=attention_case())
def test_gradients_match_torch_sdpa_and_stay_finite(case):
    q, k, v, mask, causal, alignment, scale = case
    ours_in = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    out = scaled_dot_product_attention(
        *ours_in, mask, causal=causal, causal_alignment=alignment, scale=scale, enable_gqa=True
    )
    ref = _torch_reference(*ref_in, mask, causal, alignment, scale)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=f64)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    for ours, theirs in zip(ours_in, ref_in, strict=True):
        assert torch.isfinite(ours.grad).all()
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-9, rtol=1e-9)


@FAST
@given(case=attention_case())
def test_matches_naive_float64_with_bool_masks(case):
    q, k, v, mask, causal, alignment, _ = case
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    allowed = mask if mask is not None and mask.dtype == torch.bool else None
    if causal:
        tri = _tril(q.shape[-2], k.shape[-2], alignment)
        allowed = tri if allowed is None else allowed & tri
    out = scaled_dot_product_attention(q, k, v, allowed, causal=False, causal_alignment=alignment)
    torch.testing.assert_close(out, naive_attention_float64(q, k, v, allowed))
    # causal=True must be the same thing as passing the triangle explicitly.
    if causal:
        plain = None if mask is None or mask.dtype != torch.bool else mask
        via_flag = scaled_dot_product_attention(
            q, k, v, plain, causal=True, causal_alignment=alignment
        )
        torch.testing.assert_close(via_flag, out)


@pytest.mark.parametrize(("lq", "lk"), [(3, 7), (7, 3), (5, 5), (1, 6)])
def test_bottom_right_causal_equals_an_explicit_loop_mask(lq, lk):
    q, k, v = _randn(1, 2, lq, 4, seed=1), _randn(1, 2, lk, 4, seed=2), _randn(1, 2, lk, 3)
    explicit = torch.zeros(lq, lk, dtype=torch.bool)
    for i in range(lq):
        for j in range(lk):
            explicit[i, j] = j <= i + (lk - lq)  # the last query sees every key
    out = scaled_dot_product_attention(q, k, v, causal=True, causal_alignment="bottom_right")
    torch.testing.assert_close(out, naive_attention_float64(q, k, v, explicit))
    top = scaled_dot_product_attention(q, k, v, causal=True)  # torch's is_causal convention
    torch.testing.assert_close(top, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_are_zero_with_finite_gradients(kind):
    q, k, v = (_randn(2, 2, 4, 3, seed=s).requires_grad_() for s in range(3))
    keep = torch.ones(4, 4, dtype=torch.bool)
    keep[1] = False  # query 1 may attend nothing
    mask = keep if kind == "bool" else torch.zeros(4, 4, dtype=f64).masked_fill(~keep, -math.inf)
    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert torch.equal(weights[:, :, 1], torch.zeros_like(weights[:, :, 1]))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[:, :, 1], torch.zeros_like(q.grad[:, :, 1]))
    # torch's SDPA (>= 2.5) gives zeros for such rows too: the two agree everywhere.
    ref = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=mask)
    torch.testing.assert_close(out.detach(), ref)


def test_safe_softmax_matches_torch_softmax_on_rows_with_a_finite_entry():
    x = _randn(3, 5).masked_fill(torch.rand(3, 5, generator=torch.Generator()) < 0.5, -math.inf)
    x[:, 0] = 0.0  # every row keeps one finite entry
    torch.testing.assert_close(safe_softmax(x), torch.softmax(x, dim=-1))
    assert torch.equal(safe_softmax(torch.full((2, 3), -math.inf)), torch.zeros(2, 3))
    big = torch.tensor([[1000.0, 1000.0, -1000.0]], dtype=f64)  # no overflow
    torch.testing.assert_close(safe_softmax(big), torch.softmax(big, dim=-1))


@pytest.mark.parametrize("dim", [0, -1])
def test_safe_softmax_of_a_0_dim_tensor_is_torch_softmax(dim):
    x = torch.tensor(3.5, dtype=f64)
    assert safe_softmax(x, dim=dim).shape == torch.softmax(x, dim=dim).shape == ()
    assert torch.equal(safe_softmax(x, dim=dim), torch.softmax(x, dim=dim))
    # a lone -inf is a fully masked row: zero, where torch gives NaN
    assert torch.equal(safe_softmax(torch.tensor(-math.inf), dim=dim), torch.tensor(0.0))


def test_scores_with_inf_inside_attention_propagate_instead_of_raising():
    # safe_softmax refuses a +inf score; attention applies the same softmax unchecked, so an
    # inf reaching the scores from an input gives NaN in its own row only (the NaN policy).
    q = torch.zeros(1, 1, 2, 2, dtype=f64)
    q[0, 0, 0, 0] = math.inf
    k = torch.ones(1, 1, 3, 2, dtype=f64)
    out = scaled_dot_product_attention(q, k, k)
    assert torch.isnan(out[0, 0, 0]).all()
    torch.testing.assert_close(out[0, 0, 1], torch.ones(2, dtype=f64))


@FAST
@given(case=attention_case())
def test_need_weights_rows_sum_to_one_or_zero(case):
    q, k, v, mask, causal, alignment, scale = case
    out, w = scaled_dot_product_attention(
        q,
        k,
        v,
        mask,
        causal=causal,
        causal_alignment=alignment,
        scale=scale,
        enable_gqa=True,
        need_weights=True,
    )
    assert w.shape == (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    sums = w.sum(-1)
    assert torch.all(torch.isclose(sums, torch.ones_like(sums)) | (sums == 0))
    assert torch.all(w >= 0)
    # The weights are the ones used: weights @ V (heads shared for GQA) is the output.
    v_full = v.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    torch.testing.assert_close(w @ v_full, out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_returns_input_dtype_and_matches_fp32(dtype):
    q, k, v = (_randn(2, 2, 8, 16, seed=s, dtype=torch.float32).to(dtype) for s in range(3))
    mask = torch.rand(8, 8, generator=torch.Generator().manual_seed(0)) < 0.7
    out, w = scaled_dot_product_attention(q, k, v, mask, causal=True, need_weights=True)
    assert out.dtype == dtype and w.dtype == dtype
    # Computed in float32 from the same (rounded) inputs, then cast once.
    ref = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask, causal=True)
    assert torch.equal(out, ref.to(dtype))
    torch_half = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & _tril(8, 8))
    torch.testing.assert_close(out.float(), torch_half.float(), atol=2e-2, rtol=0)


def test_float64_stays_float64_and_default_scale_is_inverse_sqrt_dim():
    q, k, v = _randn(1, 1, 3, 9), _randn(1, 1, 4, 9, seed=1), _randn(1, 1, 4, 2)
    out = scaled_dot_product_attention(q, k, v)
    assert out.dtype == f64
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, scale=1 / 3))
    manual = torch.softmax(q @ k.transpose(-2, -1) / 3.0, dim=-1) @ v
    torch.testing.assert_close(out, manual)


# ------------------------------------------------------------------------------------------
# dropout
# ------------------------------------------------------------------------------------------


def test_dropout_is_off_in_eval_and_with_p_zero():
    q, k, v = (_randn(1, 2, 5, 4, seed=s) for s in range(3))
    plain = scaled_dot_product_attention(q, k, v)
    assert torch.equal(scaled_dot_product_attention(q, k, v, dropout_p=0.5), plain)
    assert torch.equal(scaled_dot_product_attention(q, k, v, dropout_p=0.0, training=True), plain)


def test_dropout_in_training_is_seeded_and_drops_weights():
    q, k, v = (_randn(1, 2, 5, 4, seed=s) for s in range(3))

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return scaled_dot_product_attention(
            q, k, v, dropout_p=0.5, training=True, generator=g, need_weights=True
        )

    (a, wa), (b, _), (c, _) = run(0), run(0), run(1)
    assert torch.equal(a, b)  # same seed, same dropout
    assert not torch.allclose(a, c)  # different seed, different dropout
    assert not torch.allclose(a, scaled_dot_product_attention(q, k, v))
    # The returned weights are the ones before dropout.
    torch.testing.assert_close(wa, scaled_dot_product_attention(q, k, v, need_weights=True)[1])


def test_dropout_keeps_the_expectation():
    """E[dropout(W) V] = W V: average many independent draws (a batch of copies)."""
    n, p = 4000, 0.3
    q, k, v = (_randn(1, 1, 3, 4, seed=s).expand(n, 1, 3, 4) for s in range(3))
    g = torch.Generator().manual_seed(0)
    out = scaled_dot_product_attention(q, k, v, dropout_p=p, training=True, generator=g)
    expected = scaled_dot_product_attention(q[:1], k[:1], v[:1])[0]
    spread = out.std(dim=0)  # per-element std of one draw
    assert spread.max() > 0.05  # the draws do differ
    # The mean of n draws is within 5 standard errors of the expectation.
    assert torch.all((out.mean(dim=0) - expected).abs() <= 5 * spread / math.sqrt(n) + 1e-12)


# ------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------


@FAST
@given(case=attention_case(masks=False), seed=st.integers(0, 1000))
def test_permutation_equivariance_without_positions(case, seed):
    """Permuting queries permutes the outputs; permuting keys with their values changes
    nothing: attention alone has no notion of order."""
    q, k, v, _, _, _, scale = case
    g = torch.Generator().manual_seed(seed)
    pq, pk = torch.randperm(q.shape[2], generator=g), torch.randperm(k.shape[2], generator=g)
    out = scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
    out_q = scaled_dot_product_attention(q[:, :, pq], k, v, scale=scale, enable_gqa=True)
    out_k = scaled_dot_product_attention(q, k[:, :, pk], v[:, :, pk], scale=scale, enable_gqa=True)
    torch.testing.assert_close(out_q, out[:, :, pq])
    torch.testing.assert_close(out_k, out)


@settings(max_examples=20, deadline=None)
@given(seq=st.integers(2, 7), alignment=st.sampled_from(["top_left", "bottom_right"]))
def test_causal_output_has_no_gradient_from_the_future(seq, alignment):
    q, k, v = (_randn(1, 2, seq, 3, seed=s).requires_grad_() for s in range(3))
    out = scaled_dot_product_attention(q, k, v, causal=True, causal_alignment=alignment)
    for i in range(seq):
        gq, gk, gv = torch.autograd.grad(out[:, :, i].sum(), (q, k, v), retain_graph=True)
        assert torch.all(gk[:, :, i + 1 :] == 0) and torch.all(gv[:, :, i + 1 :] == 0)
        assert torch.all(gq[:, :, torch.arange(seq) != i] == 0)  # other queries play no part
        assert torch.any(gv[:, :, : i + 1] != 0)  # ...while the past does contribute


# ------------------------------------------------------------------------------------------
# empty sequences
# ------------------------------------------------------------------------------------------


def test_zero_keys_give_zeros_like_torch():
    q, k, v = _randn(1, 1, 3, 4), _randn(1, 1, 0, 4), _randn(1, 1, 0, 2)
    out = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_zero_queries_causal_give_an_empty_output_like_torch():
    q, k, v = _randn(1, 1, 0, 4), _randn(1, 1, 3, 4), _randn(1, 1, 3, 2)
    out = scaled_dot_product_attention(q, k, v, causal=True)
    assert out.shape == F.scaled_dot_product_attention(q, k, v, is_causal=True).shape


def test_zero_queries_without_causal_give_an_empty_output():
    q, k, v = _randn(1, 1, 0, 4), _randn(1, 1, 3, 4), _randn(1, 1, 3, 2)
    assert scaled_dot_product_attention(q, k, v).shape == (1, 1, 0, 2)
