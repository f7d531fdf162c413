"""Synthetic tasks that more than one chapter trains on: the data, and how a prediction is scored.

- The two-relation task (:func:`pairs_batch`): at every position a model must output the digit
  of the previous token (a positional relation) and of the token's partner (a relation found
  by content). Chapter 3 shows that heads specialise on it (C9, C10; its model and training
  step are on chapter 3's page, :mod:`book.pages.ch03`); chapter 8 compares attention
  layouts on it (:mod:`book.pages.ch08`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attention.checks import check_positive_int, check_rank, check_tensor

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# The two-relation task
# ------------------------------------------------------------------------------------------

IGNORE = -100  # target of a position that has no previous token (F.cross_entropy's default)
RELATIONS = ("previous", "partner")


@dataclass(frozen=True)
class PairsBatch:
    """Sequences of ``2 P`` tokens in which every token has exactly one partner.

    A token is a letter (the key), in lower or upper case (the form), carrying a digit (the
    value): ``a3``, ``A7``. Each sequence holds ``P`` distinct letters, each once in lower and
    once in upper case, in random order and with random digits. The partner of ``a3`` is the
    ``A`` token. At every position the model must output two digits: the one of the previous
    token (a positional relation) and the one of the partner (a relation found by content).
    """

    tokens: Tensor  # (B, L) int64 ids, see pair_token_id
    targets: Tensor  # (B, L, 2) int64: [..., 0] previous token's digit (IGNORE at t=0),
    #                                    [..., 1] the partner's digit
    partner: Tensor  # (B, L) int64: the position of each token's partner
    n_keys: int
    n_values: int


def pair_token_id(form: Tensor | int, key: Tensor | int, value: Tensor | int, n_keys, n_values):
    """Token id of (form 0/1, key, value): ``(form · n_keys + key) · n_values + value``."""
    return (form * n_keys + key) * n_values + value


def pairs_vocab_size(n_keys: int, n_values: int) -> int:
    return 2 * n_keys * n_values


def pair_token_names(tokens: Tensor, n_keys: int, n_values: int) -> list[str]:
    """Readable names of a ``(L,)`` sequence of ids: ``"a3"``, ``"A7"``, ... (at most 26 keys)."""
    check_tensor("tokens", tokens)
    check_rank("tokens", tokens, 1, "[seq]")
    if n_keys > 26:
        raise ValueError(f"n_keys must be <= 26 to name keys by letters, got {n_keys}")
    names = []
    for t in tokens.tolist():
        value, rest = t % n_values, t // n_values
        key, form = rest % n_keys, rest // n_keys
        letter = chr(ord("a" if form == 0 else "A") + key)
        names.append(f"{letter}{value}")
    return names


def pairs_batch(
    batch_size: int,
    n_pairs: int,
    n_values: int,
    *,
    n_keys: int | None = None,
    generator: torch.Generator | None = None,
) -> PairsBatch:
    """A batch of the two-relation task (see :class:`PairsBatch`); ``L = 2 · n_pairs``.

    The ``n_pairs`` letters of a row are drawn without replacement from ``n_keys`` (default
    ``n_pairs``: every letter in every row, only the order and digits vary).
    """
    batch_size = check_positive_int("batch_size", batch_size)
    n_pairs = check_positive_int("n_pairs", n_pairs)
    n_values = check_positive_int("n_values", n_values)
    n_keys = n_pairs if n_keys is None else check_positive_int("n_keys", n_keys)
    if n_pairs > n_keys:
        raise ValueError(
            f"n_pairs must be <= n_keys={n_keys} (letters are distinct), got {n_pairs}"
        )
    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2 (one pair has no order to learn), got {n_pairs}")
    seq_len = 2 * n_pairs
    keys = torch.rand(batch_size, n_keys, generator=generator).argsort(-1)[:, :n_pairs]  # (B, P)
    keys = torch.cat([keys, keys], dim=1)  # (B, 2P): slot i and slot i + P are partners
    forms = torch.arange(seq_len).ge(n_pairs).long().expand(batch_size, -1)  # (B, 2P)
    values = torch.randint(n_values, (batch_size, seq_len), generator=generator)  # (B, 2P)
    slots = torch.arange(seq_len)
    partner_slot = (slots + n_pairs) % seq_len  # (2P,)

    order = torch.rand(batch_size, seq_len, generator=generator).argsort(-1)  # (B, L): slot at t
    where = order.argsort(-1)  # (B, 2P): position of each slot
    tokens = pair_token_id(forms, keys, values, n_keys, n_values).gather(1, order)  # (B, L)
    values_at = values.gather(1, order)  # (B, L)
    partner = where.gather(1, partner_slot[order])  # (B, L): position of the partner slot

    previous = torch.full_like(values_at, IGNORE)  # (B, L)
    previous[:, 1:] = values_at[:, :-1]
    partner_value = values_at.gather(1, partner)  # (B, L)
    targets = torch.stack([previous, partner_value], dim=-1)  # (B, L, 2)
    return PairsBatch(tokens, targets, partner, n_keys, n_values)


def pairs_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over both relations and every position that has a target."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


def relation_accuracy(logits: Tensor, targets: Tensor) -> tuple[float, float]:
    """Accuracy on (previous, partner) digits, over positions that have a target."""
    hits = logits.argmax(-1) == targets  # (B, L, 2)
    valid = targets != IGNORE  # (B, L, 2)
    acc = (hits & valid).sum((0, 1)).double() / valid.sum((0, 1)).double()  # (2,)
    return float(acc[0]), float(acc[1])
