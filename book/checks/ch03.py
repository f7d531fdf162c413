"""Checks of chapter 3's exercises (multi-head attention).

Every answer is compared with the package: :func:`attention.heads.split_heads` /
:func:`~attention.heads.merge_heads`, the parameters of a real
:class:`attention.heads.MultiHeadAttention`, :func:`measure.memory.kv_cache_bytes`.
When an answer is wrong, the check recomputes the usual mistakes and names the one that
matches.
"""

from __future__ import annotations

import math

import torch

from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention, merge_heads, split_heads
from measure.memory import kv_cache_bytes

from . import CheckFailed, expect_close, expect_shape, randn, register


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


# --- 03.4 KV-cache bytes -----------------------------------------------------------------------


@register("03.4", title="The size of a KV cache")
def _kv_cache(candidate):
    configs = (
        # layers, query heads, kv heads, head dim, tokens, batch, bytes
        # 5 layers, 8 query heads over 2 kv heads, fp32, batch 3: every mistake (÷2, ÷5, ×4,
        # ÷4, ÷3) gives its own number
        (5, 8, 2, 8, 10, 3, 4),
        (32, 32, 32, 128, 4096, 1, 2),  # MHA, fp16
        (32, 32, 8, 128, 4096, 1, 2),  # GQA-8
        (32, 32, 1, 128, 4096, 1, 2),  # MQA
    )
    for layers, h, kv, dh, n, b, nbytes in configs:
        got = candidate(layers, h, kv, dh, n, b, nbytes)
        expected = kv_cache_bytes(layers, kv, dh, n, batch_size=b, bytes_per_element=nbytes)
        if got == expected:
            continue
        call = f"kv_cache_bytes({layers}, {h}, {kv}, {dh}, {n}, {b}, {nbytes})"
        hint = _kv_cache_hint(got, expected, layers, h, kv, dh, n, b, nbytes)
        raise CheckFailed(f"{call} is {got!r}, expected {expected}" + (f": {hint}" if hint else ""))


# Each typical mistake of 03.4: (what it changes in the true formula, the message naming it).
_KV_MISTAKES = {
    "values": "a cache holds keys AND values: multiply by 2",
    "layers": "every layer has its own keys and values: multiply by num_layers",
    "heads": "only the key/value heads are cached: use num_kv_heads, not num_heads",
    "bytes": "that is a number of elements: multiply by bytes_per_element",
    "batch": "each sequence of the batch has its own cache: multiply by batch_size",
}


def _kv_cache_wrong(mistakes, layers, h, kv, dh, n, b, nbytes) -> int:
    heads = h if "heads" in mistakes else kv
    depth = 1 if "layers" in mistakes else layers
    batch = 1 if "batch" in mistakes else b
    element = 1 if "bytes" in mistakes else nbytes
    total = kv_cache_bytes(depth, heads, dh, n, batch_size=batch, bytes_per_element=element)
    return total // 2 if "values" in mistakes else total


def _kv_cache_hint(got, expected, layers, h, kv, dh, n, b, nbytes) -> str | None:
    """The message naming the mistake (or the two mistakes at once) that gives ``got``."""
    names = list(_KV_MISTAKES)
    singles = [(m,) for m in names]
    pairs = [(a, c) for i, a in enumerate(names) for c in names[i + 1 :]]
    for combo in singles + pairs:  # one mistake explains more than two, so singles first
        wrong = _kv_cache_wrong(combo, layers, h, kv, dh, n, b, nbytes)
        if wrong == got and wrong != expected:
            if len(combo) == 1:
                return _KV_MISTAKES[combo[0]]
            first, second = (_KV_MISTAKES[m] for m in combo)
            return f"two mistakes at once: {first}; and {second}"
    return None


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
