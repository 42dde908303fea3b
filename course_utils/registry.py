"""A registry: items declared once, where they are written, under keys no two may share.

The exercises register themselves when they are built, the diagnostics' probes with their
place in the report; both keep a :class:`Registry`, so a second item under a taken key (or at
a taken place) fails at import with a message naming both.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from course_utils.checks import require_instance
from course_utils.language import _

Item = TypeVar("Item")


class Registry(Generic[Item]):
    """Items under unique keys, listed in order: by the ``order`` each was added with, else
    in the order they were added. ``kind`` names an item in the error messages.

    Used in every lesson.
    """

    def __init__(self, kind: str):
        self.kind = require_instance("kind", kind, str, _("a str (what an item is called)"))
        self._items: dict[str, tuple[int | None, Item]] = {}

    def add(self, key: str, item: Item, order: int | None = None) -> Item:
        """Register ``item`` under ``key`` (at place ``order``, if given); ValueError if the
        key or the place is taken."""
        if key in self._items:
            raise ValueError(_(
                "a {kind} named {key!r} is already registered"
            ).format(kind=self.kind, key=key))
        if order is not None:
            taken = next((other for other, (place, _item) in self._items.items()
                          if place == order), None)
            if taken is not None:
                raise ValueError(_(
                    "{kind} {key!r}: order {order} is taken by {taken!r}"
                ).format(kind=self.kind, key=key, order=order, taken=taken))
        self._items[key] = (order, item)
        return item

    def items(self) -> tuple[tuple[str, Item], ...]:
        """``(key, item)`` pairs in order (items added without an order keep theirs)."""
        # sorted() is stable: items of the same (or no) order stay in the order they came.
        ordered = sorted(self._items.items(), key=lambda pair: pair[1][0] or 0)
        return tuple((key, item) for key, (_order, item) in ordered)
