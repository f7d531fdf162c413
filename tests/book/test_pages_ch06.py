"""Chapter 6's page (:mod:`book.pages.ch06`, exported from
``chapters/06_engineering_pitfalls.py``): the decoder's losses, its training step, the
padding task and classifier, the masked softmaxes and the memory methods, each against an
independent computation."""

from __future__ import annotations

import math

import pytest
import torch

from attention.decoder import CharDecoder, generate
from attention.masks import causal_mask
from book.claims import ch06 as claims
from book.pages import ch06 as page
from measure.memory import kv_cache_bytes

# --- C20 --------------------------------------------------------------------------------------


def _tiny(causal: bool, seed: int = 0) -> CharDecoder:
    torch.manual_seed(seed)
    return CharDecoder(9, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=10,
                       causal=causal).eval()  # fmt: skip


def test_honest_loss_equals_teacher_forced_for_a_causal_model_only():
    x = torch.randint(0, 9, (3, 10), generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 9, (3, 10), generator=torch.Generator().manual_seed(1))
    causal = _tiny(True)
    with torch.no_grad():
        teacher = float(page.lm_loss(causal, (x, y)))
    assert page.honest_next_token_loss(causal, x, y) == pytest.approx(teacher, abs=1e-5)
    peeking = _tiny(False)
    with torch.no_grad():
        teacher = float(page.lm_loss(peeking, (x, y)))
    assert abs(page.honest_next_token_loss(peeking, x, y) - teacher) > 1e-4


def test_unigram_loss_is_the_entropy_of_uniform_text():
    train = torch.arange(4).repeat(100)  # uniform over 4 symbols
    assert page.unigram_loss(train, torch.tensor([0, 1, 2, 3]), 4) == pytest.approx(math.log(4))


def test_short_training_runs_and_the_monitor_records_every_step():
    data = page.text_data()
    run = page.train_decoder(causal=True, seed=0, steps=3, data=data)
    assert len(run.losses) == len(run.max_scores) == len(run.max_products) == 3
    assert all(p / math.sqrt(page.D_MODEL // page.NUM_HEADS) == pytest.approx(s)
               for s, p in zip(run.max_scores, run.max_products, strict=True))  # fmt: skip
    samples = page.sample_texts(run.model, data, n=2, prompt_len=4, temperature=1.0)
    assert len(samples) == 2 and all(len(c) == page.SEQ_LEN - 4 for _, c in samples)


# --- C21 --------------------------------------------------------------------------------------


def test_masked_softmax_refuses_an_unknown_fill():
    with pytest.raises(ValueError, match="fill"):
        page.masked_softmax(torch.zeros(2), torch.ones(2, dtype=torch.bool), "-1e4")


# --- C22 --------------------------------------------------------------------------------------


def test_majority_batch_labels_and_padding():
    tokens, labels = page.majority_batch(64, torch.Generator().manual_seed(0))
    for row, label in zip(tokens, labels, strict=True):
        ones, twos = int((row == 1).sum()), int((row == 2).sum())
        assert ones != twos and label == int(ones > twos)
        real = int((row != page.PAD).sum())
        assert page.CLS_MIN_LEN <= real <= page.CLS_MAX_LEN
        assert (row[:real] != page.PAD).all()  # real tokens first
    assert page.with_padding(tokens, 3).shape == (64, tokens.shape[1] + 3)


def test_padding_classifier_is_invariant_with_the_mask():
    model = page.train_padding_classifier(0, steps=2)  # the training step runs
    masked = page.accuracy_vs_padding(model, [0, 8], masked=True)
    assert masked[0] == masked[1] and model.use_mask


# --- C24 --------------------------------------------------------------------------------------


def test_every_memory_method_computes_the_same_outputs_and_gradients():
    ref = claims.outputs_and_grads("dense", 64, layers=2)
    for method in page.MEMORY_METHODS[1:]:
        for a, b in zip(claims.outputs_and_grads(method, 64, layers=2), ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_stack_attention_refuses_an_unknown_method():
    q, k, v = claims.qkv(8)
    with pytest.raises(ValueError, match="method"):
        page.stack_attention("sparse", q, k, v, layers=1)


# --- KV cache ---------------------------------------------------------------------------------


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_kv_cache_bytes_matches_the_cache_tensors(h_kv):
    model = page.build_decoder(20, causal=True, seed=0, num_kv_heads=h_kv, max_len=30)
    formula = kv_cache_bytes(page.NUM_LAYERS, h_kv, page.D_MODEL // page.NUM_HEADS, 30,
                             batch_size=3, bytes_per_element=4)  # fmt: skip
    assert model.new_cache(3).nbytes == formula


def test_the_mask_tests_on_masks_with_known_bugs():
    n = 5
    assert all(fn(causal_mask(n)) for fn in page.MASK_TESTS.values())
    everything = torch.ones(n, n, dtype=torch.bool)  # no mask at all
    assert not page.position_zero_test(everything) and not page.future_leak_test(everything)
    assert page.sees_past_test(everything)
    diagonal = torch.eye(n, dtype=torch.bool)  # the article's test cannot see this one
    assert page.position_zero_test(diagonal) and not page.sees_past_test(diagonal)


def test_masked_softmax_fills_by_hand():
    scores = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    allowed = torch.tensor([[True, True, False], [False, False, False]])
    want = torch.softmax(torch.tensor([1.0, 2.0]), dim=-1)  # the kept keys alone
    for fill in page.FILLS:
        w = page.masked_softmax(scores, allowed, fill)
        torch.testing.assert_close(w[0, :2], want)
        assert w[0, 2] == 0
    assert torch.isnan(page.masked_softmax(scores, allowed, "-inf")[1]).all()
    assert (page.masked_softmax(scores, allowed, "safe softmax")[1] == 0).all()
    torch.testing.assert_close(
        page.masked_softmax(scores, allowed, "-1e9")[1], torch.full((3,), 1 / 3)
    )


def test_naive_softmax_is_torch_softmax_on_small_scores():
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(page.naive_softmax(x), torch.softmax(x, dim=-1))


def test_padding_drift_is_zero_with_the_mask():
    masked = page.padding_drift([0, 2, 5], masked=True)
    unmasked = page.padding_drift([0, 2, 5], masked=False)
    assert masked[0] == unmasked[0] == 0.0
    assert max(masked) < 1e-6 < min(unmasked[1:])


def test_sample_texts_decodes_generate_and_is_reproducible():
    data = page.text_data()
    model = page.build_decoder(data.vocab.size, causal=True, seed=0).eval()
    inputs, _ = page.eval_windows(data, n=2, seed=3)
    greedy = generate(model, inputs[:, :4], max_new_tokens=page.SEQ_LEN - 4, use_cache=True)
    texts = page.sample_texts(model, data, n=2, prompt_len=4)
    assert [c for _, c in texts] == [data.vocab.decode(r[4:]) for r in greedy.tokens]
    assert [p for p, _ in texts] == [data.vocab.decode(r[:4]) for r in inputs[:, :4]]
    a = page.sample_texts(model, data, n=2, prompt_len=4, temperature=1.0, seed=1)
    assert a == page.sample_texts(model, data, n=2, prompt_len=4, temperature=1.0, seed=1)
