"""Where the lessons live and how their cells are marked, shared by the notebook tests."""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
# Cell tags that exclude a cell's output from nbval's comparison.
EXCLUDING_TAGS = {"nbval-ignore-output", "nbval-skip"}


def lesson_paths() -> list[Path]:
    """Every notebook under notebooks/, in learning order."""
    return sorted(p for p in NOTEBOOK_DIR.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def excluded_cells(notebook: nbformat.NotebookNode) -> int:
    """How many code cells nbval will not compare."""
    return sum(
        1 for cell in notebook.cells
        if cell.cell_type == "code" and EXCLUDING_TAGS & set(cell.metadata.get("tags", []))
    )
