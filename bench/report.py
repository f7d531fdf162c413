"""Read the benchmark's results: the targets, the tables (text and Markdown), the plot."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from .methods import CASES, MODES

MODE_TITLES = {"forward": "forward", "forward_backward": "forward+backward"}
CASE_TITLES = {
    "full": "full attention",
    "causal": "causal attention",
    "band": "sliding window band",
    "bigbird": "BigBird block pattern",
}
MIB = 2**20


def _index(results: dict) -> dict[tuple[str, str, int], dict]:
    return {(r["method"], r["mode"], r["n"]): r for r in results["results"]}


def _label(results: dict, name: str) -> str:
    return results["methods"][name]["label"]


# ---------------------------------------------------------------------------------- targets


def _target(tid, description, value, threshold, op, detail, *, missing=None) -> dict:
    """One target: ``value op threshold`` (``op`` is ``"<="`` or ``">="``); ``value`` None
    means it could not be measured in this run (``missing`` says why): status SKIP."""
    if value is None:
        status = "SKIP"
        detail = missing or detail
    elif op == "<=":
        status = "PASS" if value <= threshold else "MISS"
    else:
        status = "PASS" if value >= threshold else "MISS"
    return {
        "id": tid,
        "description": description,
        "value": value,
        "op": op,
        "threshold": threshold,
        "status": status,
        "detail": detail,
    }


def _worst_ratio(idx, method, mode, lengths, min_n) -> tuple[float | None, str]:
    """Largest paired ratio to the reference over ``n >= min_n``, and the per-n values."""
    values = {
        n: idx[(method, mode, n)]["ratio_to_reference"]
        for n in lengths
        if n >= min_n
        and (method, mode, n) in idx
        and idx[(method, mode, n)]["ratio_to_reference"] is not None
    }
    detail = ", ".join(f"n={n}: {r:.2f}x" for n, r in values.items())
    return (max(values.values()) if values else None), detail


def memory_slope(idx, method, mode, n_small, n_large) -> float | None:
    """Log-log slope of peak extra memory between two lengths (1 = linear, 2 = quadratic)."""
    a, b = idx.get((method, mode, n_small)), idx.get((method, mode, n_large))
    if a is None or b is None or a["peak_extra_bytes"] <= 0:
        return None
    return math.log(b["peak_extra_bytes"] / a["peak_extra_bytes"]) / math.log(n_large / n_small)


def _growth_of(results: dict, method: str, mode: str) -> dict[int, float]:
    """n -> paired t(2n)/t(n) of ``method`` in ``mode``, from the run's growth records."""
    return {
        g["n"]: g["growth"]
        for g in results.get("growth", [])
        if g["method"] == method and g["mode"] == mode
    }


def evaluate_targets(results: dict) -> list[dict]:
    """The issue's targets, judged on ``results`` (medians of paired ratios, one run)."""
    idx = _index(results)
    cfg = results["config"]
    lengths, min_n, n_t = cfg["lengths"], cfg["ratio_min_n"], cfg["n_target"]
    n_small, n_large = cfg["slope_ns"]
    absent = "not measured in this run (method missing or length not run)"
    targets = []

    value, detail = _worst_ratio(idx, "flash", "forward", lengths, min_n)
    aim = "" if value is None else f"; aim <= 1.3: {'met' if value <= 1.3 else 'not met'}"
    targets.append(_target(
        "flash_forward", f"flash forward / torch SDPA, worst n >= {min_n}",
        value, 1.5, "<=", detail + aim, missing=absent))  # fmt: skip
    value, detail = _worst_ratio(idx, "flash", "forward_backward", lengths, min_n)
    targets.append(_target(
        "flash_forward_backward", f"flash forward+backward / torch SDPA, worst n >= {min_n}",
        value, 1.7, "<=", detail, missing=absent))  # fmt: skip
    for mode in MODES:
        slope = memory_slope(idx, "flash", mode, n_small, n_large)
        detail = ""
        if slope is not None:
            mib = [idx[("flash", mode, n)]["peak_extra_bytes"] / MIB for n in (n_small, n_large)]
            detail = f"{mib[0]:.1f} MiB at n={n_small}, {mib[1]:.1f} MiB at n={n_large}"
        targets.append(_target(
            f"flash_memory_slope_{mode}",
            f"flash {MODE_TITLES[mode]} peak extra memory, log-log slope n={n_small}..{n_large}",
            slope, 1.1, "<=", detail, missing=absent))  # fmt: skip
    for mode in MODES:
        value, detail = _worst_ratio(idx, "flash_causal", mode, lengths, min_n)
        targets.append(_target(
            f"flash_causal_{mode}",
            f"causal flash {MODE_TITLES[mode]} / torch SDPA is_causal, worst n >= {min_n}",
            value, 2.0, "<=", detail, missing=absent))  # fmt: skip

    dense = idx.get(("dense_band", "forward", n_t))
    speedup = None
    if dense is not None and "sliding_window" in dense["ratios"]:
        speedup = dense["ratios"]["sliding_window"]  # median of t_dense / t_window
    targets.append(_target(
        "sliding_window_speedup",
        f"sliding window (w={cfg['window']}) forward speed-up over dense band-masked, n={n_t}",
        speedup, 8.0, ">=", "" if speedup is None else "median of paired t_dense / t_window",
        missing=absent))  # fmt: skip
    growth = _growth_of(results, "sliding_window", "forward")
    detail = ", ".join(f"n={n}->{2 * n}: {g:.2f}" for n, g in growth.items())
    targets.append(_target(
        "sliding_window_scaling", "sliding window forward t(2n)/t(n) (paired), worst doubling",
        max(growth.values()) if growth else None, 2.3, "<=", detail, missing=absent))  # fmt: skip
    rec = idx.get(("linear_causal", "forward", n_t))
    value = None if rec is None else rec["ratio_to_reference"]
    targets.append(_target(
        "linear_causal", f"causal linear (chunked) forward / torch SDPA is_causal, n={n_t}",
        value, 0.25, "<=", "" if rec is None else f"{rec['median_s'] * 1e3:.1f} ms",
        missing=absent))  # fmt: skip
    return targets


