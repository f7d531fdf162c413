"""Experiments of chapter 4: what positional encodings put into a Transformer, and how far they
carry past the lengths a model was trained on.

- C12, :func:`sinusoidal_wavelengths`, :func:`zero_crossings`: each channel pair of the
  sinusoidal table is a wave whose wavelength grows geometrically with the pair index.
- C13, :func:`sinusoidal_shift_matrix`, :func:`fit_shift_matrix`: moving ``k`` positions is one
  fixed block rotation of the table, the same for every position; and a plain least-squares fit
  on the table finds that matrix without being told.
- C14/C15, :func:`lookback_batch`, :func:`build_lookback_model`, :func:`train_lookback`,
  :func:`lookback_accuracy`, :func:`last_query_attention`: a task that needs relative position
  ("which token stood ``offset`` places before the last one?"), trained on short sequences and
  tested on longer ones, for each positional scheme of
  :class:`attention.blocks.SequenceClassifier`.

The encodings themselves live in :mod:`attention.positional`; nothing here re-implements them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention.blocks import POSITIONAL_KINDS, SequenceClassifier
from attention.checks import (
    check_base,
    check_choice,
    check_even,
    check_float,
    check_positive_int,
    check_rank,
    check_tensor,
)
from attention.masks import padding_mask
from book.experiments.training import fit

Tensor = torch.Tensor


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    return value


# ------------------------------------------------------------------------------------------
# C12: frequencies fall with the dimension
# ------------------------------------------------------------------------------------------


def sinusoidal_wavelengths(d_model: int, base: float = 10000.0) -> Tensor:
    """Wavelength (in positions) of each channel pair of the sinusoidal table: ``(D/2,)``.

    Pair ``i`` (channels ``2i`` and ``2i+1``) turns at angular frequency ``base^(-2i/D)``
    radians per position, so it repeats every ``2π · base^(2i/D)`` positions: from ``2π`` for
    ``i = 0`` up to almost ``2π · base`` for the last pair, a geometric progression with ratio
    ``base^(2/D)``. float64.
    """
    d_model = check_even("d_model", d_model)
    base = check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    return 2.0 * math.pi * base ** (two_i / d_model)  # (D/2,)


def zero_crossings(signal: Tensor) -> Tensor:
    """Number of sign changes along dim 0 of ``signal (L, C)``, per column: ``(C,)`` int64.

    A crossing is a pair of consecutive samples with strictly opposite signs; a sample that is
    exactly zero (``sin(0)``) neither starts nor ends one. A wave of wavelength ``λ`` sampled
    over ``L`` positions crosses zero about ``2L / λ`` times, so the count is a frequency
    measured from the data, independent of the formula.
    """
    check_float("signal", signal)
    check_rank("signal", signal, 2, "[positions, channels]")
    sign = torch.sign(signal)  # (L, C)
    return ((sign[1:] * sign[:-1]) < 0).sum(dim=0)  # (C,)


# ------------------------------------------------------------------------------------------
# C13: a shift by k positions is a fixed rotation
# ------------------------------------------------------------------------------------------


def sinusoidal_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The matrix ``M_k (D, D)`` with ``PE[p + k] = M_k @ PE[p]`` for every position ``p``.

    Channels ``(2i, 2i+1)`` hold ``(sin pω, cos pω)`` with ``ω = base^(-2i/D)``. The angle
    addition formulas give

        sin((p+k)ω) =  cos(kω) sin(pω) + sin(kω) cos(pω)
        cos((p+k)ω) = -sin(kω) sin(pω) + cos(kω) cos(pω)

    so ``M_k`` is block diagonal with the 2x2 rotation ``[[cos kω, sin kω], [-sin kω, cos kω]]``
    in block ``i``. It depends on ``k`` only, never on ``p``; ``k`` may be negative
    (``M_{-k} = M_k^T = M_k^{-1}``). float64, in the layout of
    :func:`attention.positional.sinusoidal_encoding`.
    """
    k = _check_int("k", k)
    d_model = check_even("d_model", d_model)
    base = check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = k * base ** (-two_i / d_model)  # (D/2,): k·ω_i
    c, s = torch.cos(angle), torch.sin(angle)  # (D/2,) each
    m = torch.zeros(d_model, d_model, dtype=torch.float64)  # (D, D)
    idx = torch.arange(0, d_model, 2)  # (D/2,): the sin channel of each pair
    m[idx, idx] = c
    m[idx, idx + 1] = s
    m[idx + 1, idx] = -s
    m[idx + 1, idx + 1] = c
    return m  # (D, D)


