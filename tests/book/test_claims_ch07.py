"""book.claims.ch07: the cost runners against exact counts, every verdict function fed the
numbers that give each verdict it can return, and every asserting function fed a case where
its claim is false."""

from __future__ import annotations

import math

import pytest
import torch

from attention.vision import SwinBlock
from book.claims import VERDICTS
from book.claims import ch07 as claims
from book.pages import ch07 as pages


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_vit_cost_counts_tokens_and_is_reproducible():
    a, b = claims.vit_cost(8, 2, timed=False), claims.vit_cost(8, 2, timed=False)
    assert a.seq_len == 17 and a.flops == b.flops > 0 and a.peak_bytes == b.peak_bytes > 0
    assert math.isnan(a.seconds)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        claims.forward_cost(lambda x: x, torch.ones(1), 1)


def test_quadratic_fit_recovers_exact_coefficients_and_sees_a_cubic():
    ns = [17, 65, 257, 1025]
    fit = claims.quadratic_fit(ns, [384 + 33024 * n + 256 * n * n for n in ns])
    assert fit.c0 == pytest.approx(384, abs=1e-3) and fit.c1 == pytest.approx(33024)
    assert fit.c2 == pytest.approx(256) and fit.max_residual < 1e-6
    cubic = claims.quadratic_fit(ns, [n**3 for n in ns])
    assert cubic.max_residual > 1e3
    with pytest.raises(ValueError, match="at least 3"):
        claims.quadratic_fit([1, 2], [1, 2])


def test_assert_vit_cost_quadratic_passes_on_dense_attention_and_fails_otherwise():
    ns = [17, 65, 257, 1025]
    claims.assert_vit_cost_quadratic(ns, [100 + 7 * n + 256 * n * n for n in ns], d_model=32,
                                   num_layers=2)  # fmt: skip
    real = claims.vit_cost(8, 2, timed=False), claims.vit_cost(16, 2, timed=False)
    real += claims.vit_cost(24, 2, timed=False), claims.vit_cost(32, 2, timed=False)
    claims.assert_vit_cost_quadratic(
        [c.seq_len for c in real], [c.flops for c in real], d_model=32, num_layers=2
    )
    with pytest.raises(AssertionError, match="N² coefficient"):  # linear: a windowed model
        claims.assert_vit_cost_quadratic(ns, [5000 * n for n in ns], d_model=32, num_layers=2)
    with pytest.raises(AssertionError, match="N² coefficient"):  # one layer's worth only
        claims.assert_vit_cost_quadratic(ns, [128 * n * n for n in ns], d_model=32, num_layers=2)
    with pytest.raises(AssertionError, match="not a quadratic"):
        claims.assert_vit_cost_quadratic(ns, [n**3 for n in ns], d_model=32, num_layers=2)
    with pytest.raises(ValueError, match="at least 4"):
        claims.assert_vit_cost_quadratic(ns[:3], [1, 2, 3], d_model=32, num_layers=2)


def test_assert_vit_needs_more_data():
    gaps = claims.assert_vit_needs_more_data(
        vit_small=[0.80, 0.78], cnn_small=[0.92, 0.93], vit_full=[0.95], cnn_full=[0.97],
        margin=0.03,
    )  # fmt: skip
    assert gaps == pytest.approx((0.135, 0.02))
    with pytest.raises(AssertionError, match="leads by only"):  # the ViT is as good
        claims.assert_vit_needs_more_data(vit_small=[0.9], cnn_small=[0.91], vit_full=[0.9],
                                        cnn_full=[0.9], margin=0.03)  # fmt: skip
    with pytest.raises(AssertionError, match="does not shrink"):
        claims.assert_vit_needs_more_data(vit_small=[0.8], cnn_small=[0.9], vit_full=[0.8],
                                        cnn_full=[0.95], margin=0.03)  # fmt: skip
    with pytest.raises(AssertionError, match="does not shrink by 0.03"):  # 0.200 -> 0.199
        claims.assert_vit_needs_more_data(vit_small=[0.7], cnn_small=[0.9], vit_full=[0.751],
                                          cnn_full=[0.95])  # fmt: skip


