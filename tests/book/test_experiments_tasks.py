"""book.experiments.tasks against independent references: the two-relation task decoded row by
row with a decoder written independently of its ids, and its loss and accuracy on hand-made
logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from book.experiments.tasks import (
    IGNORE,
    pair_token_id,
    pair_token_names,
    pairs_batch,
    pairs_loss,
    relation_accuracy,
)

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _decode(token: int, n_keys: int, n_values: int) -> tuple[int, int, int]:
    """(form, key, value) of an id, written independently of pair_token_id."""
    form, rest = divmod(token, n_keys * n_values)
    key, value = divmod(rest, n_values)
    return form, key, value


@FAST
@given(
    batch_size=st.integers(1, 4),
    n_pairs=st.integers(2, 6),
    extra_keys=st.integers(0, 3),
    n_values=st.integers(1, 9),
    seed=st.integers(0, 1000),
)
def test_pairs_batch_matches_its_definition_row_by_row(
    batch_size, n_pairs, extra_keys, n_values, seed
):
    n_keys = n_pairs + extra_keys
    b = pairs_batch(batch_size, n_pairs, n_values, n_keys=n_keys, generator=_gen(seed))
    seq_len = 2 * n_pairs
    assert b.tokens.shape == b.partner.shape == (batch_size, seq_len)
    assert b.targets.shape == (batch_size, seq_len, 2)
    for row in range(batch_size):
        decoded = [_decode(int(t), n_keys, n_values) for t in b.tokens[row]]
        keys_by_form = [sorted(k for f, k, _ in decoded if f == form) for form in (0, 1)]
        assert keys_by_form[0] == keys_by_form[1]  # each letter once lower, once upper case
        assert len(set(keys_by_form[0])) == n_pairs  # distinct letters
        for t, (form, key, _) in enumerate(decoded):
            p = int(b.partner[row, t])
            assert decoded[p][0] == 1 - form and decoded[p][1] == key  # same letter, other case
            assert int(b.partner[row, p]) == t  # partnership is symmetric
            assert int(b.targets[row, t, 1]) == decoded[p][2]  # the partner's digit
            expected_prev = IGNORE if t == 0 else decoded[t - 1][2]
            assert int(b.targets[row, t, 0]) == expected_prev  # the previous token's digit


def test_pairs_batch_is_reproducible_and_ids_round_trip():
    a = pairs_batch(3, 4, 5, n_keys=6, generator=_gen(7))
    b = pairs_batch(3, 4, 5, n_keys=6, generator=_gen(7))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    assert pair_token_id(1, 2, 3, 6, 5) == (6 + 2) * 5 + 3
    names = pair_token_names(
        torch.tensor([pair_token_id(0, 0, 3, 6, 5), pair_token_id(1, 2, 4, 6, 5)]), 6, 5
    )
    assert names == ["a3", "C4"]


def test_pairs_batch_refuses_bad_arguments():
    with pytest.raises(ValueError, match="n_pairs must be <= n_keys"):
        pairs_batch(2, 5, 3, n_keys=4)
    with pytest.raises(ValueError, match="n_pairs must be >= 2"):
        pairs_batch(2, 1, 3)
    with pytest.raises(ValueError, match="n_keys must be <= 26"):
        pair_token_names(torch.tensor([0]), 27, 2)


def test_relation_accuracy_and_loss_skip_ignored_targets():
    targets = torch.tensor([[[IGNORE, 1], [0, 2]]])  # (B=1, L=2, 2)
    logits = torch.zeros(1, 2, 2, 3)
    logits[0, 0, 1, 1] = logits[0, 1, 0, 0] = 5.0  # right on both counted previous/partner
    logits[0, 1, 1, 0] = 5.0  # wrong partner digit at t=1 (2 expected)
    assert relation_accuracy(logits, targets) == (1.0, 0.5)
    flat = F.cross_entropy(logits.reshape(-1, 3)[1:], targets.reshape(-1)[1:])
    torch.testing.assert_close(pairs_loss(logits, targets), flat)
