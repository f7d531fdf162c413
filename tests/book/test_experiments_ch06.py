"""Chapter 6's experiments: the helpers against independent computations, and every asserting
function fed a case where its claim is false (it must raise AssertionError) and one where it
holds."""

from __future__ import annotations

import math

import pytest
import torch

from attention.decoder import CharDecoder, generate
from attention.masks import causal_mask
from book.experiments import ch06
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
        teacher = float(ch06.lm_loss(causal, (x, y)))
    assert ch06.honest_next_token_loss(causal, x, y) == pytest.approx(teacher, abs=1e-5)
    peeking = _tiny(False)
    with torch.no_grad():
        teacher = float(ch06.lm_loss(peeking, (x, y)))
    assert abs(ch06.honest_next_token_loss(peeking, x, y) - teacher) > 1e-4


def test_unigram_loss_is_the_entropy_of_uniform_text():
    train = torch.arange(4).repeat(100)  # uniform over 4 symbols
    assert ch06.unigram_loss(train, torch.tensor([0, 1, 2, 3]), 4) == pytest.approx(math.log(4))


def test_real_word_rate():
    assert ch06.real_word_rate(["the value of the"]) == 1.0
    assert ch06.real_word_rate(["zzqx qqzx"]) == 0.0
    assert ch06.real_word_rate(["   "]) == 0.0


def test_assert_c20():
    good = dict(train_masked=[2.4, 2.5, 2.4], train_unmasked=[0.1, 0.1, 0.2],
                honest_masked=[2.3, 2.3, 2.4], honest_unmasked=[7.0, 6.5, 7.2])  # fmt: skip
    ch06.assert_c20_no_mask_cheats(*good.values(), baseline=3.2, ratio=0.5)
    slow = dict(good, train_unmasked=[0.1, 1.5, 0.2])  # one seed did not fall fast
    with pytest.raises(AssertionError, match="did not fall faster"):
        ch06.assert_c20_no_mask_cheats(*slow.values(), baseline=3.2, ratio=0.5)
    fine = dict(good, honest_unmasked=[7.0, 3.0, 7.2])  # generation did not collapse
    with pytest.raises(AssertionError, match="did not collapse"):
        ch06.assert_c20_no_mask_cheats(*fine.values(), baseline=3.2, ratio=0.5)
    weak = dict(good, honest_masked=[2.3, 3.5, 2.4])
    with pytest.raises(AssertionError, match="does not beat"):
        ch06.assert_c20_no_mask_cheats(*weak.values(), baseline=3.2, ratio=0.5)


