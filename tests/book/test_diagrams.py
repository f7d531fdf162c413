"""Every code-drawn diagram renders: each public function of ``book/diagrams/chNN.py`` is
called with no arguments and must return a titled Figure that draws something; and the
primitives of ``book.diagrams`` refuse bad input."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import book.diagrams as diagrams  # noqa: E402


def diagram_functions() -> list[tuple[str, object]]:
    """``(module:function, function)`` for every diagram of every chapter module."""
    found = []
    for info in pkgutil.iter_modules(diagrams.__path__):
        if not info.name.startswith("ch"):
            continue
        module = importlib.import_module(f"book.diagrams.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_"):
                found.append((f"{info.name}:{name}", fn))
    return found


def _title(fig: plt.Figure) -> str:
    texts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    texts += [ax.get_title() for ax in fig.axes]
    return " ".join(t for t in texts if t)


@pytest.mark.parametrize(
    ("name", "draw"), diagram_functions(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_diagram_renders_with_a_title(name, draw):
    required = [
        p
        for p in inspect.signature(draw).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    assert not required, f"{name} must be callable without arguments, needs {required}"
    fig = draw()
    try:
        assert isinstance(fig, plt.Figure), f"{name} must return a Figure, got {type(fig)}"
        assert _title(fig), f"{name} has no title"
        drawn = sum(len(ax.patches) + len(ax.texts) + len(ax.lines) + len(ax.images)
                    for ax in fig.axes)  # fmt: skip
        assert drawn > 0, f"{name} draws nothing"
        png = io.BytesIO()
        fig.savefig(png, format="png")
        assert png.tell() > 1000
    finally:
        plt.close(fig)


def test_primitives_draw_on_a_canvas():
    fig, ax = diagrams.new_diagram("primitives", xlim=(0, 6), ylim=(0, 3))
    a = diagrams.box(ax, (1, 2), "x", color=diagrams.COLORS["input"])
    b = diagrams.box(ax, (4, 2), "softmax")
    diagrams.arrow(ax, a, b, text="scores", curve=0.2)
    corner = diagrams.grid(ax, (1, 1.2), [[1, 0], [1, 1]], caption="(2, 2)",
                           row_labels=["q0", "q1"], col_labels=["k0", "k1"])  # fmt: skip
    diagrams.caption(ax, (5, 0.3), "note")
    assert corner == pytest.approx((1.6, 0.6))
    assert ax.get_title() == "primitives" and len(ax.patches) >= 7
    plt.close(fig)


def test_primitives_refuse_bad_input():
    with pytest.raises(ValueError, match="title"):
        diagrams.new_diagram("")
    with pytest.raises(ValueError, match="xlim and ylim"):
        diagrams.new_diagram("t", xlim=(2, 1))
    fig, ax = diagrams.new_diagram("t")
    with pytest.raises(ValueError, match="values must be a non-empty 2-D matrix"):
        diagrams.grid(ax, (0, 0), [1, 2, 3])
    plt.close(fig)


def test_chapter6_diagrams_refuse_bad_input_and_follow_their_arguments():
    from book.diagrams import ch06

    with pytest.raises(ValueError, match="n_blocks"):
        ch06.flash_tiling(n_blocks=1)
    with pytest.raises(ValueError, match="active_row"):
        ch06.flash_tiling(n_blocks=3, active_row=3)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        ch06.kv_cache_decoding(num_heads=4, num_kv_heads=3)
    fig = ch06.kv_cache_decoding(cached=3, num_heads=4, num_kv_heads=1)
    try:
        assert "1 key/value heads" in _title(fig)
        labels = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert sum(lbl.startswith("query head") for lbl in labels) == 4
        assert sum(lbl.startswith("K head") for lbl in labels) == 1
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("module", "function"),
    [("ch02", "five_steps"), ("ch03", "split_attend_concat"), ("ch04", "rope_rotation")],
)
def test_chapters_2_to_4_have_their_diagrams(module, function):
    draw = getattr(importlib.import_module(f"book.diagrams.{module}"), function)
    fig = draw()
    try:
        assert _title(fig) and len(fig.axes[0].texts) >= 5  # labelled, not a bare sketch
    finally:
        plt.close(fig)


def test_the_heads_diagram_refuses_a_width_the_heads_do_not_divide():
    from book.diagrams.ch03 import split_attend_concat

    with pytest.raises(ValueError, match="divisible"):
        split_attend_concat(d_model=30, num_heads=4)
    plt.close("all")


def test_ch09_layernorm_placement_shows_both_orders():
    from book.diagrams.ch09 import layernorm_placement

    fig = layernorm_placement()
    try:
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert "Post-LN" in texts and "Pre-LN" in texts
        assert texts.count("LayerNorm") == 4 and texts.count("+") == 4
    finally:
        plt.close(fig)
