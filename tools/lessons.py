"""The catalogue of lessons: where they live, their stated run time, which cells are excluded."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
# Cell tags that exclude a cell's output from nbval's comparison.
EXCLUDING_TAGS = {"nbval-ignore-output", "nbval-skip"}
STATED_RUN_TIME = re.compile(r"\*\*Run time:\*\* about (\d+) s on 2 CPU cores\.")


def lesson_paths() -> list[Path]:
    """Every notebook under notebooks/, in learning order."""
    return sorted(p for p in NOTEBOOK_DIR.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def stated_run_time(path: Path) -> int | None:
    """The run time in seconds that a lesson's first cell states, or None."""
    match = STATED_RUN_TIME.search(read(path).cells[0].source)
    return int(match.group(1)) if match else None


def excluded_cells(notebook: nbformat.NotebookNode) -> int:
    """How many code cells nbval will not compare."""
    return sum(
        1 for cell in notebook.cells
        if cell.cell_type == "code" and EXCLUDING_TAGS & set(cell.metadata.get("tags", []))
    )
