"""Checks of chapter 6's exercises (engineering pitfalls).

Each answer is compared with the package (``attention.masks``, ``attention.functional``) on
inputs the check chooses; each typical mistake is recognised by the output it produces (a
mask of the wrong polarity, a diagonal left out, ``-1e9`` in float16, NaN or uniform weights
on a fully masked row, a padding mask on the queries instead of the keys, the float16
overflow scale without its square root or with the scale applied first, a KV cache sized with
every query head or without the values) and named in the message.
"""

from __future__ import annotations

import math

import torch

from attention.functional import safe_softmax
from attention.masks import causal_mask, padding_mask
from book.pages.ch06 import FP16_MAX
from book.sceptic import Outcome
from measure.memory import kv_cache_bytes

from . import CheckFailed, expect_shape, randn, register
from .helpers import check_formula, check_prediction, expect_tensor

POLARITY_HINT = (
    "wrong polarity: the package's masks use True = may attend (torch SDPA's convention); "
    "you returned True where attending is forbidden (nn.MultiheadAttention's convention)"
)


# --- 06.1 a causal mask ---------------------------------------------------------------------


@register("06.1", title="A causal mask in the package's polarity")
def _causal(candidate):
    for n in (4, 7, 1):  # n = 1 last: there a strict mask equals the inverted one
        got = expect_tensor(f"causal(n={n})", candidate(n))
        expect_shape(f"causal(n={n})", got, (n, n), "(L, L): query i in row i, key j in column j")
        if got.dtype != torch.bool:
            raise CheckFailed(
                f"causal(n={n}) should be a bool tensor (True = may attend), got {got.dtype}; "
                "a float 0/1 mask would be added to the scores, not used as a mask"
            )
        want = causal_mask(n)
        if torch.equal(got, want):
            continue
        if torch.equal(got, ~want):
            raise CheckFailed(
                f"causal(n={n}): {POLARITY_HINT} — e.g. torch.triu(ones, diagonal=1), the "
                "mask torch's attn_mask expects"
            )
        if torch.equal(got, want.T):
            raise CheckFailed(
                f"causal(n={n}) is transposed: query i (row i) must see keys j <= i (the lower "
                "triangle, torch.tril), not j >= i"
            )
        if torch.equal(got, want & ~torch.eye(n, dtype=torch.bool)):
            raise CheckFailed(
                f"causal(n={n}) leaves out the diagonal: a token must be allowed to attend to "
                "itself (j <= i, not j < i); row 0 would have no key at all"
            )
        raise CheckFailed(f"causal(n={n}) differs from the lower triangle j <= i: got\n{got}")


# --- 06.2 a masked softmax ------------------------------------------------------------------


def _cases():
    scores = randn(2, 3, 5, seed=2) * 3  # (B, Lq, Lk)
    allowed = torch.ones(2, 3, 5, dtype=torch.bool)
    allowed[0, 0, 3:] = False  # partly masked row
    allowed[0, 1] = False  # fully masked row
    allowed[1, 2, :1] = False
    return scores, allowed


