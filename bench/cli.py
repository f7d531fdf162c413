"""Command line: ``python -m bench [--quick] [--out-dir DIR]``.

Full mode (the default) takes 6–8 minutes on two cores; set ``OMP_NUM_THREADS`` to the
cores you mean to use, on an otherwise idle machine. ``--quick`` runs every method at toy sizes
in well under a minute (CI's smoke test: it checks that everything runs and writes, not
speed). ``--markdown FILE.json`` prints the tables and targets of a results file as Markdown.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .methods import FULL, QUICK
from .report import evaluate_targets, format_markdown, format_tables, format_targets, write_plot
from .runner import run_benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="toy sizes, under a minute")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("bench"),
        help="where to write cpu_results[_quick].json and .png (default: bench)",
    )
    parser.add_argument(
        "--markdown", type=Path, metavar="JSON", help="print a results file as Markdown, exit"
    )
    args = parser.parse_args(argv)
    if args.markdown is not None:
        print(format_markdown(json.loads(args.markdown.read_text())), end="")
        return 0

    config = QUICK if args.quick else FULL
    results = run_benchmark(config)
    results["targets"] = evaluate_targets(results)
    print(format_tables(results))
    if args.quick:
        print("(quick mode: toy sizes, the numbers below say nothing about speed)")
    print(format_targets(results["targets"]))
    for e in results["errors"]:
        print(f"ERROR {e['method']} ({e['mode']}, n={e['n']}): {e['error']}")

    stem = "cpu_results_quick" if args.quick else "cpu_results"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    json_path, png_path = args.out_dir / f"{stem}.json", args.out_dir / f"{stem}.png"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    write_plot(results, png_path)
    print(f"wrote {json_path} and {png_path} ({results['elapsed_s']:.0f} s)")
    return 0
