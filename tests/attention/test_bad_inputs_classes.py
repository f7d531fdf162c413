"""The classes of cryptic failure of issue 13, each handled everywhere it applies.

A table of bad inputs (each must raise ``TypeError``/``ValueError`` whose message names the
argument) and a table of edge inputs with a documented correct result (empty inputs). With
the tables of test_bad_inputs_core.py and test_bad_inputs_modules.py they make the
package's bad-input suite; the last test counts the distinct cases of all three.
"""

from __future__ import annotations

import pytest
import torch

import attention.multimodal as mm
import attention.timeseries as ts
import attention.vision as vision
from attention.blocks import FeedForward, SequenceClassifier
from attention.dispatch import (
    attend,
    available_backends,
    backend_unavailable_reason,
    torch_sdpa,
)
from attention.efficient import (
    bigbird_layout,
    block_sparse_attention,
    chunked_attention,
    flash_attention,
    linear_attention,
    probsparse_attention,
    sliding_window_attention,
)
from attention.functional import safe_softmax
from attention.functional import scaled_dot_product_attention as sdpa
from attention.heads import MultiHeadAttention
from attention.masks import causal_mask, padding_mask, sliding_window_mask, to_additive
from attention.normalizers import normalize_scores
from attention.positional import (
    LearnedPositionalEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)
from tests.attention import test_bad_inputs_core, test_bad_inputs_modules

Q = torch.zeros(1, 2, 4, 8)
K = torch.zeros(1, 2, 5, 8)
V = torch.zeros(1, 2, 5, 3)
NAN, INF = float("nan"), float("inf")
META = torch.device("meta")  # a second device on a CPU-only machine


def _meta_mask():
    return torch.ones(4, 5, dtype=torch.bool, device=META)


def _float_mask(value):
    m = torch.zeros(4, 5)
    m[1, 2] = value
    return m


def _square(l=8):
    return (torch.zeros(1, 2, l, 4) for _ in range(3))


def _swin(**kw):
    return vision.SwinBlock(8, 8, 2, 4, **kw)


