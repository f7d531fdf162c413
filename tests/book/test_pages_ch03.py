"""The definitions on chapter 3's page (book.pages.ch03) against independent references:
torch's FlopCounterMode for the FLOP count, torch's nn.MultiheadAttention for the parameter
count, per-row loops for the head masses, and fit's own loop for the training step."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attention.heads import MultiHeadAttention
from book.experiments.tasks import pairs_batch, pairs_loss
from book.experiments.training import fit
from book.pages.ch03 import (
    SOFTMAX_FLOPS_PER_SCORE,
    PairModel,
    attention_parameter_count,
    head_relation_mass,
    mha_flops,
    train_pairs,
)

FEW = settings(max_examples=12, deadline=None)  # each example runs a real forward pass


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# C8: FLOPs
# ------------------------------------------------------------------------------------------


@FEW
@given(
    seq_len=st.integers(1, 9),
    d_head=st.integers(1, 4),
    heads_and_kv=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3)]),
    batch_size=st.integers(1, 3),
)
def test_matmul_flops_equal_torch_flop_counter(seq_len, d_head, heads_and_kv, batch_size):
    num_heads, num_kv_heads = heads_and_kv
    d_model = num_heads * d_head
    mha = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads)
    x = torch.randn(batch_size, seq_len, d_model, generator=_gen(seq_len))  # (B, L, D)
    with FlopCounterMode(display=False) as counter:
        mha(x)
    ours = mha_flops(seq_len, d_model, num_heads, num_kv_heads=num_kv_heads, batch_size=batch_size)
    assert ours.matmul == counter.get_total_flops()


def test_flops_of_h_heads_differ_from_one_head_only_by_the_softmax():
    one = mha_flops(128, 256, 1)
    for h in (2, 4, 8, 16):
        many = mha_flops(128, 256, h)
        assert many.matmul == one.matmul  # every matrix product costs exactly the same
        assert many.scores == one.scores == 2 * 128 * 128 * 256
        assert many.softmax == h * one.softmax == SOFTMAX_FLOPS_PER_SCORE * h * 128 * 128
        assert many.total - one.total == (h - 1) * SOFTMAX_FLOPS_PER_SCORE * 128 * 128


def test_flops_closed_form_for_bert_base_shape():
    f = mha_flops(512, 768, 12)
    assert f.q_proj == f.out_proj == 2 * 512 * 768 * 768
    assert f.kv_proj == 2 * f.q_proj
    assert f.weighted_sum == f.scores == 2 * 512 * 512 * 768
    assert f.total == f.matmul + 6 * 12 * 512 * 512


def test_flops_refuse_bad_arguments():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        mha_flops(4, 10, 3)
    with pytest.raises(ValueError, match="divisible by num_kv_heads"):
        mha_flops(4, 12, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="seq_len"):
        mha_flops(0, 8, 2)
    with pytest.raises(TypeError, match="num_heads"):
        mha_flops(4, 8, 2.0)


# ------------------------------------------------------------------------------------------
# C9, C10: heads on the pairs task (the task itself: test_experiments_tasks.py)
# ------------------------------------------------------------------------------------------


def test_head_relation_mass_equals_a_loop():
    g = _gen(3)
    b = pairs_batch(3, 4, 5, generator=g)
    weights = torch.softmax(torch.randn(3, 2, 8, 8, generator=g), dim=-1)  # (B, H, L, L)
    got = head_relation_mass(weights, b.partner)
    expected = torch.zeros(2, 2)
    count = 0
    for row in range(3):
        for t in range(1, 8):
            p = int(b.partner[row, t])
            if p == t - 1:
                continue
            count += 1
            for h in range(2):
                expected[h, 0] += weights[row, h, t, t - 1]
                expected[h, 1] += weights[row, h, t, p]
    torch.testing.assert_close(got, expected / count)


def test_head_relation_mass_refuses_a_wrong_partner_shape():
    with pytest.raises(ValueError, match="partner must have shape"):
        head_relation_mass(torch.rand(2, 1, 4, 4), torch.zeros(2, 5, dtype=torch.long))


def test_pair_model_reads_the_layer_it_is_built_from():
    """The forward pass is embedding -> (positions) -> layer -> norm -> read-out, by hand."""
    torch.manual_seed(0)
    model = PairModel(4, 5, 8, 16, 4, positional="sinusoidal").eval()
    b = pairs_batch(3, 4, 5, generator=_gen(1))
    with torch.no_grad():
        x = model.pos(model.embed(b.tokens))  # (B, L, D)
        want = model.readout(model.norm(model.layer(x))).view(3, 8, 2, 5)
        torch.testing.assert_close(model(b.tokens), want)


@pytest.mark.parametrize("positional", ["rope", "sinusoidal", "learned"])
def test_pair_model_shapes_and_weights(positional):
    torch.manual_seed(0)
    model = PairModel(4, 5, 8, 16, 4, positional=positional)
    b = pairs_batch(3, 4, 5, generator=_gen(1))
    logits, weights = model(b.tokens, need_weights=True)
    assert logits.shape == (3, 8, 2, 5) and weights.shape == (3, 4, 8, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 8))
    torch.testing.assert_close(model(b.tokens), logits)


def test_pair_model_refuses_unknown_positional():
    with pytest.raises(ValueError, match="positional"):
        PairModel(4, 5, 8, 16, 4, positional="alibi")


def test_train_pairs_is_fit_with_the_pairs_loss():
    """train_pairs's losses are fit's on the same model, batches and loss, written out here."""
    run = train_pairs(num_heads=2, steps=5, batch_size=16, eval_size=32, seed=3)
    torch.manual_seed(3)
    model = PairModel(6, 8, 12, 32, 2)
    log = fit(
        model,
        lambda g: pairs_batch(16, 6, 8, generator=g),
        lambda m, batch: pairs_loss(m(batch.tokens), batch.targets),
        steps=5,
        lr=1e-2,
        data_seed=4,
    )
    assert run.losses == log.losses
    held_out = pairs_batch(32, 6, 8, generator=_gen(5))
    with torch.no_grad():
        logits = model(held_out.tokens)  # (B, L, 2, 8)
    hits = (logits.argmax(-1) == held_out.targets).double()  # (B, L, 2)
    want_previous = hits[:, 1:, 0].mean().item()  # position 0 has no previous token
    assert run.accuracy == pytest.approx((want_previous, hits[:, :, 1].mean().item()))
    assert run.mean_accuracy == pytest.approx(sum(run.accuracy) / 2)


def test_attention_parameter_count_is_torchs():
    for d in (8, 48, 768):
        with torch.device("meta"):
            independent = torch.nn.MultiheadAttention(d, 4 if d % 4 == 0 else 1)
        assert attention_parameter_count(d) == sum(p.numel() for p in independent.parameters())
    with pytest.raises(ValueError, match="d_model"):
        attention_parameter_count(0)


def test_train_pairs_is_deterministic_and_learns():
    a = train_pairs(num_heads=2, steps=80, batch_size=32, eval_size=64, seed=1)
    b = train_pairs(num_heads=2, steps=20, batch_size=32, eval_size=64, seed=1)
    assert len(a.losses) == 80 and a.losses[:20] == b.losses  # same seed, same run
    assert a.head_mass.shape == (2, 2)
    assert sum(a.losses[-10:]) / 10 < 0.85 * a.losses[0]  # below ln 8: it uses the context
