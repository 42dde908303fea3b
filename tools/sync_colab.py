"""Write the Colab badge and setup cell from tools/colab.py into every lesson and the README.

    python3 tools/course.py sync

A notebook's first markdown cell gets the badge right under its title; its first code cell
becomes the setup cell (inserted if missing, in which case re-execute the notebook).
"""

from __future__ import annotations

import re
import sys

import nbformat

from tools.colab import badge, setup_cell_source
from tools.lessons import ROOT, lesson_paths, read, stated_run_time

BADGE_LINE = re.compile(r"^\[!\[Open In Colab\].*$", re.M)
SETUP_MARKER = "# Setup: on Colab"


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
    if cell.source.startswith(SETUP_MARKER):
        cell.source = setup_cell_source()
    else:
        notebook.cells.insert(first_code, nbformat.v4.new_code_cell(setup_cell_source()))
    if nbformat.writes(notebook) == before:
        return False
    nbformat.write(notebook, path)
    return True


def lesson_table() -> str:
    """The README's lesson table: number, title, stated run time and badge of each lesson."""
    rows = ["| # | lesson | CPU run time | |", "|---|---|---|---|"]
    for path in lesson_paths():
        relative = path.relative_to(ROOT).as_posix()
        title = read(path).cells[0].source.partition("\n")[0].removeprefix("# ")
        number, _, name = title.partition(" · ")
        rows.append(f"| {number.split()[-1]} | [{name}]({relative}) | "
                    f"about {stated_run_time(path)} s | {badge(relative)} |")
    return "\n".join(rows)


LESSON_BLOCK = re.compile(r"(<!-- lessons:.*?-->\n).*?(<!-- /lessons -->)", re.S)


def sync_readme() -> bool:
    readme = ROOT / "README.md"
    text = readme.read_text()
    updated = LESSON_BLOCK.sub(lambda m: f"{m.group(1)}{lesson_table()}\n{m.group(2)}", text)
    readme.write_text(updated)
    return updated != text


def main() -> int:
    for path in lesson_paths():
        if sync_notebook(path):
            print(f"updated {path.relative_to(ROOT)}")
    if sync_readme():
        print("updated README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
