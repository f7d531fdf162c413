"""Checks of chapter 5's exercises (long-range dependencies and the cost of attention).

Every answer is compared with the package: the bytes of a real weight tensor from
:func:`attention.functional.scaled_dot_product_attention`,
:func:`attention.efficient.sliding_window.sliding_window_attention`, the band size of
:func:`attention.masks.sliding_window_mask`, :func:`attention.efficient.linear.linear_attention`.
When an answer is wrong, the check recomputes the usual mistakes and names the one that
matches.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention.efficient.linear import linear_attention
from attention.efficient.sliding_window import sliding_window_attention
from attention.functional import scaled_dot_product_attention
from measure.flops import band_pairs, matmul_flop_counter
from measure.memory import peak_extra_bytes

from . import CheckFailed, expect_close, expect_shape, rand_qkv, register
from .helpers import check_formula, check_prediction, expect_int, expect_tensor, matches

# --- 05.1 bytes of the score table -----------------------------------------------------------


def _table_bytes(seq_len, num_heads, batch_size, bytes_per_element) -> int:
    """Bytes of a real weight tensor (B, H, n, n), built on the meta device (no memory)."""
    dtype = {1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[bytes_per_element]
    with torch.device("meta"):
        weights = torch.empty(
            int(batch_size), int(num_heads), int(seq_len), int(seq_len), dtype=dtype
        )
    return weights.numel() * weights.element_size()


@register("05.1", title="Memory of the score table")
def _table(candidate):
    cases = [
        # small and distinct values, so that each mistake gives its own number
        {"seq_len": 10, "num_heads": 3, "batch_size": 2, "bytes_per_element": 4},
        {"seq_len": 512, "num_heads": 8, "batch_size": 1, "bytes_per_element": 4},
        {"seq_len": 4096, "num_heads": 32, "batch_size": 1, "bytes_per_element": 2},  # fp16
        {"seq_len": 32_768, "num_heads": 32, "batch_size": 1, "bytes_per_element": 2},  # 64 GiB
        {"seq_len": 1000, "num_heads": 12, "batch_size": 4, "bytes_per_element": 8},
    ]
    check_formula(
        candidate,
        "score_table_bytes",
        cases,
        _table_bytes,
        [
            (
                lambda n, h, b, nb: b * h * n * nb,
                "the table has n × n entries per head (every query against every key), not n",
            ),
            (
                lambda n, h, b, nb: b * n * n * nb,
                "each head has its own n × n table: multiply by num_heads",
            ),
            (
                lambda n, h, b, nb: h * n * n * nb,
                "each sequence of the batch has its own tables: multiply by batch_size",
            ),
            (
                lambda n, h, b, nb: b * h * n * n,
                "that is a number of elements: multiply by bytes_per_element",
            ),
            (lambda n, h, b, nb: 8 * b * h * n * n * nb, "bytes, not bits: do not multiply by 8"),
            (
                lambda n, h, b, nb: b * h * n * (n + 1) // 2 * nb,
                "without a causal mask the "
                "table is full, not triangular (and even with one, dense attention stores the "
                "whole square)",
            ),
        ],  # fmt: skip
        "one float per (query, key) pair, per head, per sequence: B · H · n² · bytes",
    )


# --- 05.2 band attention ---------------------------------------------------------------------


def _band_variant(q, k, v, left, right, *, strict=False, scale=True, invert=False, dim=-1):
    """Band attention with one deliberate mistake, to name it in the message."""
    lq, lk = q.shape[-2], k.shape[-2]
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    if strict:
        allowed = (j > i - left) & (j < i + right)  # (Lq, Lk)
    else:
        allowed = (j >= i - left) & (j <= i + right)  # (Lq, Lk)
    scores = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(allowed if invert else ~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)  # (B, H, Lq, Lk)
    return weights @ v  # (B, H, Lq, Ev)


@register("05.2", title="Band (sliding-window) attention")
def _band(candidate):
    for length, left, right, seed in ((9, 2, 2, 0), (12, 3, 1, 1), (7, 0, 2, 2), (6, 1, 0, 3)):
        q, k, v = rand_qkv(2, 2, length, dim=4, seed=seed)  # (B, H, L, E)
        call = f"band_attention(q, k, v, left={left}, right={right})"
        got = expect_tensor(call, candidate(q, k, v, left, right))
        expect_shape(call, got, q.shape, "(B, H, L, E): one output per query")
        expected = sliding_window_attention(q, k, v, left=left, right=right)  # (B, H, L, E)
        if matches(got, expected):
            continue
        if matches(got, sliding_window_attention(q, k, v, left=left, right=0)):
            raise CheckFailed(
                f"{call} matches a window that looks only backwards (right=0): query i must "
                f"also see the keys i+1 .. i+right"
            )
        if matches(got, sliding_window_attention(q, k, v, left=0, right=right)):
            raise CheckFailed(
                f"{call} matches a window that looks only forwards (left=0): query i must "
                f"also see the keys i-left .. i-1"
            )
        if matches(got, _band_variant(q, k, v, left, right, strict=True)):
            raise CheckFailed(
                f"{call}: both ends of the window are inclusive, i - left <= j <= i + right "
                f"(you used strict inequalities)"
            )
        if matches(got, _band_variant(q, k, v, left, right, scale=False)):
            raise CheckFailed(f"{call}: divide the scores by sqrt(E) before the softmax")
        if matches(got, _band_variant(q, k, v, left, right, invert=True)):
            raise CheckFailed(
                f"{call}: the mask is inverted — keep the scores inside the band and set those "
                f"outside to -inf (masked_fill fills where the mask is True)"
            )
        if matches(got, _band_variant(q, k, v, left, right, dim=-2)):
            raise CheckFailed(
                f"{call}: the softmax must run over the keys (the last axis), so that each "
                f"query's weights sum to 1"
            )
        if matches(got, scaled_dot_product_attention(q, k, v)):
            raise CheckFailed(f"{call} equals full attention: the band mask is not applied")
        expect_close(call, got, expected, hint="compare with softmax(q kᵀ/√E + mask) v")


# --- 05.3 what a window saves ----------------------------------------------------------------


@register("05.3", title="How many scores a window saves")
def _savings(candidate):
    cases = [
        {"seq_len": 10, "left": 2, "right": 2},
        {"seq_len": 16, "left": 3, "right": 0},
        {"seq_len": 4096, "left": 256, "right": 256},
        {"seq_len": 2048, "left": 127, "right": 0},
        {"seq_len": 8, "left": 20, "right": 20},  # wider than the sequence: no saving
    ]
    check_formula(
        candidate,
        "window_savings",
        cases,
        lambda n, left, right: n * n / band_pairs(int(n), int(left), int(right)),
        [
            (
                lambda n, left, right: n / (left + right + 1),
                "that ignores the edges: the "
                "first `left` and last `right` queries have fewer keys in their window, so the "
                "band holds fewer pairs than n × (left + right + 1)",
            ),
            (
                lambda n, left, right: n / max(left + right, 1),
                "a window holds left + right + 1 keys: count the query's own position",
            ),
            (
                lambda n, left, right: band_pairs(int(n), int(left), int(right)) / (n * n),
                "upside down: full attention scores n² pairs, the band fewer; the saving is n² / "
                "(pairs in the band) > 1",
            ),
        ],  # fmt: skip
        "count, for each query i, the keys max(0, i - left) .. min(n - 1, i + right)",
        rel_tol=1e-9,
    )


# --- 05.4 linear attention -------------------------------------------------------------------


def _linear_variant(q, k, v, eps, *, plus_one=True, normalise=True):
    phi_q, phi_k = F.elu(q), F.elu(k)
    if plus_one:
        phi_q, phi_k = phi_q + 1, phi_k + 1
    out = phi_q @ (phi_k.transpose(-2, -1) @ v)  # (B, H, L, Ev)
    if normalise:
        out = out / (phi_q @ phi_k.sum(-2).unsqueeze(-1) + eps)  # (B, H, L, 1)
    return out


@register("05.4", title="Linear attention with φ(x) = elu(x) + 1")
def _linear(candidate):
    for b, h, lq, lk, e, ev, seed in ((2, 2, 6, 6, 4, 4, 0), (1, 3, 5, 9, 3, 2, 1)):
        q, k, v = rand_qkv(b, h, lq, lk, dim=e, value_dim=ev, seed=seed)  # (B, H, L*, E*)
        call = f"linear_attention_noncausal(q {tuple(q.shape)}, k {tuple(k.shape)}, v)"
        got = expect_tensor(call, candidate(q, k, v))
        expect_shape(call, got, (b, h, lq, ev), "(B, H, Lq, Ev): one output per query")
        expected = linear_attention(q, k, v, causal=False)  # (B, H, Lq, Ev)
        if matches(got, expected):
            continue
        if matches(got, _linear_variant(q, k, v, 1e-6, plus_one=False)):
            raise CheckFailed(
                f"{call}: φ(x) = elu(x) + 1, not elu(x): without the + 1 features can be "
                f"negative and the weights φ(q)·φ(k) are no longer positive"
            )
        if matches(got, _linear_variant(q, k, v, 1e-6, normalise=False)):
            raise CheckFailed(
                f"{call}: divide by the normaliser φ(q_i) · Σ_j φ(k_j), so that each query's "
                f"weights sum to 1 (as a softmax's do)"
            )
        if matches(got, scaled_dot_product_attention(q, k, v)):
            raise CheckFailed(
                f"{call} equals softmax attention: replace exp(q·k/√E) by the kernel "
                f"φ(q)·φ(k), with no scale"
            )
        expect_close(call, got, expected, hint="out_i = φ(q_i) S / (φ(q_i)·z), S = φ(K)ᵀ V")
    # Linear in n: the answer must still match on a long sequence, and its cost must grow like
    # n. (φ(Q)φ(K)ᵀ)V gives the same values through the Lq × Lk table the exercise forbids,
    # so the check measures the cost: peak bytes and matmul FLOPs per doubling of n (2× for
    # φ(Q)(φ(K)ᵀV), 4× for the table; the line between them is 3×).
    q, k, v = rand_qkv(1, 1, 2048, dim=8, seed=5)
    expect_close(
        "linear_attention_noncausal at n = 2048",
        candidate(q, k, v),
        linear_attention(q, k, v, causal=False),
        atol=1e-4,
    )
    (peak_1k, flops_1k), (peak_2k, flops_2k) = (_linear_cost(candidate, n) for n in (1024, 2048))
    grows = {"peak memory": peak_2k / peak_1k, "matmul FLOPs": flops_2k / flops_1k}
    too_fast = {what: r for what, r in grows.items() if r > LINEAR_GROWTH_MAX}
    if too_fast:
        raise CheckFailed(
            "linear_attention_noncausal: from n = 1024 to 2048 the "
            + " and ".join(f"{what} grew {r:.1f}×" for what, r in too_fast.items())
            + " (linear cost doubles): the values are right, but the code builds the n × n "
            "table φ(Q)φ(K)ᵀ. Multiply φ(K)ᵀ V (E × Ev) first, then φ(Q) by it"
        )


# Per doubling of n: 2× for a linear-cost route, 4× for one that holds the n × n table.
LINEAR_GROWTH_MAX = 3.0


def _linear_cost(candidate, n: int) -> tuple[float, float]:
    """(peak extra bytes, matmul FLOPs) of one call of ``candidate`` on ``(1, 1, n, 8)``."""
    q, k, v = rand_qkv(1, 1, n, dim=8, seed=6)  # (1, 1, n, 8)
    peak = peak_extra_bytes(lambda: candidate(q, k, v))
    counter = matmul_flop_counter()
    with counter:
        candidate(q, k, v)
    return float(peak), float(counter.get_total_flops())


# --- 05.5 the longest sequence that fits ----------------------------------------------------


@register("05.5", title="The longest sequence whose scores fit")
def _longest(candidate):
    configs = (
        # memory, heads, bytes: the answers straddle perfect squares
        (80 * 2**30, 32, 2),  # an 80 GiB GPU, 32 heads, fp16
        (16 * 2**30, 16, 4),
        (1000, 2, 4),  # 125 elements per head: n = 11
        (4 * 2**20, 1, 4),  # exactly 1024²·4: n = 1024
        (4 * 2**20 - 1, 1, 4),  # one byte short: n = 1023
    )
    for memory, h, nbytes in configs:
        call = f"longest_sequence({memory}, {h}, {nbytes})"
        got = candidate(memory, h, nbytes)
        if isinstance(got, float) and math.isclose(got, math.sqrt(memory / (h * nbytes))):
            raise CheckFailed(
                f"{call} is {got!r}: a length is a whole number of tokens; round down (math.isqrt)"
            )
        got = expect_int(call, got)
        expected = math.isqrt(memory // (h * nbytes))
        if got == expected:
            continue
        mistakes = (
            (math.isqrt(memory // nbytes), "each head has its own n × n table: divide the "
             "memory by num_heads too"),
            (math.isqrt(memory // h), "the table holds elements of bytes_per_element bytes "
             "each: divide by it"),
            (expected + 1, "round down: n + 1 tokens would need more than the memory"),
            (memory // (h * nbytes), "memory grows with n², so n is a square root"),
        )  # fmt: skip
        hint = next((text for value, text in mistakes if value == got), None)
        raise CheckFailed(
            f"{call} is {got}, expected {expected}"
            + (f": {hint}" if hint else ": the largest n with num_heads · n² · bytes <= memory")
        )


# --- 05.6 predict, then run: the LSTM's forget-gate bias -------------------------------------

FORGET_BIAS = "+1"


@register("05.6", title="Predict, then run: the LSTM's forget-gate bias +1")
def _predict_forget_bias(predict, *, outcome):
    numbers = getattr(outcome, "numbers", {})
    if isinstance(numbers, dict) and numbers.get("forget-gate bias") != FORGET_BIAS:
        raise CheckFailed(
            f"the run's forget-gate bias is {numbers.get('forget-gate bias')!r}, not "
            f"{FORGET_BIAS!r}: run c16_sweep_run(seeds=[0], forget_bias=1.0) (torch's default "
            f"initialisation is the chapter's baseline, not the experiment)"
        )
    check_prediction(
        predict,
        outcome,
        setting="forget-gate bias +1",
        why={
            "reproduced": "Both recurrent gradients still vanished below their thresholds and "
            "attention stayed flat: a bias of +1 did not open the gate enough.",
            "partly": "Attention stayed flat, but with its forget gate half open from the start "
            "the LSTM's far/near ratio stays above C16_LSTM_VANISHED: the contrast holds at "
            "torch's default initialisation, not at +1.",
            "not reproduced": "An attention gradient was not flat in the distance.",
        },
    )
