"""Write the Colab badge and setup cell from tools/colab.py into every lesson of every
edition, and the lesson tables into each edition's README (README.md, README.<edition>.md).

    python3 tools/course.py sync

A notebook's first markdown cell gets the badge right under its title; its first code cell
becomes the setup cell (inserted if missing, in which case re-execute the notebook).
"""

from __future__ import annotations

import re
import sys

import nbformat

from tools.colab import badge, setup_cell_source
from tools.lessons import (
    EDITIONS,
    ROOT,
    all_lesson_paths,
    edition_of,
    edition_text,
    lesson_heading,
    lesson_paths,
    read,
    readme_path,
    stated_run_time,
)

BADGE_LINE = re.compile(r"^\[!\[Open In Colab\].*$", re.M)
# The setup cell, in any edition: its comment line, then the code that is the same in all.
SETUP_MARKER = re.compile(r"# [^\n]*\nimport importlib\.util\n")
READMES = {edition: readme_path(edition) for edition in EDITIONS}


def sync_notebook(path) -> bool:
    """Bring one notebook's badge and setup cell up to date; return True if it changed."""
    notebook = nbformat.read(path, as_version=4)
    before = nbformat.writes(notebook)
    relative = path.relative_to(ROOT).as_posix()
    intro = notebook.cells[0]
    if intro.cell_type != "markdown" or not intro.source.startswith("# "):
        raise SystemExit(f"{relative}: the first cell must be markdown starting with '# Title'")
    title, _, rest = intro.source.partition("\n")
    rest = BADGE_LINE.sub("", rest).lstrip("\n")
    intro.source = f"{title}\n\n{badge(relative)}\n\n{rest}".rstrip() + "\n"
    first_code = next(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code")
    cell = notebook.cells[first_code]
    setup = setup_cell_source(edition_of(path))
    if SETUP_MARKER.match(cell.source):
        cell.source = setup
    else:
        notebook.cells.insert(first_code, nbformat.v4.new_code_cell(setup))
    if nbformat.writes(notebook) == before:
        return False
    nbformat.write(notebook, path)
    return True


def lesson_table(edition: str = "en") -> str:
    """A README's lesson table: number, title, stated run time and badge of each lesson."""
    header = edition_text(edition, "notebook", "| # | lesson | CPU run time | |")
    run_time = edition_text(edition, "notebook", "about {seconds} s")
    rows = [header, "|---|---|---|---|"]
    for path in lesson_paths(edition):
        relative = path.relative_to(ROOT).as_posix()
        number, name = lesson_heading(read(path))
        rows.append(f"| {number} | [{name}]({relative}) | "
                    f"{run_time.format(seconds=stated_run_time(path))} | {badge(relative)} |")
    return "\n".join(rows)


LESSON_BLOCK = re.compile(r"(<!-- lessons:.*?-->\n).*?(<!-- /lessons -->)", re.S)


def sync_readme(edition: str) -> bool:
    readme = READMES[edition]
    text = readme.read_text()
    table = lesson_table(edition)
    updated = LESSON_BLOCK.sub(lambda m: f"{m.group(1)}{table}\n{m.group(2)}", text)
    readme.write_text(updated)
    return updated != text


def main() -> int:
    for path in all_lesson_paths():
        if sync_notebook(path):
            print(f"updated {path.relative_to(ROOT)}")
    for edition, readme in READMES.items():
        if readme.exists() and sync_readme(edition):
            print(f"updated {readme.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
