"""The catalogue of lessons: where they live, their stated run time, which cells are excluded."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
# Cell tags that exclude a cell's output from nbval's comparison.
EXCLUDING_TAGS = {"nbval-ignore-output", "nbval-skip"}
# The header's run-time line in each edition.
STATED_RUN_TIME = re.compile(r"\*\*Run time:\*\* about (\d+) s on 2 CPU cores\."
                             r"|\*\*运行时间：\*\*在 2 核 CPU 上约 (\d+) 秒。")


# The course's editions and their folders: English lessons, their Chinese twins of the same name.
EDITIONS = {"en": NOTEBOOK_DIR, "zh-CN": NOTEBOOK_DIR / "zh-CN"}


def lesson_paths(edition: str = "en") -> list[Path]:
    """One edition's lessons, in learning order."""
    if edition not in EDITIONS:
        raise ValueError(f"edition should be one of {tuple(EDITIONS)}, got {edition!r}")
    return sorted(EDITIONS[edition].glob("*.ipynb"))


def all_lesson_paths() -> list[Path]:
    """Every lesson of every edition: the English ones, then the Chinese ones."""
    return [path for edition in EDITIONS for path in lesson_paths(edition)]


def edition_of(path: Path) -> str:
    """The edition a lesson belongs to, from its folder."""
    folder = Path(path).resolve().parent
    return next(name for name, where in EDITIONS.items() if where == folder)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def stated_run_time(path: Path) -> int | None:
    """The run time in seconds that a lesson's first cell states, or None."""
    match = STATED_RUN_TIME.search(read(path).cells[0].source)
    return int(match.group(1) or match.group(2)) if match else None


def excluded_cells(notebook: nbformat.NotebookNode) -> int:
    """How many code cells nbval will not compare."""
    return sum(
        1 for cell in notebook.cells
        if cell.cell_type == "code" and EXCLUDING_TAGS & set(cell.metadata.get("tags", []))
    )


# What a notebook's outputs need only a kernel for; anything else is rendered by a front end.
PLAIN_OUTPUTS = {"text/plain", "image/png"}


def front_end_outputs(notebook: nbformat.NotebookNode) -> set[str]:
    """The MIME types of a notebook's stored outputs that a front end must render (HTML with
    a script, widget views): what the JupyterLab pass of the suite exists to check."""
    return {kind for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) for kind in output.get("data", {})
            } - PLAIN_OUTPUTS


def lesson_heading(notebook: nbformat.NotebookNode) -> tuple[str, str]:
    """("09", "The attention explorer: ...") from the first cell's "# Lesson 09 · ..."
    (or the Chinese edition's "# 第 09 课 · ...")."""
    heading = notebook.cells[0].source.partition("\n")[0].removeprefix("# ")
    number, _, name = heading.partition(" · ")
    digits = re.search(r"\d+", number)
    return (digits.group() if digits else number), name or heading
