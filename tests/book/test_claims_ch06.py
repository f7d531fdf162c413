"""Chapter 6's claims module (:mod:`book.claims.ch06`): the measurement harness against
independent computations, and every verdict and asserting function fed a case where its claim
is false, and the case that gives each verdict it can return."""

from __future__ import annotations

import math

import pytest
import torch

from attention.decoder import CharDecoder, generate
from attention.masks import causal_mask
from book.claims import VERDICTS
from book.claims import ch06 as claims
from book.pages import ch06 as page
from measure.flops import matmul_flop_counter

# --- C20 --------------------------------------------------------------------------------------


def _tiny(causal: bool, seed: int = 0) -> CharDecoder:
    torch.manual_seed(seed)
    return CharDecoder(9, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=10,
                       causal=causal).eval()  # fmt: skip


def test_real_word_rate():
    assert claims.real_word_rate(["the value of the"]) == 1.0
    assert claims.real_word_rate(["zzqx qqzx"]) == 0.0
    assert claims.real_word_rate(["   "]) == 0.0


def test_assert_c20():
    good = dict(train_masked=[2.4, 2.5, 2.4], train_unmasked=[0.1, 0.1, 0.2],
                honest_masked=[2.3, 2.3, 2.4], honest_unmasked=[7.0, 6.5, 7.2])  # fmt: skip
    claims.assert_c20_no_mask_cheats(*good.values(), baseline=3.2, ratio=0.5)
    slow = dict(good, train_unmasked=[0.1, 1.5, 0.2])  # one seed did not fall fast
    with pytest.raises(AssertionError, match="did not fall faster"):
        claims.assert_c20_no_mask_cheats(*slow.values(), baseline=3.2, ratio=0.5)
    fine = dict(good, honest_unmasked=[7.0, 3.0, 7.2])  # generation did not collapse
    with pytest.raises(AssertionError, match="did not collapse"):
        claims.assert_c20_no_mask_cheats(*fine.values(), baseline=3.2, ratio=0.5)
    weak = dict(good, honest_masked=[2.3, 3.5, 2.4])
    with pytest.raises(AssertionError, match="does not beat"):
        claims.assert_c20_no_mask_cheats(*weak.values(), baseline=3.2, ratio=0.5)


def test_monitor_equals_the_direct_max_score_and_its_assertion_can_fail():
    torch.manual_seed(0)
    model = CharDecoder(9, d_model=8, num_heads=2, num_layers=2, d_ff=16, max_len=10,
                        num_kv_heads=1).eval()  # fmt: skip
    x = torch.randint(0, 9, (2, 10), generator=torch.Generator().manual_seed(2))
    with page.ScoreMonitor(model) as monitor, torch.no_grad():
        model(x)
        model(x[:, :5])
    assert len(monitor.max_scores) == 2
    # independent: every layer's q and k recomputed by hand from the weights
    direct = page.max_score(model, x)
    claims.assert_monitor_matches(monitor.max_scores[0], direct)
    with pytest.raises(AssertionError, match="monitor recorded"):
        claims.assert_monitor_matches(monitor.max_scores[0] * 1.01, direct)
    with torch.no_grad():  # hooks removed on exit
        model(x)
    assert len(monitor.max_scores) == 2


# --- C21 --------------------------------------------------------------------------------------


def test_fill_report_matches_hand_computed_softmaxes():
    r32 = claims.fill_report(torch.float32)
    assert r32["-1e9"]["fully masked row"] == "uniform over masked keys"
    assert r32["-inf"]["fully masked row"] == "NaN"
    assert r32["safe softmax"]["fully masked row"] == "zeros"
    assert all(r32[f]["partly masked row"] == "masked keys get 0" for f in page.FILLS)
    r16 = claims.fill_report(torch.float16)
    assert r16["-1e9"]["partly masked row"].startswith("raises RuntimeError")
    assert page.additive_half_mask(torch.tensor([True, False]))[1].item() == -math.inf


