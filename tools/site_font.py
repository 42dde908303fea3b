"""The web font of an edition whose script the reader's machine may lack (Chinese).

Furo uses the system's fonts. A machine without a CJK font (CI's is one, so are many
minimal Linux installs) draws every Chinese character of the site as a box. So the Chinese
pages carry their own font: the edition's figure font (``figure_font`` in its edition.json,
Noto Sans SC from the pip package zhplot, SIL Open Font License), cut down with fontTools
to the characters the built pages contain, as WOFF2 in the site's own _static/fonts/.
The style sheet puts it first in Furo's font stacks with the CJK blocks as its
``unicode-range``, so Latin text keeps the system fonts, a browser fetches the font only for
a page with CJK text, and never asks another host for it. (Placed after the Latin fonts,
Chromium drew some runs with their .notdef boxes: a full-width comma after a Latin letter,
whole bold or sidebar runs.)

    stylesheet(edition) -> str | None   # written into the Sphinx source before the build
    write_font(edition, output) -> Path  # after the build, subset to the pages' characters
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fontTools import subset

from course_utils.language import edition, edition_font_path

FAMILY = "Course CJK"
STYLESHEET = "edition-font.css"
FONT_FILE = "fonts/edition-font.woff2"
# CJK punctuation and symbols, kana, the unified ideographs and their extension A,
# compatibility ideographs, full-width forms.
UNICODE_RANGE = "U+2E80-2FDF, U+3000-303F, U+3040-30FF, U+3400-4DBF, U+4E00-9FFF, " \
                "U+F900-FAFF, U+FE30-FE4F, U+FF00-FFEF"
_RANGES = [tuple(int(end, 16) for end in part.strip()[2:].split("-"))
           for part in UNICODE_RANGE.split(",")]
# Furo's own stacks (its --font-stack and --font-stack--monospace) behind the font.
_SANS = ('"{family}", -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, '
         'sans-serif, "Apple Color Emoji", "Segoe UI Emoji"')
_MONO = ('"{family}", "SFMono-Regular", Menlo, Consolas, Monaco, "Liberation Mono", '
         '"Lucida Console", monospace')
# The pages' text is in their HTML; the search box's words are in Sphinx's translations.
_TEXT_FILES = ("*.html", "*.js")


def has_web_font(edition_name: str) -> bool:
    """Whether ``edition_name``'s pages carry a font (those whose figures need one)."""
    return "figure_font" in edition(edition_name)


def stylesheet(edition_name: str) -> str | None:
    """The CSS that declares and uses the edition's font, or None for an edition without."""
    if not has_web_font(edition_name):
        return None
    return (
        "/* The edition's own font for CJK text (tools/site_font.py); Latin keeps the "
        "system's. */\n"
        "@font-face {\n"
        f'  font-family: "{FAMILY}";\n'
        f'  src: url("{FONT_FILE}") format("woff2");\n'
        f"  unicode-range: {UNICODE_RANGE};\n"
        "  font-display: swap;\n"
        "}\n"
        "body {\n"
        f"  --font-stack: {_SANS.format(family=FAMILY)};\n"
        f"  --font-stack--monospace: {_MONO.format(family=FAMILY)};\n"
        "}\n"
    )


def in_unicode_range(character: str) -> bool:
    return any(low <= ord(character) <= high for low, high in _RANGES)


def characters_shown(output: Path) -> set[str]:
    """Every character of the font's range in the built pages under ``output``."""
    found: set[str] = set()
    for pattern in _TEXT_FILES:
        for path in output.rglob(pattern):
            found.update(c for c in path.read_text(encoding="utf-8", errors="ignore")
                         if in_unicode_range(c))
    return found


def write_font(edition_name: str, output: Path) -> Path:
    """Subset the edition's font to the characters of its built site ``output``; write it
    (and the font's licence) into output/_static/; return the font's path."""
    options = subset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]  # keep vertical forms and punctuation spacing
    options.name_IDs = ["*"]  # the licence and the font's names travel with it
    font = subset.load_font(str(edition_font_path(edition_name)), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text="".join(sorted(characters_shown(output))))
    subsetter.subset(font)
    target = output / "_static" / FONT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    subset.save_font(font, str(target), options)
    licence = edition_font_path(edition_name).parent / "OFL.txt"
    if licence.exists():
        shutil.copy2(licence, target.parent / "OFL.txt")
    return target
