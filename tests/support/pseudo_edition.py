"""A pseudo-edition ``en-XA``: every message and every line of prose bracketed and accented
(``⟦Rúñ tímé⟧``), so that a third edition can be added to a copy of the package or of the
lessons and shown to need no code."""

from __future__ import annotations

import copy
import io
import json
import string
import tokenize
from functools import cache
from pathlib import Path

import nbformat

from tools import catalogue
from tools.sync_colab import SETUP_MARKER

EDITION = "en-XA"
_ACCENTS = str.maketrans("aeiouAEIOUcnyCNY", "áéíóúÁÉÍÓÚçñýÇÑÝ")


def pseudo(message: str) -> str:
    """``message`` bracketed and accented, its placeholders kept."""
    parts = []
    try:
        pieces = list(string.Formatter().parse(message))
    except ValueError:
        pieces = None
    if pieces is None or all(field is None for _literal, field, _spec, _conv in pieces):
        return f"⟦{message.translate(_ACCENTS)}⟧"
    for literal, field, spec, conversion in pieces:
        parts.append(literal.translate(_ACCENTS).replace("{", "{{").replace("}", "}}"))
        if field is not None:
            parts.append("{" + field + (f"!{conversion}" if conversion else "")
                         + (f":{spec}" if spec else "") + "}")
    return f"⟦{''.join(parts)}⟧"


@cache  # extracting every message takes seconds: once per test process
def _compiled_catalogue() -> bytes:
    template = catalogue.template()
    template.locale = "en_XA"
    for message in template:
        if message.id:
            message.string = pseudo(message.id)
    return catalogue.mo_bytes(template)


def add_to_locale(locale: Path) -> None:
    """Register the pseudo-edition as any edition is: ``locale/en-XA`` with an
    ``edition.json`` and the compiled catalogue of every message the package and tools mark."""
    folder = locale / EDITION
    folder.mkdir()
    (folder / "edition.json").write_text(json.dumps({"name": "pseudo"}))
    (folder / f"{catalogue.DOMAIN}.mo").write_bytes(_compiled_catalogue())


def _pseudo_words(source: str) -> str:
    """Code with its comments and plain string literals accented (f-strings, whose braces
    hold code, are left as they are), the code itself unchanged."""
    lines = source.splitlines(keepends=True)
    edits = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = token.string
        if token.type == tokenize.COMMENT:
            edits.append((token.start, token.end, text.translate(_ACCENTS)))
        elif token.type == tokenize.STRING and "f" not in text[:text.index(text[-1])].lower():
            quote = text.index(text[-1])  # the prefix (r, b) stays as it is
            edits.append((token.start, token.end, text[:quote] + text[quote:].translate(_ACCENTS)))
    for (row, column), (end_row, end_column), text in reversed(edits):
        if row != end_row:
            continue  # a triple-quoted string over several lines: left in English
        line = lines[row - 1]
        lines[row - 1] = line[:column] + text + line[end_column:]
    return "".join(lines)


def pseudo_twin(english: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A twin of an English lesson in the pseudo-edition: each line of prose, each comment and
    string literal of its code pseudo-translated; code, tags and outputs as they are."""
    twin = copy.deepcopy(english)
    for cell in twin.cells:
        if cell.cell_type == "markdown":
            cell.source = "\n".join(pseudo(line) if line.strip() else line
                                    for line in cell.source.split("\n"))
        elif cell.cell_type == "code" and not SETUP_MARKER.match(cell.source):
            cell.source = _pseudo_words(cell.source)
    return twin