def test_describe_row():
    allowed = torch.tensor([True, False])
    assert claims.describe_row(torch.tensor([1.0, 0.0]), allowed) == "masked keys get 0"
    assert claims.describe_row(torch.tensor([0.9, 0.1]), allowed) == "masked keys get 0.1"
    none = torch.tensor([False, False])
    assert claims.describe_row(torch.tensor([0.5, 0.5]), none) == "uniform over masked keys"
    assert claims.describe_row(torch.tensor([float("nan"), 0.0]), none) == "NaN"


def test_assert_c21_edge_cases_passes_on_the_real_behaviour_and_fails_on_a_false_one():
    report32, report16 = claims.fill_report(torch.float32), claims.fill_report(torch.float16)
    allowed = torch.tensor([[True, False], [False, False]])
    bias = page.additive_half_mask(allowed)
    cast = torch.softmax(torch.zeros(2, 2, dtype=torch.float16) + bias, dim=-1)
    fmin = torch.tensor(torch.finfo(torch.float32).min)
    args = (report32, report16, bias[0, -1].item(), cast[1], (fmin + fmin).item())
    claims.assert_c21_edge_cases(*args)
    fixed = {**report32, "-inf": {**report32["-inf"], "fully masked row": "zeros"}}
    with pytest.raises(AssertionError, match="float32 -inf, fully masked row: zeros"):
        claims.assert_c21_edge_cases(fixed, *args[1:])
    leaky = {**report16, "finfo.min": {**report16["finfo.min"], "partly masked row": "masked "
                                        "keys get 1e-05"}}  # fmt: skip
    with pytest.raises(AssertionError, match="float16 finfo.min, partly masked row"):
        claims.assert_c21_edge_cases(report32, leaky, *args[2:])
    with pytest.raises(AssertionError, match="cast to float16 gave -65504"):
        claims.assert_c21_edge_cases(*args[:2], -65504.0, *args[3:])
    with pytest.raises(AssertionError, match="fully masked float16 row"):
        claims.assert_c21_edge_cases(*args[:3], torch.zeros(2), args[4])
    with pytest.raises(AssertionError, match="finfo.min"):
        claims.assert_c21_edge_cases(*args[:4], float(fmin))


def test_assert_c21_large_negative():
    claims.assert_c21_large_negative({"-1e9": {"partly masked row": "masked keys get 0"}})
    with pytest.raises(AssertionError, match="-1e9 in float32"):
        claims.assert_c21_large_negative({"-1e9": {"partly masked row": "masked keys get 0.01"}})


def test_mask_tests_against_masks_with_known_bugs():
    n = 5
    assert all(fn(causal_mask(n)) for fn in page.MASK_TESTS.values())
    everything = torch.ones(n, n, dtype=torch.bool)  # no mask at all
    assert not page.position_zero_test(everything) and not page.future_leak_test(everything)
    assert page.sees_past_test(everything)
    table = claims.mask_test_table()
    claims.assert_tests_verdicts(table, article_misses=["diagonal only (j == i)"])
    with pytest.raises(AssertionError, match="the article's test passes"):
        claims.assert_tests_verdicts(table, article_misses=[])
    broken = {k: dict(v) for k, v in table.items()}
    broken["strict (j < i)"] = dict.fromkeys(page.MASK_TESTS, True)
    with pytest.raises(AssertionError):
        claims.assert_tests_verdicts(broken, article_misses=["diagonal only (j == i)"])
    bad_correct = {k: dict(v) for k, v in table.items()}
    bad_correct[claims.CORRECT_MASK]["no future leak"] = False
    with pytest.raises(AssertionError, match="rejects the correct mask"):
        claims.assert_tests_verdicts(bad_correct, article_misses=["diagonal only (j == i)"])


# --- C22 --------------------------------------------------------------------------------------


def test_padding_drift_and_its_assertion():
    pads = [0, 2, 5]
    masked = page.padding_drift(pads, masked=True)
    unmasked = page.padding_drift(pads, masked=False)
    assert masked[0] == unmasked[0] == 0.0
    claims.assert_c22_padding_invariance(masked, unmasked, atol=1e-6)
    with pytest.raises(AssertionError, match="masked outputs moved"):
        claims.assert_c22_padding_invariance(unmasked, unmasked, atol=1e-6)
    with pytest.raises(AssertionError, match="did not move"):
        claims.assert_c22_padding_invariance(masked, masked, atol=1e-6)


