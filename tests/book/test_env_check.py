"""book.env_check: one line per requirement, exit status 1 iff a required item fails."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from book import env_check

NAMES = ["Python", "torch", "numpy", "matplotlib", "jupyterlab", "jupytext", "nbval"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _status_by_name(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("[OK]", "[FAIL]", "[--]"):
            name = rest.strip().split(":")[0]
            assert name not in out, f"two lines for {name}"
            out[name] = status
    return out


@pytest.mark.slow
def test_module_runs_as_a_script_and_passes_in_the_dev_environment():
    proc = subprocess.run(
        [sys.executable, "-m", "book.env_check"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    status = _status_by_name(proc.stdout)
    assert set(NAMES) | {"triton", "CUDA", "MPS"} == set(status), proc.stdout
    assert all(status[n] == "[OK]" for n in NAMES), proc.stdout
    assert status["triton"] in ("[OK]", "[--]")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def versions(monkeypatch):
    """Pretend every package is installed at a good version; tests then break one."""
    table = {
        "torch": "2.13.0+cpu",
        "numpy": "2.4.6",
        "matplotlib": "3.11.2",
        "jupyterlab": "4.6.6",
        "jupytext": "1.19.6",
        "nbval": "0.11.0",
        "triton": "3.9.0",
    }
    monkeypatch.setattr(env_check, "installed_version", lambda name: table.get(name))
    return table


def test_all_good_returns_zero(versions, capsys):
    assert env_check.main() == 0
    assert "All required items found." in capsys.readouterr().out


@pytest.mark.parametrize("missing", ["numpy", "matplotlib", "jupyterlab", "jupytext", "nbval"])
def test_missing_required_package_fails(versions, capsys, missing):
    del versions[missing]
    assert env_check.main() == 1
    out = capsys.readouterr().out
    assert f"[FAIL] {missing}: not installed (required" in out
    assert f"1 required item(s) failed: {missing}." in out


def test_old_torch_fails(versions, capsys):
    versions["torch"] = "2.4.1"
    assert env_check.main() == 1
    assert "[FAIL] torch: 2.4.1 is too old (required, >= 2.5)" in capsys.readouterr().out


def test_old_python_fails(versions, capsys, monkeypatch):
    monkeypatch.setattr(env_check, "python_version", lambda: (3, 9, 18))
    assert env_check.main() == 1
    assert "[FAIL] Python: 3.9.18 is too old: the book needs >= 3.10" in capsys.readouterr().out


@pytest.mark.parametrize("triton", [None, "2.1.0"])
def test_triton_is_optional(versions, capsys, triton):
    if triton is None:
        del versions["triton"]
    else:
        versions["triton"] = triton
    assert env_check.main() == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "triton" in s)
    assert line.startswith("[--]") and "optional" in line


def test_accelerators_are_informational(versions, capsys, monkeypatch):
    fake_cuda = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, get_device_name=lambda i: "Fake GPU"
    )
    import torch

    monkeypatch.setattr(torch, "cuda", fake_cuda)
    checks = {c.name: c for c in env_check.check_accelerators()}
    assert checks["CUDA"].status == "[OK]" and "Fake GPU" in checks["CUDA"].detail
    fake_cuda.is_available = lambda: False
    assert env_check.main() == 0
    assert "[--]   CUDA: not available" in capsys.readouterr().out


def test_broken_torch_import_is_reported_not_raised(versions, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    checks = env_check.check_accelerators()
    assert [c.status for c in checks] == ["[--]", "[--]"]
    assert "torch cannot be imported" in checks[0].detail


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("2.13.0+cpu", (2, 13, 0)),
        ("3.0", (3, 0)),
        ("1.16.4.dev0", (1, 16, 4)),
        ("0.11.0", (0, 11, 0)),
    ],
)
def test_parse_version(text, parsed):
    assert env_check.parse_version(text) == parsed


def test_version_comparison_pads_and_compares_numerically():
    assert env_check._at_least("2.5", "2.5.0") and env_check._at_least("2.10.0", "2.5")
    assert not env_check._at_least("2.4.99", "2.5")
    with pytest.raises(ValueError, match=r"version must start with a number, got 'abc'"):
        env_check.parse_version("abc")
