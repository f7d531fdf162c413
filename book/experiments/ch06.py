"""Experiments of chapter 6: engineering pitfalls of attention (C20–C24) and the KV cache.

- C20 (:func:`train_decoder`): a one-block GPT-style character model
  (:class:`attention.decoder.CharDecoder`) trained on Python's own documentation
  (:func:`book.data.pydoc_text`) with and without the causal mask; the teacher-forced loss,
  the *honest* left-to-right loss (:func:`honest_next_token_loss`) and greedy samples.
- C21 (:func:`masked_softmax`, :data:`FILLS`, :data:`CAUSAL_VARIANTS`, :data:`MASK_TESTS`):
  ``-1e9``, ``-inf``, ``finfo.min`` and the package's safe softmax on partly and fully masked
  rows, in float32 and float16; the article's unit test and the ones it misses.
- C22 (:func:`padding_drift`, :class:`PadAwareClassifier`, :func:`train_padding_classifier`):
  padding with and without a key-padding mask.
- C23 (:func:`overflow_scale_predicted`, :func:`overflow_scale_measured`,
  :func:`naive_softmax`, :class:`ScoreMonitor`): float16 overflow of ``QKᵀ`` and of ``exp``.
- C24 (:func:`peak_memory`, :func:`stack_attention`): exact peak memory of dense attention,
  the package's flash attention and gradient checkpointing over a stack of attention layers.
- The KV cache (:func:`decode_seconds`; its size: :func:`measure.memory.kv_cache_bytes`).

The asserting functions ``assert_...`` raise ``AssertionError`` when the claim is false.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from attention.blocks import SequenceClassifier
from attention.checks import check_choice, check_positive_int
from attention.decoder import CharDecoder, generate
from attention.efficient import flash_attention
from attention.functional import safe_softmax, scaled_dot_product_attention
from attention.heads import MultiHeadAttention
from attention.masks import causal_mask
from book.data import CharVocab, char_windows, pydoc_text
from book.experiments.training import fit, torch_threads
from measure.memory import peak_extra_bytes
from measure.timing import min_seconds

Tensor = torch.Tensor

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504
EXP_LIMIT_FP16 = math.log(FP16_MAX)  # exp(x) overflows float16 past x ≈ 11.09

# ------------------------------------------------------------------------------------------
# Data: Python's documentation, split 90 / 10 in reading order
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextData:
    vocab: CharVocab
    train: Tensor  # (N_train,) int64 ids
    test: Tensor  # (N_test,)


@lru_cache(maxsize=1)
def text_data(train_fraction: float = 0.9) -> TextData:
    """``pydoc_data.topics`` as ids; the first 90 % trains, the last 10 % is held out."""
    text = pydoc_text()
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text)
    n = int(len(ids) * train_fraction)
    return TextData(vocab, ids[:n], ids[n:])


def unigram_loss(train: Tensor, targets: Tensor, vocab_size: int) -> float:
    """Cross-entropy (nats) of ``targets`` under the character frequencies of ``train``
    (add-one smoothed): the loss of a model that ignores the context entirely."""
    counts = torch.bincount(train, minlength=vocab_size).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[targets.flatten()].mean())


# ------------------------------------------------------------------------------------------
# C20: the missing causal mask
# ------------------------------------------------------------------------------------------

D_MODEL, NUM_HEADS, NUM_LAYERS, D_FF = 48, 4, 1, 96
SEQ_LEN, BATCH, STEPS, LR = 48, 16, 200, 1e-2


def build_decoder(vocab_size: int, *, causal: bool, seed: int, num_kv_heads=None, max_len=SEQ_LEN):
    torch.manual_seed(seed)
    return CharDecoder(
        vocab_size, d_model=D_MODEL, num_heads=NUM_HEADS, num_layers=NUM_LAYERS, d_ff=D_FF,
        max_len=max_len, causal=causal, num_kv_heads=num_kv_heads,
    )  # fmt: skip


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Teacher-forced next-token cross-entropy: every position at once, in one forward."""
    inputs, targets = batch  # (B, L) each
    return F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())


@torch.no_grad()
def honest_next_token_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> float:
    """Next-token loss as generation meets it: the prediction at position ``t`` is read from a
    forward pass over ``inputs[:, :t+1]`` only, so no later token can be seen, whatever the
    model's mask. For a causal model this equals the teacher-forced loss."""
    losses = []
    for t in range(inputs.shape[1]):
        logits = model(inputs[:, : t + 1])[:, -1]  # (B, V): the last position of the prefix
        losses.append(F.cross_entropy(logits, targets[:, t], reduction="sum"))
    return float(torch.stack(losses).sum() / targets.numel())