def test_layer_cost_of_a_window_block_is_linear_in_the_tokens():
    costs = [
        claims.layer_cost(SwinBlock(8, s, 1, 4, shift=2), s, 8, timed=False) for s in (4, 8, 16)
    ]
    assert [c.seq_len for c in costs] == [16, 64, 256]
    assert claims.growth([c.flops for c in costs]) == [4.0, 4.0]
    assert claims.growth([1, 3, 6]) == [3.0, 2.0]


def test_assert_c25_window_cost_linear():
    tokens = [64, 256, 1024]
    window = [(10 * n, 3 * n) for n in tokens]
    dense = [(n * n, n * n) for n in tokens]
    claims.assert_c25_window_cost_linear(tokens=tokens, window=window, dense=dense)
    with pytest.raises(AssertionError, match="FLOPs per token change"):
        claims.assert_c25_window_cost_linear(tokens=tokens, window=dense, dense=dense)
    with pytest.raises(AssertionError, match="peak bytes per token change"):
        bad = [(10 * n, n * n) for n in tokens]
        claims.assert_c25_window_cost_linear(tokens=tokens, window=bad, dense=dense)
    with pytest.raises(AssertionError, match="grow no faster"):
        claims.assert_c25_window_cost_linear(tokens=tokens, window=window, dense=window)


def _fields(grow: bool):
    own = pages.window_of((5, 6), 16, 4)
    fields = {(False, d): own.clone() for d in (1, 2, 4)}
    for i, d in enumerate((1, 2, 4)):
        f = own.clone()
        if grow and i:
            f[max(0, 3 - 2 * i) : 9 + 2 * i, max(0, 3 - 2 * i) : 9 + 2 * i] = True
        fields[True, d] = f
    return fields, own


def test_assert_c25_shift_crosses_windows():
    fields, own = _fields(grow=True)
    claims.assert_c25_shift_crosses_windows(fields, own)
    stuck, own = _fields(grow=False)  # the shift made no difference
    with pytest.raises(AssertionError, match="ever leaves its own window"):
        claims.assert_c25_shift_crosses_windows(stuck, own)
    leaky, own = _fields(grow=True)
    leaky[False, 4] = leaky[True, 4]  # regular windows leaking: impossible, so it must fail
    with pytest.raises(AssertionError, match="regular windows only"):
        claims.assert_c25_shift_crosses_windows(leaky, own)
    flat, own = _fields(grow=True)
    flat[True, 4] = flat[True, 2]
    with pytest.raises(AssertionError, match="does not grow"):
        claims.assert_c25_shift_crosses_windows(flat, own)


def test_c25_shift_judges_every_token_and_catches_the_corners():
    """On the real 8 × 8 map with 4 × 4 windows, every token's field: at two shifted blocks
    the corner tokens still see only their window (partly), at four every token has left."""
    torch.manual_seed(0)
    own = torch.stack([pages.window_of((r, c), 8, 4) for r in range(8) for c in range(8)])
    maps = {
        (s, d): pages.field_map(pages.swin_stack(d, shifted=s, grid=8, window_size=4), 8, 16)
        for s in (False, True)
        for d in (1, 2, 4)
    }
    for (s, d), m in maps.items():  # the all-token map agrees with the one-token field
        torch.testing.assert_close(m[5 * 8 + 2], pages.receptive_field(
            pages.swin_stack(d, shifted=s, grid=8, window_size=4), 8, 16, (5, 2)))  # fmt: skip
    assert claims.assert_c25_shift_crosses_windows(maps, own)[4] == 64
    shallow = {k: v for k, v in maps.items() if k[1] <= 2}
    assert claims.c25_shift_verdict(shallow, own) == "partly"  # the corners stay home
    with pytest.raises(AssertionError, match="still see only their own window after 2"):
        claims.assert_c25_shift_crosses_windows(shallow, own)
    assert claims.c25_shift_verdict(maps, own) == "reproduced"


def test_assert_c25_pyramid():
    claims.assert_c25_pyramid([(16, 16), (8, 32), (4, 64)])
    with pytest.raises(AssertionError, match="expected 8×8×32"):
        claims.assert_c25_pyramid([(16, 16), (8, 16)])


