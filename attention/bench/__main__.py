"""Entry point of ``python -m attention.bench`` (see :mod:`attention.bench.cli`)."""

from .cli import main

raise SystemExit(main())
