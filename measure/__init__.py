"""measure: measurement for the chapters (``book``) and the benchmark (``bench``), which both
import it: wall time (:mod:`measure.timing`), peak extra memory counted tensor by tensor
(:mod:`measure.memory`), FLOPs, counted and predicted (:mod:`measure.flops`), and the three
for one attention call, with the exponent of their growth with length (:mod:`measure.cost`).

It depends on torch and the ``attention`` library only, never on ``book`` or ``bench``
(``tests/measure/test_import_boundary.py``)."""
