"""A lesson's exercise cells, and running one alone in a fresh interpreter."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat


def exercise_cells(lesson: str) -> list[str]:
    """The code cells of ``notebooks/<lesson>`` that check an exercise (they call .check())."""
    path = Path(__file__).parents[2] / "notebooks" / lesson
    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells
            if cell.cell_type == "code" and ".check(" in cell.source]


def run_alone(source: str) -> str:
    """Run one cell in a fresh namespace, as if every other cell had been skipped."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "<exercise cell>", "exec"), {})
    return printed.getvalue()
