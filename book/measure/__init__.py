"""Measurement for the chapters and the benchmark: wall time (:mod:`book.measure.timing`), peak
extra memory counted tensor by tensor (:mod:`book.measure.memory`) and FLOPs, counted and
predicted (:mod:`book.measure.flops`)."""