def test_assert_c25_shift_decides():
    good = dict(border_shifted=[0.95, 0.97], border_regular=[0.26, 0.25],
                inside_shifted=[0.99], inside_regular=[1.0], chance=0.25, solved=0.9)  # fmt: skip
    claims.assert_c25_shift_decides(**good)
    with pytest.raises(AssertionError, match="without the shift"):
        claims.assert_c25_shift_decides(**(good | {"border_regular": [0.5, 0.25]}))
    with pytest.raises(AssertionError, match="did not carry"):
        claims.assert_c25_shift_decides(**(good | {"border_shifted": [0.95, 0.6]}))
    with pytest.raises(AssertionError, match="not learned at all"):
        claims.assert_c25_shift_decides(**(good | {"inside_regular": [0.4]}))


def _mse(**by_model):
    base = {
        "DLinear": [1.0, 1.0],
        "LSTM (last)": [1.0, 1.02],
        "TCN (last)": [1.2, 1.4],
        "Transformer (last)": [0.9, 1.1],
        "LSTM (flat)": [1.0, 1.02],
        "TCN (flat)": [1.2, 1.4],
        "Transformer (flat)": [0.9, 1.1],
        "no attention (flat)": [1.5, 1.6],
        "+ time (flat)": [1.2, 1.3],
        "Informer-style (flat)": [1.3, 1.4],
    }
    return {"a": base | by_model, "b": dict(base)}


def test_c26_steadier_needs_a_smaller_range_and_no_worse_worst_seed():
    assert claims.c26_steadier([1.0, 1.02], [0.9, 1.1])
    assert not claims.c26_steadier([3.0, 3.01], [0.9, 1.1])  # 3× worse, steady: worse
    assert not claims.c26_steadier([0.5, 1.0], [0.9, 1.1])  # wider range


def test_c26_claim_holds_when_lstm_or_tcn_is_as_good_or_steadier_with_the_same_head():
    data = _mse()["a"]
    assert claims.c26_claim_holds(data, read_out="last", tol=0.1)  # LSTM as good and steadier
    steady = data | {"LSTM (last)": [1.09, 1.095], "TCN (last)": [2.0, 3.0]}
    assert claims.c26_claim_holds(steady, read_out="last", tol=0.1)  # steadier is enough
    steady_but_worse = data | {"LSTM (last)": [3.0, 3.01], "TCN (last)": [2.0, 3.0]}
    assert not claims.c26_claim_holds(steady_but_worse, read_out="last", tol=0.1)
    tcn_only = data | {"LSTM (last)": [2.0, 3.0], "TCN (last)": [1.0, 1.05]}
    assert claims.c26_claim_holds(tcn_only, read_out="last", tol=0.1)
    neither = data | {"LSTM (flat)": [1.5, 2.0], "TCN (flat)": [2.0, 3.0]}
    assert claims.c26_claim_holds(neither, read_out="last", tol=0.1)  # the other head
    assert not claims.c26_claim_holds(neither, read_out="flat", tol=0.1)


def test_c26_verdict():
    holds = _mse()["a"]
    fails = holds | {"LSTM (flat)": [1.5, 2.0], "TCN (flat)": [2.0, 3.0]}
    fails_both = fails | {"LSTM (last)": [1.5, 2.0], "TCN (last)": [2.0, 3.0]}
    assert claims.c26_verdict({"a": holds, "b": holds}) == "reproduced"
    assert claims.c26_verdict({"a": holds, "b": fails}) == "partly"
    assert claims.c26_verdict({"a": fails_both, "b": fails_both}) == "not reproduced"


def test_c26_attention_verdict():
    assert claims.c26_attention_verdict(_mse()) == "reproduced"  # 1.55 > 1.1 × 1.0
    one = _mse(**{"no attention (flat)": [0.9, 1.1]})  # as good without attention on "a"
    assert claims.c26_attention_verdict(one) == "partly"
    none = {s: d | {"no attention (flat)": [1.0, 1.05]} for s, d in _mse().items()}
    assert claims.c26_attention_verdict(none) == "not reproduced"


def test_c26_additions_verdict():
    assert claims.c26_additions_verdict(_mse()) == "not reproduced"
    one = _mse(**{"+ time (flat)": [0.8, 0.9]})  # helps on series "a" only
    assert claims.c26_additions_verdict(one) == "partly"
    both = {
        s: d | {"+ time (flat)": [0.5, 0.5], "Informer-style (flat)": [0.6, 0.6]}
        for s, d in _mse().items()
    }
    assert claims.c26_additions_verdict(both) == "reproduced"