def test_assert_c22_accuracy():
    claims.assert_c22_accuracy([[1.0, 1.0]] * 3, [[1.0, 0.6]] * 3, drop=0.2)
    with pytest.raises(AssertionError, match="masked accuracy moved"):
        claims.assert_c22_accuracy([[1.0, 0.99]], [[1.0, 0.6]], drop=0.2)
    with pytest.raises(AssertionError, match="fell by only"):
        claims.assert_c22_accuracy([[1.0, 1.0]], [[1.0, 0.9]], drop=0.2)


# --- C23 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_k", [1, 16, 64])
@pytest.mark.parametrize("first", [False, True])
def test_overflow_scale_is_the_first_float16_value_whose_product_is_inf(d_k, first):
    s = claims.overflow_scale_measured(d_k, scale_first=first)
    bits = torch.tensor([s], dtype=torch.float16).view(torch.int16)
    below = float((bits - 1).view(torch.float16))  # the float16 value just under s

    def product(value):
        q = torch.full((1, d_k), value, dtype=torch.float16)  # (1, d_k)
        q = q / math.sqrt(d_k) if first else q
        return q @ torch.full((d_k, 1), value, dtype=torch.float16)  # (1, 1)

    assert torch.isinf(product(s)).all() and torch.isfinite(product(below)).all()
    pred = claims.overflow_scale_predicted(d_k, scale_first=first)
    claims.assert_c23_overflow(pred, s, rel=0.01)
    with pytest.raises(AssertionError, match="apart"):
        claims.assert_c23_overflow(pred * 1.5, s, rel=0.01)


def test_first_nan_score():
    assert claims.first_nan_score("naive") == pytest.approx(math.log(65504), abs=0.01)
    assert claims.first_nan_score("package") == math.inf
    assert math.isnan(page.naive_softmax(torch.tensor([12.0, 0.0]).half())[0])


def test_precision_errors_order():
    errs = claims.precision_errors(scale=1.0, n=16, d_k=16)
    assert errs["float32"] < errs["float16 package"] < errs["bfloat16 package"]


def test_assert_package_fp16_finite():
    claims.assert_package_fp16_finite([1.0], [torch.ones(2)])
    with pytest.raises(AssertionError, match="not finite"):
        claims.assert_package_fp16_finite([1.0, 2.0], [torch.ones(2), torch.tensor([math.inf])])


# --- C24 --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_peak_memory_orders_the_methods():
    peaks = {m: claims.peak_memory(m, 1024, layers=2) for m in page.MEMORY_METHODS}
    n2_bytes = 2 * 1024 * 1024 * 4  # one (B=1, H=2, n, n) float32 matrix
    assert peaks["dense"] > 2 * n2_bytes  # at least one n x n per layer kept
    assert peaks["flash (package)"] < n2_bytes
    assert peaks["dense + checkpointing"] < peaks["dense"]


def test_slope():
    assert claims.slope([10, 20], [3.0, 12.0]) == pytest.approx(2.0)


def test_assert_c24_memory():
    slopes = {"dense": 2.0, "flash (package)": 0.7, "dense + checkpointing": 2.0}
    peaks = {"dense": 100, "flash (package)": 4, "dense + checkpointing": 50}
    growth = {"dense": 2.0, "flash (package)": 1.4, "dense + checkpointing": 1.0}
    claims.assert_c24_memory(slopes, peaks, growth, max_diff=1e-6, atol=1e-4)
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
            claims.assert_c24_memory(s, p, g, max_diff=diff, atol=1e-4)


def test_assert_equal_to_package():
    claims.assert_equal_to_package(torch.ones(3), torch.ones(3))
    with pytest.raises(AssertionError, match="differs from the package"):
        claims.assert_equal_to_package(torch.ones(3), torch.ones(3) * 1.01)


# --- KV cache ---------------------------------------------------------------------------------