CASES = {
    # ---- masks on another device, NaN / +inf in float masks -------------------------------
    "sdpa mask on another device": (
        lambda: sdpa(Q, K, V, _meta_mask()),
        ValueError,
        r"mask must be on the inputs' device \(cpu\), got a mask on meta",
    ),
    "attend mask on another device": (
        lambda: attend(Q, K, V, _meta_mask(), backend="reference"),
        ValueError,
        r"mask must be on the inputs' device",
    ),
    "torch_sdpa mask on another device": (
        lambda: torch_sdpa(Q, K, V, _meta_mask()),
        ValueError,
        r"mask must be on the inputs' device",
    ),
    "MHA mask on another device": (
        lambda: MultiHeadAttention(8, 2)(
            torch.zeros(1, 5, 8), mask=torch.ones(5, 5, dtype=torch.bool, device=META)
        ),
        ValueError,
        r"mask must be on the inputs' device",
    ),
    "WindowAttention mask on another device": (
        lambda: vision.WindowAttention(8, 2, window_size=2)(
            torch.zeros(2, 4, 8), mask=torch.ones(1, 4, 4, dtype=torch.bool, device=META)
        ),
        ValueError,
        r"mask must be on the device of windows \(cpu\), got a mask on meta",
    ),
    "NaN in a float mask": (
        lambda: sdpa(Q, K, V, _float_mask(NAN)),
        ValueError,
        r"mask is a float mask \(an additive bias\) and must hold finite values or -inf.*1 NaN",
    ),
    "+inf in a float mask": (
        lambda: sdpa(Q, K, V, _float_mask(INF)),
        ValueError,
        r"mask is a float mask .* 0 NaN and 1 \+inf entries",
    ),
    "+inf in a float mask to attend": (
        lambda: attend(Q, K, V, _float_mask(INF), backend="torch"),
        ValueError,
        r"mask is a float mask .* \+inf",
    ),
    "NaN in a float mask to torch_sdpa": (
        lambda: torch_sdpa(Q, K, V, _float_mask(NAN)),
        ValueError,
        r"mask is a float mask .* NaN",
    ),
    "NaN in a float mask to MHA": (
        lambda: MultiHeadAttention(8, 2)(torch.zeros(1, 4, 8), mask=torch.full((4, 4), NAN)),
        ValueError,
        r"mask is a float mask",
    ),
    "complex mask": (
        lambda: sdpa(Q, K, V, torch.zeros(4, 5, dtype=torch.complex64)),
        TypeError,
        r"mask must be a bool tensor .* got dtype torch.complex64",
    ),
    # ---- scale of the wrong type or non-finite, on every entry point -----------------------
    **{
        f"{name} scale {label}": (
            (lambda fn=fn, s=s: fn(s)),
            error,
            match,
        )
        for name, fn in {
            "sdpa": lambda s: sdpa(Q, K, V, scale=s),
            "flash": lambda s: flash_attention(Q, K, V, scale=s),
            "chunked": lambda s: chunked_attention(Q, K, V, scale=s),
            "sliding window": lambda s: sliding_window_attention(
                *_square(), left=1, right=1, scale=s
            ),
            "block sparse": lambda s: block_sparse_attention(
                *_square(), torch.ones(2, 2, dtype=torch.bool), block_size=4, scale=s
            ),
            "probsparse": lambda s: probsparse_attention(*_square(), scale=s),
            "attend": lambda s: attend(Q, K, V, scale=s, backend="reference"),
            "torch_sdpa": lambda s: torch_sdpa(Q, K, V, scale=s),
        }.items()
        for label, s, error, match in (
            ("NaN", NAN, ValueError, r"scale must be finite, got nan"),
            ("str", "0.5", TypeError, r"scale must be a float or None, got str"),
        )
    },
    "sdpa scale inf": (
        lambda: sdpa(Q, K, V, scale=INF),
        ValueError,
        r"scale must be finite, got inf",
    ),
    "sdpa scale tensor": (
        lambda: sdpa(Q, K, V, scale=torch.tensor(0.5)),
        TypeError,
        r"scale must be a float or None, got Tensor",
    ),
    "sdpa scale bool": (
        lambda: sdpa(Q, K, V, scale=True),
        TypeError,
        r"scale must be a float or None, got bool",
    ),
    # ---- generators and devices of the wrong type ------------------------------------------
    "sdpa generator an int": (
        lambda: sdpa(Q, K, V, dropout_p=0.5, training=True, generator=0),
        TypeError,
        r"generator must be a torch.Generator or None, got int",
    ),
    "probsparse generator a seed": (
        lambda: probsparse_attention(*_square(), generator=0),
        TypeError,
        r"generator must be a torch.Generator or None, got int",
    ),
    "bigbird generator a string": (
        lambda: bigbird_layout(4, generator="seed"),
        TypeError,
        r"generator must be a torch.Generator or None, got str",
    ),
    "sdpa training not a bool": (
        lambda: sdpa(Q, K, V, training=1),
        TypeError,
        r"training must be a bool, got int",
    ),
    "sdpa need_weights not a bool": (
        lambda: sdpa(Q, K, V, need_weights="yes"),
        TypeError,
        r"need_weights must be a bool, got str",
    ),
    "causal_mask device a float": (
        lambda: causal_mask(4, device=1.5),
        TypeError,
        r"device must be a torch.device, a device string or None, got float",
    ),
    "causal_mask device unparsable": (
        lambda: causal_mask(4, device="gpu0"),
        ValueError,
        r"device is not a valid device: 'gpu0'",
    ),
    "sliding_window_mask device a list": (
        lambda: sliding_window_mask(4, left=1, right=1, device=["cpu"]),
        TypeError,
        r"device must be a torch.device",
    ),
    "padding_mask device a float": (
        lambda: padding_mask(torch.tensor([2, 3]), device=0.0),
        TypeError,
        r"device must be a torch.device",
    ),
    "sinusoidal device an object": (
        lambda: sinusoidal_encoding(4, 8, device=object()),
        TypeError,
        r"device must be a torch.device",
    ),
    "alibi device a float": (
        lambda: alibi_bias(2, 4, device=2.0),
        TypeError,
        r"device must be a torch.device",
    ),
    "shifted_window_mask device an int list": (
        lambda: vision.shifted_window_mask(8, 8, 4, 2, device=[0]),
        TypeError,
        r"device must be a torch.device",
    ),
    "available_backends device a float": (
        lambda: available_backends(1.0),
        TypeError,
        r"device must be a torch.device, a device string or None, got float",
    ),
    "backend_unavailable_reason dtype a string": (
        lambda: backend_unavailable_reason("flash", "cpu", "float32"),
        TypeError,
        r"dtype must be a torch.dtype or None, got str",
    ),
    # ---- dtype= arguments that make no sense -------------------------------------------------
    "to_additive bool dtype": (
        lambda: to_additive(torch.ones(2, 2, dtype=torch.bool), dtype=torch.bool),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.bool",
    ),
    "to_additive int dtype": (
        lambda: to_additive(torch.ones(2, 2, dtype=torch.bool), dtype=torch.int64),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.int64",
    ),
    "to_additive dtype a string": (
        lambda: to_additive(torch.ones(2, 2, dtype=torch.bool), dtype="float32"),
        TypeError,
        r"dtype must be a torch.dtype, got str",
    ),
    "sinusoidal int dtype": (
        lambda: sinusoidal_encoding(4, 8, dtype=torch.int32),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.int32",
    ),
    "sinusoidal bool dtype": (
        lambda: sinusoidal_encoding(4, 8, dtype=torch.bool),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.bool",
    ),
    "alibi int dtype": (
        lambda: alibi_bias(2, 4, dtype=torch.int64),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.int64",
    ),
    "alibi complex dtype": (
        lambda: alibi_bias(2, 4, dtype=torch.complex64),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.complex64",
    ),
    "alibi_slopes bool dtype": (
        lambda: alibi_slopes(4, dtype=torch.bool),
        TypeError,
        r"dtype must be a floating-point dtype .* got torch.bool",
    ),
    # ---- complex lengths, RoPE positions that cannot hold distinct integers -----------------
    "complex lengths": (
        lambda: padding_mask(torch.tensor([1 + 0j, 2 + 0j])),
        TypeError,
        r"lengths must be an integer tensor, got dtype torch.complex64",
    ),
    "RoPE bfloat16 positions": (
        lambda: rope_angles(torch.arange(4096, dtype=torch.bfloat16), head_dim=8),
        TypeError,
        r"positions must be an integer tensor or float32/float64, got dtype torch.bfloat16",
    ),
    "RoPE float16 positions": (
        lambda: apply_rope(torch.zeros(1, 1, 4, 8), positions=torch.arange(4, dtype=torch.float16)),
        TypeError,
        r"positions must be an integer tensor or float32/float64, got dtype torch.float16",
    ),
    "RoPE complex positions": (
        lambda: rope_angles(torch.zeros(4, dtype=torch.complex64), head_dim=8),
        TypeError,
        r"positions must be an integer or float tensor, got dtype torch.complex64",
    ),
    # ---- one dtype rule for modules ---------------------------------------------------------
    "FeedForward float64 input": (
        lambda: FeedForward(8, 16)(torch.zeros(1, 3, 8, dtype=torch.float64)),
        TypeError,
        r"x has dtype torch.float64 but the module's weights are torch.float32; cast one of "
        r"them \(e.g. module.to\(torch.float64\)\)",
    ),
    "FeedForward float16 input": (
        lambda: FeedForward(8, 16)(torch.zeros(1, 3, 8, dtype=torch.float16)),
        TypeError,
        r"x has dtype torch.float16 but the module's weights are torch.float32",
    ),
    "PatchEmbedding float64 images": (
        lambda: vision.PatchEmbedding(8, 4, 3, 16)(torch.zeros(1, 3, 8, 8, dtype=torch.float64)),
        TypeError,
        r"images has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "WindowAttention float16 windows": (
        lambda: vision.WindowAttention(8, 2, window_size=2)(
            torch.zeros(2, 4, 8, dtype=torch.float16)
        ),
        TypeError,
        r"windows has dtype torch.float16 but the module's weights are torch.float32",
    ),
    "SwinBlock float64 tokens": (
        lambda: _swin()(torch.zeros(1, 64, 8, dtype=torch.float64)),
        TypeError,
        r"x has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "PatchMerging float64 tokens": (
        lambda: vision.PatchMerging(4, 8)(torch.zeros(1, 16, 8, dtype=torch.float64)),
        TypeError,
        r"x has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "CrossAttentionBlock float64 context": (
        lambda: mm.CrossAttentionBlock(8, 2)(torch.zeros(1, 3, 8), torch.zeros(1, 4, 8).double()),
        TypeError,
        r"context has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "ProjectionHead float16 features": (
        lambda: mm.ProjectionHead(8, 4)(torch.zeros(2, 8, dtype=torch.float16)),
        TypeError,
        r"features has dtype torch.float16 but the module's weights are torch.float32",
    ),
    "LearnedPositionalEmbedding float64 input": (
        lambda: LearnedPositionalEmbedding(4, max_len=8)(torch.zeros(1, 3, 4, dtype=torch.float64)),
        TypeError,
        r"x has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "DLinear float64 history": (
        lambda: ts.DLinear(8, 2)(torch.zeros(2, 8, dtype=torch.float64)),
        TypeError,
        r"history has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "FeedForward input on another device": (
        lambda: FeedForward(8, 16)(torch.zeros(1, 3, 8, device=META)),
        ValueError,
        r"x is on meta but the module's weights are on cpu",
    ),
    # ---- non-tensor arguments reaching torch ------------------------------------------------
    "safe_softmax on a list": (
        lambda: safe_softmax([1.0, 2.0]),
        TypeError,
        r"scores must be a torch.Tensor, got list",
    ),
    "safe_softmax dim out of range": (
        lambda: safe_softmax(torch.zeros(2, 3), dim=2),
        ValueError,
        r"dim must be in \[-2, 1\] for a 2-dim tensor, got 2",
    ),
    "safe_softmax dim a float": (
        lambda: safe_softmax(torch.zeros(2, 3), dim=1.0),
        TypeError,
        r"dim must be an int, got float",
    ),
    "safe_softmax integer scores": (
        lambda: safe_softmax(torch.zeros(2, 3, dtype=torch.int64)),
        TypeError,
        r"scores must be a floating-point tensor",
    ),
    "safe_softmax +inf score": (
        lambda: safe_softmax(torch.tensor([[float("inf"), 0.0], [1.0, 0.0]])),
        ValueError,
        r"scores must be finite or -inf \(= not allowed\), got 1 rows holding \+inf",
    ),
    "normalize_scores integer mask": (
        lambda: normalize_scores(torch.zeros(2, 3), mask=torch.ones(2, 3, dtype=torch.int64)),
        TypeError,
        r"mask must be a bool tensor \(True = may attend\) or a float tensor \(additive bias\), "
        r"got dtype torch.int64",
    ),
    "normalize_scores mask of another shape": (
        lambda: normalize_scores(torch.zeros(2, 3), mask=torch.ones(2, 2, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(2, 2\) does not broadcast to \(2, 3\)",
    ),
    "normalize_scores mask on another device": (
        lambda: normalize_scores(
            torch.zeros(2, 3), mask=torch.ones(2, 3, dtype=torch.bool, device=META)
        ),
        ValueError,
        r"mask must be on the inputs' device \(cpu\), got a mask on meta",
    ),
    "normalize_scores integer scores": (
        lambda: normalize_scores(torch.zeros(2, 3, dtype=torch.int64)),
        TypeError,
        r"scores must be a floating-point tensor .* got dtype torch.int64",
    ),
    "ViTEmbedding dropout 1": (
        lambda: vision.ViTEmbedding(8, 4, 3, 16, dropout=1.0),
        ValueError,
        r"dropout must be in \[0, 1\), got 1.0",
    ),
    "window_partition on a list": (
        lambda: vision.window_partition([[1.0]], window_size=2),
        TypeError,
        r"x must be a torch.Tensor, got list",
    ),
    "window_reverse on a tuple": (
        lambda: vision.window_reverse((1.0,), window_size=2, height=4, width=4),
        TypeError,
        r"windows must be a torch.Tensor, got tuple",
    ),
    "cyclic_shift on a list": (
        lambda: vision.cyclic_shift([1.0], shift=1),
        TypeError,
        r"x must be a torch.Tensor, got list",
    ),
    "cyclic_shift pair of three": (
        lambda: vision.cyclic_shift(torch.zeros(1, 4, 4, 1), shift=(1, 1, 1)),
        ValueError,
        r"shift must be an int or a pair \(rows, cols\), got \(1, 1, 1\)",
    ),
    "cyclic_shift float in a pair": (
        lambda: vision.cyclic_shift(torch.zeros(1, 4, 4, 1), shift=(1, 0.5)),
        TypeError,
        r"shift\[1\] must be an int, got float",
    ),
    "shifted_window_mask shift pair too large": (
        lambda: vision.shifted_window_mask(8, 8, 4, (1, 4)),
        ValueError,
        r"shift must be in \[0, window_size=4\), got \(1, 4\)",
    ),
    "mlp_ratio NaN": (
        lambda: _swin(mlp_ratio=NAN),
        ValueError,
        r"mlp_ratio must be a number with mlp_ratio \* d_model >= 1, got nan",
    ),
    "mlp_ratio inf": (
        lambda: _swin(mlp_ratio=INF),
        ValueError,
        r"mlp_ratio must be a number with mlp_ratio \* d_model >= 1, got inf",
    ),
    "mlp_ratio a string": (
        lambda: _swin(mlp_ratio="4"),
        TypeError,
        r"mlp_ratio must be a number .* got str",
    ),
    "ViT norm_eps negative": (
        lambda: vision.VisionTransformer(
            8, 4, 3, 2, d_model=8, num_heads=2, num_layers=1, d_ff=16, norm_eps=-1e-6
        ),
        ValueError,
        r"norm_eps must be a finite float >= 0, got -1e-06",
    ),
    "clip_logits logit_scale inf": (
        lambda: mm.clip_logits(torch.randn(2, 4), torch.randn(3, 4), INF),
        ValueError,
        r"logit_scale must be > 0, got inf; expected a finite number > 0",
    ),
    "clip_logits logit_scale NaN tensor": (
        lambda: mm.clip_logits(torch.randn(2, 4), torch.randn(3, 4), torch.tensor(NAN)),
        ValueError,
        r"logit_scale must be > 0, got nan",
    ),
    "clip loss on an empty batch": (
        lambda: mm.clip_contrastive_loss(torch.zeros(0, 4), torch.zeros(0, 4), 10.0),
        ValueError,
        r"image_emb and text_emb must hold at least one matching pair \(batch >= 1\)",
    ),
    "classifier on an empty sequence": (
        lambda: SequenceClassifier(10, 2, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)(
            torch.zeros(2, 0, dtype=torch.long)
        ),
        ValueError,
        r"every sequence needs at least one real token",
    ),
    "linear_attention eps NaN": (
        lambda: linear_attention(*_square(), eps=NAN),
        ValueError,
        r"eps must be a finite float >= 0, got nan",
    ),
}


# Edge inputs with a documented correct result (attention/__init__.py, "Empty inputs").
def _empty(b, h, lq, lk, e, ev):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(b, h, lq, e, generator=g),
        torch.randn(b, h, lk, e, generator=g),
        torch.randn(b, h, lk, ev, generator=g),
    )


EMPTY_SHAPES = {
    "batch 0": (0, 2, 8, 8, 4, 3),
    "heads 0": (2, 0, 8, 8, 4, 3),
    "queries 0": (2, 2, 0, 8, 4, 3),
    "keys 0": (2, 2, 8, 0, 4, 3),
    "head dim 0": (2, 2, 8, 8, 0, 3),
    "value dim 0": (2, 2, 8, 8, 4, 0),
}
SQUARE_ONLY = {"sliding window", "block sparse", "probsparse"}
EMPTY_VARIANTS = {
    "reference": lambda q, k, v: sdpa(q, k, v),
    "torch_sdpa": lambda q, k, v: torch_sdpa(q, k, v),
    "flash": lambda q, k, v: flash_attention(q, k, v, block_q=3, block_k=3),
    "chunked": lambda q, k, v: chunked_attention(q, k, v, query_chunk=3, key_chunk=3),
    "sliding window": lambda q, k, v: sliding_window_attention(q, k, v, left=2, right=1),
    "block sparse": lambda q, k, v: block_sparse_attention(
        q,
        k,
        v,
        torch.ones(-(-q.shape[2] // 4), -(-k.shape[2] // 4), dtype=torch.bool),
        block_size=4,
    ),  # fmt: skip
    "probsparse": lambda q, k, v: probsparse_attention(q, k, v, factor=1),
}


@pytest.mark.parametrize("shape", list(EMPTY_SHAPES), ids=list(EMPTY_SHAPES))
@pytest.mark.parametrize("variant", list(EMPTY_VARIANTS), ids=list(EMPTY_VARIANTS))
def test_empty_inputs_give_the_dense_reference_result(variant, shape):
    b, h, lq, lk, e, ev = EMPTY_SHAPES[shape]
    if variant in SQUARE_ONLY and lq != lk:
        lq = lk = 0  # these variants attend a sequence to itself
    q, k, v = _empty(b, h, lq, lk, e, ev)
    out = EMPTY_VARIANTS[variant](q, k, v)
    band = None
    if variant == "sliding window" and lq and lk:
        band = sliding_window_mask(lq, lk, left=2, right=1)
    ref = sdpa(q, k, v, band)
    assert out.shape == (b, h, lq, ev) and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    if lk == 0:
        assert not out.any()  # no key: every row fully masked, zeros
    if e == 0 and lk > 0 and band is None:  # scores all 0: a uniform average of the values
        torch.testing.assert_close(out, v.mean(dim=2, keepdim=True).expand_as(out))


def test_linear_attention_empty_inputs_are_finite_and_shaped():
    for shape in EMPTY_SHAPES.values():
        b, h, lq, lk, e, ev = shape
        q, k, v = _empty(b, h, lk, lk, e, ev)
        out = linear_attention(q, k, v)
        assert out.shape == (b, h, lk, ev) and torch.isfinite(out).all()


def test_mha_and_modules_on_an_empty_batch_return_an_empty_batch():
    torch.manual_seed(0)
    assert MultiHeadAttention(8, 2)(torch.zeros(0, 5, 8)).shape == (0, 5, 8)
    assert FeedForward(8, 16)(torch.zeros(0, 5, 8)).shape == (0, 5, 8)
    assert _swin()(torch.zeros(0, 64, 8)).shape == (0, 64, 8)
    assert mm.clip_logits(torch.zeros(0, 4), torch.randn(3, 4), 10.0).shape == (0, 3)
    assert safe_softmax(torch.zeros(2, 0)).shape == (2, 0)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_input_raises_a_message_naming_the_argument(case):
    call, error, match = CASES[case]
    with pytest.raises(error, match=match):
        call()


def test_the_suite_holds_at_least_150_distinct_bad_inputs():
    tables = (test_bad_inputs_core.CASES, test_bad_inputs_modules.CASES, CASES)
    names = [name for table in tables for name in table]
    assert len(set(names)) == len(names)  # one name, one case
    distinct = {(name, match) for table in tables for name, (_, _, match) in table.items()}
    assert len(distinct) >= 150, len(distinct)
    # plus the documented empty results, one per (variant, shape)
    assert len(EMPTY_VARIANTS) * len(EMPTY_SHAPES) >= 40
