"""book.experiments.ch03 against independent references: torch's FlopCounterMode for the
FLOP count, per-row loops for the head masses, and the byte size of real key/value tensors
for the cache formula."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attention.heads import MultiHeadAttention
from book.experiments.ch03 import (
    SOFTMAX_FLOPS_PER_SCORE,
    PairModel,
    PairsRun,
    assert_c9a_heads_split_without_new_parameters,
    assert_c9b_heads_specialise,
    assert_c10_rises_then_falls,
    attention_parameter_count,
    c9b_specialisation_failures,
    head_relation_mass,
    mha_flops,
    train_pairs,
)
from book.experiments.tasks import pairs_batch

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


def test_train_pairs_is_deterministic_and_learns():
    a = train_pairs(num_heads=2, steps=80, batch_size=32, eval_size=64, seed=1)
    b = train_pairs(num_heads=2, steps=20, batch_size=32, eval_size=64, seed=1)
    assert len(a.losses) == 80 and a.losses[:20] == b.losses  # same seed, same run
    assert a.head_mass.shape == (2, 2)
    assert sum(a.losses[-10:]) / 10 < 0.85 * a.losses[0]  # below ln 8: it uses the context


# ------------------------------------------------------------------------------------------
# MQA / GQA: the cache
# ------------------------------------------------------------------------------------------


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_c9a_passes_for_the_real_layers_and_matches_torch():
    d = 48
    counts = {f"{h} heads": n_params(MultiHeadAttention(d, h)) for h in (1, 4, 12)}
    independent = n_params(torch.nn.MultiheadAttention(d, 4))
    assert independent == attention_parameter_count(d)
    assert_c9a_heads_split_without_new_parameters(d, counts, independent=independent)


def test_c9a_fails_when_a_head_count_changes_the_parameters():
    d = 48
    independent = attention_parameter_count(d)
    with pytest.raises(AssertionError, match="head count changed"):
        assert_c9a_heads_split_without_new_parameters(
            d, {"1 head": independent, "12 heads": independent + 12 * d}, independent=independent
        )


def test_c9a_fails_when_the_independent_count_disagrees_with_the_hand_count():
    d = 48
    no_biases = 4 * d * d
    with pytest.raises(AssertionError, match="hand count"):
        assert_c9a_heads_split_without_new_parameters(
            d, {"1 head": no_biases}, independent=no_biases
        )


def test_c10_passes_for_an_interior_optimum():
    acc = {1: [0.55, 0.56, 0.55], 2: [0.99, 1.0, 0.98], 4: [0.99, 0.97, 1.0], 16: [0.6, 0.7, 0.65]}
    assert assert_c10_rises_then_falls(acc, margin=0.1) == 2


@pytest.mark.parametrize(
    ("acc", "message"),
    [
        ({1: [0.5], 2: [0.7], 4: [0.8], 16: [0.95]}, "an end of the range"),  # more is better
        ({1: [0.95], 2: [0.9], 4: [0.8], 16: [0.5]}, "an end of the range"),  # fewer is better
        ({1: [0.5], 2: [0.9], 4: [0.88], 16: [0.85]}, "less than the margin"),  # a plateau
    ],
)
def test_c10_fails_when_quality_does_not_rise_then_fall(acc, message):
    with pytest.raises(AssertionError, match=message):
        assert_c10_rises_then_falls(acc, margin=0.1)


def test_c10_refuses_too_few_head_counts():
    with pytest.raises(ValueError, match="at least 3"):
        assert_c10_rises_then_falls({1: [0.5], 2: [0.9]}, margin=0.1)


def _pairs_run(accuracy: tuple[float, float], masses: list[list[float]]) -> PairsRun:
    return PairsRun(len(masses), 32, 0, [1.0], accuracy, torch.tensor(masses), model=None)


SPECIALISED = (  # 1, 2 and 4 heads as the claim predicts (seed 0 of chapter 3)
    _pairs_run((1.0, 0.21), [[0.99, 0.0]]),
    _pairs_run((1.0, 1.0), [[0.99, 0.0], [0.0, 0.99]]),
    _pairs_run((1.0, 1.0), [[0.02, 0.76], [0.97, 0.0], [0.1, 0.35], [0.02, 0.74]]),
)


def test_c9b_passes_specialised_heads_and_fails_when_heads_do_not_specialise():
    assert c9b_specialisation_failures(*SPECIALISED) == []
    assert_c9b_heads_specialise(*SPECIALISED)
    run_1, _, run_4 = SPECIALISED
    # Two heads that both attend to both relations: they solve the task, but not by splitting.
    blended = _pairs_run((1.0, 1.0), [[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(AssertionError, match="not one head per relation"):
        assert_c9b_heads_specialise(run_1, blended, run_4)
    # Two heads that fail the partner relation.
    with pytest.raises(AssertionError, match="2 heads: accuracy"):
        assert_c9b_heads_specialise(
            run_1, _pairs_run((1.0, 0.5), [[0.99, 0.0], [0.0, 0.99]]), run_4
        )
    # One head that solves both: nothing forces heads to split work.
    with pytest.raises(AssertionError, match="1 head: accuracy"):
        assert_c9b_heads_specialise(_pairs_run((1.0, 1.0), [[0.99, 0.0]]), *SPECIALISED[1:])
    # Four heads with nobody on the previous token.
    spread_4 = _pairs_run((1.0, 1.0), [[0.3, 0.7]] * 4)
    with pytest.raises(AssertionError, match="4 heads: no head"):
        assert_c9b_heads_specialise(run_1, SPECIALISED[1], spread_4)
    with pytest.raises(ValueError, match="run_2 must be a run with 2 head"):
        c9b_specialisation_failures(run_1, run_1, run_4)