def test_assert_cache_exact():
    model = _tiny(True)
    prompt = torch.randint(0, 9, (2, 3), generator=torch.Generator().manual_seed(0))
    a = generate(model, prompt, max_new_tokens=5, use_cache=True)
    b = generate(model, prompt, max_new_tokens=5, use_cache=False)
    claims.assert_cache_exact(a, b)
    other = generate(_tiny(True, seed=1), prompt, max_new_tokens=5, use_cache=False)
    with pytest.raises(AssertionError):
        claims.assert_cache_exact(a, other)


def test_decode_flops_count_the_forward_passes_each_way_of_decoding_makes():
    model = _tiny(True)
    prompt = torch.randint(0, 9, (1, 3), generator=torch.Generator().manual_seed(0))

    def forward_flops(tokens):
        counter = matmul_flop_counter()
        with torch.no_grad(), counter:
            model(tokens)
        return counter.get_total_flops()

    longer = torch.cat([prompt, prompt[:, :1]], dim=1)  # (1, 4)
    # recomputing: the prompt, then the prompt plus one token
    full = claims.decode_flops(model, prompt, 2, use_cache=False)
    assert full == forward_flops(prompt) + forward_flops(longer)
    # one new token: both ways make the same single pass over the prompt
    assert claims.decode_flops(model, prompt, 1, use_cache=True) == forward_flops(prompt)
    assert claims.decode_flops(model, prompt, 4, use_cache=True) < claims.decode_flops(
        model, prompt, 4, use_cache=False
    )


def test_kv_bytes_computed_is_two_tensors_per_layer_per_position():
    model = _tiny(True)  # 1 layer, 2 key/value heads of width 4, float32
    per_position = 2 * 1 * 2 * 4 * 4  # keys and values
    assert claims.kv_bytes_computed(model, 7) == 7 * per_position
    assert claims.kv_bytes_computed(model, 7, batch_size=2) == 14 * per_position


def test_paired_time_ratio_is_the_median_of_paired_ratios():
    model = _tiny(True)
    prompt = torch.randint(0, 9, (1, 3), generator=torch.Generator().manual_seed(0))
    ratio, full, cached = claims.paired_time_ratio(model, prompt, 3, pairs=3)
    assert full > 0 and cached > 0 and ratio > 0


# --- verdicts ---------------------------------------------------------------------------------


def test_parts_verdict():
    assert claims.parts_verdict({"a": True, "b": True}) == "reproduced"
    assert claims.parts_verdict({"a": True, "b": False}) == "partly"
    assert claims.parts_verdict({"a": False, "b": False}) == "not reproduced"
    with pytest.raises(ValueError, match="parts"):
        claims.parts_verdict({})


def test_c20_verdict():
    good = ([2.4, 2.5, 2.4], [0.1, 0.1, 0.2], [2.3, 2.3, 2.4], [7.0, 6.5, 7.2])
    assert claims.c20_verdict(*good, baseline=3.2) == "reproduced"
    slow = (good[0], [0.1, 1.5, 0.2], *good[2:])  # one seed did not fall fast
    assert claims.c20_verdict(*slow, baseline=3.2) == "partly"
    fine = (*good[:3], [7.0, 3.0, 7.2])  # generation did not collapse on one seed
    assert claims.c20_verdict(*fine, baseline=3.2) == "partly"
    assert claims.c20_verdict(good[0], good[0], *fine[2:], baseline=3.2) == "not reproduced"
    assert claims.c20_verdict(*good, baseline=2.0) == "partly"  # the masked model loses too


def _c21_inputs():
    return (
        claims.fill_report(torch.float32),
        claims.fill_report(torch.float16),
        claims.mask_test_table(),
    )


