"""environment.yml, requirements-dev.txt and pyproject.toml describe one environment.

pyproject.toml holds ranges (what the package supports); requirements-dev.txt holds the exact
pins CI installs; environment.yml mirrors those pins for conda. These tests keep them in step.
(``yaml`` comes with jupytext, ``packaging`` with pytest and matplotlib.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]


def _key(req: Requirement) -> tuple[str, str, str]:
    """A comparable form: normalized name, specifier, marker."""
    return (canonicalize_name(req.name), str(req.specifier), str(req.marker or ""))


def _requirements_dev() -> list[Requirement]:
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    return [
        Requirement(line)
        for line in (s.split(" #")[0].strip() for s in lines)
        if line and not line.startswith("#")
    ]


def _environment_yml() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _yml_pip() -> list[str]:
    deps = _environment_yml()["dependencies"]
    pip_lists = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1, "environment.yml must have exactly one pip: section"
    return pip_lists[0]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pyproject_ranges() -> list[Requirement]:
    project = _pyproject()["project"]
    return [
        Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]
    ]


def test_requirements_dev_pins_every_package_exactly():
    reqs = _requirements_dev()
    assert reqs, "requirements-dev.txt lists no packages"
    for req in reqs:
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{req} is not an exact pin"
    names = [canonicalize_name(r.name) for r in reqs]
    assert len(names) == len(set(names)), "a package is listed twice in requirements-dev.txt"


def test_environment_yml_pip_list_equals_requirements_dev():
    pip = _yml_pip()
    # The yml also installs the package itself, editable; everything else must be the pins.
    assert "-e ." in pip
    yml = sorted(_key(Requirement(line)) for line in pip if line != "-e .")
    dev = sorted(_key(r) for r in _requirements_dev())
    assert yml == dev


def test_environment_yml_python_satisfies_requires_python():
    deps = _environment_yml()["dependencies"]
    pythons = [d for d in deps if isinstance(d, str) and d.startswith("python")]
    assert len(pythons) == 1
    version = pythons[0].split("=")[-1]
    assert version in SpecifierSet(_pyproject()["project"]["requires-python"])
    assert "pip" in deps


def test_pyproject_names_equal_requirements_dev_names():
    ranges = {canonicalize_name(r.name) for r in _pyproject_ranges()}
    pins = {canonicalize_name(r.name) for r in _requirements_dev()}
    assert ranges == pins, f"only in pyproject: {ranges - pins}; only pinned: {pins - ranges}"


def test_every_pin_satisfies_the_pyproject_range_with_the_same_marker():
    ranges = {canonicalize_name(r.name): r for r in _pyproject_ranges()}
    for pin in _requirements_dev():
        rng = ranges[canonicalize_name(pin.name)]
        version = next(iter(pin.specifier)).version
        assert rng.specifier.contains(version, prereleases=True), f"{pin} is outside {rng}"
        assert str(pin.marker or "") == str(rng.marker or ""), f"markers differ: {pin} vs {rng}"


def test_gpu_extra_is_a_subset_of_dev():
    project = _pyproject()["project"]
    gpu = {_key(Requirement(r)) for r in project["optional-dependencies"]["gpu"]}
    dev = {_key(Requirement(r)) for r in project["optional-dependencies"]["dev"]}
    assert gpu <= dev
