"""``python -m bench``: time and measure every attention variant on this machine.

For each case (full, causal, sliding-window band, BigBird blocks), length and mode (forward,
forward+backward) it times the package's variants interleaved with torch's fused
``F.scaled_dot_product_attention`` (and the book's naive dense form), measures each call's peak
extra memory (:mod:`measure.memory`), this machine's fp32 matmul rate and each method's
fraction of it (:mod:`measure.flops`), prints tables of medians and of paired ratios
and the targets met or missed, and writes ``bench/cpu_results.json`` and
``bench/cpu_results.png``. ``--quick`` is a smoke test at toy sizes (under a minute; its
numbers mean nothing). See ``bench/README.md``.
"""

from measure.memory import PeakMemory, peak_extra_bytes

from .methods import FULL, QUICK, BenchConfig
from .report import evaluate_targets, format_markdown, format_tables, write_plot
from .runner import run_benchmark

__all__ = [
    "FULL",
    "QUICK",
    "BenchConfig",
    "PeakMemory",
    "evaluate_targets",
    "format_markdown",
    "format_tables",
    "peak_extra_bytes",
    "run_benchmark",
    "write_plot",
]
