"""Checks of chapter 3's exercises (multi-head attention).

Every answer is compared with the package: :func:`attention.heads.split_heads` /
:func:`~attention.heads.merge_heads`, the parameters of a real
:class:`attention.heads.MultiHeadAttention` and the way its forward pass copies grouped
key/value heads; 03.6 grades a predicted verdict against the learner's own run.
When an answer is wrong, the check recomputes the usual mistakes and names the one that
matches.
"""

from __future__ import annotations

import math

import torch

from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention, merge_heads, split_heads

from . import CheckFailed, expect_close, expect_shape, randn, register
from .helpers import check_prediction


def _same(a: object, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, atol=1e-5)


# --- 03.1 split_heads -------------------------------------------------------------------------


@register("03.1", title="Split the heads")
def _split(candidate):
    for b, l, d, h in ((2, 5, 12, 3), (1, 4, 8, 4), (3, 2, 6, 1)):
        x = randn(b, l, d, seed=b * 100 + l)  # (B, L, D)
        got = candidate(x, h)
        dh = d // h
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (b, l, h, dh) and l != h:
            raise CheckFailed(
                f"split_heads(x, {h}) has shape {(b, l, h, dh)}, expected {(b, h, l, dh)} "
                f"(B, H, L, D/H): after the view, swap the seq and heads axes with .transpose(1, 2)"
            )
        expect_shape(
            f"split_heads(x of shape {(b, l, d)}, {h})", got, (b, h, l, dh), "(B, H, L, D/H)"
        )
        expected = split_heads(x, num_heads=h)  # (B, H, L, Dh)
        if _same(got, expected):
            continue
        if _same(got, x.reshape(b, h, l, dh)):
            raise CheckFailed(
                "you reshaped x straight to (B, H, L, D/H): that cuts the flat memory of "
                "(L, D) into H blocks, so a 'head' holds features of several tokens. View as "
                "(B, L, H, D/H) first (each token's features cut into H slices), then "
                "transpose(1, 2)"
            )
        strided = x.reshape(b, l, dh, h).permute(0, 3, 1, 2)  # head i = features i, i+H, ...
        if _same(got, strided):
            raise CheckFailed(
                "head i got every H-th feature (i, i+H, i+2H, ...); it should get the "
                "contiguous slice i*D/H ... (i+1)*D/H - 1: view as (B, L, H, D/H), not "
                "(B, L, D/H, H)"
            )
        expect_close(
            f"split_heads(x, {h})", got, expected, hint="compare with x[:, :, i*Dh:(i+1)*Dh]"
        )


# --- 03.2 merge_heads -------------------------------------------------------------------------


@register("03.2", title="Merge the heads")
def _merge(candidate):
    for b, h, l, dh in ((2, 3, 5, 4), (1, 4, 2, 2), (2, 1, 3, 5)):
        x = randn(b, h, l, dh, seed=h * 10 + l)  # (B, H, L, Dh)
        try:
            got = candidate(x)
        except RuntimeError as err:
            if "view" in str(err):
                raise CheckFailed(
                    f"your code raised RuntimeError: {str(err).rstrip('.')}. After transpose(1, 2) "
                    f"the tensor is "
                    f"not contiguous in memory, so .view cannot regroup it: use .reshape(...) "
                    f"or .contiguous().view(...)"
                ) from None
            raise
        expect_shape(
            f"merge_heads(x of shape {(b, h, l, dh)})", got, (b, l, h * dh), "(B, L, H*Dh)"
        )
        expected = merge_heads(x)  # (B, L, H*Dh)
        if _same(got, expected):
            continue
        if _same(got, x.reshape(b, l, h * dh)):
            raise CheckFailed(
                "you reshaped (B, H, L, Dh) straight to (B, L, H*Dh): that mixes tokens. Move "
                "the heads axis next to the features first (transpose(1, 2) to (B, L, H, Dh)), "
                "then flatten the last two axes"
            )
        expect_close(
            "merge_heads(x)", got, expected, hint="merge_heads(split_heads(x, h)) must give x"
        )
    x = randn(2, 3, 12, seed=5)
    expect_close("merge_heads(split_heads(x, 4))", candidate(split_heads(x, num_heads=4)), x)


# --- 03.3 parameters of an attention layer -----------------------------------------------------