@dataclass(frozen=True)
class DecoderRun:
    causal: bool
    seed: int
    losses: list[float]  # training loss per step
    teacher_forced: float  # held-out loss, all positions in one forward
    honest: float  # held-out loss, left to right
    max_scores: list[float]  # the largest scaled attention score per training step
    max_products: list[float]  # the largest |q·k| before scaling, per training step
    seconds: float
    model: CharDecoder

    @property
    def final_train_loss(self) -> float:
        return sum(self.losses[-20:]) / len(self.losses[-20:])


def eval_windows(data: TextData, *, n: int = 32, seed: int = 99) -> tuple[Tensor, Tensor]:
    return char_windows(data.test, length=SEQ_LEN, batch_size=n,
                        generator=torch.Generator().manual_seed(seed))  # fmt: skip


def train_decoder(
    *, causal: bool, seed: int, steps: int = STEPS, data: TextData | None = None
) -> DecoderRun:
    """Train the chapter's decoder (parameters from ``seed``, batches from ``seed + 1``, the
    same batches with and without the mask), watching the max attention score."""
    data = text_data() if data is None else data
    model = build_decoder(data.vocab.size, causal=causal, seed=seed)
    with ScoreMonitor(model) as monitor:
        log = fit(
            model,
            lambda g: char_windows(data.train, length=SEQ_LEN, batch_size=BATCH, generator=g),
            lm_loss, steps=steps, lr=LR, data_seed=seed + 1, clip=1.0, threads=1,
        )  # fmt: skip
    inputs, targets = eval_windows(data)
    with torch.no_grad(), torch_threads(1):
        teacher = float(lm_loss(model, (inputs, targets)))
        honest = honest_next_token_loss(model, inputs, targets)
    return DecoderRun(causal, seed, log.losses, teacher, honest, monitor.max_scores,
                      monitor.max_products, log.seconds, model)  # fmt: skip


def greedy_samples(model: CharDecoder, data: TextData, *, n: int = 3, prompt_len: int = 12):
    """Greedy continuations of ``n`` held-out prompts to the model's full length (recomputed
    left to right: correct with or without the mask)."""
    inputs, _ = eval_windows(data, n=n, seed=3)
    out = generate(model, inputs[:, :prompt_len], max_new_tokens=model.max_len - prompt_len,
                   use_cache=False)  # fmt: skip
    return [(data.vocab.decode(row[:prompt_len]), data.vocab.decode(row[prompt_len:]))
            for row in out.tokens]  # fmt: skip


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    return frozenset(re.findall(r"[A-Za-z]{2,}", pydoc_text()[: int(len(pydoc_text()) * 0.9)]))


def real_word_rate(texts: Sequence[str]) -> float:
    """Share of the letter runs (two letters or more) in ``texts`` that are words of the
    training text; 0 when there is none."""
    words = [w for t in texts for w in re.findall(r"[A-Za-z]{2,}", t)]
    return sum(w in known_words() for w in words) / len(words) if words else 0.0


def assert_c20_no_mask_cheats(
    train_masked: Sequence[float],
    train_unmasked: Sequence[float],
    honest_masked: Sequence[float],
    honest_unmasked: Sequence[float],
    *,
    baseline: float,
    ratio: float,
) -> None:
    """C20, both halves, seed by seed (paired by seed). "The training loss falls fast": without
    the mask every seed ends below ``ratio`` × the masked loss of the same seed. "Generation
    collapses": without the mask the honest left-to-right loss of every seed is worse than
    ``baseline`` (a model that ignores the context), while with the mask every seed beats it."""
    for m, u in zip(train_masked, train_unmasked, strict=True):
        assert u < ratio * m, (
            f"without the mask the training loss {u:.3f} is not below {ratio} x the masked "
            f"{m:.3f}: it did not fall faster"
        )
    for h in honest_masked:
        assert h < baseline, f"the masked model ({h:.3f}) does not beat the baseline {baseline:.3f}"
    for h in honest_unmasked:
        assert h > baseline, (
            f"without the mask the honest loss {h:.3f} beats the context-free baseline "
            f"{baseline:.3f}: generation did not collapse"
        )


# ------------------------------------------------------------------------------------------
# C23's monitor (used while training C20's models): the largest attention score
# ------------------------------------------------------------------------------------------


