"""The probes, by theme; importing this package registers every one of them."""

from course_utils.diagnostics.probes import calls, mask_probes, numerics, shapes, weight_probes

__all__ = ["calls", "mask_probes", "numerics", "shapes", "weight_probes"]
