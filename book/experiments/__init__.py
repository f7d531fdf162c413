"""The chapters' experiments: one module per chapter (``chNN``), which imports no other
chapter's, and the modules chapters share, by role: :mod:`~book.experiments.tasks` (synthetic
tasks), :mod:`~book.experiments.training` (the one training loop),
:mod:`~book.experiments.seeds` (seeds and spreads), :mod:`~book.experiments.parallel`
(independent runs side by side, one per core) and :mod:`~book.experiments.gradients`
(gradients against distance)."""
