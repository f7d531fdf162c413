"""The book's figures: attention heat maps, grids of heads, training and scaling curves.

One style for every chapter (:func:`set_style`). Each helper draws into a given ``ax`` or a new
figure, sets a title and axis labels, and returns the Axes (or Figure); nothing calls
``plt.show()``, so the helpers work headless (Agg backend, CI) and in notebooks alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch

# The book's look: readable at notebook width, light grid, a perceptually uniform colour map.
STYLE = {
    "figure.figsize": (6.0, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "image.cmap": "viridis",
}

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def set_style() -> None:
    """Apply the book's matplotlib style (rcParams) for the rest of the session."""
    mpl.rcParams.update(STYLE)


def _as_array(name: str, weights: object, rank: int, layout: str) -> np.ndarray:
    """A ``rank``-D float array from a real tensor or array; refuses other ranks, non-numeric
    or complex values and empty arrays (there is nothing to draw)."""
    if isinstance(weights, torch.Tensor):
        if weights.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {weights.dtype}")
        weights = weights.detach().to("cpu", torch.float32).numpy()
    if not isinstance(weights, np.ndarray):
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy array, got {type(weights).__name__}"
        )
    if weights.dtype != np.bool_ and not (
        np.issubdtype(weights.dtype, np.integer) or np.issubdtype(weights.dtype, np.floating)
    ):
        raise TypeError(
            f"{name} must hold real numbers, got a numpy array of dtype {weights.dtype}"
        )
    if weights.ndim != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {layout}, got {weights.ndim} with shape "
            f"{tuple(weights.shape)}"
        )
    if weights.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(weights.shape)}): nothing to draw")
    return weights.astype(np.float32)