def _count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    """Parameters of a real layer; built on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        mha = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads, bias=bias)
    return sum(p.numel() for p in mha.parameters())


@register("03.3", title="Parameters of a multi-head attention layer")
def _params(candidate):
    configs = (
        (768, 12, 12, True),  # BERT-base
        (512, 8, 8, False),
        (64, 8, 2, True),  # GQA
        (4096, 32, 8, False),  # a LLaMA-2-70B-like layer width, GQA-8
        (96, 8, 1, True),  # MQA
    )
    for d, h, kv, bias in configs:
        got = candidate(d, h, kv, bias)
        expected = _count(d, h, kv, bias)
        if got == expected:
            continue
        call = f"attention_params({d}, {h}, {kv}, bias={bias})"
        mistakes = {
            _count(d, h, kv, False): "did you forget the biases (one per output feature of "
            "each of the four projections)?",
            _count(d, h, h, bias): "K and V project to num_kv_heads * d_head features, not "
            "d_model: with fewer key/value heads their matrices are narrower",
            expected - (d * d + (d if bias else 0)): "did you forget W_O, the output "
            "projection (d_model x d_model)?",
            h * expected: "the head count does not multiply the parameters: each head's W_Q, "
            "W_K, W_V are d_model x d_head, and H of them make one d_model x d_model matrix",
        }
        hint = mistakes.get(got) or None
        raise CheckFailed(f"{call} is {got!r}, expected {expected}" + (f": {hint}" if hint else ""))


# --- 03.4 GQA: key/value heads copied to their groups -----------------------------------------

# (batch, key/value heads, query heads, length, head width): a group of 3 with 2 kv heads tells
# a tiling (0, 1, 0, 1, 0, 1) from consecutive copies (0, 0, 0, 1, 1, 1); MHA and MQA too.
_EXPAND_CASES = ((2, 2, 6, 5, 4), (1, 4, 8, 3, 2), (2, 3, 3, 4, 4), (1, 1, 4, 5, 2))


def _expand_reference(kv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The package's own expansion (``MultiHeadAttention.forward`` with an ``attn_fn``):
    query head ``i`` reads key/value head ``i // (num_heads // H_kv)``."""
    index = torch.arange(num_heads) // (num_heads // kv.shape[1])  # (H,)
    return kv[:, index]  # (B, H, L, Dh)


