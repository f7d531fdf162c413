"""Check that this machine can run the book: ``python -m book.env_check``.

Prints one line per requirement, ``[OK]`` or ``[FAIL]``, plus ``[--]`` lines for optional or
informational items (triton, CUDA, MPS) that are never failures. Exits with status 1 iff a
required item fails. Paste its output into bug reports.

Versions are read from package metadata (``importlib.metadata``), so checking does not import
the heavy packages; only torch is imported, to ask about CUDA and MPS.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata

# The minimums of pyproject.toml (package dependencies and the dev extra the book needs).
MIN_PYTHON = (3, 10)
REQUIRED = (
    ("torch", "2.5"),
    ("numpy", "1.24"),
    ("matplotlib", "3.7"),
    ("jupyterlab", "4.0"),
    ("jupytext", "1.16"),
    ("nbval", "0.11"),
)
OPTIONAL = (("triton", "3.0", "GPU kernels of chapter 9"),)

OK, FAIL, SKIP = "[OK]", "[FAIL]", "[--]"


@dataclass(frozen=True)
class Check:
    status: str  # OK, FAIL or SKIP
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<6} {self.name}: {self.detail}"


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: ``"2.13.0+cpu"`` -> ``(2, 13, 0)``."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        raise ValueError(f"version must start with a number, got {text!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def _at_least(version: str, minimum: str) -> bool:
    # Pad so that "2.5" compares equal to "2.5.0".
    have, need = parse_version(version), parse_version(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def installed_version(distribution: str) -> str | None:
    """Installed version of ``distribution``, or ``None`` if it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def python_version() -> tuple[int, int, int]:
    return tuple(sys.version_info[:3])


def check_python() -> Check:
    have = python_version()
    shown = ".".join(map(str, have))
    need = ".".join(map(str, MIN_PYTHON))
    if have[:2] >= MIN_PYTHON:
        return Check(OK, "Python", f"{shown} (>= {need}) at {sys.executable}")
    return Check(FAIL, "Python", f"{shown} is too old: the book needs >= {need}")


def check_package(name: str, minimum: str) -> Check:
    version = installed_version(name)
    if version is None:
        return Check(FAIL, name, f"not installed (required, >= {minimum})")
    try:
        good = _at_least(version, minimum)
    except ValueError:
        good = False
    if good:
        return Check(OK, name, f"{version} (>= {minimum})")
    return Check(FAIL, name, f"{version} is too old (required, >= {minimum})")


def check_optional(name: str, minimum: str, purpose: str) -> Check:
    version = installed_version(name)
    if version is None:
        return Check(SKIP, name, f"optional, not installed ({purpose})")
    try:
        good = _at_least(version, minimum)
    except ValueError:
        good = False
    if good:
        return Check(OK, name, f"{version} (optional, >= {minimum})")
    return Check(SKIP, name, f"{version} is older than {minimum}; optional ({purpose})")


def check_accelerators() -> list[Check]:
    """CUDA and MPS presence: informational, never a failure."""
    try:
        import torch
    except Exception as err:  # a broken torch install is reported by check_package
        reason = f"unknown (torch cannot be imported: {type(err).__name__})"
        return [Check(SKIP, "CUDA", reason), Check(SKIP, "MPS", reason)]
    checks = []
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        checks.append(Check(OK, "CUDA", f"available, CUDA {torch.version.cuda}: {names}"))
    else:
        checks.append(Check(SKIP, "CUDA", "not available (the book runs on CPU)"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        checks.append(Check(OK, "MPS", "available (Apple GPU)"))
    else:
        checks.append(Check(SKIP, "MPS", "not available"))
    return checks


def run_checks() -> list[Check]:
    checks = [check_python()]
    checks += [check_package(name, minimum) for name, minimum in REQUIRED]
    checks += [check_optional(*item) for item in OPTIONAL]
    checks += check_accelerators()
    return checks


def main() -> int:
    """Print the report; return 1 if a required item failed, else 0."""
    checks = run_checks()
    print(f"attention-book environment check ({platform.platform()})")
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        print(f"{len(failed)} required item(s) failed: {', '.join(failed)}. See README.md, Set-up.")
        return 1
    print("All required items found.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