def format_targets(targets: list[dict]) -> str:
    lines = ["targets (medians of paired ratios in this run):"]
    for t in targets:
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        lines.append(
            f"  [{t['status']}] {t['description']}: {value} (target {t['op']} {t['threshold']})"
            + (f"  [{t['detail']}]" if t["detail"] else "")
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- tables


def _grid(results: dict, mode: str, methods: list[str], cell: Callable[[dict], str]):
    """Rows ``(label, [cell per length])`` for ``methods``; ``-`` where not measured."""
    idx = _index(results)
    rows = []
    for name in methods:
        cells = [
            cell(idx[(name, mode, n)]) if (name, mode, n) in idx else "-"
            for n in results["config"]["lengths"]
        ]
        if any(c != "-" for c in cells):
            rows.append((_label(results, name), cells))
    return rows


def _case_methods(results: dict, case: str) -> list[str]:
    return [name for name, info in results["methods"].items() if info["case"] == case]


def _time_cell(r: dict) -> str:
    ratio = r["ratio_to_reference"]
    ratio_text = "" if ratio is None else f" ({ratio:.2f}x)"
    return f"{r['median_s'] * 1e3:.1f}{ratio_text}"


def _memory_cell(r: dict) -> str:
    return f"{r['peak_extra_bytes'] / MIB:.1f}"


def _fraction_cell(r: dict) -> str:
    return f"{100 * r['fraction_of_matmul']:.0f}%"


def _sections(results: dict):
    """(title, column headers, rows) of every table: per mode, time per case, then memory and
    rate fraction; last, the paired growth per doubling."""
    all_methods = list(results["methods"])
    headers = [f"n={n}" for n in results["config"]["lengths"]]
    for mode in MODES:
        m_title = MODE_TITLES[mode]
        for case in CASES:
            reference = _label(results, _case_methods(results, case)[0])
            yield (
                f"{m_title}, {CASE_TITLES[case]}: median time in ms (paired ratio to {reference})",
                headers,
                _grid(results, mode, _case_methods(results, case), _time_cell),
            )
        yield (
            f"{m_title}: peak extra memory in MiB",
            headers,
            _grid(results, mode, all_methods, _memory_cell),
        )
        yield (
            f"{m_title}: achieved FLOP rate as a fraction of the fp32 matmul rate "
            f"({results['matmul']['gflops']:.0f} GFLOP/s)",
            headers,
            _grid(results, mode, all_methods, _fraction_cell),
        )
    yield _growth_table(results)


def _growth_table(results: dict) -> tuple[str, list[str], list[tuple[str, list[str]]]]:
    """(title, column headers, rows) of the paired growth per doubling (no rows if none)."""
    starts = sorted({g["n"] for g in results.get("growth", [])})
    rows = []
    for mode in MODES:
        for name in results["methods"]:
            growth = _growth_of(results, name, mode)
            if growth:
                cells = [f"{growth[n]:.2f}" if n in growth else "-" for n in starts]
                rows.append((f"{_label(results, name)}, {MODE_TITLES[mode]}", cells))
    title = "growth per doubling: paired t(2n)/t(n) (2 = linear, 4 = quadratic)"
    return title, [f"n={n}->{2 * n}" for n in starts], rows


def format_tables(results: dict) -> str:
    """Plain-text tables (what the benchmark prints)."""
    sections = [section for section in _sections(results) if section[2]]
    width = max(
        14,
        *(len(c) + 2 for _, hs, rows in sections for c in hs + [c for _, cs in rows for c in cs]),
    )
    out = []
    for title, headers, rows in sections:
        label_w = max(len(label) for label, _ in rows) + 2
        out.append(title)
        out.append(" " * label_w + "".join(f"{h:>{width}}" for h in headers))
        for label, cells in rows:
            out.append(f"{label:<{label_w}}" + "".join(f"{c:>{width}}" for c in cells))
        out.append("")
    return "\n".join(out)


def format_markdown(results: dict) -> str:
    """The same tables and the targets in Markdown (for ``bench/README.md``)."""
    out = []
    for title, headers, rows in _sections(results):
        if not rows:
            continue
        out.append(f"**{title}**\n")
        out.append("| method | " + " | ".join(headers) + " |")
        out.append("| --- |" + " ---: |" * len(headers))
        for label, cells in rows:
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
    out.append("| target | measured | wanted | result | details |")
    out.append("| --- | ---: | ---: | --- | --- |")
    for t in results.get("targets") or evaluate_targets(results):
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        out.append(
            f"| {t['description']} | {value} | {t['op']} {t['threshold']} | {t['status']} | "
            f"{t['detail']} |"
        )
    for e in results.get("errors", []):
        out.append(f"\nError: {e['method']} ({e['mode']}, n={e['n']}): {e['error']}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------- plot

# The figure's look (matplotlib rcParams beyond the defaults): the benchmark draws its own.
PLOT_STYLE = {"savefig.dpi": 150, "savefig.bbox": "tight", "axes.grid": True, "grid.alpha": 0.3}
PLOT_STYLE |= {"axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def write_plot(results: dict, path: str | Path) -> None:
    """Time and peak extra memory against n, log-log, forward and forward+backward: a 2 × 2
    figure with one legend, written to ``path`` (PNG)."""
    import matplotlib
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from cycler import cycler

    idx = _index(results)
    lengths = results["config"]["lengths"]
    names = list(results["methods"])
    style = dict(PLOT_STYLE, **{"axes.prop_cycle": cycler(color=plt.cm.tab20.colors)})
    with matplotlib.rc_context(style):
        fig, axes = plt.subplots(2, 2, figsize=(13, 9))
        for col, mode in enumerate(MODES):
            for row, (key, scale, ylabel) in enumerate(
                (("median_s", 1e3, "median time (ms)"),
                 ("peak_extra_bytes", 1 / MIB, "peak extra memory (MiB)"))
            ):  # fmt: skip
                xs = {
                    _label(results, m): [n for n in lengths if (m, mode, n) in idx] for m in names
                }
                ys = {
                    _label(results, m): [idx[(m, mode, n)][key] * scale for n in lengths
                                         if (m, mode, n) in idx]
                    for m in names
                }  # fmt: skip
                what = "time" if row == 0 else "peak extra memory"
                ax = axes[row, col]
                for i, label in enumerate(ys):
                    ax.plot(xs[label], ys[label], marker=MARKERS[i % len(MARKERS)], label=label)
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_title(f"{MODE_TITLES[mode]}: {what} vs sequence length")
                ax.set_xlabel("sequence length n (tokens)")
                ax.set_ylabel(ylabel)
                ax.set_xticks(lengths, [str(n) for n in lengths])
                ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        handles, labels = axes[0, 0].get_legend_handles_labels()
        cfg = results["config"]
        fig.suptitle(
            f"bench ({results['mode']} mode): {cfg['dtype']}, batch {cfg['batch_size']}, "
            f"{cfg['num_heads']} heads, head dim {cfg['head_dim']}, "
            f"{results['environment']['torch_threads']} threads"
        )
        fig.legend(handles, labels, loc="lower center", ncol=5)
        fig.tight_layout(rect=(0, 0.08, 1, 0.97))
        fig.savefig(path)
        plt.close(fig)