def fit_shift_matrix(pe: Tensor, k: int) -> Tensor:
    """Least-squares ``M (D, D)`` minimising ``Σ_p ||pe[p + k] - M @ pe[p]||²``, float64.

    The fit sees only the table ``pe (L, D)`` (rows = positions, ``L > k + D`` so that the
    problem is overdetermined), not the formula. If the rows of ``pe[:-k]`` span all ``D``
    dimensions the minimiser is unique; for the sinusoidal table it is then ``M_k`` itself.
    """
    check_float("pe", pe)
    check_rank("pe", pe, 2, "[positions, d_model]")
    k = check_positive_int("k", k)
    n, d = pe.shape
    if n - k < d:
        raise ValueError(
            f"pe must have more than k + d_model = {k + d} rows to determine a ({d}, {d}) "
            f"matrix, got shape {tuple(pe.shape)}"
        )
    x = pe[:-k].double()  # (L-k, D): positions p
    y = pe[k:].double()  # (L-k, D): positions p + k
    # Row form: y = x @ M^T. lstsq solves x @ W = y for W = M^T.
    solution = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (D, D)
    return solution.T.contiguous()  # (D, D)


# ------------------------------------------------------------------------------------------
# C14 / C15: train short, test long
# ------------------------------------------------------------------------------------------


