"""The message catalogues: every text course_utils shows, translated per edition.

The package writes its learner-facing text in English and marks it (``_()``, ``N_()``,
``pgettext()``, see course_utils/language.py); each other edition has a gettext catalogue
``course_utils/locale/<edition>/course_utils.po`` and its compiled ``.mo``.

    python -m tools.catalogue           # extract the messages, update every .po, compile .mo
    python -m tools.catalogue --check   # list what is stale or untranslated, exit 1 if any

Updating keeps every translation whose English is unchanged, adds new messages with an
empty translation (to be filled in: ``--check`` lists them) and drops messages the code no
longer has. Entries are grouped by the module that uses them and carry no line numbers,
so a change to one module touches only that module's entries.
"""

from __future__ import annotations

import ast
import datetime
import inspect
import io
import json
import string
import sys
import textwrap
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po, write_po

from course_utils import __version__
from course_utils.listings import LISTING, listing_texts

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_utils"
LOCALE_DIR = PACKAGE / "locale"
DOMAIN = "course_utils"
TOOLS = ROOT / "tools"
# tools/ holds the words the tools write into notebooks and READMEs (tools/lessons.py's
# edition_text(language, context, message)): the same catalogue carries them.
KEYWORDS = {"_": None, "N_": None, "pgettext": ((1, "c"), 2), "edition_text": ((2, "c"), 3),
            "probe_name": None}
# Modules whose functions and classes a lesson prints (course_utils.listings.source_listing):
# the docstrings and comments of their public ones are messages too, as are those of every
# exercise's reference solution.
LISTED_MODULES = ("experiments/l08_bug_gallery.py", "exercises/l08.py")
PROJECT = "Self-attention, hands-on"
CREATED = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
HEADER = """\
# The {name} edition's words for course_utils (see tools/catalogue.py).
# Each msgid is the English text the code writes; msgstr is this edition's text. Keep the
# placeholders ({{name}}, {{0}}) of the msgid; python3 tools/course.py catalogue updates the
# file and compiles the .mo beside it."""


def editions() -> list[str]:
    """Every edition with a catalogue folder (English, the source, has none)."""
    return sorted(path.parent.name for path in LOCALE_DIR.glob("*/edition.json"))


def template() -> Catalog:
    """Every message the package and the tools mark, with the modules that use it."""
    # A fixed date, so that regenerating an unchanged catalogue changes nothing.
    catalog = Catalog(project=PROJECT, domain=DOMAIN, creation_date=CREATED)
    for folder in (PACKAGE, TOOLS):
        for filename, _lineno, message, comments, context in extract_from_dir(
                folder, method_map=[("**.py", "python")], keywords=KEYWORDS,
                comment_tags=("Translators:",), strip_comment_tags=True):
            catalog.add(message, locations=[(f"{folder.name}/{filename}", None)],
                        auto_comments=comments, context=context)
    for location, texts in listings():
        for text in texts:
            catalog.add(text, locations=[(location, None)], context=LISTING,
                        auto_comments=["A docstring or comment of code the learner reads."])
    return catalog


def listings() -> list[tuple[str, list[str]]]:
    """(module, the docstrings and comments of code it holds that the learner reads): the
    listed modules' public functions and classes, and every exercise's reference solution
    (``ex.solution()`` prints it)."""
    from course_utils.exercises.framework import all_exercises  # imports every lesson's

    found = [(f"{PACKAGE.name}/{module}", listed_texts(PACKAGE / module))
             for module in LISTED_MODULES]
    for exercise in all_exercises().values():
        module = exercise.reference.__module__.replace(".", "/") + ".py"
        found.append((module, listing_texts(textwrap.dedent(inspect.getsource(
            exercise.reference)))))
    return found


def listed_texts(path: Path) -> list[str]:
    """The docstrings and comments of the public functions and classes of a listed module."""
    source = path.read_text(encoding="utf-8")
    lines = source.split("\n")
    return [text for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
            and not node.decorator_list  # a @dataclass holds data; no lesson prints it
            for text in listing_texts(textwrap.dedent("\n".join(
                lines[node.lineno - 1:node.end_lineno])))]