def test_c26_linear_verdict():
    lower = {"Transformer (last)": [1.1, 1.2], "Transformer (flat)": [1.1, 1.2]}
    beats_a = _mse(**lower)  # DLinear below every variant on "a" only
    assert claims.c26_linear_verdict(beats_a) == "partly"
    everywhere = {s: d | lower for s, d in _mse().items()}
    assert claims.c26_linear_verdict(everywhere) == "reproduced"
    informer_only = _mse()  # below Informer-style on both, never below the plain Transformer
    assert claims.c26_linear_verdict(informer_only) == "partly"
    nowhere = {s: d | {"DLinear": [2.0, 2.0]} for s, d in _mse().items()}
    assert claims.c26_linear_verdict(nowhere) == "not reproduced"


def test_assert_c27_words_find_their_patches():
    claims.assert_c27_words_find_their_patches(
        mass=[[0.9, 0.8, 0.95, 0.7]], accuracy=[0.9], min_mass=0.5, min_accuracy=0.8
    )
    with pytest.raises(AssertionError, match="'bottom-left' puts only 0.250"):  # uniform
        claims.assert_c27_words_find_their_patches(
            mass=[[0.9, 0.8, 0.25, 0.7]], accuracy=[0.9], min_mass=0.5, min_accuracy=0.8
        )
    with pytest.raises(AssertionError, match="reads the digits"):
        claims.assert_c27_words_find_their_patches(
            mass=[[0.9] * 4], accuracy=[0.9, 0.3], min_mass=0.5, min_accuracy=0.8
        )


def test_assert_clip_uniform_loss():
    claims.assert_clip_uniform_loss(math.log(32), 32)
    with pytest.raises(AssertionError, match="expected ln 32"):
        claims.assert_clip_uniform_loss(math.log(31), 32)


def test_assert_c27_clip_aligns_and_temperature_matters():
    claims.assert_c27_clip_aligns(image_to_text=[0.3, 0.4], text_to_image=[0.2, 0.5],
                                min_retrieval=0.1)  # fmt: skip
    with pytest.raises(AssertionError, match="text → image retrieval falls to 0.010"):
        claims.assert_c27_clip_aligns(image_to_text=[0.3], text_to_image=[0.2, 0.01],
                                    min_retrieval=0.1)  # fmt: skip
    good = dict(learned=([0.4, 0.5], [0.4, 0.5]), fixed=([0.2, 0.3], [0.2, 0.3]),
                fixed_losses=[2.7], floor=2.49)  # fmt: skip
    claims.assert_c27_temperature_matters(**good)
    with pytest.raises(AssertionError, match="not worse"):
        claims.assert_c27_temperature_matters(**(good | {"fixed": ([0.5, 0.6], [0.2, 0.3])}))
    with pytest.raises(AssertionError, match="below the floor"):
        claims.assert_c27_temperature_matters(**(good | {"fixed_losses": [2.0]}))


# ------------------------------------------------------------------------------------------
# Verdict functions: each verdict they can return, from numbers made to give it
# ------------------------------------------------------------------------------------------

NS = [17, 65, 257, 1025]


def test_vit_cost_verdict():
    def verdict(flops):
        return claims.vit_cost_verdict(NS, flops, d_model=32, num_layers=2)

    assert verdict([100 + 7 * n + 256 * n * n for n in NS]) == "reproduced"
    assert verdict([100 + 7 * n + 128 * n * n for n in NS]) == "partly"  # one layer's worth
    assert verdict([n**3 for n in NS]) == "partly"  # faster than quadratic, not dense's count
    assert verdict([5000 * n for n in NS]) == "not reproduced"  # linear: no quadratic term
    with pytest.raises(ValueError, match="at least 4"):
        claims.vit_cost_verdict(NS[:3], [1, 2, 3], d_model=32, num_layers=2)


