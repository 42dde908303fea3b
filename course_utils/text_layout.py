"""Text laid out by display width, for any language: columns padded, lines wrapped.

A CJK character takes two columns of a monospaced font, so padding by ``len`` (as an
f-string's ``{name:>12}`` does) leaves Chinese columns short. ``pad`` pads by display width
and ``format_table`` lays rows out in columns padded so; ``fill`` wraps report lines.
Wrapping decides by the text's own characters: text without wide (CJK) characters is
wrapped at spaces like ``textwrap.fill``; text with them may break after
any wide character (Chinese has no spaces to break at), but never inside a run of Latin
letters or digits, so a number is never cut in two, and never before closing punctuation.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata

from course_utils.checks import require_instance, require_one_of, require_positive_int
from course_utils.language import _

_WIDE = r"\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"
# A space, one wide character, or a run of anything else (a word, a number, a formula).
_WRAP_TOKEN = re.compile(rf"\s+|[{_WIDE}]|[^\s{_WIDE}]+")
# Full-width comma, full stop, colon, semicolon, enumeration comma, closing bracket, !, ? and
# closing quote: CJK typography never starts a line with them.
_NO_LINE_START = set("\uff0c\u3002\uff1a\uff1b\u3001\uff09\uff01\uff1f\u201d")


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font: 2 per wide or full-width character.

    Used in lesson 03.
    """
    require_instance("text", text, str, _("a str"))
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``width`` columns (``align``: "<" left, ">" right, "^"
    centre), like ``format(text, f"{align}{width}")`` but counting wide characters twice.

    Used in lessons 01, 02, 03, 04, 05, 06, 07, 08, 09, 10, 12, 14, 15, 16, 17 and 19.
    """
    require_positive_int("width", width)
    require_one_of("align", align, ("<", ">", "^"))
    room = max(width - display_width(text), 0)
    left = {"<": 0, ">": room, "^": room // 2}[align]
    return " " * left + text + " " * (room - left)


def format_table(rows, align: str = ">", gap: int = 2) -> str:
    """Rows of cells (str) as lines of columns, each as wide as its widest cell in display
    width. ``align`` is one of "<", ">", "^" for every column, or one such character per
    column ("<>>" puts the first on the left, the others on the right).

    Used in lessons 10, 11 and 18.
    """
    rows = [list(row) for row in require_instance("rows", rows, (list, tuple), _("a list of rows"))]
    if not rows or any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(_(
            "rows should be a non-empty list of rows of as many cells, got row lengths {lengths}"
        ).format(lengths=[len(row) for row in rows]))
    for row in rows:
        for cell in row:
            require_instance(_("a cell of rows"), cell, str, _("a str"))
    columns = len(rows[0])
    aligns = align * columns if len(align) == 1 else align
    if len(aligns) != columns:
        raise ValueError(_(
            "align should be one character or {columns} (one per column), got {align!r}"
        ).format(columns=columns, align=align))
    for character in aligns:
        require_one_of("align", character, ("<", ">", "^"))
    widths = [max(1, *(display_width(cell) for cell in column))
              for column in zip(*rows, strict=True)]
    separator = " " * require_positive_int("gap", gap)
    return "\n".join(separator.join(pad(cell, width, side)
                                    for cell, width, side in zip(row, widths, aligns, strict=True))
                     .rstrip() for row in rows)


def fill(message: str, head: str, width: int = 100) -> str:
    """``message`` after ``head``, in lines of at most ``width`` columns, indented under it.

    ``textwrap.fill`` for text without wide characters; otherwise lines broken by display
    width, at any wide character (closing punctuation may overhang by one character).

    Used in lesson 08.
    """
    require_instance("message", message, str, _("a str"))
    require_instance("head", head, str, _("a str"))
    require_positive_int("width", width)
    indent = " " * display_width(head)
    if all(display_width(character) == 1 for character in message):
        return textwrap.fill(message, width=width, initial_indent=head, subsequent_indent=indent)
    lines, line, space = [], head, False
    for token in _WRAP_TOKEN.findall(message):
        if token.isspace():
            space = True
            continue
        piece = (" " if space else "") + token
        space = False
        if (display_width(line + piece) > width and line.strip() and token not in _NO_LINE_START
                and line != head):
            lines.append(line)
            line, piece = indent, token
        line += piece
    lines.append(line)
    return "\n".join(lines)
