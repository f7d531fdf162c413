"""The sceptic's sweep: each claim's verdict re-run under the obvious changes a sceptic would try.

A verdict reached on the chapter's seeds, budget and initialisation may not survive other
seeds, a longer run, torch's standard initialisation or another value of the claim's own knob
(a learning rate, a length, a depth, a width). So each claim that training decides declares,
next to its thresholds in ``book/claims/chNN.py``, the changes it must survive::

    SCEPTIC_SWEEPS = (
        Sweep(
            "C7",
            run=c7_sweep_run,  # **kwargs -> Outcome(verdict, numbers)
            baseline={"seeds": [0, 1, 2], "steps": 400},  # what the chapter shows
            perturbations=(
                Perturbation("seeds 3–5", "other seeds", {"seeds": [3, 4, 5]}),
                Perturbation("1200 steps", "a 3× longer budget", {"steps": 1200}),
            ),
        ),
    )

``python -m book.sceptic [--chapter 02] [--claim C7]`` (``make sceptic CH=02 CLAIM=C7``) runs
the baseline and each perturbation (the baseline's keyword arguments updated by the
perturbation's), records the verdict and the key numbers each gives, and writes them to
``chapters/sceptic/NN_slug.json``, one file per chapter, beside the chapter. With each claim it
stores the sha256 of the source of what the sweep ran (:func:`source_fingerprint`) and the
torch version; ``tests/book/test_sceptic.py`` fails when a declared sweep has no stored results
or when they were computed from other code or another declaration (:func:`stale_problems`).
The claims index (:mod:`book.claims_index`) shows, per claim, whether the verdict held under
each change (:func:`sweep_cell`); a chapter prints the stored sweep with
:func:`sweep_summary`.
"""

from __future__ import annotations

import argparse
import builtins
import hashlib
import importlib
import inspect
import json
import pkgutil
import re
import sys
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from book.claims import VERDICTS

__all__ = [
    "SCEPTIC_DIR",
    "Outcome",
    "Perturbation",
    "Sweep",
    "declared_sweeps",
    "main",
    "run_sweep",
    "source_fingerprint",
    "stale_problems",
    "stored_sweeps",
    "sweep_cell",
    "sweep_path",
    "sweep_summary",
]

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = REPO / "chapters"
SCEPTIC_DIR = CHAPTERS / "sceptic"
FORMAT_VERSION = 1
# Code whose source a sweep's fingerprint covers: the book's and the library's. torch and the
# standard library are covered by the stored torch version (CI pins it).
FINGERPRINTED = ("book", "attention")
# Modules of the book that cannot change a result (a progress bar): left out of it.
NOT_FINGERPRINTED = ("book.progress",)
# Where chapters declare their sweeps: each chapter's claims module, book.claims.chNN.
SWEEP_PACKAGES = ("book.claims",)


@dataclass(frozen=True)
class Perturbation:
    """One change a sceptic would try: ``kwargs`` update the baseline's keyword arguments."""

    name: str  # short, for the claims index: "seeds 3–5", "torch init", "d_k 64"
    description: str  # what changes, in words
    kwargs: Mapping[str, Any]

    def __post_init__(self) -> None:
        for attr in ("name", "description"):
            value = getattr(self, attr)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{attr} must be a non-empty str, got {value!r}")
        if not isinstance(self.kwargs, Mapping) or not self.kwargs:
            raise ValueError(
                f"perturbation {self.name!r}: kwargs must be a non-empty mapping, got "
                f"{self.kwargs!r}"
            )
        object.__setattr__(self, "kwargs", _jsonable("kwargs", dict(self.kwargs)))


@dataclass(frozen=True)
class Outcome:
    """What one run of a sweep gives: a verdict and the numbers it rests on (JSON values)."""

    verdict: str
    numbers: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {list(VERDICTS)}, got {self.verdict!r}")
        object.__setattr__(self, "numbers", _jsonable("numbers", dict(self.numbers)))