def test_vit_data_verdict_and_gaps():
    assert claims.vit_data_gaps(
        vit_small=[0.7, 0.74], cnn_small=[0.92], vit_full=[0.83], cnn_full=[0.95]
    ) == pytest.approx((0.2, 0.12))
    assert claims.vit_data_verdict(0.20, 0.12) == "reproduced"
    assert claims.vit_data_verdict(0.20, 0.25) == "partly"  # the gap grows with the data
    assert claims.vit_data_verdict(0.20, 0.20) == "partly"
    assert claims.vit_data_verdict(0.200, 0.199) == "partly"  # a thousandth is not shrinking
    assert claims.vit_data_verdict(0.20, 0.18, shrink=0.01) == "reproduced"
    assert claims.vit_data_verdict(0.02, -0.1) == "not reproduced"  # no lead with little data
    assert claims.vit_data_verdict(0.05, 0.0, margin=0.1) == "not reproduced"


def test_c25_cost_verdict():
    tokens = [64, 256, 1024]
    window = [(10 * n, 3 * n) for n in tokens]
    dense = [(n * n, n * n) for n in tokens]
    assert claims.c25_cost_verdict(tokens=tokens, window=window, dense=dense) == "reproduced"
    bytes_grow = [(10 * n, n * n) for n in tokens]
    assert claims.c25_cost_verdict(tokens=tokens, window=bytes_grow, dense=dense) == "partly"
    assert claims.c25_cost_verdict(tokens=tokens, window=window, dense=window) == "partly"
    assert claims.c25_cost_verdict(tokens=tokens, window=dense, dense=dense) == "not reproduced"


def test_c25_shift_verdict():
    fields, own = _fields(grow=True)
    assert claims.c25_shift_verdict(fields, own) == "reproduced"
    flat, own = _fields(grow=True)
    flat[True, 4] = flat[True, 2]  # leaves the window, then stops growing
    assert claims.c25_shift_verdict(flat, own) == "partly"
    stuck, own = _fields(grow=False)
    assert claims.c25_shift_verdict(stuck, own) == "not reproduced"
    leaky, own = _fields(grow=True)
    leaky[False, 4] = leaky[True, 4]  # regular windows leaking
    assert claims.c25_shift_verdict(leaky, own) == "not reproduced"


def test_c25_pyramid_verdict():
    pyramid = [(16, 16), (8, 32), (4, 64)]
    assert claims.c25_pyramid_verdict(pyramid) == "partly"  # suitability untested
    assert claims.c25_pyramid_verdict(pyramid, suits_detection=False) == "partly"
    assert claims.c25_pyramid_verdict(pyramid, suits_detection=True) == "reproduced"
    assert claims.c25_pyramid_verdict([(16, 16), (8, 16)], suits_detection=True) == (
        "not reproduced"
    )
    assert claims.c25_pyramid_verdict([(16, 16)]) == "not reproduced"


def test_c25_task_verdict():
    good = dict(border_shifted=[0.95, 0.97], border_regular=[0.26, 0.25],
                inside_shifted=[0.99], inside_regular=[1.0])  # fmt: skip
    assert claims.c25_task_verdict(**good) == "reproduced"
    assert claims.c25_task_verdict(**(good | {"border_shifted": [0.95, 0.6]})) == "partly"
    assert claims.c25_task_verdict(**(good | {"inside_regular": [0.5]})) == "partly"
    assert claims.c25_task_verdict(**(good | {"border_regular": [0.26, 0.5]})) == ("not reproduced")


def test_c27_cross_verdict():
    assert claims.c27_cross_verdict(mass=[[0.9] * 4], accuracy=[0.9]) == "reproduced"
    assert claims.c27_cross_verdict(mass=[[0.9, 0.9, 0.25, 0.9]], accuracy=[0.9]) == "partly"
    assert claims.c27_cross_verdict(mass=[[0.9] * 4], accuracy=[0.9, 0.3]) == "partly"
    assert claims.c27_cross_verdict(mass=[[0.25] * 4], accuracy=[0.1]) == "not reproduced"


def test_c27_clip_verdict():
    assert claims.c27_clip_verdict(image_to_text=[0.3, 0.4], text_to_image=[0.2]) == "reproduced"
    assert claims.c27_clip_verdict(image_to_text=[0.3], text_to_image=[0.2, 0.01]) == "partly"
    assert claims.c27_clip_verdict(image_to_text=[0.05], text_to_image=[0.02]) == ("not reproduced")