def test_short_training_runs_and_the_monitor_records_every_step():
    data = ch06.text_data()
    run = ch06.train_decoder(causal=True, seed=0, steps=3, data=data)
    assert len(run.losses) == len(run.max_scores) == len(run.max_products) == 3
    assert all(p / math.sqrt(ch06.D_MODEL // ch06.NUM_HEADS) == pytest.approx(s)
               for s, p in zip(run.max_scores, run.max_products, strict=True))  # fmt: skip
    samples = ch06.greedy_samples(run.model, data, n=2, prompt_len=4)
    assert len(samples) == 2 and all(len(c) == ch06.SEQ_LEN - 4 for _, c in samples)


def test_monitor_equals_the_direct_max_score_and_its_assertion_can_fail():
    torch.manual_seed(0)
    model = CharDecoder(9, d_model=8, num_heads=2, num_layers=2, d_ff=16, max_len=10,
                        num_kv_heads=1).eval()  # fmt: skip
    x = torch.randint(0, 9, (2, 10), generator=torch.Generator().manual_seed(2))
    with ch06.ScoreMonitor(model) as monitor, torch.no_grad():
        model(x)
        model(x[:, :5])
    assert len(monitor.max_scores) == 2
    # independent: every layer's q and k recomputed by hand from the weights
    direct = ch06.max_score(model, x)
    ch06.assert_monitor_matches(monitor.max_scores[0], direct)
    with pytest.raises(AssertionError, match="monitor recorded"):
        ch06.assert_monitor_matches(monitor.max_scores[0] * 1.01, direct)
    with torch.no_grad():  # hooks removed on exit
        model(x)
    assert len(monitor.max_scores) == 2


# --- C21 --------------------------------------------------------------------------------------


def test_fill_report_matches_hand_computed_softmaxes():
    r32 = ch06.fill_report(torch.float32)
    assert r32["-1e9"]["fully masked row"] == "uniform over masked keys"
    assert r32["-inf"]["fully masked row"] == "NaN"
    assert r32["safe softmax"]["fully masked row"] == "zeros"
    assert all(r32[f]["partly masked row"] == "masked keys get 0" for f in ch06.FILLS)
    r16 = ch06.fill_report(torch.float16)
    assert r16["-1e9"]["partly masked row"].startswith("raises RuntimeError")
    assert ch06.additive_half_mask(torch.tensor([True, False]))[1].item() == -math.inf


def test_describe_row():
    allowed = torch.tensor([True, False])
    assert ch06.describe_row(torch.tensor([1.0, 0.0]), allowed) == "masked keys get 0"
    assert ch06.describe_row(torch.tensor([0.9, 0.1]), allowed) == "masked keys get 0.1"
    none = torch.tensor([False, False])
    assert ch06.describe_row(torch.tensor([0.5, 0.5]), none) == "uniform over masked keys"
    assert ch06.describe_row(torch.tensor([float("nan"), 0.0]), none) == "NaN"


def test_assert_c21_edge_cases_passes_on_the_real_behaviour_and_fails_on_a_false_one():
    report32, report16 = ch06.fill_report(torch.float32), ch06.fill_report(torch.float16)
    allowed = torch.tensor([[True, False], [False, False]])
    bias = ch06.additive_half_mask(allowed)
    cast = torch.softmax(torch.zeros(2, 2, dtype=torch.float16) + bias, dim=-1)
    fmin = torch.tensor(torch.finfo(torch.float32).min)
    args = (report32, report16, bias[0, -1].item(), cast[1], (fmin + fmin).item())
    ch06.assert_c21_edge_cases(*args)
    fixed = {**report32, "-inf": {**report32["-inf"], "fully masked row": "zeros"}}
    with pytest.raises(AssertionError, match="float32 -inf, fully masked row: zeros"):
        ch06.assert_c21_edge_cases(fixed, *args[1:])
    with pytest.raises(AssertionError, match="cast to float16 gave -65504"):
        ch06.assert_c21_edge_cases(*args[:2], -65504.0, *args[3:])
    with pytest.raises(AssertionError, match="fully masked float16 row"):
        ch06.assert_c21_edge_cases(*args[:3], torch.zeros(2), args[4])
    with pytest.raises(AssertionError, match="finfo.min"):
        ch06.assert_c21_edge_cases(*args[:4], float(fmin))


def test_assert_c21_large_negative():
    ch06.assert_c21_large_negative({"-1e9": {"partly masked row": "masked keys get 0"}})
    with pytest.raises(AssertionError, match="-1e9 in float32"):
        ch06.assert_c21_large_negative({"-1e9": {"partly masked row": "masked keys get 0.01"}})


def test_mask_tests_against_masks_with_known_bugs():
    n = 5
    assert all(fn(causal_mask(n)) for fn in ch06.MASK_TESTS.values())
    everything = torch.ones(n, n, dtype=torch.bool)  # no mask at all
    assert not ch06.position_zero_test(everything) and not ch06.future_leak_test(everything)
    assert ch06.sees_past_test(everything)
    table = ch06.mask_test_table()
    ch06.assert_tests_verdicts(table, article_misses=["diagonal only (j == i)"])
    with pytest.raises(AssertionError, match="the article's test passes"):
        ch06.assert_tests_verdicts(table, article_misses=[])
    broken = {k: dict(v) for k, v in table.items()}
    broken["strict (j < i)"] = dict.fromkeys(ch06.MASK_TESTS, True)
    with pytest.raises(AssertionError):
        ch06.assert_tests_verdicts(broken, article_misses=["diagonal only (j == i)"])
    bad_correct = {k: dict(v) for k, v in table.items()}
    bad_correct[ch06.CORRECT_MASK]["no future leak"] = False
    with pytest.raises(AssertionError, match="rejects the correct mask"):
        ch06.assert_tests_verdicts(bad_correct, article_misses=["diagonal only (j == i)"])


def test_masked_softmax_refuses_an_unknown_fill():
    with pytest.raises(ValueError, match="fill"):
        ch06.masked_softmax(torch.zeros(2), torch.ones(2, dtype=torch.bool), "-1e4")


# --- C22 --------------------------------------------------------------------------------------


def test_padding_drift_and_its_assertion():
    pads = [0, 2, 5]
    masked = ch06.padding_drift(pads, masked=True)
    unmasked = ch06.padding_drift(pads, masked=False)
    assert masked[0] == unmasked[0] == 0.0
    ch06.assert_c22_padding_invariance(masked, unmasked, atol=1e-6)
    with pytest.raises(AssertionError, match="masked outputs moved"):
        ch06.assert_c22_padding_invariance(unmasked, unmasked, atol=1e-6)
    with pytest.raises(AssertionError, match="did not move"):
        ch06.assert_c22_padding_invariance(masked, masked, atol=1e-6)


def test_majority_batch_labels_and_padding():
    tokens, labels = ch06.majority_batch(64, torch.Generator().manual_seed(0))
    for row, label in zip(tokens, labels, strict=True):
        ones, twos = int((row == 1).sum()), int((row == 2).sum())
        assert ones != twos and label == int(ones > twos)
        real = int((row != ch06.PAD).sum())
        assert ch06.CLS_MIN_LEN <= real <= ch06.CLS_MAX_LEN
        assert (row[:real] != ch06.PAD).all()  # real tokens first
    assert ch06.with_padding(tokens, 3).shape == (64, tokens.shape[1] + 3)


def test_padding_classifier_is_invariant_with_the_mask():
    model = ch06.train_padding_classifier(0, steps=2)
    masked = ch06.accuracy_vs_padding(model, [0, 8], masked=True)
    assert masked[0] == masked[1] and model.use_mask


def test_assert_c22_accuracy():
    ch06.assert_c22_accuracy([[1.0, 1.0]] * 3, [[1.0, 0.6]] * 3, drop=0.2)
    with pytest.raises(AssertionError, match="masked accuracy moved"):
        ch06.assert_c22_accuracy([[1.0, 0.99]], [[1.0, 0.6]], drop=0.2)
    with pytest.raises(AssertionError, match="fell by only"):
        ch06.assert_c22_accuracy([[1.0, 1.0]], [[1.0, 0.9]], drop=0.2)


# --- C23 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_k", [1, 16, 64])
@pytest.mark.parametrize("first", [False, True])
def test_overflow_scale_is_the_first_float16_value_whose_product_is_inf(d_k, first):
    s = ch06.overflow_scale_measured(d_k, scale_first=first)
    bits = torch.tensor([s], dtype=torch.float16).view(torch.int16)
    below = float((bits - 1).view(torch.float16))  # the float16 value just under s

    def product(value):
        q = torch.full((1, d_k), value, dtype=torch.float16)  # (1, d_k)
        q = q / math.sqrt(d_k) if first else q
        return q @ torch.full((d_k, 1), value, dtype=torch.float16)  # (1, 1)

    assert torch.isinf(product(s)).all() and torch.isfinite(product(below)).all()
    pred = ch06.overflow_scale_predicted(d_k, scale_first=first)
    ch06.assert_c23_overflow(pred, s, rel=0.01)
    with pytest.raises(AssertionError, match="apart"):
        ch06.assert_c23_overflow(pred * 1.5, s, rel=0.01)


def test_first_nan_score():
    assert ch06.first_nan_score("naive") == pytest.approx(math.log(65504), abs=0.01)
    assert ch06.first_nan_score("package") == math.inf
    assert math.isnan(ch06.naive_softmax(torch.tensor([12.0, 0.0]).half())[0])


def test_precision_errors_order():
    errs = ch06.precision_errors(scale=1.0, n=16, d_k=16)
    assert errs["float32"] < errs["float16 package"] < errs["bfloat16 package"]


def test_assert_package_fp16_finite():
    ch06.assert_package_fp16_finite([1.0], [torch.ones(2)])
    with pytest.raises(AssertionError, match="not finite"):
        ch06.assert_package_fp16_finite([1.0, 2.0], [torch.ones(2), torch.tensor([math.inf])])


# --- C24 --------------------------------------------------------------------------------------


def test_every_memory_method_computes_the_same_outputs_and_gradients():
    ref = ch06.outputs_and_grads("dense", 64, layers=2)
    for method in ch06.MEMORY_METHODS[1:]:
        for a, b in zip(ch06.outputs_and_grads(method, 64, layers=2), ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_peak_memory_orders_the_methods():
    peaks = {m: ch06.peak_memory(m, 1024, layers=2) for m in ch06.MEMORY_METHODS}
    n2_bytes = 2 * 1024 * 1024 * 4  # one (B=1, H=2, n, n) float32 matrix
    assert peaks["dense"] > 2 * n2_bytes  # at least one n x n per layer kept
    assert peaks["flash (package)"] < n2_bytes
    assert peaks["dense + checkpointing"] < peaks["dense"]


def test_slope():
    assert ch06.slope([10, 20], [3.0, 12.0]) == pytest.approx(2.0)


def test_assert_c24_memory():
    slopes = {"dense": 2.0, "flash (package)": 0.7, "dense + checkpointing": 2.0}
    peaks = {"dense": 100, "flash (package)": 4, "dense + checkpointing": 50}
    growth = {"dense": 2.0, "flash (package)": 1.4, "dense + checkpointing": 1.0}
    ch06.assert_c24_memory(slopes, peaks, growth, max_diff=1e-6, atol=1e-4)
    cases = [
        (dict(slopes, dense=1.5), peaks, growth, 1e-6, "dense peak memory slope"),
        (dict(slopes, **{"flash (package)": 1.9}), peaks, growth, 1e-6, "flash slope"),
        (slopes, dict(peaks, **{"flash (package)": 40}), growth, 1e-6, "flash peak"),
        (slopes, dict(peaks, **{"dense + checkpointing": 95}), growth, 1e-6, "cut the dense"),
        (slopes, peaks, dict(growth, **{"dense + checkpointing": 2.0}), 1e-6, "grew"),
        (slopes, peaks, dict(growth, dense=1.1), 1e-6, "grew only"),
        (slopes, peaks, growth, 1e-2, "differ"),
    ]
    for s, p, g, diff, message in cases:
        with pytest.raises(AssertionError, match=message):
            ch06.assert_c24_memory(s, p, g, max_diff=diff, atol=1e-4)


def test_assert_equal_to_package():
    ch06.assert_equal_to_package(torch.ones(3), torch.ones(3))
    with pytest.raises(AssertionError, match="differs from the package"):
        ch06.assert_equal_to_package(torch.ones(3), torch.ones(3) * 1.01)


def test_stack_attention_refuses_an_unknown_method():
    q, k, v = ch06.qkv(8)
    with pytest.raises(ValueError, match="method"):
        ch06.stack_attention("sparse", q, k, v, layers=1)


# --- KV cache ---------------------------------------------------------------------------------


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_kv_cache_bytes_matches_the_cache_tensors(h_kv):
    model = ch06.build_decoder(20, causal=True, seed=0, num_kv_heads=h_kv, max_len=30)
    formula = kv_cache_bytes(ch06.NUM_LAYERS, h_kv, ch06.D_MODEL // ch06.NUM_HEADS, 30,
                             batch_size=3, bytes_per_element=4)  # fmt: skip
    assert model.new_cache(3).nbytes == formula


def test_assert_cache_exact():
    model = _tiny(True)
    prompt = torch.randint(0, 9, (2, 3), generator=torch.Generator().manual_seed(0))
    a = generate(model, prompt, max_new_tokens=5, use_cache=True)
    b = generate(model, prompt, max_new_tokens=5, use_cache=False)
    ch06.assert_cache_exact(a, b)
    other = generate(_tiny(True, seed=1), prompt, max_new_tokens=5, use_cache=False)
    with pytest.raises(AssertionError):
        ch06.assert_cache_exact(a, other)
    assert ch06.decode_seconds(model, prompt, 2, use_cache=True) > 0