@dataclass(frozen=True)
class Sweep:
    """A claim's sweep: ``run(**baseline)`` is the chapter's setting, then each perturbation's
    ``run(**(baseline | perturbation.kwargs))``; ``run`` returns an :class:`Outcome`."""

    claim_id: str
    run: Callable[..., Outcome]
    baseline: Mapping[str, Any]
    perturbations: tuple[Perturbation, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.claim_id, str) or not self.claim_id.strip():
            raise ValueError(f"claim_id must be a non-empty str, got {self.claim_id!r}")
        if not callable(self.run):
            raise TypeError(f"run must be callable (**kwargs -> Outcome), got {self.run!r}")
        object.__setattr__(self, "baseline", _jsonable("baseline", dict(self.baseline)))
        perturbations = tuple(self.perturbations)
        if not perturbations or not all(isinstance(p, Perturbation) for p in perturbations):
            raise ValueError(f"{self.claim_id}: perturbations must be one or more Perturbation")
        names = [p.name for p in perturbations]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.claim_id}: perturbation names must be distinct, got {names}")
        for p in perturbations:
            unknown = sorted(set(p.kwargs) - set(self.baseline))
            if unknown:
                raise ValueError(
                    f"{self.claim_id}, perturbation {p.name!r}: {unknown} not in the baseline's "
                    f"keyword arguments {sorted(self.baseline)}"
                )
        object.__setattr__(self, "perturbations", perturbations)

    def declaration(self) -> dict:
        """The baseline and the perturbations as JSON (stored, and compared when checking)."""
        return {
            "baseline": dict(self.baseline),
            "perturbations": [
                {"name": p.name, "description": p.description, "kwargs": dict(p.kwargs)}
                for p in self.perturbations
            ],
        }


def _jsonable(name: str, value: dict) -> dict:
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must hold JSON values (finite numbers), got {value!r}") from exc


# ------------------------------------------------------------------------------------------
# What a sweep ran: the fingerprint of its source
# ------------------------------------------------------------------------------------------