def test_c21_verdict_on_the_real_behaviour_and_on_other_ones():
    r32, r16, table = _c21_inputs()
    assert claims.c21_verdict(r32, r16, table) == "partly"
    parts = claims.c21_parts(r32, r16, table)
    assert parts == {
        "-1e9 gives zero weight": True,
        "-1e9 gives zero weight everywhere": False,
        "the article's test catches every wrong mask": False,
    }
    # a world where -1e9 works everywhere and the article's test sees every wrong mask
    ideal32 = {
        **r32,
        "-1e9": {"partly masked row": "masked keys get 0", "fully masked row": "zeros"},
    }
    ideal16 = {**r16, "-1e9": dict.fromkeys(r16["-1e9"], "masked keys get 0")}
    strict = {k: dict(v) for k, v in table.items()}
    strict["diagonal only (j == i)"][claims.ARTICLE_TEST] = False
    assert claims.c21_verdict(ideal32, ideal16, strict) == "reproduced"
    leaky32 = {**r32, "-1e9": {**r32["-1e9"], "partly masked row": "masked keys get 0.01"}}
    assert claims.c21_verdict(leaky32, r16, table) == "not reproduced"


def test_c22_verdict():
    args = ([0.0, 1e-7], [0.0, 0.3], [[1.0, 1.0]] * 3, [[1.0, 0.6]] * 3, 1e-7)
    assert claims.c22_verdict(*args) == "reproduced"
    assert claims.c22_verdict(*args[:3], [[1.0, 0.95]] * 3, 1e-7) == "partly"  # no accuracy drop
    assert claims.c22_verdict(*args[:4], 1e-3) == "partly"  # the masks do not combine
    assert claims.c22_verdict([0.0, 0.3], [0.0, 0.0], [[1.0, 0.9]], [[1.0, 1.0]], 1.0) == (
        "not reproduced"
    )


def test_c23_verdict():
    overflow = [(31.99, 32.0), (90.49, 90.5)]
    assert claims.c23_verdict(overflow, 11.09375, [True, True]) == "reproduced"
    assert claims.c23_verdict([(31.99, 40.0)], 11.09375, [True]) == "partly"
    assert claims.c23_verdict(overflow, math.inf, [True, False]) == "partly"
    assert claims.c23_verdict([(31.99, 40.0)], math.inf, [False]) == "not reproduced"


def test_c24_verdict():
    slopes = {"dense": 2.0, "flash (package)": 0.7, "dense + checkpointing": 2.0}
    peaks = {"dense": 100, "flash (package)": 4, "dense + checkpointing": 50}
    growth = {"dense": 2.0, "flash (package)": 1.4, "dense + checkpointing": 1.0}
    assert claims.c24_verdict(slopes, peaks, growth, max_diff=1e-6) == "reproduced"
    no_ckpt = dict(growth, **{"dense + checkpointing": 2.0})  # checkpointing grows with depth
    assert claims.c24_verdict(slopes, peaks, no_ckpt, max_diff=1e-6) == "partly"
    flat = dict(slopes, dense=1.0)  # dense memory not n²
    assert claims.c24_verdict(flat, peaks, no_ckpt, max_diff=1.0) == "not reproduced"


def test_kv_cache_verdict():
    rows = {"MHA": (4, 400, 900, 40), "GQA": (2, 200, 800, 30), "MQA": (1, 100, 700, 20)}
    assert claims.kv_cache_verdict(True, rows, num_heads=4) == "reproduced"
    little = dict(rows, MQA=(1, 100, 700, 400))  # the cache saved under half the FLOPs for MQA
    assert claims.kv_cache_verdict(True, little, num_heads=4) == "partly"
    assert claims.kv_cache_verdict(True, dict(rows, MQA=(1, 100, 700, 350)), num_heads=4) == (
        "reproduced"
    )  # exactly half: the threshold is inclusive
    wrong_size = dict(rows, GQA=(2, 300, 800, 30))
    assert claims.kv_cache_verdict(True, wrong_size, num_heads=4) == "partly"
    no_mha = {"GQA": (2, 200, 800, 800)}
    assert claims.kv_cache_verdict(False, no_mha, num_heads=4) == "not reproduced"


def test_every_verdict_is_one_of_the_verdicts():
    assert set(VERDICTS) == {"reproduced", "partly", "not reproduced"}