class ScoreMonitor:
    """Context manager: hooks every block's query and key projections and records, per forward
    pass, the largest scaled score ``q·k/√d_k`` and the largest raw product ``|q·k|`` over all
    layers, heads and pairs (mask ignored: a masked score is still computed)."""

    def __init__(self, model: CharDecoder) -> None:
        self.model = model
        self.max_scores: list[float] = []
        self.max_products: list[float] = []
        self._handles = []
        self._q: dict[int, Tensor] = {}
        self._step: list[tuple[float, float]] = []

    def _on_q(self, layer: int):
        def hook(_module, _inputs, output):
            self._q[layer] = output.detach()

        return hook

    def _on_k(self, layer: int, attn: MultiHeadAttention):
        def hook(_module, _inputs, output):
            product = raw_products(self._q.pop(layer), output.detach(), attn)
            top = float(product.abs().max())
            self._step.append((top / math.sqrt(attn.head_dim), top))
            if layer == len(self.model.blocks) - 1:
                self.max_scores.append(max(s for s, _ in self._step))
                self.max_products.append(max(p for _, p in self._step))
                self._step = []

        return hook

    def __enter__(self) -> ScoreMonitor:
        for i, block in enumerate(self.model.blocks):
            self._handles.append(block.attn.q_proj.register_forward_hook(self._on_q(i)))
            self._handles.append(block.attn.k_proj.register_forward_hook(self._on_k(i, block.attn)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def raw_products(q_flat: Tensor, k_flat: Tensor, attn: MultiHeadAttention) -> Tensor:
    """``q·k`` for every head and pair, from the projections ``(B, L, D)`` and ``(B, L, H_kv·Dh)``:
    ``(B, H, L, L)``, before the ``1/√d_k`` scale."""
    b, l, _ = q_flat.shape
    q = q_flat.view(b, l, attn.num_heads, attn.head_dim).transpose(1, 2)  # (B, H, L, Dh)
    k = k_flat.view(b, l, attn.num_kv_heads, attn.head_dim).transpose(1, 2)  # (B, H_kv, L, Dh)
    k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)  # (B, H, L, Dh)
    return q @ k.transpose(-2, -1)  # (B, H, L, L)


@torch.no_grad()
def max_score(model: CharDecoder, tokens: Tensor) -> float:
    """The largest scaled score of ``model`` on ``tokens``, computed directly (layer by layer,
    the residual stream rebuilt with the blocks themselves): checks the monitor."""
    x = model.pos(model.embed(tokens))  # (B, L, D)
    best = -math.inf
    for block in model.blocks:
        h = block.norm1(x)  # (B, L, D)
        product = raw_products(block.attn.q_proj(h), block.attn.k_proj(h), block.attn)
        best = max(best, float(product.abs().max()) / math.sqrt(block.attn.head_dim))
        x = block(x)  # (B, L, D)
    return best


def assert_monitor_matches(recorded: float, direct: float, *, rel: float = 1e-5) -> None:
    """The monitor's value for a forward pass equals the max score computed directly."""
    assert abs(recorded - direct) <= rel * max(1.0, abs(direct)), (
        f"the monitor recorded {recorded:.6g}, the direct computation gives {direct:.6g}"
    )


# ------------------------------------------------------------------------------------------
# C21: masking with a large negative
# ------------------------------------------------------------------------------------------

FILLS = ("-1e9", "-inf", "finfo.min", "safe softmax")


def masked_softmax(scores: Tensor, allowed: Tensor, fill: str) -> Tensor:
    """Softmax over the last axis with the keys where ``allowed`` is False masked by ``fill``:
    ``"-1e9"``, ``"-inf"``, ``"finfo.min"`` (of the scores' dtype), each by ``masked_fill``
    then ``torch.softmax``; or ``"safe softmax"``: ``-inf`` then the package's safe softmax.
    In float16 ``masked_fill(-1e9)`` raises a ``RuntimeError`` (the value does not fit)."""
    check_choice("fill", fill, FILLS)
    if fill == "safe softmax":
        return safe_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    value = {"-1e9": -1e9, "-inf": float("-inf"),
             "finfo.min": torch.finfo(scores.dtype).min}[fill]  # fmt: skip
    return torch.softmax(scores.masked_fill(~allowed, value), dim=-1)


def describe_row(weights: Tensor, allowed: Tensor) -> str:
    """What a softmax gave one row: ``"NaN"``, ``"zeros"``, ``"uniform over masked keys"``,
    ``"masked keys get 0"`` or ``"masked keys get <max weight>"``."""
    if torch.isnan(weights).any():
        return "NaN"
    if not allowed.any():
        if torch.all(weights == 0):
            return "zeros"
        if torch.allclose(weights, torch.full_like(weights, 1.0 / weights.numel())):
            return "uniform over masked keys"
        return f"weights sum to {float(weights.sum()):.3g}"
    leak = float(weights[~allowed].abs().max()) if (~allowed).any() else 0.0
    return "masked keys get 0" if leak == 0.0 else f"masked keys get {leak:.2g}"


def fill_report(dtype: torch.dtype = torch.float32, seed: int = 0) -> dict[str, dict[str, str]]:
    """``report[fill][case]`` for the cases ``"partly masked row"`` and ``"fully masked row"``
    (scores ~ N(0, 3²), one row of each), in ``dtype``; an error is reported by its type and
    message."""
    g = torch.Generator().manual_seed(seed)
    scores = (3 * torch.randn(2, 6, generator=g)).to(dtype)  # (2 rows, 6 keys)
    allowed = torch.tensor([[True, True, True, False, False, False], [False] * 6])
    report = {}
    for fill in FILLS:
        try:
            w = masked_softmax(scores, allowed, fill)
            report[fill] = {"partly masked row": describe_row(w[0], allowed[0]),
                            "fully masked row": describe_row(w[1], allowed[1])}  # fmt: skip
        except RuntimeError as err:
            text = f"raises RuntimeError: {err}"
            report[fill] = {"partly masked row": text, "fully masked row": text}
    return report


def additive_half_mask(allowed: Tensor, value: float = -1e9) -> Tensor:
    """The other way people write ``-1e9`` in float16: an additive float mask built in float32
    and cast. ``-1e9`` becomes ``-inf`` in the cast (float16 stops at ±65504)."""
    return torch.where(allowed, 0.0, value).to(torch.float16)


# The mask implementations the unit tests are run on: the right one and plausible slips.
CAUSAL_VARIANTS: dict[str, Callable[[int], Tensor]] = {
    "correct (j <= i)": lambda n: causal_mask(n),
    "diagonal only (j == i)": lambda n: torch.eye(n, dtype=torch.bool),
    "leaks the next token (j <= i + 1)": lambda n: ~torch.ones(n, n, dtype=torch.bool).triu(2),
    "strict (j < i)": lambda n: causal_mask(n) & ~torch.eye(n, dtype=torch.bool),
    "reversed polarity (True = masked)": lambda n: ~causal_mask(n),
}
CORRECT_MASK = "correct (j <= i)"


def _attend_with(mask: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """Self-attention of ``x (1, 1, L, E)`` (q = k = v) with a bool mask, the package's
    reference: output and weights."""
    return scaled_dot_product_attention(x, x, x, mask, need_weights=True)


def position_zero_test(mask: Tensor) -> bool:
    """The article's test: position 0 attends only to itself (weight 1 on key 0)."""
    x = torch.randn(1, 1, mask.shape[0], 8, generator=torch.Generator().manual_seed(0))
    _, w = _attend_with(mask, x)
    return bool(torch.allclose(w[0, 0, 0], F.one_hot(torch.tensor(0), mask.shape[0]).float()))


def future_leak_test(mask: Tensor) -> bool:
    """Changing the tokens after position t leaves the outputs up to t unchanged, every t."""
    n = mask.shape[0]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 1, n, 8, generator=g)
    out, _ = _attend_with(mask, x)
    for t in range(n - 1):
        y = x.clone()
        y[..., t + 1 :, :] = torch.randn(1, 1, n - t - 1, 8, generator=g)
        if not torch.allclose(_attend_with(mask, y)[0][..., : t + 1, :], out[..., : t + 1, :]):
            return False
    return True


def sees_past_test(mask: Tensor) -> bool:
    """Every query gives a positive weight to itself and every earlier key."""
    x = torch.randn(1, 1, mask.shape[0], 8, generator=torch.Generator().manual_seed(2))
    _, w = _attend_with(mask, x)
    return bool((w[0, 0][causal_mask(mask.shape[0])] > 0).all())


MASK_TESTS: dict[str, Callable[[Tensor], bool]] = {
    "position 0 sees only itself (article)": position_zero_test,
    "no future leak": future_leak_test,
    "sees itself and its past": sees_past_test,
}
ARTICLE_TEST = "position 0 sees only itself (article)"


def mask_test_table(n: int = 6) -> dict[str, dict[str, bool]]:
    """``table[variant][test]``: True when the test passes that mask implementation."""
    return {name: {t: fn(build(n)) for t, fn in MASK_TESTS.items()}
            for name, build in CAUSAL_VARIANTS.items()}  # fmt: skip


def assert_c21_large_negative(report32: Mapping[str, Mapping[str, str]]) -> None:
    """C21 as stated: in float32, masking with ``-1e9`` gives the masked keys exactly zero
    weight on a row that keeps at least one key."""
    got = report32["-1e9"]["partly masked row"]
    assert got == "masked keys get 0", f"-1e9 in float32: {got}"


# What the chapter states about the rows the claim leaves out, fill by fill (float32 and
# float16): a fully masked row, and -1e9 in half precision.
C21_FULLY_MASKED = {
    "-1e9": "uniform over masked keys",
    "-inf": "NaN",
    "finfo.min": "uniform over masked keys",
    "safe softmax": "zeros",
}


def assert_c21_edge_cases(
    report32: Mapping[str, Mapping[str, str]],
    report16: Mapping[str, Mapping[str, str]],
    cast_fill: float,
    cast_fully_masked: Tensor,
    doubled_min: float,
) -> None:
    """The behaviours the chapter reports beyond C21 as stated, each asserted:

    - a fully masked row, float32 and float16 (where the fill fits): ``-1e9`` and
      ``finfo.min`` give a uniform row, ``-inf`` gives NaN, the safe softmax zeros
      (:data:`C21_FULLY_MASKED`);
    - float16: ``masked_fill`` with ``-1e9`` raises; an additive float32 mask cast to float16
      turns ``-1e9`` into ``-inf`` (``cast_fill``) and its fully masked row into NaN
      (``cast_fully_masked``, the softmax of that row);
    - two ``finfo.min`` masks summed overflow to ``-inf`` (``doubled_min``).
    """
    for name, report in (("float32", report32), ("float16", report16)):
        for fill, expected in C21_FULLY_MASKED.items():
            got = report[fill]["fully masked row"]
            if name == "float16" and fill == "-1e9":
                assert got.startswith("raises RuntimeError"), f"float16 -1e9: {got}"
                continue
            assert got == expected, f"{name} {fill}, fully masked row: {got}, expected {expected}"
    assert cast_fill == float("-inf"), f"-1e9 cast to float16 gave {cast_fill}, expected -inf"
    assert torch.isnan(cast_fully_masked).all(), (
        f"softmax of a fully masked float16 row with the cast mask: {cast_fully_masked.tolist()}"
    )
    assert doubled_min == float("-inf"), f"finfo.min + finfo.min = {doubled_min}, expected -inf"


def assert_tests_verdicts(
    table: Mapping[str, Mapping[str, bool]], *, article_misses: Sequence[str]
) -> None:
    """The correct mask passes every test; the article's test passes exactly the wrong masks in
    ``article_misses``; every wrong mask fails at least one of the tests."""
    assert all(table[CORRECT_MASK].values()), (
        f"a test rejects the correct mask: {table[CORRECT_MASK]}"
    )
    passed = sorted(n for n, row in table.items() if n != CORRECT_MASK and row[ARTICLE_TEST])
    assert passed == sorted(article_misses), (
        f"the article's test passes these wrong masks: {passed}, expected {sorted(article_misses)}"
    )
    missed = [n for n, row in table.items() if n != CORRECT_MASK and all(row.values())]
    assert not missed, f"every test passes these wrong masks: {missed}"


# ------------------------------------------------------------------------------------------
# C22: padding
# ------------------------------------------------------------------------------------------

PAD = 0


def padding_drift(
    pads: Sequence[int], *, masked: bool, n_real: int = 5, seed: int = 0
) -> list[float]:
    """Largest change of the real tokens' outputs of one attention layer when ``p`` padding
    positions (the embedding of a pad token) follow them, against no padding, per ``p``."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    attn = MultiHeadAttention(16, 2).eval()
    real = torch.randn(1, n_real, 16, generator=g)  # (1, n, D)
    pad_vec = torch.randn(1, 1, 16, generator=g)  # the pad token's embedding
    with torch.no_grad():
        base = attn(real)  # (1, n, D)
        drift = []
        for p in pads:
            x = torch.cat([real, pad_vec.expand(1, p, 16)], dim=1)  # (1, n + p, D)
            keep = torch.arange(n_real + p) < n_real  # (L,)
            mask = keep[None, None, None, :] if masked else None  # (1, 1, 1, L) keys only
            out = attn(x, mask=mask)[:, :n_real]  # (1, n, D)
            drift.append(float((out - base).abs().max()))
    return drift


def assert_c22_padding_invariance(
    drift_masked: Sequence[float], drift_unmasked: Sequence[float], *, atol: float
) -> None:
    """With the key-padding mask the real tokens' outputs do not move with the amount of
    padding (every drift ``<= atol``); without it they do, once there is padding."""
    assert max(drift_masked) <= atol, f"masked outputs moved with padding: {list(drift_masked)}"
    assert all(d > atol for d in drift_unmasked[1:]), (
        f"unmasked outputs did not move with padding: {list(drift_unmasked)}"
    )


CLS_VOCAB, CLS_MIN_LEN, CLS_MAX_LEN, CLS_TRAIN_PAD = 6, 6, 12, 4


def majority_batch(batch_size: int, generator: torch.Generator, *, pad: int = CLS_TRAIN_PAD):
    """Sequences of 6–12 tokens from {1, …, 5} followed by 0–``pad`` pad tokens (id 0); label 1
    when token 1 occurs more often than token 2, else 0. Ties are broken by a last token."""
    lengths = torch.randint(CLS_MIN_LEN, CLS_MAX_LEN + 1, (batch_size,), generator=generator)
    extra = torch.randint(0, pad + 1, (batch_size,), generator=generator)
    width = int((lengths + extra).max())
    tokens = torch.randint(1, CLS_VOCAB, (batch_size, width), generator=generator)
    positions = torch.arange(width)[None, :]  # (1, W)
    tokens = tokens.masked_fill(positions >= lengths[:, None], PAD)  # (B, W)
    ones = (tokens == 1).sum(1)
    twos = (tokens == 2).sum(1)
    tie = ones == twos
    last = tokens[torch.arange(batch_size), lengths - 1]
    tokens[torch.arange(batch_size), lengths - 1] = torch.where(
        tie, torch.where(last == 1, 2, 1), last
    )
    labels = ((tokens == 1).sum(1) > (tokens == 2).sum(1)).long()
    return tokens, labels


def with_padding(tokens: Tensor, p: int) -> Tensor:
    """``tokens`` with ``p`` more pad tokens appended to every sequence."""
    return torch.cat([tokens, tokens.new_full((tokens.shape[0], p), PAD)], dim=1)


class PadAwareClassifier(nn.Module):
    """A :class:`attention.blocks.SequenceClassifier` that finds its padding from the pad id
    (``tokens != 0``). ``use_mask=False`` is the bug: the pads are then attended to and pooled
    like real tokens."""

    def __init__(self, *, seed: int, max_len: int = 64) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.inner = SequenceClassifier(
            CLS_VOCAB, 2, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_len=max_len,
            positional="none", pooling="mean",
        )  # fmt: skip
        self.use_mask = True

    def forward(self, tokens: Tensor) -> Tensor:
        keep = tokens != PAD if self.use_mask else None  # (B, L) True = real token
        return self.inner(tokens, keep=keep)  # (B, 2)


def train_padding_classifier(seed: int, *, steps: int = 60) -> PadAwareClassifier:
    model = PadAwareClassifier(seed=seed)
    fit(model, lambda g: majority_batch(32, g),
        lambda m, b: F.cross_entropy(m(b[0]), b[1]),
        steps=steps, lr=3e-3, data_seed=seed + 1, clip=1.0, threads=1)  # fmt: skip
    return model


@torch.no_grad()
def accuracy_vs_padding(
    model: PadAwareClassifier, pads: Sequence[int], *, masked: bool, seed: int = 1000
) -> list[float]:
    """Held-out accuracy with ``p`` extra pad tokens per sequence, with or without the mask."""
    tokens, labels = majority_batch(512, torch.Generator().manual_seed(seed), pad=0)
    model.use_mask = masked
    try:
        return [float((model(with_padding(tokens, p)).argmax(-1) == labels).float().mean())
                for p in pads]  # fmt: skip
    finally:
        model.use_mask = True


def assert_c22_accuracy(
    masked: Sequence[Sequence[float]], unmasked: Sequence[Sequence[float]], *, drop: float
) -> None:
    """Per seed, accuracy against the padding lengths: with the mask it does not change at
    all; without it, the longest padding costs at least ``drop`` against no padding."""
    for row in masked:
        assert max(row) - min(row) == 0.0, f"masked accuracy moved with padding: {list(row)}"
    for row in unmasked:
        assert row[0] - row[-1] >= drop, (
            f"unmasked accuracy fell by only {row[0] - row[-1]:.3f} (< {drop}): {list(row)}"
        )


# ------------------------------------------------------------------------------------------
# C23: float16 overflow
# ------------------------------------------------------------------------------------------


def overflow_scale_predicted(d_k: int, *, scale_first: bool = False) -> float:
    """The element size ``s`` at which ``q·k`` of two aligned vectors (every element ``s``)
    reaches float16's max: ``d_k s² = 65504``, or ``√d_k s² = 65504`` when ``q`` is scaled by
    ``1/√d_k`` before the product."""
    d_k = check_positive_int("d_k", d_k)
    return math.sqrt(FP16_MAX / (math.sqrt(d_k) if scale_first else d_k))


def _overflows(s: float, d_k: int, scale_first: bool) -> bool:
    q = torch.full((1, d_k), s, dtype=torch.float16)
    if scale_first:
        q = q / math.sqrt(d_k)
    return bool(torch.isinf(q @ torch.full((d_k, 1), s, dtype=torch.float16)).any())


def overflow_scale_measured(d_k: int, *, scale_first: bool = False) -> float:
    """The smallest float16 element size ``s`` (aligned q = k = s·1) whose float16 product
    ``q @ kᵀ`` is ``inf``: a search over every float16 value from 1 to 65504."""
    candidates = torch.arange(0x3C00, 0x7BFF + 1, dtype=torch.int16).view(torch.float16)  # 1..max
    lo, hi = 0, len(candidates) - 1
    if not _overflows(float(candidates[hi]), d_k, scale_first):
        return math.inf
    while lo < hi:  # first candidate that overflows
        mid = (lo + hi) // 2
        if _overflows(float(candidates[mid]), d_k, scale_first):
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[lo])


def naive_softmax(scores: Tensor) -> Tensor:
    """``exp(s) / Σ exp(s)`` as written in a textbook, without subtracting the max."""
    e = scores.exp()
    return e / e.sum(dim=-1, keepdim=True)


def first_nan_score(kind: str, dtype: torch.dtype = torch.float16) -> float:
    """The smallest top score ``m`` (a row ``[m, 0, 0, 0]``, ``m`` swept over float16 values
    from 1 to 65504) at which the softmax ``kind`` gives NaN or inf: ``"naive"``
    (:func:`naive_softmax`), ``"torch"`` (``torch.softmax``) or ``"package"`` (float32 inside)."""
    check_choice("kind", kind, ("naive", "torch", "package"))
    values = torch.arange(0x3C00, 0x7BFF + 1, dtype=torch.int16).view(torch.float16)  # 1..max
    rows = torch.zeros(len(values), 4, dtype=torch.float16)
    rows[:, 0] = values
    rows = rows.to(dtype)
    if kind == "naive":
        w = naive_softmax(rows)
    elif kind == "torch":
        w = torch.softmax(rows, dim=-1)
    else:
        w = safe_softmax(rows.float(), dim=-1).to(dtype)
    bad = ~torch.isfinite(w).all(dim=-1)
    return float(values[bad.nonzero()[0, 0]]) if bad.any() else math.inf


def precision_errors(
    *, scale: float, seed: int = 0, n: int = 64, d_k: int = 64
) -> dict[str, float]:
    """Largest error of the attention output against float64, for float16 and bfloat16 inputs
    computed naively in their own dtype (product and softmax), and through the package (which
    computes in float32), on inputs ~ N(0, scale²)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        scale * torch.randn(1, 1, n, d_k, generator=g, dtype=torch.float64) for _ in range(3)
    )
    ref = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ v
    errors = {}
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        qh, kh, vh = q.to(dt), k.to(dt), v.to(dt)
        naive = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ vh
        errors[f"{name} naive"] = float((naive.double() - ref).abs().max())
        pkg = scaled_dot_product_attention(qh, kh, vh)
        errors[f"{name} package"] = float((pkg.double() - ref).abs().max())
    errors["float32"] = float(
        (scaled_dot_product_attention(q.float(), k.float(), v.float()).double() - ref).abs().max()
    )
    return errors