@register("06.2", title="A masked softmax for float16 and fully masked rows")
def _masked_softmax(candidate):
    scores, allowed = _cases()
    want = safe_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    for dtype in (torch.float16, torch.float32):
        s = scores.to(dtype)
        call = f"masked_softmax(scores.{str(dtype).split('.')[-1]}(), allowed)"
        try:
            got = candidate(s, allowed)
        except RuntimeError as err:
            if dtype == torch.float16 and "overflow" in str(err):
                raise CheckFailed(
                    f"{call} raised '{err}': -1e9 does not fit in float16 (its largest "
                    "magnitude is 65504), and in float32 it gives a fully masked row uniform "
                    "weights. Mask with float('-inf') and make the fully masked row give zeros"
                ) from None
            raise
        got = expect_tensor(call, got, floating=True)
        expect_shape(call, got, tuple(scores.shape))
        g = got.detach().double()
        full = ~allowed.any(dim=-1)  # rows without any key
        if torch.isnan(g).any() and dtype == torch.float16:
            in32 = candidate(scores, allowed).detach().double()
            full32 = in32[~allowed.any(dim=-1)]
            if torch.isfinite(in32).all() and torch.allclose(full32, torch.full_like(full32, 0.2)):
                raise CheckFailed(
                    f"{call} has NaN in the fully masked row, while in float32 that row is "
                    "uniform: a large negative like -1e9 became -inf when cast to float16 "
                    "(float16 stops at 65504). Mask with float('-inf') and give a fully masked "
                    "row zeros"
                )
        if torch.isnan(g).any():
            rows = "the fully masked row" if torch.isnan(g[full]).any() else "some rows"
            raise CheckFailed(
                f"{call} has NaN in {rows}: softmax of a row of -inf is 0/0. Return zeros for "
                "a row whose every key is masked (e.g. attention.safe_softmax, or torch.where "
                "on allowed.any(-1))"
            )
        partly = ~allowed & allowed.any(dim=-1, keepdim=True)  # masked keys of kept rows
        if g[partly].abs().max() > 0:
            raise CheckFailed(
                f"{call}: masked keys must get weight 0 (True = may attend); was the mask "
                "applied, and with the right polarity?"
            )
        if g[full].abs().max() > 0:
            if torch.allclose(g[full], torch.full_like(g[full], 1 / scores.shape[-1]), atol=1e-3):
                raise CheckFailed(
                    f"{call} gives the fully masked row uniform weights over keys it must "
                    "ignore — what -1e9 or finfo.min do. That row must be all zeros"
                )
            raise CheckFailed(f"{call}: a fully masked row must be all zeros, got {g[full]}")
        if got.dtype != dtype:
            raise CheckFailed(
                f"{call} returns {got.dtype}; the result must have the dtype of `scores` "
                f"({dtype}): compute in float32 if you like, then cast back with "
                ".to(scores.dtype)"
            )
        tol = 1e-3 if dtype == torch.float16 else 1e-5
        if not torch.allclose(g, want.double(), atol=tol):
            raise CheckFailed(f"{call} differs from softmax over the allowed keys by "
                              f"{float((g - want.double()).abs().max()):.3g}")  # fmt: skip


# --- 06.3 a key padding mask ----------------------------------------------------------------


@register("06.3", title="A key-padding mask from lengths")
def _key_padding(candidate):
    lengths = torch.tensor([3, 5, 1])
    max_len = 5
    got = expect_tensor("key_padding(lengths, 5)", candidate(lengths, max_len))
    want = padding_mask(lengths, max_len)  # (B, 1, 1, L)
    call = "key_padding(tensor([3, 5, 1]), 5)"
    if got.dtype != torch.bool:
        raise CheckFailed(f"{call} should be a bool tensor (True = real token), got {got.dtype}")
    queries = want.transpose(-1, -2)  # (B, 1, L, 1)
    if got.shape == queries.shape and torch.equal(got, queries):
        raise CheckFailed(
            f"{call} has shape (B, 1, L, 1): that masks padded *queries* (rows), which leaves "
            "every real token attending to the pads. Mask the *keys*: shape (B, 1, 1, L)"
        )
    if got.shape == queries.shape and torch.equal(got, ~queries):
        raise CheckFailed(f"{call} masks queries (shape (B, 1, L, 1)) and has the wrong "
                          f"polarity; expected (B, 1, 1, L) with True = real token")  # fmt: skip
    expect_shape(call, got, (3, 1, 1, 5), "(B, 1, 1, L): it must broadcast over heads and "
                 "queries, and cover the keys")  # fmt: skip
    if torch.equal(got, ~want):
        raise CheckFailed(
            f"{call}: wrong polarity — True must mark real tokens (may attend); you marked "
            "the pads, which is what nn.MultiheadAttention's key_padding_mask expects"
        )
    if not torch.equal(got, want):
        raise CheckFailed(f"{call}: expected position j of sequence b to be True iff "
                          f"j < lengths[b]; got {got[:, 0, 0]}")  # fmt: skip


# --- 06.4 the float16 overflow scale --------------------------------------------------------


