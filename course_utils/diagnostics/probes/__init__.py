"""The probes, by theme; importing this package registers every one of them."""

from course_utils.diagnostics.probes import (
    batch_and_mode,
    calls,
    mask_probes,
    numerics,
    shapes,
    weight_probes,
)

__all__ = ["batch_and_mode", "calls", "mask_probes", "numerics", "shapes", "weight_probes"]
