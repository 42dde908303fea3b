"""The catalogue of lessons: the editions and their folders, the lessons' stated run time and
heading, which cells are excluded.

The editions are course_utils.language's (``available_languages()``): English, the source,
in ``notebooks/``, every other edition in ``notebooks/<edition>/`` with a README
``README.<edition>.md``. The words the tools write into or read from a notebook (the header's
run-time line, the lesson heading, the setup cell's comments, the README's lesson table) are
messages of the package's catalogue in the context "notebook" (``edition_text``), so a new
edition costs a catalogue and a folder, not code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

from course_utils.language import ENGLISH, available_languages, translate

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
# Cell tags that exclude a cell's output from nbval's comparison.
EXCLUDING_TAGS = {"nbval-ignore-output", "nbval-skip"}


def edition_text(language: str, context: str, message: str) -> str:
    """``message`` (English, a literal the catalogue tool extracts) in ``language``."""
    return translate(message, language, context=context)


def notebook_folder(language: str) -> Path:
    """Where an edition's lessons live: ``notebooks/`` for English, else a subfolder."""
    return NOTEBOOK_DIR if language == ENGLISH else NOTEBOOK_DIR / language


def readme_path(language: str) -> Path:
    """An edition's README: README.md for English, README.<edition>.md for the others."""
    return ROOT / ("README.md" if language == ENGLISH else f"README.{language}.md")


# The course's editions and their folders: English lessons, each twin of the same name. The
# tools read it when they run (never a copy taken at import), so an edition added here (a
# test's pseudo-edition) reaches every one of them.
EDITIONS = {language: notebook_folder(language) for language in available_languages()}


def translated_editions() -> tuple[str, ...]:
    """Every edition but English, the source, in ``EDITIONS``' order."""
    return tuple(language for language in EDITIONS if language != ENGLISH)


def _pattern(template: str, **groups: str) -> str:
    """A regex for a message's text with each ``{name}`` placeholder matching ``groups[name]``."""
    parts = re.split(r"\{(\w+)\}", template)
    return "".join(re.escape(part) if i % 2 == 0 else f"({groups[part]})"
                   for i, part in enumerate(parts))


def run_time_line(language: str, seconds: int | str) -> str:
    """The header's run-time line, e.g. "**Run time:** about 40 s on 2 CPU cores."."""
    return edition_text(language, "notebook",
                        "**Run time:** about {seconds} s on 2 CPU cores.").format(seconds=seconds)


def run_time_pattern(language: str) -> re.Pattern:
    return re.compile(_pattern(run_time_line(language, "{seconds}"), seconds=r"\d+"))


def reading_time_line(language: str, minutes: int | str) -> str:
    """The header's reading-time line, e.g. "**Reading time:** about 40 minutes."."""
    return edition_text(language, "notebook",
                        "**Reading time:** about {minutes} minutes.").format(minutes=minutes)


def reading_time_pattern(language: str) -> re.Pattern:
    return re.compile(_pattern(reading_time_line(language, "{minutes}"), minutes=r"\d+"))


def heading_number_pattern(language: str) -> re.Pattern:
    """The lesson heading's number part ("Lesson {number}") as a regex, in ``language``."""
    lesson = edition_text(language, "notebook", "Lesson {number}")
    return re.compile(_pattern(lesson, number=r"\d+"))


def lesson_paths(edition: str = ENGLISH) -> list[Path]:
    """One edition's lessons, in learning order."""
    if edition not in EDITIONS:
        raise ValueError(f"edition should be one of {tuple(EDITIONS)}, got {edition!r}")
    return sorted(EDITIONS[edition].glob("*.ipynb"))


def all_lesson_paths() -> list[Path]:
    """Every lesson of every edition: the English ones, then each other edition's."""
    return [path for edition in EDITIONS for path in lesson_paths(edition)]


def edition_of(path: Path) -> str:
    """The edition a lesson belongs to, from its folder."""
    folder = Path(path).resolve().parent
    return next(name for name, where in EDITIONS.items() if where == folder)


