"""measure: measurement for the chapters (``book``) and the benchmark (``bench``), which both
import it: wall time (:mod:`measure.timing`), peak extra memory counted tensor by tensor
(:mod:`measure.memory`) and FLOPs, counted and predicted (:mod:`measure.flops`).

It depends on torch and the ``attention`` library only, never on ``book`` or ``bench``
(``tests/measure/test_import_boundary.py``)."""