def _numbers(name: str, values: object, *, allow_none: bool = False) -> np.ndarray:
    """A non-empty 1-D float array from a sequence of real numbers (``None`` -> NaN, a gap,
    when ``allow_none``); ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(
            f"{name} must be a sequence of numbers, got {type(values).__name__} ({values!r})"
        )
    out = []
    for i, v in enumerate(values.tolist() if hasattr(values, "tolist") else values):
        if v is None and allow_none:
            out.append(np.nan)
            continue
        bad = isinstance(v, (str, bytes, bool, np.bool_, complex)) or np.iscomplexobj(v)
        try:
            out.append(float("nan") if bad else float(v))
        except (TypeError, ValueError):
            bad = True
        if bad:
            raise TypeError(f"{name}[{i}] must be a real number, got {type(v).__name__} ({v!r})")
    if not out:
        raise ValueError(f"{name} is empty: nothing to draw")
    return np.array(out, dtype=float)


def _check_labels(name: str, labels: Sequence[str] | None, n: int, dim: str) -> None:
    if labels is not None and len(labels) != n:
        raise ValueError(f"{name} must have one label per {dim} ({n}), got {len(labels)}")


def _draw_heatmap(ax, w: np.ndarray, x_labels, y_labels, vmin, vmax, cmap):
    lq, lk = w.shape
    image = ax.imshow(w, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto", interpolation="nearest")
    ax.grid(False)  # grid lines would cut through the cells
    if x_labels is not None:
        ax.set_xticks(range(lk), [str(t) for t in x_labels], rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(lq), [str(t) for t in y_labels])
    ax.set_xlabel("key" if x_labels is not None else "key position")
    ax.set_ylabel("query" if y_labels is not None else "query position")
    return image


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str = "Attention weights",
    ax: plt.Axes | None = None,
    *,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    cmap: str | None = None,
    colorbar: bool = True,
) -> plt.Axes:
    """Heat map of one head's weights ``(Lq, Lk)``: row i = how query i spreads over the keys.

    ``x_labels`` name the keys (columns), ``y_labels`` the queries (rows). The colour bar is
    labelled "attention weight" (a probability, no unit). Pass ``vmin=None`` for raw scores
    that may be negative. Returns the Axes.
    """
    w = _as_array("weights", weights, 2, "(q_len, k_len)")
    _check_labels("x_labels", x_labels, w.shape[1], "key")
    _check_labels("y_labels", y_labels, w.shape[0], "query")
    if ax is None:
        _, ax = plt.subplots()
    image = _draw_heatmap(ax, w, x_labels, y_labels, vmin, vmax, cmap)
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="attention weight")
    return ax


def plot_heads(
    weights: torch.Tensor | np.ndarray,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str = "Attention weights per head",
    ncols: int = 4,
    *,
    head_titles: Sequence[str] | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    cmap: str | None = None,
) -> plt.Figure:
    """A grid of heat maps, one per head, for weights ``(H, Lq, Lk)``.

    All heads share one colour scale (so that they can be compared) and one colour bar.
    Returns the Figure; its axes are ``fig.axes[:H]`` in head order.
    """
    w = _as_array("weights", weights, 3, "(heads, q_len, k_len)")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be an int >= 1, got {ncols!r}")
    n_heads = w.shape[0]
    _check_labels("x_labels", x_labels, w.shape[2], "key")
    _check_labels("y_labels", y_labels, w.shape[1], "query")
    _check_labels("head_titles", head_titles, n_heads, "head")
    ncols = min(ncols, n_heads)
    nrows = math.ceil(n_heads / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(3.0 * ncols + 1.0, 2.8 * nrows + 0.6),
        squeeze=False,
        layout="constrained",  # keeps the suptitle clear of the head titles
    )
    # One colour scale for every head, so that heads can be compared.
    vmin = float(w.min()) if vmin is None else vmin
    vmax = float(w.max()) if vmax is None else vmax
    image = None
    for idx, ax in enumerate(axes.flat):
        if idx >= n_heads:
            ax.remove()  # an empty cell of the last row
            continue
        image = _draw_heatmap(ax, w[idx], x_labels, y_labels, vmin, vmax, cmap)
        ax.set_title(head_titles[idx] if head_titles is not None else f"head {idx}")
    fig.suptitle(title)
    fig.colorbar(image, ax=fig.axes, label="attention weight")
    return fig


def plot_lines(
    xs: Sequence[float] | Mapping[str, Sequence[float]],
    ys_by_label: Mapping[str, Sequence[float | None]],
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    ax: plt.Axes | None = None,
    *,
    markers: bool = True,
) -> plt.Axes:
    """Curves for training logs and scaling measurements, one per label, with a legend.

    ``xs`` is shared by every curve, or a mapping label -> xs when curves are sampled at
    different points. A ``None``/NaN y (a run that did not fit in memory, say) leaves a gap.
    Put units in ``xlabel``/``ylabel`` (``"sequence length (tokens)"``, ``"time (ms)"``).
    Returns the Axes.
    """
    if not isinstance(ys_by_label, Mapping) or not ys_by_label:
        raise TypeError(
            f"ys_by_label must be a non-empty mapping label -> values, got "
            f"{type(ys_by_label).__name__}"
        )
    for name, text in (("title", title), ("xlabel", xlabel), ("ylabel", ylabel)):
        if not isinstance(text, str) or not text:
            raise ValueError(f"{name} must be a non-empty string, got {text!r}")
    if ax is None:
        _, ax = plt.subplots()
    for idx, (label, ys) in enumerate(ys_by_label.items()):
        if isinstance(xs, Mapping) and label not in xs:
            raise ValueError(f"xs has no entry for the label {label!r} of ys_by_label")
        x_name = f"xs[{label!r}]" if isinstance(xs, Mapping) else "xs"
        x = _numbers(x_name, xs[label] if isinstance(xs, Mapping) else xs)
        y = _numbers(f"ys_by_label[{label!r}]", ys, allow_none=True)
        if len(x) != len(y):
            raise ValueError(f"ys_by_label[{label!r}] has {len(y)} values but its xs have {len(x)}")
        marker = MARKERS[idx % len(MARKERS)] if markers else None
        ax.plot(x, y, marker=marker, label=str(label))
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax


def _check_texts(**texts: str) -> None:
    for name, text in texts.items():
        if not isinstance(text, str) or not text:
            raise ValueError(f"{name} must be a non-empty string, got {text!r}")


def _seed_values(name: str, values: object) -> np.ndarray:
    """A 1-D float array of one measurement's values over seeds (at least one, all finite)."""
    if values is None:
        values = []
    elif not hasattr(values, "__len__") or isinstance(values, (str, bytes)):
        values = [values]  # one number: one seed
    try:
        arr = np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must hold real numbers (one per seed), got {values!r}") from err
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one value (one per seed), got none")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return arr