def po_path(edition: str) -> Path:
    return LOCALE_DIR / edition / f"{DOMAIN}.po"


def mo_path(edition: str) -> Path:
    return LOCALE_DIR / edition / f"{DOMAIN}.mo"


def read_catalogue(edition: str) -> Catalog:
    with po_path(edition).open("rb") as file:
        return read_po(file, locale=edition.replace("-", "_"), domain=DOMAIN)


def po_text(catalog: Catalog) -> bytes:
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=100, sort_by_file=True, include_lineno=False,
             omit_header=False, ignore_obsolete=True)
    return buffer.getvalue()


def mo_bytes(catalog: Catalog) -> bytes:
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    return buffer.getvalue()


def updated(edition: str) -> Catalog:
    """The edition's catalogue brought up to the code's messages."""
    catalog = read_catalogue(edition)
    catalog.update(template(), no_fuzzy_matching=True, update_header_comment=False)
    catalog.obsolete.clear()
    name = json.loads((LOCALE_DIR / edition / "edition.json").read_text())["name"]
    catalog.header_comment = HEADER.format(name=name)
    catalog.fuzzy = False
    catalog.revision_date = catalog.creation_date = CREATED
    catalog.last_translator = catalog.language_team = f"{PROJECT} <{name}>"
    catalog.msgid_bugs_address = ""
    catalog.version = __version__
    return catalog


def write(edition: str) -> None:
    catalog = updated(edition)
    po_path(edition).write_bytes(po_text(catalog))
    mo_path(edition).write_bytes(mo_bytes(read_catalogue(edition)))


def fields(message: str) -> set[str]:
    """The placeholders of a message (``{name}``, ``{0}``), without format specs."""
    try:
        return {name.split(".")[0].split("[")[0] for _, name, _, _ in
                string.Formatter().parse(message) if name is not None}
    except ValueError:  # a lone brace: not a format string, so no placeholders
        return set()


def problems(edition: str) -> list[str]:
    """Everything wrong with one edition's catalogue, as readable lines."""
    where = po_path(edition).relative_to(ROOT)
    found = []
    if po_path(edition).read_bytes() != po_text(updated(edition)):
        found.append(f"{where}: not up to date with the code: python3 tools/course.py catalogue")
    catalog = read_catalogue(edition)
    for message in catalog:
        if not message.id:
            continue  # the header
        shown = f"{where}: {message.id!r}"
        if not message.string:
            found.append(f"{shown} has no translation")
        elif message.fuzzy:
            found.append(f"{shown} is marked fuzzy: check the translation and unmark it")
        elif fields(message.string) != fields(message.id):
            found.append(f"{shown}: the translation's placeholders "
                         f"{sorted(fields(message.string))} differ from the English "
                         f"{sorted(fields(message.id))}")
    if not mo_path(edition).exists():
        found.append(f"{mo_path(edition).relative_to(ROOT)} is missing: run the catalogue tool")
    else:
        with mo_path(edition).open("rb") as file:
            compiled = read_mo(file)
        if {(m.id, m.context): m.string for m in compiled if m.id} != {
                (m.id, m.context): m.string for m in catalog
                if m.id and m.string and not m.fuzzy}:
            found.append(f"{mo_path(edition).relative_to(ROOT)} was not compiled from its .po: "
                         "python3 tools/course.py catalogue")
    return found


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = [problem for edition in editions() for problem in problems(edition)]
        print("\n".join(found) or "every catalogue is up to date and complete")
        return 1 if found else 0
    for edition in editions():
        write(edition)
        left = [p for p in problems(edition) if "no translation" in p or "fuzzy" in p]
        print(f"{po_path(edition).relative_to(ROOT)}: {len(left)} messages to translate")
        for problem in left:
            print("  " + problem)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