def assert_c23_overflow(predicted: float, measured: float, *, rel: float) -> None:
    """The measured float16 overflow scale is within ``rel`` of the predicted one."""
    assert abs(measured - predicted) <= rel * predicted, (
        f"float16 product overflows at s = {measured:.4g}, predicted {predicted:.4g} "
        f"(more than {rel:.0%} apart)"
    )


def assert_package_fp16_finite(scales: Sequence[float], outputs: Sequence[Tensor]) -> None:
    """The package's attention on float16 inputs stays finite at every scale tried."""
    bad = [s for s, o in zip(scales, outputs, strict=True) if not torch.isfinite(o).all()]
    assert not bad, f"the package's float16 attention is not finite at scales {bad}"


# ------------------------------------------------------------------------------------------
# C24: memory
# ------------------------------------------------------------------------------------------

MEMORY_METHODS = ("dense", "flash (package)", "dense + checkpointing")
# C24's thresholds, from the claim (n² against n; a cut; no growth with depth against growth).
C24_THRESHOLDS = {
    "dense slope at least": 1.8,
    "flash slope at most": 1.2,
    "checkpointing cut at least": 1.25,
    "checkpointed depth growth at most": 1.25,
    "dense depth growth at least": 1.5,
}


def _dense(q, k, v):
    return scaled_dot_product_attention(q, k, v)