def reference_line(ax: plt.Axes, y: float, label: str, *, color: str = "0.4") -> None:
    """A labelled horizontal line (chance level, a threshold, a theory value), drawn above the
    data so that it stays visible, and named in the legend."""
    _check_texts(label=label)
    if isinstance(y, bool) or not isinstance(y, (int, float, np.number)):
        raise TypeError(f"y must be a real number, got {type(y).__name__} ({y!r})")
    if not np.isfinite(y):
        raise ValueError(f"y must be finite, got {y}")
    ax.axhline(float(y), color=color, linestyle="--", linewidth=1.2, zorder=5, label=label)


def plot_spread(
    xs: Sequence[float],
    runs_by_label: Mapping[str, Sequence[Sequence[float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    ax: plt.Axes | None = None,
    logx: bool = False,
    logy: bool = False,
) -> plt.Axes:
    """Mean over seeds against ``x``, one curve per label, with min–max bars.

    ``runs_by_label[label][i]`` holds the values over seeds measured at ``xs[i]``. Each curve is
    the mean; the vertical bars span the smallest to the largest seed, so that a single lucky
    seed cannot pass for the typical run. Returns the Axes.
    """
    _check_texts(title=title, xlabel=xlabel, ylabel=ylabel)
    if not isinstance(runs_by_label, Mapping) or not runs_by_label:
        raise TypeError(
            f"runs_by_label must be a non-empty mapping label -> values per x, got "
            f"{type(runs_by_label).__name__}"
        )
    x = _numbers("xs", xs)
    if ax is None:
        _, ax = plt.subplots()
    for idx, (label, runs) in enumerate(runs_by_label.items()):
        if len(runs) != len(x):
            raise ValueError(
                f"runs_by_label[{label!r}] has {len(runs)} entries but xs has {len(x)}"
            )
        per_x = [_seed_values(f"runs_by_label[{label!r}][{i}]", r) for i, r in enumerate(runs)]
        mean = np.array([v.mean() for v in per_x])
        low = mean - np.array([v.min() for v in per_x])
        high = np.array([v.max() for v in per_x]) - mean
        n_seeds = sorted({v.size for v in per_x})
        seeds = "/".join(str(n) for n in n_seeds)
        ax.errorbar(
            x,
            mean,
            yerr=np.vstack([low, high]),
            marker=MARKERS[idx % len(MARKERS)],
            capsize=3,
            label=f"{label} (mean, min–max over {seeds} seeds)",
        )
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax


def plot_bar_spread(
    values_by_label: Mapping[str, Sequence[float]],
    title: str,
    ylabel: str,
    *,
    ax: plt.Axes | None = None,
    xlabel: str = "",
    reference: tuple[float, str] | None = None,
) -> plt.Axes:
    """One bar per label at the mean over seeds, a min–max whisker, and every seed as a dot.

    ``reference=(y, label)`` adds a labelled line (chance, say) with :func:`reference_line`.
    Returns the Axes.
    """
    _check_texts(title=title, ylabel=ylabel)
    if not isinstance(values_by_label, Mapping) or not values_by_label:
        raise TypeError(
            f"values_by_label must be a non-empty mapping label -> values over seeds, got "
            f"{type(values_by_label).__name__}"
        )
    if ax is None:
        _, ax = plt.subplots()
    labels = [str(k) for k in values_by_label]
    arrays = [_seed_values(f"values_by_label[{k!r}]", v) for k, v in values_by_label.items()]
    positions = np.arange(len(arrays))
    means = np.array([a.mean() for a in arrays])
    whiskers = np.vstack([means - [a.min() for a in arrays], [a.max() for a in arrays] - means])
    ax.bar(positions, means, color="C0", alpha=0.6, label="mean over seeds")
    ax.errorbar(positions, means, yerr=whiskers, fmt="none", ecolor="k", capsize=4,
                label="min–max")  # fmt: skip
    for pos, arr in zip(positions, arrays, strict=True):
        jitter = np.linspace(-0.15, 0.15, arr.size) if arr.size > 1 else np.zeros(1)
        ax.scatter(pos + jitter, arr, color="k", s=12, zorder=4)
    ax.scatter([], [], color="k", s=12, label="one seed")
    if reference is not None:
        reference_line(ax, reference[0], reference[1])
    ax.set_xticks(positions, labels)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.legend()
    return ax
