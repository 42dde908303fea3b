"""The probes, by theme; importing this package registers every one of them."""

from course_utils.diagnostics.probes import calls, masks, numerics, shapes, weights

__all__ = ["calls", "masks", "numerics", "shapes", "weights"]
