"""The probes, by theme; importing this package registers every one of them."""

from course_utils.diagnostics.probes import masks, numerics, shapes, weights

__all__ = ["masks", "numerics", "shapes", "weights"]
