"""attention.positional against independent references: explicit loops with ``math``, complex
multiplication in float64, the slopes listed in the ALiBi paper, and the algebraic properties
each scheme is built for."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.functional import scaled_dot_product_attention
from attention.masks import causal_mask
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)

FAST = settings(max_examples=30, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# sinusoidal
# ------------------------------------------------------------------------------------------


def test_sinusoidal_matches_the_formula_loop():
    max_len, d, base = 12, 10, 10000.0
    pe = sinusoidal_encoding(max_len, d, base=base)
    assert pe.shape == (max_len, d) and pe.dtype == torch.float32
    for pos in range(max_len):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_dtype_and_base():
    pe64 = sinusoidal_encoding(5, 4, base=100.0, dtype=torch.float64)
    assert pe64.dtype == torch.float64
    assert pe64[3, 2].item() == pytest.approx(math.sin(3 / 100.0 ** (2 / 4)), abs=1e-12)


@FAST
@given(
    d_half=st.integers(1, 8),
    shift=st.integers(0, 40),
    base=st.sampled_from([10.0, 100.0, 10000.0]),
)
def test_sinusoidal_shift_is_a_fixed_block_rotation(d_half, shift, base):
    """PE(p + k) = M_k PE(p) with the same M_k for every p: M_k is block-diagonal, one 2x2
    rotation by k * w_i per channel pair (sin, cos)."""
    d, max_len = 2 * d_half, 64
    pe = sinusoidal_encoding(max_len + shift, d, base=base, dtype=torch.float64)
    m = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d_half):
        a = shift / base ** (2 * i / d)
        # (sin, cos)(p + k) = [[cos a, sin a], [-sin a, cos a]] (sin, cos)(p)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]], dtype=torch.float64
        )
    torch.testing.assert_close(pe[shift:], pe[:max_len] @ m.T, atol=1e-9, rtol=0)


def test_sinusoidal_module_adds_the_right_rows_with_offset():
    mod = SinusoidalPositionalEncoding(d_model=8, max_len=20)
    x = torch.randn(2, 5, 8, generator=_gen())
    pe = sinusoidal_encoding(20, 8)
    torch.testing.assert_close(mod(x), x + pe[:5])
    torch.testing.assert_close(mod(x, offset=7), x + pe[7:12])
    assert "pe" not in mod.state_dict()  # derived from the arguments, not a parameter


def test_sinusoidal_module_keeps_half_dtype():
    mod = SinusoidalPositionalEncoding(d_model=8, max_len=20)
    x = torch.randn(1, 3, 8, generator=_gen()).to(torch.bfloat16)
    out = mod(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(
        out.float(), x.float() + sinusoidal_encoding(3, 8), atol=2e-2, rtol=0
    )


def test_sinusoidal_module_refuses_positions_past_max_len():
    mod = SinusoidalPositionalEncoding(d_model=4, max_len=6)
    mod(torch.zeros(1, 6, 4))  # exactly fits
    with pytest.raises(ValueError, match=r"offset=2 \+ seq length 5.*max_len=6"):
        mod(torch.zeros(1, 5, 4), offset=2)


# ------------------------------------------------------------------------------------------
# learned
# ------------------------------------------------------------------------------------------


def test_learned_embedding_equals_nn_embedding_lookup():
    torch.manual_seed(0)
    mod = LearnedPositionalEmbedding(max_len=10, d_model=6)
    ref = torch.nn.Embedding(10, 6)
    ref.weight.data.copy_(mod.weight.data)
    x = torch.randn(3, 4, 6, generator=_gen())
    torch.testing.assert_close(mod(x, offset=5), x + ref(torch.arange(5, 9)))
    assert set(dict(mod.named_parameters())) == {"weight"}


def test_learned_embedding_gradient_reaches_only_used_rows():
    mod = LearnedPositionalEmbedding(max_len=10, d_model=3)
    mod(torch.zeros(2, 3, 3), offset=4).sum().backward()
    used = torch.zeros(10, dtype=torch.bool)
    used[4:7] = True
    assert torch.all(mod.weight.grad[used] == 2.0)  # batch of 2, d(sum)/d(row) = 2
    assert torch.all(mod.weight.grad[~used] == 0.0)


def test_learned_embedding_error_names_max_len_and_the_position():
    mod = LearnedPositionalEmbedding(max_len=8, d_model=4)
    with pytest.raises(ValueError, match=r"positions up to 9 .*offset=3.*max_len=8"):
        mod(torch.zeros(1, 7, 4), offset=3)
    with pytest.raises(ValueError, match=r"positions up to 8 .*max_len=8"):
        mod(torch.zeros(1, 9, 4))


# ------------------------------------------------------------------------------------------
# RoPE
# ------------------------------------------------------------------------------------------


def _rope_complex_reference(x: torch.Tensor, positions: torch.Tensor, base: float, interleaved):
    """RoPE as complex multiplication, in float64: pair (a, b) -> (a + ib) * e^{i m theta}."""
    x = x.double()
    dh = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / dh) for i in range(dh // 2)], dtype=torch.float64)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : dh // 2], x[..., dh // 2 :]
    angles = positions.double()[..., None] * theta  # (L, Dh/2)
    z = torch.complex(a, b) * torch.polar(torch.ones_like(angles), angles)
    if interleaved:
        return torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    return torch.cat((z.real, z.imag), dim=-1)


@FAST
@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    seq=st.integers(1, 9),
    half=st.integers(1, 6),
    offset=st.integers(0, 50),
    interleaved=st.booleans(),
    base=st.sampled_from([10.0, 10000.0, 500000.0]),
)
def test_rope_matches_complex_rotation(b, h, seq, half, offset, interleaved, base):
    x = torch.randn(b, h, seq, 2 * half, generator=_gen(seq + half), dtype=torch.float64)
    out = apply_rope(x, offset=offset, base=base, interleaved=interleaved)
    ref = _rope_complex_reference(x, torch.arange(offset, offset + seq), base, interleaved)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


def test_rope_angles_shape_dtype_and_values():
    pos = torch.tensor([0, 3, 7])
    ang = rope_angles(pos, head_dim=6, base=100.0)
    assert ang.shape == (3, 3) and ang.dtype == torch.float32
    for r, p in enumerate(pos.tolist()):
        for i in range(3):
            assert ang[r, i].item() == pytest.approx(p * 100.0 ** (-2 * i / 6), rel=1e-6)
    assert rope_angles(pos, head_dim=6, dtype=torch.float64).dtype == torch.float64
    assert rope_angles(pos.view(1, 3).expand(2, 3), head_dim=6).shape == (2, 3, 3)


@FAST
@given(seq=st.integers(1, 12), half=st.integers(1, 8), interleaved=st.booleans())
def test_rope_keeps_norms(seq, half, interleaved):
    x = torch.randn(2, 2, seq, 2 * half, generator=_gen(seq), dtype=torch.float64)
    out = apply_rope(x, offset=3, interleaved=interleaved)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


@FAST
@given(
    m=st.integers(0, 300),
    n=st.integers(0, 300),
    shift=st.integers(0, 300),
    half=st.integers(1, 8),
    interleaved=st.booleans(),
)
def test_rope_scores_depend_only_on_relative_position(m, n, shift, half, interleaved):
    """<R_m q, R_n k> = <R_{m+s} q, R_{n+s} k> for any shift s."""
    g = _gen(half)
    q = torch.randn(1, 1, 1, 2 * half, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 2 * half, generator=g, dtype=torch.float64)

    def score(pm, pn):
        qm = apply_rope(q, positions=torch.tensor([pm]), interleaved=interleaved)
        kn = apply_rope(k, positions=torch.tensor([pn]), interleaved=interleaved)
        return (qm * kn).sum()

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=1e-9, rtol=1e-9)
    # ... and the score at distance zero is the unrotated dot product.
    torch.testing.assert_close(score(m, m), (q * k).sum(), atol=1e-9, rtol=1e-9)


@FAST
@given(seq=st.integers(1, 8), half=st.integers(1, 8), offset=st.integers(0, 20))
def test_rope_interleaved_equals_half_split_under_channel_permutation(seq, half, offset):
    """Interleaved pair i = channels (2i, 2i+1); half-split pair i = channels (i, i + Dh/2).
    perm = [0, 2, 4, ..., 1, 3, 5, ...] maps one layout to the other."""
    dh = 2 * half
    perm = torch.cat((torch.arange(0, dh, 2), torch.arange(1, dh, 2)))
    x = torch.randn(1, 2, seq, dh, generator=_gen(seq), dtype=torch.float64)
    inter = apply_rope(x, offset=offset, interleaved=True)
    split = apply_rope(x[..., perm], offset=offset, interleaved=False)
    torch.testing.assert_close(split, inter[..., perm])


def test_rope_offset_equals_slicing_a_longer_sequence():
    """Decoding with a cache: rotating token t alone at offset t equals rotating it in place."""
    x = torch.randn(2, 3, 10, 8, generator=_gen())
    full = apply_rope(x)
    for t in (0, 4, 9):
        torch.testing.assert_close(apply_rope(x[:, :, t : t + 1], offset=t), full[:, :, t : t + 1])
    torch.testing.assert_close(apply_rope(x[:, :, 6:], offset=6), full[:, :, 6:])


def test_rope_per_sequence_positions():
    x = torch.randn(2, 2, 4, 6, generator=_gen())
    positions = torch.tensor([[0, 1, 2, 3], [5, 9, 2, 0]])
    out = apply_rope(x, positions=positions)
    for bi in range(2):
        ref = apply_rope(x[bi : bi + 1], positions=positions[bi])
        torch.testing.assert_close(out[bi : bi + 1], ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_half_precision_returns_input_dtype_and_matches_fp32(dtype):
    x = torch.randn(1, 2, 16, 8, generator=_gen()).to(dtype)
    out = apply_rope(x, offset=1000)  # large positions: fp16 angles would be badly off
    assert out.dtype == dtype
    ref = apply_rope(x.float(), offset=1000)
    # Only the final cast rounds: the error is one rounding of the output.
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=0)
    fp64 = _rope_complex_reference(x, torch.arange(1000, 1016), 10000.0, False)
    torch.testing.assert_close(ref.double(), fp64, atol=1e-4, rtol=0)


def test_rope_gradient_is_the_inverse_rotation():
    """The Jacobian of a rotation is the rotation: grad_x <R x, g> = R^T g."""
    x = torch.randn(1, 1, 5, 4, dtype=torch.float64, generator=_gen(), requires_grad=True)
    g = torch.randn(1, 1, 5, 4, dtype=torch.float64, generator=_gen(1))
    (apply_rope(x, offset=2) * g).sum().backward()
    # R^T = rotation by the negative angle, i.e. positions negated.
    expected = apply_rope(g, positions=-torch.arange(2, 7))
    torch.testing.assert_close(x.grad, expected)


def test_rotary_module_is_apply_rope():
    rot = RotaryEmbedding(8, base=500.0, interleaved=True)
    x = torch.randn(2, 2, 5, 8, generator=_gen())
    torch.testing.assert_close(
        rot(x, offset=3), apply_rope(x, offset=3, base=500.0, interleaved=True)
    )
    assert list(rot.parameters()) == []
    with pytest.raises(ValueError, match=r"head_dim=8"):
        rot(torch.randn(2, 2, 5, 6))


# ------------------------------------------------------------------------------------------
# ALiBi
# ------------------------------------------------------------------------------------------


def test_alibi_slopes_power_of_two_are_the_papers():
    # Press et al. (2022), section 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256.
    expected = torch.tensor([2.0**-k for k in range(1, 9)])
    torch.testing.assert_close(alibi_slopes(8), expected)
    torch.testing.assert_close(alibi_slopes(16)[:3], torch.tensor([2**-0.5, 2**-1.0, 2**-1.5]))
    assert alibi_slopes(1).tolist() == [2.0**-8]


def test_alibi_slopes_non_power_of_two_rule():
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then 8-head slopes 2^-1, 2^-3
    # (every other one of 2^-1 .. 2^-8).
    six = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    torch.testing.assert_close(alibi_slopes(6), six)
    # 12 heads: 2^-1 .. 2^-8, then 16-head slopes 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    twelve = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve))


@FAST
@given(h=st.integers(1, 40))
def test_alibi_slopes_are_distinct_positive_and_below_one(h):
    s = alibi_slopes(h)
    assert s.shape == (h,) and s.dtype == torch.float32
    assert torch.all((s > 0) & (s < 1)) and len(set(s.tolist())) == h


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_alibi_bias_matches_a_double_loop(alignment):
    h, lq, lk = 3, 4, 7
    bias = alibi_bias(h, lq, lk, causal_alignment=alignment)
    slopes = alibi_slopes(h)
    shift = lk - lq if alignment == "bottom_right" else 0
    assert bias.shape == (h, lq, lk) and bias.dtype == torch.float32
    for hi in range(h):
        for i in range(lq):
            for j in range(lk):
                want = -slopes[hi].item() * abs(i + shift - j)
                assert bias[hi, i, j].item() == pytest.approx(want)


def test_alibi_with_causal_mask_is_the_papers_causal_form():
    """Causal ALiBi adds -m (i - j) for j <= i: equal to the symmetric bias where allowed."""
    h, seq = 4, 6
    g = _gen()
    q, k, v = (torch.randn(2, h, seq, 8, generator=g, dtype=torch.float64) for _ in range(3))
    sym = alibi_bias(h, seq, dtype=torch.float64)
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    causal_form = -alibi_slopes(h).double()[:, None, None] * (i - j)  # (H, L, L)
    ours = scaled_dot_product_attention(q, k, v, sym, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_form.masked_fill(~causal_mask(seq), float("-inf"))
    )
    torch.testing.assert_close(ours, ref)


def test_alibi_bias_is_shift_invariant_in_attention():
    """Only distances matter: the bias for a window of keys is a crop of a longer one."""
    big = alibi_bias(2, 10)
    torch.testing.assert_close(alibi_bias(2, 3, 5, causal_alignment="bottom_right"), big[:, 7:, 5:])