def twin_path(path: Path, edition: str) -> Path:
    """The lesson of the same name in another edition."""
    return EDITIONS[edition] / Path(path).name


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def stated_run_time(path: Path) -> int | None:
    """The run time in seconds that a lesson's first cell states (in its edition's words),
    or None."""
    match = run_time_pattern(edition_of(path)).search(read(path).cells[0].source)
    return int(match.group(1)) if match else None


def stated_reading_time(path: Path) -> int | None:
    """The reading time in minutes that a lesson's first cell states, or None."""
    match = reading_time_pattern(edition_of(path)).search(read(path).cells[0].source)
    return int(match.group(1)) if match else None


# A learner reads technical prose at about 150 words a minute and code, which they also run and
# check against its output, at about 20 lines a minute.
PROSE_WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 150, 20


def estimated_reading_time(path: Path) -> int:
    """Minutes to read a lesson, from its English edition's prose words and code lines,
    rounded to 5: both editions state the same time."""
    notebook = read(twin_path(path, ENGLISH))
    words = sum(len(cell.source.split()) for cell in notebook.cells
                if cell.cell_type == "markdown")
    lines = sum(len(cell.source.splitlines()) for cell in notebook.cells
                if cell.cell_type == "code")
    minutes = words / PROSE_WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE
    return max(5, 5 * round(minutes / 5))


def excluded_cells(notebook: nbformat.NotebookNode) -> int:
    """How many code cells nbval will not compare."""
    return sum(
        1 for cell in notebook.cells
        if cell.cell_type == "code" and EXCLUDING_TAGS & set(cell.metadata.get("tags", []))
    )


# What a notebook's outputs need only a kernel for; anything else is rendered by a front end.
PLAIN_OUTPUTS = {"text/plain", "image/png"}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_HTML_ROOT = re.compile(r'\s*<\w+[^>]*?\bclass="([^"]*)"')
_EXPLORER_DATA = re.compile(r'class="attn-explorer-data">(.*?)</script>', re.DOTALL)


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def _html_view(html: str) -> str:
    """An HTML output's kind: its root element's classes, and for the attention explorer
    what changes what its script draws (its mode, its toggles, one sentence or several)."""
    root = _HTML_ROOT.match(html)
    if not root:
        return "text/html"
    data = _EXPLORER_DATA.search(html)
    if not data:
        return root.group(1)
    payload = json.loads(data.group(1))
    settings = [payload["mode"]]
    if "toggles" in payload:
        settings.append(f"toggles: {', '.join(payload['toggles']) or 'none'}")
    settings.append("one sentence" if len(payload["sentences"]) == 1 else "several sentences")
    return f"{root.group(1)} ({', '.join(settings)})"


def front_end_views(notebook: nbformat.NotebookNode | dict) -> set[str]:
    """The kinds of view a front end must render in a notebook's outputs (HTML with a script,
    widgets): what the JupyterLab pass of the suite exists to check. ``notebook`` as stored or
    as JupyterLab's model gives it (``toJSON()``)."""
    views = set()
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else ():
            data = output.get("data", {})
            for kind in set(data) - PLAIN_OUTPUTS:
                if kind == "text/html":
                    views.add(_html_view(_text(data[kind])))
                elif kind == WIDGET_VIEW:  # its class, as its text form names it: VBox(...)
                    views.add(f"widget {_text(data['text/plain']).partition('(')[0]}")
                else:
                    views.add(kind)
    return views


def lesson_heading(notebook: nbformat.NotebookNode) -> tuple[str, str]:
    """("09", "The attention explorer: ...") from the first cell's "# Lesson 09 · ..."
    (in any edition's words: "Lesson {number}" of the catalogue)."""
    heading = notebook.cells[0].source.partition("\n")[0].removeprefix("# ")
    number, _, name = heading.partition(" · ")
    for language in EDITIONS:
        found = heading_number_pattern(language).fullmatch(number.strip())
        if found:
            return found.group(1), name or heading
    digits = re.search(r"\d+", number)
    return (digits.group() if digits else number), name or heading
