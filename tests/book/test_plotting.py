"""book.plotting: figures carry what they claim (data, labels, title, colour bar, scales)
and draw headless."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from book.plotting import (  # noqa: E402
    STYLE,
    plot_attention,
    plot_bar_spread,
    plot_heads,
    plot_lines,
    plot_spread,
    reference_line,
    set_style,
)


@pytest.fixture(autouse=True)
def _no_show_and_close(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("plotting helpers must not call plt.show()")

    monkeypatch.setattr(plt, "show", refuse)
    yield
    plt.close("all")


def _weights(*shape):
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(0)), dim=-1)


def test_set_style_applies_the_rcparams():
    with matplotlib.rc_context():
        set_style()
        for key, value in STYLE.items():
            got = matplotlib.rcParams[key]
            if isinstance(value, tuple):  # rcParams stores sizes as lists
                got, value = list(got), list(value)
            assert got == value, key


def test_plot_attention_draws_the_weights_with_labels_and_colorbar():
    w = _weights(3, 4)
    keys, queries = ["the", "cat", "sat", "."], ["q0", "q1", "q2"]
    ax = plot_attention(w, x_labels=keys, y_labels=queries, title="Head 0")
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), w.numpy(), rtol=1e-6)
    assert ax.get_title() == "Head 0"
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert [t.get_text() for t in ax.get_xticklabels()] == keys
    assert [t.get_text() for t in ax.get_yticklabels()] == queries
    colorbars = [a for a in ax.figure.axes if a is not ax]
    assert len(colorbars) == 1 and colorbars[0].get_ylabel() == "attention weight"
    assert ax.images[0].get_clim() == (0.0, pytest.approx(float(w.max())))


def test_plot_attention_without_labels_names_positions_and_accepts_numpy():
    ax = plot_attention(_weights(2, 5).numpy(), colorbar=False)
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    assert ax.get_title() and len(ax.figure.axes) == 1


def test_plot_attention_draws_into_a_given_axes():
    fig, (a, b) = plt.subplots(1, 2)
    out = plot_attention(_weights(2, 2), ax=b, colorbar=False)
    assert out is b and not a.images and b.images


def test_plot_attention_accepts_bfloat16_and_grad_tensors():
    w = _weights(2, 3).to(torch.bfloat16).requires_grad_()
    ax = plot_attention(w)
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), w.float().detach().numpy())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": torch.ones(2, 3, 4)}, r"weights must have 2 dimensions \(q_len, k_len\)"),
        ({"weights": [[0.5, 0.5]]}, r"weights must be a torch.Tensor or numpy array, got list"),
        ({"weights": torch.ones(2, 3), "x_labels": ["a", "b"]}, r"x_labels .* per key \(3\)"),
        ({"weights": torch.ones(2, 3), "y_labels": ["a"]}, r"y_labels .* per query \(2\)"),
    ],
)
def test_plot_attention_bad_inputs(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        plot_attention(**kwargs)


def test_plot_heads_grid_shared_scale_and_titles():
    w = _weights(5, 3, 4)
    fig = plot_heads(w, x_labels=list("abcd"), title="Layer 1", ncols=2)
    heads = [a for a in fig.axes if a.images]
    assert len(heads) == 5  # 3 rows x 2 cols, the sixth cell removed
    assert len(fig.axes) == 6  # five heads and one shared colour bar
    assert fig.get_suptitle() == "Layer 1"
    for h, ax in enumerate(heads):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), w[h].numpy(), rtol=1e-6)
        assert ax.get_title() == f"head {h}"
        assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query position"
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(w.max())))
    assert fig.axes[-1].get_ylabel() == "attention weight"


def test_plot_heads_vmin_none_still_shares_one_scale():
    w = _weights(3, 4, 4) + torch.arange(3.0).view(3, 1, 1)  # heads on different levels
    fig = plot_heads(w, vmin=None)
    clims = [ax.images[0].get_clim() for ax in fig.axes if ax.images]
    assert clims == [(pytest.approx(float(w.min())), pytest.approx(float(w.max())))] * 3


def test_plot_heads_bad_inputs():
    with pytest.raises(ValueError, match=r"weights must have 3 dimensions \(heads"):
        plot_heads(torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"ncols must be an int >= 1, got 0"):
        plot_heads(torch.ones(2, 3, 4), ncols=0)
    with pytest.raises(ValueError, match=r"head_titles must have one label per head \(2\)"):
        plot_heads(torch.ones(2, 3, 4), head_titles=["a"])


def test_plot_lines_draws_each_curve_with_legend_and_log_axes():
    xs = [128, 256, 512]
    ys = {"naive": [1.0, 4.0, 16.0], "flash": [1.0, 2.0, None]}
    ax = plot_lines(xs, ys, "Time vs length", "sequence length (tokens)", "time (ms)", True, True)
    assert ax.get_title() == "Time vs length"
    assert ax.get_xlabel() == "sequence length (tokens)" and ax.get_ylabel() == "time (ms)"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["naive", "flash"]
    naive, flash = ax.get_lines()
    np.testing.assert_array_equal(naive.get_xdata(), xs)
    np.testing.assert_array_equal(naive.get_ydata(), ys["naive"])
    assert math.isnan(flash.get_ydata()[2])  # a missing run leaves a gap
    assert naive.get_marker() != flash.get_marker() and naive.get_marker() not in (None, "None")


def test_plot_lines_per_curve_xs_and_linear_axes():
    ax = plot_lines({"a": [1, 2], "b": [1, 2, 3]}, {"a": [3, 4], "b": [5, 6, 7]}, "t", "x", "y")
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"
    assert [len(line.get_xdata()) for line in ax.get_lines()] == [2, 3]


def test_plot_lines_bad_inputs():
    with pytest.raises(ValueError, match=r"ys_by_label\['a'\] has 3 values but its xs have 2"):
        plot_lines([1, 2], {"a": [1, 2, 3]}, "t", "x", "y")
    with pytest.raises(ValueError, match=r"xlabel must be a non-empty string"):
        plot_lines([1], {"a": [1]}, "t", "", "y")
    with pytest.raises(TypeError, match=r"ys_by_label must be a non-empty mapping"):
        plot_lines([1], [1], "t", "x", "y")


def test_figures_render_headless(tmp_path):
    set_style()
    plot_attention(_weights(4, 4)).figure.savefig(tmp_path / "a.png", dpi=40)
    plot_heads(_weights(3, 4, 4)).savefig(tmp_path / "b.png", dpi=40)
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.png").stat().st_size > 0


# ------------------------------------------------------------------------------------------
# spread over seeds
# ------------------------------------------------------------------------------------------


def test_plot_spread_draws_the_mean_with_min_max_bars():
    runs = {"linear": [[0.5, 0.7, 0.9], [0.8, 1.0, 0.9]]}
    ax = plot_spread([128, 512], runs, "accuracy", "length (tokens)", "accuracy")
    line = ax.lines[0]
    assert np.allclose(line.get_ydata(), [0.7, 0.9])
    # The error bars span min..max of each x.
    segments = ax.collections[0].get_segments()
    spans = sorted((float(s[:, 1].min()), float(s[:, 1].max())) for s in segments)
    assert spans == [pytest.approx((0.5, 0.9)), pytest.approx((0.8, 1.0))]
    assert "min–max over 3 seeds" in ax.get_legend().get_texts()[0].get_text()
    assert ax.get_xlabel() == "length (tokens)" and ax.get_title() == "accuracy"


def test_plot_bar_spread_shows_mean_whiskers_every_seed_and_a_reference():
    ax = plot_bar_spread({"LSTM": [0.25, 0.74, 0.71], "attention": [1.0, 1.0, 1.0]},
                         "accuracy by model", "accuracy", reference=(0.25, "chance"))  # fmt: skip
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([0.5667, 1.0], abs=1e-3)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "chance" in legend and "one seed" in legend and "min–max" in legend
    dots = sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
    assert dots >= 6


def test_reference_line_is_drawn_above_the_data():
    _, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    reference_line(ax, 0.5, "threshold")
    line = ax.lines[-1]
    assert line.get_zorder() > ax.lines[0].get_zorder() and line.get_label() == "threshold"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: plot_spread([1, 2], {"a": [[1.0]]}, "t", "x", "y"), "has 1 entries"),
        (lambda: plot_spread([1], {"a": [[]]}, "t", "x", "y"), "at least one value"),
        (lambda: plot_spread([1], {"a": [[math.nan]]}, "t", "x", "y"), "finite"),
        (lambda: plot_spread([1], {}, "t", "x", "y"), "non-empty mapping"),
        (lambda: plot_bar_spread({"a": [1.0]}, "", "y"), "title"),
        (lambda: reference_line(plt.subplots()[1], 0.5, ""), "label"),
    ],
)
def test_spread_plots_refuse_bad_input(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: plot_attention(torch.ones(0, 3)),
            ValueError,
            r"weights is empty \(shape \(0, 3\)\)",
        ),
        (lambda: plot_attention(np.zeros((2, 0))), ValueError, r"weights is empty"),
        (lambda: plot_heads(torch.ones(0, 2, 2)), ValueError, r"weights is empty"),
        (
            lambda: plot_attention(np.array([["a", "b"]])),
            TypeError,
            r"weights must hold real numbers, got a numpy array of dtype <U1",
        ),
        (
            lambda: plot_attention(torch.ones(2, 2, dtype=torch.complex64)),
            TypeError,
            r"weights must hold real numbers, got dtype torch.complex64",
        ),
        (lambda: plot_lines([], {"a": []}, "t", "x", "y"), ValueError, r"xs is empty"),
        (
            lambda: plot_lines([1, 2], {"a": [1, "two"]}, "t", "x", "y"),
            TypeError,
            r"ys_by_label\['a'\]\[1\] must be a real number, got str",
        ),
        (
            lambda: plot_lines(["a", "b"], {"a": [1, 2]}, "t", "x", "y"),
            TypeError,
            r"xs\[0\] must be a real number, got str",
        ),
        (lambda: plot_lines(3, {"a": [1]}, "t", "x", "y"), TypeError, r"xs must be a sequence"),
        (
            lambda: plot_lines({"b": [1]}, {"a": [1]}, "t", "x", "y"),
            ValueError,
            r"xs has no entry for the label 'a'",
        ),
        (
            lambda: plot_spread(["x"], {"a": [[1.0]]}, "t", "x", "y"),
            TypeError,
            r"xs\[0\] must be a real number",
        ),
        (
            lambda: plot_spread([1], {"a": [["one"]]}, "t", "x", "y"),
            TypeError,
            r"runs_by_label\['a'\]\[0\] must hold real numbers",
        ),
        (
            lambda: plot_bar_spread({"a": "high"}, "t", "y"),
            TypeError,
            r"values_by_label\['a'\] must hold real numbers",
        ),
        (
            lambda: reference_line(plt.subplots()[1], "half", "chance"),
            TypeError,
            r"y must be a real number, got str",
        ),
        (
            lambda: reference_line(plt.subplots()[1], math.inf, "chance"),
            ValueError,
            r"y must be finite, got inf",
        ),
    ],
)
def test_plotting_helpers_refuse_empty_and_non_numeric_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_plot_lines_still_takes_tensors_numpy_and_gaps():
    ax = plot_lines(
        torch.arange(3), {"a": [torch.tensor(1.0), np.float64(2.0), None]}, "t", "x", "y"
    )
    y = ax.lines[0].get_ydata()
    assert y[0] == 1.0 and y[1] == 2.0 and math.isnan(y[2])