@register("03.4", title="Share the key/value heads (GQA)")
def _expand_kv(candidate):
    for b, kv_heads, h, n, dh in _EXPAND_CASES:
        kv = randn(b, kv_heads, n, dh)  # (B, H_kv, L, Dh)
        call = f"expand_kv(kv of shape {tuple(kv.shape)}, num_heads={h})"
        got = candidate(kv.clone(), h)
        expected = _expand_reference(kv, h)
        expect_shape(call, got, tuple(expected.shape))
        if _same(got, expected):
            continue
        tiled = kv.repeat(1, h // kv_heads, 1, 1)  # (B, H, L, Dh): 0, 1, 0, 1, ...
        if _same(got, tiled):
            raise CheckFailed(
                f"{call}: query head 1 got key/value head {1 % kv_heads}, expected head "
                f"{1 // (h // kv_heads)}: the heads are tiled (0, 1, 0, 1, ...), as "
                "kv.repeat does; each key/value head must be copied to its group of "
                "consecutive query heads (0, 0, 0, 1, 1, 1): kv.repeat_interleave(group, dim=1)"
            )
        raise CheckFailed(
            f"{call}: the values differ from the expected copies (head i of the result is head "
            "i // (num_heads // H_kv) of kv)"
        )
    kv = randn(1, 2, 3, 4)
    try:
        candidate(kv, 3)
    except ValueError as err:
        if "num_heads" not in str(err):
            raise CheckFailed(
                f"expand_kv(kv with 2 key/value heads, num_heads=3) raised ValueError({err!s}), "
                "which should name num_heads"
            ) from None
    else:
        raise CheckFailed(
            "expand_kv(kv with 2 key/value heads, num_heads=3) should raise a ValueError naming "
            "num_heads: 3 query heads cannot be split into 2 equal groups"
        )


# --- 03.5 multi-head attention from weight matrices --------------------------------------------


def _reference_mha(x, w_q, w_k, w_v, w_o, num_heads):
    d = x.shape[-1]
    mha = MultiHeadAttention(d, num_heads, bias=False)
    with torch.no_grad():
        for proj, w in (
            (mha.q_proj, w_q),
            (mha.k_proj, w_k),
            (mha.v_proj, w_v),
            (mha.out_proj, w_o),
        ):
            proj.weight.copy_(w.T)  # nn.Linear stores (out, in); the exercise uses x @ w
        return mha(x)


def _variant(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    h,
    *,
    scale=None,
    wrong_split=False,
    apply_w_o=True,
    softmax_dim=-1,
    transposed=False,
):
    """The forward pass with one deliberate mistake, to name it in the message."""
    b, l, d = x.shape
    if transposed:  # x @ w.T: the nn.Linear habit applied to matrices stored as (in, out)
        w_q, w_k, w_v, w_o = (w.T for w in (w_q, w_k, w_v, w_o))
    if wrong_split:
        q, k, v = ((x @ w).reshape(b, h, l, d // h) for w in (w_q, w_k, w_v))  # (B, H, L, Dh)
    else:
        q, k, v = (split_heads(x @ w, num_heads=h) for w in (w_q, w_k, w_v))  # (B, H, L, Dh)
    if softmax_dim == -1:
        heads = scaled_dot_product_attention(q, k, v, scale=scale)  # (B, H, L, Dh)
    else:
        s = 1 / math.sqrt(d // h) if scale is None else scale
        heads = torch.softmax(q @ k.transpose(-2, -1) * s, dim=softmax_dim) @ v  # (B, H, L, Dh)
    out = merge_heads(heads)  # (B, L, D)
    return out @ w_o if apply_w_o else out


@register("03.5", title="Multi-head attention from its weight matrices")
def _mha_forward(candidate):
    b, l, d, h = 2, 5, 32, 8  # d_head 4: 1/d_head differs from 1/sqrt(d_model)
    x = randn(b, l, d, seed=1)  # (B, L, D)
    ws = [randn(d, d, seed=10 + i) / math.sqrt(d) for i in range(4)]  # (D, D) each
    with torch.no_grad():
        got = candidate(x, *ws, h)
        expected = _reference_mha(x, *ws, h)  # (B, L, D)
    expect_shape("mha_forward(x, w_q, w_k, w_v, w_o, 8)", got, (b, l, d), "(B, L, D)")
    if _same(got, expected):
        # One more shape, so that a hard-coded head width is caught.
        x2 = randn(1, 3, 12, seed=2)
        ws2 = [randn(12, 12, seed=20 + i) / math.sqrt(12) for i in range(4)]
        with torch.no_grad():
            expect_close(
                "mha_forward(x, ..., num_heads=2) with d_model 12",
                candidate(x2, *ws2, 2),
                _reference_mha(x2, *ws2, 2),
                hint="is the head width d_model // num_heads?",
            )
        return
    mistakes = (
        (
            dict(scale=1 / math.sqrt(d)),
            "the scores were divided by sqrt(d_model); divide by "
            "sqrt(d_head) = sqrt(d_model / num_heads), the width of the vectors being multiplied",
        ),
        (dict(scale=1.0), "the scores were not scaled: divide Q Kᵀ by sqrt(d_head)"),
        (
            dict(scale=1 / (d // h)),
            "the scores were divided by d_head; divide by its square root, sqrt(d_head)",
        ),
        (
            dict(softmax_dim=-2),
            "the softmax ran over the queries (dim=-2): each query's weights must sum to 1 over "
            "the keys, softmax(..., dim=-1)",
        ),
        (
            dict(transposed=True),
            "the weights were transposed (x @ w.T): these matrices are stored as (in, out) for "
            "x @ w; only nn.Linear's .weight is (out, in) and needs the .T",
        ),
        (
            dict(apply_w_o=False),
            "the output projection is missing: multiply the merged heads by w_o",
        ),
        (
            dict(wrong_split=True),
            "the heads were split by reshaping straight to (B, H, L, Dh); view "
            "as (B, L, H, Dh), then transpose(1, 2)",
        ),
    )
    with torch.no_grad():
        for kwargs, hint in mistakes:
            if _same(got, _variant(x, *ws, h, **kwargs)):
                raise CheckFailed(f"mha_forward output is wrong: {hint}")
    expect_close(
        "mha_forward(x, w_q, w_k, w_v, w_o, 8)",
        got,
        expected,
        hint="check the softmax axis (over keys, dim=-1) and that W_O is applied after merging",
    )


# --- 03.6 predict, then run: C8 at a long sequence ---------------------------------------------

C8_EXERCISE_SHAPE = "L 4096, d_model 768, h 12"  # the chapter's BERT-base shape at L 4096
C8_EXERCISE_WHY = {
    "partly": (
        "The matrix products still cost the same, but the softmax work grows as L² while the "
        "projections grow as L: at 4,096 tokens the extra heads add 1.56 % of the layer, over "
        "the 1 % that 'about the same' allows."
    ),
    "reproduced": (
        "The matrix products cost the same and the extra softmax work stays under 1 % of the "
        "layer at this shape."
    ),
    "not reproduced": "The matrix products differ between one head and many.",
}


@register("03.6", title="Predict, then run: the sequence length")
def _check_c8_prediction(predict, *, outcome) -> None:
    from book.sceptic import Outcome

    # A wrong kind of outcome is check_prediction's to report; a run of another shape is ours.
    shape = outcome.numbers.get("shape") if isinstance(outcome, Outcome) else None
    if isinstance(outcome, Outcome) and shape != C8_EXERCISE_SHAPE:
        raise CheckFailed(
            f"the run measured {shape!r}, not {C8_EXERCISE_SHAPE!r}: run c8_sweep_run with "
            "seq_len=4096, d_model=768, num_heads=12 (only the sequence length changes from "
            "the chapter's 512)"
        )
    check_prediction(predict, outcome, setting="L = 4096 tokens", why=C8_EXERCISE_WHY)