def stack_attention(method: str, q: Tensor, k: Tensor, v: Tensor, *, layers: int) -> Tensor:
    """``layers`` attention calls in a chain (``out = attention(out, k, v)`` starting from
    ``q``) by ``method``: the reference (dense, every layer keeps its n × n weights for the
    backward), the package's flash attention (O(n) memory forward and backward) or the dense
    one under ``torch.utils.checkpoint`` (each layer recomputed in the backward)."""
    check_choice("method", method, MEMORY_METHODS)
    out = q
    for _ in range(layers):
        if method == "dense":
            out = _dense(out, k, v)  # (B, H, n, E)
        elif method == "flash (package)":
            out = flash_attention(out, k, v)  # (B, H, n, E)
        else:
            out = checkpoint(_dense, out, k, v, use_reentrant=False)  # (B, H, n, E)
    return out


def qkv(n: int, *, seed: int = 0, b: int = 1, h: int = 2, e: int = 32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, e, generator=g).requires_grad_() for _ in range(3))


def peak_memory(method: str, n: int, *, layers: int) -> int:
    """Exact peak bytes of a forward and backward pass through :func:`stack_attention`
    (gradients of q, k, v included), by :func:`measure.memory.peak_extra_bytes`."""
    q, k, v = qkv(n)

    def run():
        stack_attention(method, q, k, v, layers=layers).sum().backward()

    with torch_threads(1):
        return peak_extra_bytes(run)