def test_c27_temperature_verdict():
    learned = ([0.4, 0.5], [0.4, 0.5])
    assert claims.c27_temperature_verdict(learned=learned, fixed=([0.2], [0.2])) == "reproduced"
    assert claims.c27_temperature_verdict(learned=learned, fixed=([0.6], [0.2])) == "partly"
    assert claims.c27_temperature_verdict(learned=learned, fixed=([0.6], [0.5])) == (
        "not reproduced"
    )


def test_c27_learning_verdict():
    learned = ([0.4, 0.5], [0.4, 0.5])
    assert claims.c27_learning_verdict(learned=learned, fixed_large=([0.3], [0.3])) == (
        "reproduced"
    )
    assert claims.c27_learning_verdict(learned=learned, fixed_large=([0.3], [0.44])) == "partly"
    # within the 0.05 margin: a large fixed scale does as well, learning it did not help
    assert claims.c27_learning_verdict(learned=learned, fixed_large=([0.42], [0.45])) == (
        "not reproduced"
    )


@pytest.mark.parametrize(
    "run", [claims.c26_sweep_run, claims.c26_attention_sweep_run,
            claims.c26_additions_sweep_run, claims.c26_linear_sweep_run],
)  # fmt: skip
def test_c26_sweep_runners_run_and_judge_at_a_tiny_budget(run):
    outcome = run(seeds=[0, 1], steps=2)
    assert outcome.verdict in VERDICTS and outcome.numbers["steps"] == 2


@pytest.mark.parametrize(
    "run", [claims.c27_clip_sweep_run, claims.c27_temperature_sweep_run,
            claims.c27_learning_sweep_run],
)  # fmt: skip
def test_c27_sweep_runners_run_and_judge_at_a_tiny_budget(run):
    outcome = run(seeds=[0], steps=2)
    assert outcome.verdict in VERDICTS and outcome.numbers["steps"] == 2


def test_trained_claims_sweep_seeds_and_a_3x_budget():
    sweeps = {s.claim_id: s for s in claims.SCEPTIC_SWEEPS}
    assert {"C26", "C26 attention", "C26 additions", "C26 linear", "C27 CLIP", "C27 τ"} <= set(
        sweeps
    )
    for sweep in sweeps.values():
        if "seeds" not in sweep.baseline:  # a cost or field claim: its knob is the claim's own
            continue
        changes = [dict(p.kwargs) for p in sweep.perturbations]
        assert {"seeds": [3, 4, 5]} in changes
        assert {"steps": 3 * sweep.baseline["steps"]} in changes


def test_every_verdict_is_one_of_the_books():
    assert {claims.vit_data_verdict(0.2, 0.1), claims.vit_data_verdict(0.0, 0.0)} <= set(VERDICTS)


def test_cost_and_field_sweep_runners_run_and_judge_at_a_small_size():
    vit = claims.vit_cost_sweep_run(sides=[4, 8, 12, 16], patch_size=2, d_model=8, num_layers=1)
    assert vit.verdict == "reproduced" and vit.numbers["N'² coefficient"] == pytest.approx(32)
    cost = claims.c25_cost_sweep_run(sides=[8, 16], window_size=4)
    assert cost.verdict == "reproduced" and cost.numbers["window FLOPs × per doubling"] == "4.00"
    shift = claims.c25_shift_sweep_run(grid=8, window_size=4, depths=[1, 2])
    # two blocks leave the corner pieces of the rolled grid in their own window
    assert shift.verdict == "partly"
    assert shift.numbers["2 block(s): corner (0, 0) sees"] == 16
    assert claims.c25_shift_sweep_run(grid=8, window_size=4, depths=[1, 2, 4]).verdict == (
        "reproduced"
    )
    pyramid = claims.c25_pyramid_sweep_run(side=8, width=8, stages=2)
    assert pyramid.verdict == "partly" and pyramid.numbers["pyramid"] == "8×8×8 → 4×4×16"


def test_trained_sweep_runners_run_and_judge_at_a_tiny_budget():
    for outcome in (
        claims.vit_data_sweep_run(seeds=[0], steps=2, sizes=[30, 60]),
        claims.c25_task_sweep_run(seeds=[0], steps=2),
        claims.c27_cross_sweep_run(seeds=[0], steps=2),
    ):
        assert outcome.verdict in VERDICTS and outcome.numbers["steps"] == 2
