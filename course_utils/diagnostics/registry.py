"""The probe registry: each probe is declared once, where it is written.

    @probe(SHAPES, order=10)
    def shapes(probing: Probing) -> Finding: ...

``order`` places it in the report (gaps leave room for new probes); :func:`registered` lists
the probes in that order, and ``PROBES`` (their names) is derived from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    """A registered probe: its name (as the report shows it), its place and its runner.

    Used in lesson 08.
    """

    name: str
    order: int
    run: Callable  # (Probing) -> Finding


_REGISTRY: dict[str, Probe] = {}


def probe(name: str, order: int) -> Callable[[Callable], Callable]:
    """Register the decorated function as the probe ``name``, shown at place ``order``.

    Used in lesson 08.
    """

    def register(run: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"a probe named {name!r} is already registered")
        taken = {p.order: p.name for p in _REGISTRY.values()}
        if order in taken:
            raise ValueError(f"probe {name!r}: order {order} is taken by {taken[order]!r}")
        _REGISTRY[name] = Probe(name, order, run)
        return run

    return register


def registered() -> tuple[Probe, ...]:
    """Every registered probe, in report order.

    Used in lesson 08.
    """
    return tuple(sorted(_REGISTRY.values(), key=lambda p: p.order))
