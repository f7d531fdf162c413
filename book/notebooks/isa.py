"""Which CPU instruction set torch's kernels use, and how to force another one.

torch picks its vectorised kernels (ATen), oneDNN and MKL pick theirs, by what the CPU can
do. Rounding differs between them, so a trained number differs in its last digits between
an AVX-512 and an AVX2 machine. `make execute` records the instruction set a notebook ran
under (:func:`kernel_cpu_capability`); `make test-notebooks` checks the stored outputs under
another one where the machine allows (:func:`cross_check_env`), so a reader on another CPU
gets what the book promises.
"""

from __future__ import annotations

import os
import subprocess
import sys

# The settings that make torch, oneDNN and MKL use AVX2 kernels on an AVX-512 machine.
FORCE_AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
ISA_VARIABLES = tuple(FORCE_AVX2)


def kernel_cpu_capability(env: dict[str, str] | None = None) -> str:
    """``torch.backends.cpu.get_cpu_capability()`` in a fresh process with ``env``.

    A fresh process, because torch reads ``ATEN_CPU_CAPABILITY`` once, at import."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ if env is None else env),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


# From the widest to the narrowest; DEFAULT (no vectorisation) is too slow for the notebooks.
LEVELS = ("AVX512", "AVX2")
UNRECORDED = "unrecorded"


def recorded_capabilities(paths) -> dict[str, str]:
    """Each stored notebook's recorded instruction set (exercises, stored without outputs,
    are left out)."""
    import nbformat

    from book.notebooks.common import META_KEY

    found = {}
    for path in paths:
        nb = nbformat.read(str(path), as_version=4)
        if not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            continue
        found[str(path)] = nb.metadata.get(META_KEY, {}).get("cpu_capability", UNRECORDED)
    return found


def choose_cross_check(native: str, recorded: dict[str, str]) -> tuple[dict[str, str], str]:
    """The environment to check stored notebooks in, on a CPU whose widest instruction set is
    ``native``, given each notebook's recorded one; and a sentence saying which and why.

    The level this CPU has that the most notebooks were not executed under (the widest on a
    tie). Notebooks executed under the chosen level are named: they are not cross-checked."""
    available = LEVELS[LEVELS.index(native) :] if native in LEVELS else (native,)
    level = max(available, key=lambda lv: sum(r != lv for r in recorded.values()))
    env = {} if level == native else dict(FORCE_AVX2)
    how = "native kernels" if not env else " ".join(f"{k}={v}" for k, v in env.items())
    executed = ", ".join(sorted(set(recorded.values()))) or "nothing recorded"
    sentence = f"checking notebooks executed under {executed} with {level} kernels ({how})"
    same = sorted(path for path, r in recorded.items() if r == level)
    if same:
        sentence += (
            f"; not a cross-check for {len(same)} notebook(s) executed under {level} "
            f"(this CPU offers no other level): {', '.join(same)}"
        )
    return env, sentence


def describe_environment() -> str:
    """One line: the instruction set settings this process passes to its kernels."""
    forced = {k: os.environ[k] for k in ISA_VARIABLES if k in os.environ}
    if not forced:
        return "instruction set: the CPU's native kernels (no ATEN_CPU_CAPABILITY set)"
    return "instruction set: " + " ".join(f"{k}={v}" for k, v in forced.items())


def main(argv: list[str] | None = None) -> int:
    """``python -m book.notebooks.isa NOTEBOOK...``: print the environment assignments for
    the cross-check on stdout (for ``env``), and what is checked under what on stderr."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("notebooks", nargs="*")
    args = parser.parse_args(argv)
    clean = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    native = kernel_cpu_capability(clean)
    env, sentence = choose_cross_check(native, recorded_capabilities(args.notebooks))
    print(sentence, file=sys.stderr)
    print(" ".join(f"{k}={v}" for k, v in env.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