@register("06.4", title="Where float16 QKᵀ overflows")
def _overflow(candidate):
    check_formula(
        candidate,
        "overflow_scale",
        [{"d_k": 64}, {"d_k": 16}, {"d_k": 128}],
        lambda d_k: math.sqrt(FP16_MAX / d_k),
        [
            (
                lambda d_k: FP16_MAX / d_k,
                "you forgot the square root: the product is d_k·s², so s = sqrt(65504 / d_k)",
            ),
            (
                lambda d_k: math.sqrt(FP16_MAX / math.sqrt(d_k)),
                "that is the limit when q is "
                "scaled by 1/sqrt(d_k) *before* the product; here the scale comes after, so the "
                "raw product d_k·s² must fit",
            ),
            (
                lambda d_k: math.sqrt(math.log(FP16_MAX) / d_k),
                "ln(65504) ≈ 11.09 is where exp "
                "overflows in the softmax; the question is the product q·k itself",
            ),
            (
                lambda d_k: math.sqrt(torch.finfo(torch.bfloat16).max / d_k),
                "that is bfloat16's range; float16's largest value is 65504",
            ),
        ],
        "two aligned vectors with every element s have q·k = d_k·s², which must stay below "
        "float16's largest value 65504",
    )


# --- 06.5 the size of a KV cache ------------------------------------------------------------


def _kv_bytes(num_layers, batch_size, num_heads, num_kv_heads, head_dim, seq_len,
              bytes_per_element):  # fmt: skip
    """The exercise's argument order, answered by the book's formula."""
    return kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=batch_size,
                          bytes_per_element=bytes_per_element)  # fmt: skip


@register("06.5", title="The size of a KV cache")
def _kv(candidate):
    check_formula(
        candidate,
        "kv_cache_bytes",
        [
            {
                "num_layers": 24,
                "batch_size": 8,
                "num_heads": 16,
                "num_kv_heads": 4,
                "head_dim": 64,
                "seq_len": 2048,
                "bytes_per_element": 2,
            },
            {
                "num_layers": 2,
                "batch_size": 1,
                "num_heads": 8,
                "num_kv_heads": 1,
                "head_dim": 32,
                "seq_len": 100,
                "bytes_per_element": 4,
            },
            {
                "num_layers": 3,
                "batch_size": 2,
                "num_heads": 6,
                "num_kv_heads": 6,
                "head_dim": 16,
                "seq_len": 10,
                "bytes_per_element": 2,
            },
        ],  # fmt: skip
        _kv_bytes,
        [
            (
                lambda nl, b, h, hk, d, t, e: 2 * nl * b * h * d * t * e,
                "the cache holds only "
                "the key/value heads: with GQA/MQA use num_kv_heads, not num_heads",
            ),
            (
                lambda nl, b, h, hk, d, t, e: nl * b * hk * d * t * e,
                "the cache holds keys *and* values: a factor of 2",
            ),
            (
                lambda nl, b, h, hk, d, t, e: 2 * b * hk * d * t * e,
                "every layer has its own keys and values: multiply by num_layers",
            ),
            (
                lambda nl, b, h, hk, d, t, e: 2 * nl * b * hk * d * t,
                "that is a count of numbers; multiply by bytes_per_element for bytes",
            ),
            (
                lambda nl, b, h, hk, d, t, e: 2 * nl * hk * d * t * e,
                "each sequence of the batch has its own cache: multiply by batch",
            ),
        ],
        "2 (keys and values) · layers · batch · key/value heads · head dim · positions · bytes",
    )


# --- 06.6 predict, then run: C22 with a classifier trained without its mask -----------------


@register("06.6", title="Predict, then run: the classifier trained without its mask")
def _c22_without_mask(predict, *, outcome):
    trained = outcome.numbers.get("trained") if isinstance(outcome, Outcome) else None
    if isinstance(outcome, Outcome) and trained != "without its mask":
        raise CheckFailed(
            f"this run trained the classifier {trained or 'as the chapter does'}, not without "
            "its mask: call "
            "c22_sweep_run with train_masked=False, the knob this exercise changes"
        )
    check_prediction(
        predict,
        outcome,
        setting="the classifier trained without its padding mask",
        why={
            "partly": "Two of C22's parts do not depend on training and still hold: with the "
            "mask, padding leaves the real tokens' outputs unchanged, and the combined "
            "padding + causal mask gives torch's output. The third fails: a classifier that "
            "saw pads in training learns to give them no weight itself, so removing the mask "
            "at test time costs it nothing (1.00 at 0 and at 32 pads). 'Padding dilutes' is "
            "a fact about a model trained with its mask and run without it.",
            "reproduced": "Here the classifier trained without its mask still lost accuracy "
            "to padding: it did not learn to ignore the pads in this many steps.",
            "not reproduced": "All three parts failed, including the two that do not depend "
            "on training (the drift with the mask, the combined mask): look at the numbers.",
        },
    )