def lookback_batch(
    batch_size: int,
    min_len: int,
    max_len: int,
    *,
    offset: int = 3,
    vocab_size: int = 16,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Random sequences whose label is the token ``offset`` places before the last one.

    Lengths are uniform in ``[min_len, max_len]``; tokens are uniform in ``[0, vocab_size)``.
    The answer depends only on a *relative* position (from the last token, go back
    ``offset``), so a model that has learned "look ``offset`` back" should get it right at any
    length, and a model that has learned absolute positions needs to have seen the length.

    Returns:
        tokens ``(B, L)`` int64 (``L`` = the longest length drawn; the padding after each
        sequence's end holds token 0 and is masked out by the model), lengths ``(B,)`` int64,
        labels ``(B,)`` int64 with ``labels[b] = tokens[b, lengths[b] - 1 - offset]``.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    offset = check_positive_int("offset", offset)
    vocab_size = check_positive_int("vocab_size", vocab_size)
    min_len = check_positive_int("min_len", min_len)
    max_len = check_positive_int("max_len", max_len)
    if min_len <= offset:
        raise ValueError(
            f"min_len must be > offset={offset} (the answer must exist), got min_len={min_len}"
        )
    if max_len < min_len:
        raise ValueError(f"max_len must be >= min_len={min_len}, got max_len={max_len}")
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)  # (B,)
    longest = int(lengths.max())
    tokens = torch.randint(0, vocab_size, (batch_size, longest), generator=generator)  # (B, L)
    real = torch.arange(longest) < lengths.unsqueeze(1)  # (B, L): True = real token
    tokens = torch.where(real, tokens, 0)  # (B, L): padding holds token 0
    labels = tokens[torch.arange(batch_size), lengths - 1 - offset]  # (B,)
    return tokens, lengths, labels


def build_lookback_model(
    positional: str,
    max_len: int,
    *,
    vocab_size: int = 16,
    d_model: int = 32,
    num_heads: int = 2,
    num_layers: int = 1,
    seed: int = 0,
) -> SequenceClassifier:
    """A small :class:`SequenceClassifier` for the look-back task, pooling the last token.

    ``max_len`` is the longest input it accepts: for ``"learned"`` the size of its position
    table (positions past it raise), for the others just a bound. A learned table is
    initialised at the scale of the token embeddings (std 1, ``nn.Embedding``'s default), as
    BERT initialises both tables alike; at the package's default (std 0.02, tuned for token
    tables of that scale) the positions start 50x weaker than the tokens here and the model
    needs many more steps to notice them.
    """
    check_choice("positional", positional, POSITIONAL_KINDS)
    torch.manual_seed(_check_int("seed", seed))
    model = SequenceClassifier(
        vocab_size,
        vocab_size,  # the answer is a token: one class per token id
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=2 * d_model,
        max_len=max_len,
        positional=positional,
        pooling="last",
        pre_ln=True,
    )
    if positional == "learned":
        with torch.no_grad():
            model.pos.weight.normal_(0.0, model.embed.weight.std().item())
    return model


def train_lookback(
    model: SequenceClassifier,
    *,
    steps: int = 400,
    batch_size: int = 64,
    min_len: int = 8,
    max_len: int = 32,
    offset: int = 3,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
) -> list[float]:
    """Train ``model`` on :func:`lookback_batch` data (AdamW, :func:`fit`); return each step's loss.

    Every model trained with the same ``seed`` sees the same batches, so that a comparison
    between positional schemes is on identical data.
    """
    log = fit(
        model,
        lambda generator: lookback_batch(
            batch_size,
            min_len,
            max_len,
            offset=offset,
            vocab_size=model.vocab_size,
            generator=generator,
        ),
        _lookback_loss,
        steps=steps,
        lr=lr,
        data_seed=_check_int("seed", seed) + 1000,
        optimizer="adamw",
        progress=progress,
        desc=f"{model.positional}, seed {seed}",
    )
    return log.losses


def _lookback_loss(model: SequenceClassifier, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    tokens, lengths, labels = batch
    return F.cross_entropy(model(tokens, lengths=lengths), labels)  # logits (B, vocab)


@torch.no_grad()
def lookback_accuracy(
    model: SequenceClassifier,
    length: int,
    *,
    n: int = 512,
    offset: int = 3,
    seed: int = 7,
    window: int | None = None,
) -> float | None:
    """Accuracy on ``n`` fresh sequences of exactly ``length`` tokens.

    With ``window``, only the last ``window`` tokens are visible: the earlier ones are masked
    out as if they were padding. The visible tokens then sit at positions
    ``length - window .. length - 1`` and are ``window`` apart at most: a short sequence moved
    to far positions, which separates "new absolute positions" from "new distances".

    Returns ``None`` when ``length > model.max_len``: the model cannot be run at that length at
    all (a learned table has no row for those positions; ``SequenceClassifier`` raises).
    """
    length = check_positive_int("length", length)
    if length > model.max_len:
        return None
    if window is not None:
        window = check_positive_int("window", window)
        if not offset < window <= length:
            raise ValueError(
                f"window must be in (offset, length] = ({offset}, {length}], got {window}"
            )
    generator = torch.Generator().manual_seed(_check_int("seed", seed))
    tokens, _, labels = lookback_batch(
        n, length, length, offset=offset, vocab_size=model.vocab_size, generator=generator
    )
    keep = torch.ones(n, length, dtype=torch.bool)  # (n, L): True = visible
    if window is not None:
        keep[:, : length - window] = False
    model.eval()
    predictions = model(tokens, keep=keep).argmax(dim=-1)  # (n,)
    return float((predictions == labels).float().mean())


@torch.no_grad()
def last_query_attention(model: SequenceClassifier, tokens: Tensor) -> Tensor:
    """First-layer attention of the last token, by distance: ``(B, H, L)``.

    ``tokens (B, L)`` are full-length sequences (no padding). Entry ``[b, h, d]`` is the weight
    head ``h`` of the first encoder layer puts, from the last position ``L - 1``, on the key at
    distance ``d`` (position ``L - 1 - d``). This is the query that the ``"last"`` pooling
    reads, so it shows where the model looks when it answers.
    """
    check_tensor("tokens", tokens)
    check_rank("tokens", tokens, 2, "[batch, seq]")
    if not isinstance(model, SequenceClassifier) or model.pooling != "last":
        raise TypeError("model must be a SequenceClassifier with pooling='last'")
    if model.cls_token is not None:  # pragma: no cover - excluded by pooling="last"
        raise TypeError("model must not use a cls token")
    b, l = tokens.shape
    if l > model.max_len:
        raise ValueError(f"tokens has seq length {l}, expected at most max_len={model.max_len}")
    model.eval()
    x = model.embed(tokens)  # (B, L, D)
    if model.pos is not None:
        x = model.pos(x)  # (B, L, D)
    keep = padding_mask(torch.full((b,), l), l)  # (B, 1, 1, L): every token real
    _, weights = model.encoder.layers[0](x, mask=keep, need_weights=True)  # (B, H, L, L)
    return weights[:, :, -1, :].flip(-1)  # (B, H, L): index d = distance from the last token


# ------------------------------------------------------------------------------------------
# C14/C15 over seeds: the verdicts, with thresholds fixed from the claims
# ------------------------------------------------------------------------------------------


def _mean(values) -> float:
    values = list(values)
    if not values:
        raise ValueError("need at least one seed")
    return sum(values) / len(values)


def assert_c14_quality_drops_past_training_length(
    accuracy: dict[int, list[float]], *, train_max: int, learned: float, drop: float
) -> None:
    """C14: a sinusoidal model that learned the task in range loses quality past it.

    ``accuracy[n]`` holds one accuracy per seed at test length ``n``. Fails unless every seed
    reaches ``learned`` at ``train_max`` (the model did learn the task), and the mean accuracy at
    every tested length of at least ``2 * train_max`` is at least ``drop`` below the mean at
    ``train_max``. (Lengths between ``train_max`` and twice it are reported, not judged.)
    """
    if train_max not in accuracy:
        raise ValueError(f"accuracy has no entry at train_max={train_max}")
    beyond = [n for n in accuracy if n >= 2 * train_max]
    if not beyond:
        raise ValueError(f"accuracy has no test length >= 2 * train_max = {2 * train_max}")
    in_range = accuracy[train_max]
    if min(in_range) < learned:
        raise AssertionError(
            f"at the training length {train_max} a seed reached only {min(in_range):.3f} "
            f"(< {learned}): the model did not learn the task, so a drop says nothing"
        )
    for n in beyond:
        if _mean(in_range) - _mean(accuracy[n]) < drop:
            raise AssertionError(
                f"at {n} tokens the mean accuracy {_mean(accuracy[n]):.3f} is within {drop} of "
                f"{_mean(in_range):.3f} at {train_max}: quality does not drop"
            )


def assert_c15_rope_extrapolates_better(
    rope: dict[int, list[float]],
    other: dict[int, list[float]],
    *,
    lengths: list[int],
    margin: float,
) -> None:
    """C15's "extrapolates better": RoPE's mean accuracy beats ``other``'s at each length.

    ``rope[n]`` and ``other[n]`` hold one accuracy per seed at test length ``n``; at every
    length in ``lengths`` (past the training lengths) RoPE's mean must exceed the other
    encoding's mean by at least ``margin``.
    """
    for n in lengths:
        if n not in rope or n not in other:
            raise ValueError(f"no accuracy at length {n} for both encodings")
        gap = _mean(rope[n]) - _mean(other[n])
        if gap < margin:
            raise AssertionError(
                f"at {n} tokens RoPE's mean accuracy {_mean(rope[n]):.3f} beats the other "
                f"encoding's {_mean(other[n]):.3f} by {gap:.3f} < {margin}: not better"
            )
