"""The registry that the exercises and the diagnostics' probes share (course_utils/registry.py)."""

from __future__ import annotations

import pytest

from course_utils.registry import Registry


def _probes() -> Registry[str]:
    probes = Registry("probe")
    probes.add("shapes", "first", order=10)
    return probes


def test_items_come_in_their_order_else_in_the_order_they_were_added():
    probes = _probes()
    probes.add("rows", "second", order=5)
    assert probes.items() == (("rows", "second"), ("shapes", "first"))
    exercises = Registry("exercise")
    for key in ("l02:b", "l01:a"):
        exercises.add(key, key.upper())
    assert exercises.items() == (("l02:b", "L02:B"), ("l01:a", "L01:A"))


def test_a_taken_key_or_place_is_refused_and_nothing_is_added():
    probes = _probes()
    with pytest.raises(ValueError, match="a probe named 'shapes' is already registered"):
        probes.add("shapes", "again", order=11)
    with pytest.raises(ValueError, match="probe 'rows': order 10 is taken by 'shapes'"):
        probes.add("rows", "second", order=10)
    assert probes.items() == (("shapes", "first"),)


BAD_INPUTS = [
    pytest.param(Registry, (None,), {}, TypeError, ("kind", "str", "None"), id="Registry: kind"),
    pytest.param(_probes().add, ("shapes", "again"), {}, ValueError,
                 ("probe", "'shapes'", "already registered"), id="Registry.add: taken key"),
]