def test_sweeps_declare_seeds_budget_and_the_mask_in_training():
    sweeps = {s.claim_id: s for s in claims.SCEPTIC_SWEEPS}
    assert set(sweeps) == {"C20", "C21", "C22", "C23", "C24", "KV cache"}
    for sweep in (sweeps["C20"], sweeps["C22"]):
        changed = {k for p in sweep.perturbations for k in p.kwargs}
        assert {"seeds", "steps"} <= changed
        budgets = [p.kwargs["steps"] for p in sweep.perturbations if "steps" in p.kwargs]
        assert min(budgets) >= 3 * sweep.baseline["steps"]
    assert any(p.kwargs == {"train_masked": False} for p in sweeps["C22"].perturbations)


def test_combined_mask_difference_is_rounding():
    assert claims.combined_mask_difference() < 1e-6


def test_sweep_runners_run_and_judge_a_tiny_budget():
    c20 = claims.c20_sweep_run(seeds=[0], steps=2)
    assert c20.verdict in VERDICTS and "unigram" in c20.numbers
    c22 = claims.c22_sweep_run(seeds=[0], steps=2, train_masked=False)
    assert c22.verdict in VERDICTS and set(c22.numbers) == {
        "trained",
        "steps",
        "masked, 0 pads",
        "masked, 32 pads",
        "no mask, 0 pads",
        "no mask, 32 pads",
    }
    assert c22.numbers["trained"] == "without its mask" and c22.numbers["steps"] == 2


def test_untrained_claims_declare_their_own_knobs():
    sweeps = {s.claim_id: s for s in claims.SCEPTIC_SWEEPS}
    changed = {cid: {k for p in sw.perturbations for k in p.kwargs} for cid, sw in sweeps.items()}
    assert {"seeds", "low_precision", "scale", "n"} <= changed["C21"]
    assert any(p.kwargs.get("low_precision") == "bfloat16" for p in sweeps["C21"].perturbations)
    assert {"d_ks", "scales", "d_k"} <= changed["C23"]
    assert {"ns", "layers"} <= changed["C24"]
    assert {"length", "prompt", "batch_size"} <= changed["KV cache"]
    assert sweeps["KV cache"].baseline["kv_heads"] == [4, 2, 1]  # MHA, GQA, MQA in every run


def test_c21_sweep_run_judges_each_dtype_with_the_chapters_verdict():
    base = claims.c21_sweep_run(seeds=[0], low_precision="float16", scale=3.0, n=4)
    assert base.verdict == claims.c21_verdict(
        claims.fill_report(torch.float32), claims.fill_report(torch.float16),
        claims.mask_test_table(4),
    ) == "partly"  # fmt: skip
    assert base.numbers["float16 -1e9"] == "raises RuntimeError"
    bf16 = claims.c21_sweep_run(seeds=[0, 1], low_precision="bfloat16", scale=3.0, n=4)
    assert bf16.numbers["bfloat16 -1e9"] == "masked keys get 0 / uniform over masked keys"
    with pytest.raises(ValueError, match="low_precision"):
        claims.c21_sweep_run(seeds=[0], low_precision="float8", scale=3.0, n=4)


def test_c23_sweep_run_on_small_heads():
    out = claims.c23_sweep_run(d_ks=[1, 4], scales=[1.0, 100.0], d_k=4)
    assert out.verdict == "reproduced"
    assert (
        "d_k 4: 127.97 / 128.00"
        in out.numbers["overflow scale, scale after (predicted / measured)"]
    )
    assert out.numbers["package finite at every scale"] is True


def test_c24_sweep_run_at_small_sizes():
    out = claims.c24_sweep_run(ns=[16, 32, 64], layers=2)
    assert out.verdict in VERDICTS and out.numbers["setting"] == "2 layers, n [16, 32, 64]"
    assert float(out.numbers["max diff"]) <= claims.C24_ATOL


def test_kv_cache_sweep_run_at_a_tiny_budget():
    out = claims.kv_cache_sweep_run(kv_heads=[4, 1], length=40, prompt=8, batch_size=2, steps=2)
    assert out.numbers["same tokens"] is True
    # A cache of 4 key/value heads is 4x that of 1; 32 tokens after 8 cut the FLOPs well past 2x.
    assert out.numbers["cache bytes"] == "H_kv 4 30720, H_kv 1 7680"
    assert out.verdict == "reproduced"
