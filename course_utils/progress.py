"""Progress a learner can see while a long cell runs, and that the notebook does not keep.

``with Progress(steps, N_("training steps")) as bar: ... bar.advance()`` shows, in a
notebook, one line per open bar (``training steps ▕██████░░░░▏ 120/300``), updated at most
every ``UPDATE_EVERY_S`` seconds. A cell has one progress display (a cell that trains five
models reuses it), made with a ``display_id``: it starts empty, each update replaces it, and
it is emptied again when the outermost bar closes. nbclient stores a display's last update and
nbval compares its first message, so the stored and the compared output are the same empty
text however fast the machine is (tests/test_progress.py runs both). Nothing is printed per
step and no widget state is made. Outside a kernel (a script, a test) a bar only counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from course_utils.checks import require_instance, require_positive_int
from course_utils.language import N_, Message, _

UPDATE_EVERY_S = 0.5
BAR_WIDTH = 20
EMPTY = {"text/plain": ""}
# The labels of the course's own bars.
TRAINING_STEPS = N_("training steps")
MODELS = N_("models")

_open_bars: list[Progress] = []
_cell_display = {"execution": None, "handle": None}


def _display_handle():
    """The running cell's progress display (made empty on first use), or None outside a kernel."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # the package works without IPython
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    if _cell_display["execution"] != shell.execution_count:
        _cell_display.update(execution=shell.execution_count,
                             handle=display(EMPTY, raw=True, display_id=True))
    return _cell_display["handle"]


class Progress:
    """Count ``total`` units of work (steps, models, ...) named by ``label``, and show them.

    A context manager; ``advance(n)`` counts ``n`` more units. A bar opened inside another
    (a sweep that trains several models) shows under it, in the same display.

    Used in every lesson.
    """

    def __init__(self, total: int, label: str | Message):
        self.total = require_positive_int("total", total)
        self.label = require_instance("label", label, str | Message,
                                      _("a str or an N_(...) message"))
        self.done = 0
        self._handle = None
        self._shown_at = -float("inf")

    def __enter__(self) -> Progress:
        self._handle = _display_handle()
        _open_bars.append(self)
        return self

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + require_positive_int("n", n))
        now = time.monotonic()
        if self._handle is not None and now - self._shown_at >= UPDATE_EVERY_S:
            self._shown_at = now
            self._handle.update({"text/plain": "\n".join(bar.line() for bar in _open_bars)},
                                raw=True)

    def line(self) -> str:
        """``label ▕███░░░▏ done/total``, the label in the learner's language."""
        filled = round(BAR_WIDTH * self.done / self.total)
        return f"{self.label} ▕{'█' * filled}{'░' * (BAR_WIDTH - filled)}▏ {self.done}/{self.total}"

    def __exit__(self, *exc_info) -> None:
        _open_bars.remove(self)
        if self._handle is not None and not _open_bars:
            self._handle.update(EMPTY, raw=True)  # what the notebook keeps: always the same


def counted(items: Sequence, label: str | Message) -> Iterator:
    """Yield ``items`` one by one under a ``Progress`` bar of ``len(items)`` units.

    Used in every lesson.
    """
    require_instance("items", items, Sequence, _("a sequence (a list or a tuple)"))
    require_instance("label", label, str | Message, _("a str or an N_(...) message"))
    return _under(Progress(len(items), label), items) if items else iter(())


def _under(bar: Progress, items: Sequence) -> Iterator:
    with bar:
        for item in items:
            yield item
            bar.advance()
