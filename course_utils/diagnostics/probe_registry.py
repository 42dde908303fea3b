"""The probe registry: each probe is declared once, where it is written.

    @probe(SHAPES, order=10)
    def shapes(probing: Probing) -> Finding: ...

``order`` places it in the report (gaps leave room for new probes); :func:`registered` lists
the probes in that order, and ``PROBES`` (their names) is derived from it. The probes are kept
in a :class:`course_utils.registry.Registry`, as the exercises are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from course_utils.registry import Registry


@dataclass(frozen=True)
class Probe:
    """A registered probe: its name (as the report shows it), its place and its runner.

    Used in lesson 08.
    """

    name: str
    order: int
    run: Callable  # (Probing) -> Finding


_PROBES: Registry[Probe] = Registry("probe")


def probe(name: str, order: int) -> Callable[[Callable], Callable]:
    """Register the decorated function as the probe ``name``, shown at place ``order``.

    Used in lesson 08.
    """

    def register(run: Callable) -> Callable:
        _PROBES.add(name, Probe(name, order, run), order=order)
        return run

    return register


def registered() -> tuple[Probe, ...]:
    """Every registered probe, in report order.

    Used in lesson 08.
    """
    return tuple(registered_probe for _name, registered_probe in _PROBES.items())