def _ours(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or ""
    if isinstance(obj, types.ModuleType):
        module = obj.__name__
    return module.split(".")[0] in FINGERPRINTED and module not in NOT_FINGERPRINTED


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _referenced(obj: object) -> list[object]:
    """What the source of ``obj`` (a function or a class) names: the globals of its module that
    its code loads, and the functions and classes of the book's modules it reads attributes of."""
    if isinstance(obj, type):
        codes = []
        for member in vars(obj).values():
            member = member.fget if isinstance(member, property) else member
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            if isinstance(member, types.FunctionType):
                codes.append(member.__code__)
        module_globals = vars(sys.modules[obj.__module__])
    else:
        codes = [obj.__code__]
        module_globals = obj.__globals__
    names = set().union(*(_code_names(c) for c in codes)) if codes else set()
    found = []
    modules = [v for v in module_globals.values() if isinstance(v, types.ModuleType) and _ours(v)]
    for name in sorted(names):
        if name in module_globals:
            found.append((name, module_globals[name]))
        for module in modules:  # `training.fit`: an attribute of one of the book's modules
            if name in vars(module):
                found.append((f"{module.__name__}.{name}", vars(module)[name]))
    return found


def _runtime_state(module_name: str, name: str) -> bool:
    """Whether ``name`` is state a module rebinds as it runs (``global name`` in one of its
    functions, such as a thread pool's key), not a constant: its value depends on what ran
    before in the process, so it must not enter a fingerprint."""
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return False
    return re.search(rf"^\s*global\s+[\w\s,]*\b{re.escape(name)}\b", source, re.M) is not None


def source_fingerprint(run: Callable) -> tuple[str, list[str]]:
    """The sha256 of the source of ``run`` and of everything in ``book``/``attention`` it uses,
    transitively, with the names covered.

    Followed: every global name a function's code (nested functions and lambdas included)
    loads, and every attribute it reads of a module of the book; a function or class defined in
    ``book`` or ``attention`` contributes its source (a class, its whole body, and what its
    methods use), a module-level constant (a threshold) its ``repr``. An edit of any of them
    changes the fingerprint; an edit elsewhere in the same module does not. A module global
    that the module rebinds at run time (``global _POOL_KEY``) is state, not a constant, and is
    left out, so that the fingerprint does not depend on what ran before in the process.
    """
    seen: dict[str, str] = {}
    todo: list[object] = [run]
    done: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in done:
            continue
        done.add(id(obj))
        key = f"{obj.__module__}.{obj.__qualname__}"
        seen[key] = inspect.getsource(obj)
        for name, value in _referenced(obj):
            if isinstance(value, (types.FunctionType, type)) and _ours(value):
                todo.append(value)
            elif (
                isinstance(value, (bool, int, float, str, tuple, frozenset))
                and not hasattr(builtins, name)
                and not _runtime_state(obj.__module__, name)
            ):
                module = obj.__module__
                seen.setdefault(f"{module}.{name}", f"{name} = {value!r}")
    digest = hashlib.sha256()
    for key in sorted(seen):
        digest.update(f"{key}\n{seen[key]}\n".encode())
    return digest.hexdigest(), sorted(seen)


# ------------------------------------------------------------------------------------------
# Declared sweeps, stored results
# ------------------------------------------------------------------------------------------


def declared_sweeps() -> dict[str, tuple[int, Sweep]]:
    """Every sweep a chapter declares: claim id -> (chapter, sweep), from the
    ``SCEPTIC_SWEEPS`` of each chapter's claims module ``book.claims.chNN``."""
    found: dict[str, tuple[int, Sweep]] = {}
    for package in SWEEP_PACKAGES:
        for info in sorted(
            pkgutil.iter_modules(importlib.import_module(package).__path__), key=lambda i: i.name
        ):
            match = re.fullmatch(r"ch(\d{2})", info.name)
            if match is None:
                continue
            module = importlib.import_module(f"{package}.{info.name}")
            for sweep in getattr(module, "SCEPTIC_SWEEPS", ()):
                if sweep.claim_id in found:
                    raise ValueError(f"{sweep.claim_id}: declared twice")
                found[sweep.claim_id] = (int(match.group(1)), sweep)
    return found


def sweep_path(chapter: int, chapters: Path = CHAPTERS) -> Path:
    """``chapters/sceptic/NN_slug.json``, named after the chapter's notebook."""
    notebooks = sorted(Path(chapters).glob(f"{chapter:02d}_*.py"))
    if len(notebooks) != 1:
        raise ValueError(f"chapter {chapter}: expected one chapters/{chapter:02d}_*.py")
    return Path(chapters) / "sceptic" / f"{notebooks[0].stem}.json"


def _read(path: Path) -> dict:
    if not path.exists():
        return {"version": FORMAT_VERSION, "claims": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def stored_sweeps(chapters: Path = CHAPTERS) -> dict[str, dict]:
    """Every stored sweep: claim id -> its record (see :func:`run_sweep`)."""
    found = {}
    for path in sorted((Path(chapters) / "sceptic").glob("[0-9][0-9]_*.json")):
        found.update(_read(path)["claims"])
    return found


def run_sweep(
    claim_id: str,
    chapter: int,
    sweep: Sweep,
    *,
    chapters: Path = CHAPTERS,
    show_progress: bool = True,
) -> dict:
    """Run ``sweep``'s baseline and every perturbation, store the record in the chapter's
    ``chapters/sceptic/NN_slug.json`` (other claims' records kept) and return it."""
    import torch

    from book.progress import progress

    sha, covered = source_fingerprint(sweep.run)
    settings = [("baseline", "the chapter's setting", {})] + [
        (p.name, p.description, dict(p.kwargs)) for p in sweep.perturbations
    ]
    results = []
    start = time.perf_counter()
    iterator = progress(settings, desc=f"{claim_id} sweep") if show_progress else settings
    for name, description, kwargs in iterator:
        outcome = sweep.run(**(dict(sweep.baseline) | kwargs))
        if not isinstance(outcome, Outcome):
            raise TypeError(f"{claim_id}: run must return an Outcome, got {type(outcome).__name__}")
        results.append(
            {
                "name": name,
                "description": description,
                "kwargs": kwargs,
                "verdict": outcome.verdict,
                "numbers": dict(outcome.numbers),
            }
        )
        if show_progress:
            print(f"  {name}: {outcome.verdict}", file=sys.stderr)
    record = {
        "claim_id": claim_id,
        "run": f"{sweep.run.__module__}.{sweep.run.__qualname__}",
        "source_sha256": sha,
        "sources": covered,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start),
        "declaration": sweep.declaration(),
        "baseline": results[0],
        "perturbations": results[1:],
    }
    path = sweep_path(chapter, chapters)
    stored = _read(path)
    stored["version"] = FORMAT_VERSION
    stored["claims"] = dict(sorted((stored["claims"] | {claim_id: record}).items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


def stale_problems(
    declared: Mapping[str, tuple[int, Sweep]] | None = None, chapters: Path = CHAPTERS
) -> list[str]:
    """Why the stored sweeps cannot be trusted; [] if they can: a declared sweep without
    stored results, or stored from another source (fingerprint) or another declaration."""
    declared = declared_sweeps() if declared is None else declared
    problems = []
    for claim_id, (chapter, sweep) in declared.items():
        path = sweep_path(chapter, chapters)
        redo = f"run `make sceptic CH={chapter:02d} CLAIM={claim_id}`"
        record = _read(path)["claims"].get(claim_id)
        if record is None:
            problems.append(f"{claim_id}: no stored sweep in {path.name}: {redo}")
            continue
        sha, _ = source_fingerprint(sweep.run)
        if record.get("source_sha256") != sha:
            problems.append(
                f"{claim_id}: the code the sweep runs changed since {path.name} was written "
                f"(sources: {', '.join(record.get('sources', []))}): {redo}"
            )
        if record.get("declaration") != sweep.declaration():
            problems.append(
                f"{claim_id}: the declared baseline or perturbations differ from those stored "
                f"in {path.name}: {redo}"
            )
    return problems


# ------------------------------------------------------------------------------------------
# Showing a stored sweep
# ------------------------------------------------------------------------------------------


def sweep_cell(record: Mapping[str, Any] | None) -> str:
    """The claims index's cell for one stored sweep: the baseline's verdict, then per
    perturbation "held" or the verdict it became; "—" without a stored sweep."""
    if not record:
        return "—"
    base = record["baseline"]["verdict"]
    parts = [f"baseline: {base}"]
    for p in record["perturbations"]:
        parts.append(f"{p['name']}: {'held' if p['verdict'] == base else p['verdict']}")
    return "; ".join(parts)


def sweep_summary(
    claim_id: str, chapters: Path = CHAPTERS, *, keys: Sequence[str] | None = None
) -> str:
    """The stored sweep of ``claim_id`` as lines of text, one per setting: its name, its
    verdict and its key numbers (``keys``: which; default all that are not lists). Read from
    the stored JSON, so the same on every machine."""
    record = stored_sweeps(chapters).get(claim_id)
    if record is None:
        raise ValueError(f"{claim_id}: no stored sweep under {Path(chapters) / 'sceptic'}")
    rows = [record["baseline"], *record["perturbations"]]
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        numbers = r["numbers"]
        if keys is not None:
            numbers = {k: numbers[k] for k in keys if k in numbers}
        detail = ", ".join(f"{k} {v}" for k, v in numbers.items() if not isinstance(v, list))
        lines.append(f"{r['name']:<{width}}  {r['verdict']:<14}  {detail}".rstrip())
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m book.sceptic", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--chapter", type=int, help="only this chapter's sweeps (e.g. 02)")
    parser.add_argument("--claim", help="only this claim's sweep (e.g. C7)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a stored sweep is missing or stale"
    )
    args = parser.parse_args(argv)
    declared = declared_sweeps()
    chosen = {
        cid: (ch, sw)
        for cid, (ch, sw) in declared.items()
        if (args.chapter is None or ch == args.chapter) and (args.claim in (None, cid))
    }
    if not chosen:
        print(
            f"no declared sweep matches (declared: {', '.join(declared) or 'none'})",
            file=sys.stderr,
        )
        return 2
    if args.check:
        problems = stale_problems(chosen)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"stored sweeps up to date: {', '.join(chosen)}")
        return 1 if problems else 0
    for claim_id, (chapter, sweep) in chosen.items():
        record = run_sweep(claim_id, chapter, sweep)
        print(
            f"{claim_id}: {sweep_cell(record)} ({record['seconds']} s) -> "
            f"{sweep_path(chapter).relative_to(REPO)}"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    # Run as book.sceptic, not __main__: the chapters' sweeps return book.sceptic.Outcome.
    from book.sceptic import main as _main

    sys.exit(_main())