def outputs_and_grads(method: str, n: int, *, layers: int) -> list[Tensor]:
    q, k, v = qkv(n)
    with torch_threads(1):
        out = stack_attention(method, q, k, v, layers=layers)
        out.sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


def slope(ns: Sequence[int], values: Sequence[float]) -> float:
    """Log–log slope between the last two points: 2 for an n² cost, 1 for a linear one."""
    return math.log(values[-1] / values[-2]) / math.log(ns[-1] / ns[-2])


def assert_c24_memory(
    slopes: Mapping[str, float],
    peaks: Mapping[str, int],
    depth_growth: Mapping[str, float],
    *,
    max_diff: float,
    atol: float,
) -> None:
    """C24. Dense attention's peak grows like n² (log-log slope >= 1.8), flash attention's like
    n (slope <= 1.2); at the largest n (``peaks``) flash needs under a quarter of the dense
    peak and checkpointing cuts the dense peak (by at least 1.25x); ``depth_growth[method]``
    (peak with the full stack / peak with one layer): checkpointing's peak does not grow with
    depth (<= 1.25) while dense's does (>= 1.5); outputs and gradients agree
    (``max_diff <= atol``)."""
    t = C24_THRESHOLDS
    assert slopes["dense"] >= t["dense slope at least"], (
        f"dense peak memory slope {slopes['dense']:.2f} < {t['dense slope at least']}"
    )
    flash = "flash (package)"
    assert slopes[flash] <= t["flash slope at most"], f"flash slope {slopes[flash]:.2f} too high"
    assert peaks[flash] < peaks["dense"] / 4, f"flash peak {peaks[flash]} not < dense / 4"
    cut = peaks["dense"] / peaks["dense + checkpointing"]
    assert cut >= t["checkpointing cut at least"], (
        f"checkpointing cut the dense peak by only {cut:.2f}x"
    )
    assert depth_growth["dense + checkpointing"] <= t["checkpointed depth growth at most"], (
        f"the checkpointed peak grew {depth_growth['dense + checkpointing']:.2f}x with depth"
    )
    assert depth_growth["dense"] >= t["dense depth growth at least"], (
        f"the dense peak grew only {depth_growth['dense']:.2f}x with depth"
    )
    assert max_diff <= atol, f"outputs or gradients differ by {max_diff:.2g} > {atol}"


def assert_equal_to_package(mine: Tensor, package: Tensor, *, atol: float = 1e-5) -> None:
    """A hand-written attention equals the package's (largest difference ``<= atol``)."""
    diff = float((mine - package).abs().max())
    assert diff <= atol, f"the hand-written loop differs from the package by {diff:.3g} > {atol}"


# ------------------------------------------------------------------------------------------
# The KV cache
# ------------------------------------------------------------------------------------------


def decode_seconds(model: CharDecoder, prompt: Tensor, new: int, *, use_cache: bool) -> float:
    """Fastest of two greedy generations of ``new`` tokens, after one untimed (one thread)."""
    with torch_threads(1):
        return min_seconds(lambda: generate(model, prompt, max_new_tokens=new, use_cache=use_cache),
                           repeats=2, warmup=1)  # fmt: skip


def assert_cache_exact(cached, recomputed) -> None:
    """Decoding with the cache gives the tokens (and logits) of full recomputation."""
    assert torch.equal(cached.tokens, recomputed.tokens), "cached decoding chose other tokens"
    diff = float((cached.logits - recomputed.logits).abs().max())
    assert diff <= 1e-4, f"cached logits differ from recomputed ones by {diff:.3g}"
