"""The course's editions kept in parity: English and every translated edition (today 简体中文).

An English lesson ``notebooks/NN_slug.ipynb`` has a twin ``notebooks/<edition>/NN_slug.ipynb``
in every other edition (``tools.lessons.translated_editions()``); nothing here names one, so a
third edition costs a catalogue and a folder, no code (tests/test_editions.py proves it with a
pseudo-edition). The twins must have the same cells and the same code:
only prose (markdown), string literals (labels, titles, messages) and comments may differ.
Where a code cell's string literals are the same in both editions, its stored outputs
must be the same too, unless course_utils printed them in the course language (an
exercise's verdict); where they differ (a translated label or message), the outputs must
still hold the same numbers: no number may depend on the language. Cells whose outputs
nbval does not compare (timings) are exempt, and so are the cells both twins tag
``edition-specific`` (``EDITION_SPECIFIC``): a lesson whose example is about language (a model
trained on Chinese text in the Chinese edition) declares there the cells whose numbers
legitimately differ; their code must still match. The twins also state the same run time, each
edition's prose uses its column of the glossary's terms (if it has one), Chinese prose keeps
each paragraph on one line, and no stored output warns of a glyph missing from the font.

    python -m tools.editions          # list every difference, exit 1 if there is one
    python -m tools.editions --join-lines   # first join the Chinese prose's soft-wrapped lines
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

import nbformat

from course_utils.language import ENGLISH, edition
from tools.lessons import (
    EDITIONS,
    EXCLUDING_TAGS,
    ROOT,
    lesson_paths,
    read,
    stated_run_time,
    translated_editions,
)

_STRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+ splits f-strings
_STRING_END = getattr(tokenize, "FSTRING_END", None)
# The cell tag that declares a cell's outputs to differ between the editions on purpose.
EDITION_SPECIFIC = "edition-specific"
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}


def english_lessons() -> list[Path]:
    return lesson_paths(ENGLISH)


def twin_lessons(language: str) -> list[Path]:
    """One translated edition's lessons (``notebooks/<language>/``)."""
    return lesson_paths(language)


def code_shape(source: str) -> tuple[list[str], list[str]]:
    """Split code into (tokens that must match, string literals that may differ).

    Comments and layout are dropped; each string literal (f-strings included) becomes
    one placeholder token, and its text goes to the second list.
    """
    tokens, strings, depth, current = [], [], 0, []
    readline = io.StringIO(source.replace("\r\n", "\n")).readline
    for token in tokenize.generate_tokens(readline):
        if _STRING_START is not None and token.type == _STRING_START:
            depth += 1
            current.append(token.string)
            continue
        if depth:
            current.append(token.string)
            if token.type == _STRING_END:
                depth -= 1
                if not depth:
                    tokens.append("<str>")
                    strings.append("".join(current))
                    current = []
            continue
        if token.type == tokenize.STRING:
            tokens.append("<str>")
            strings.append(token.string)
        elif token.type not in _SKIPPED:
            tokens.append(token.string)
    return tokens, strings


def _outputs(cell) -> list[str]:
    """A code cell's stored text outputs (streams and text/plain), images left out."""
    texts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            texts.append(f"{output.name}: {output.text}")
        elif output.output_type in ("execute_result", "display_data"):
            texts.append(output.get("data", {}).get("text/plain", ""))
        elif output.output_type == "error":
            texts.append(f"error: {output.ename}")
    return texts


# matplotlib's warnings when a font lacks a character (text, and mathtext's own fonts):
# the figure shows empty boxes.
MISSING_GLYPH = re.compile(r"Glyph \d+ .*missing from (current )?font"
                           r"|does not have a glyph for .*substituting")


def missing_glyphs(notebook: nbformat.NotebookNode) -> list[str]:
    """Cells whose stored outputs warn of a glyph missing from the font, as readable lines."""
    return [f"cell {number}: a figure lacks glyphs ({MISSING_GLYPH.search(text).group()})"
            for number, cell in enumerate(notebook.cells, 1) if cell.cell_type == "code"
            for text in _outputs(cell) if MISSING_GLYPH.search(text)]


# A line break inside a paragraph renders as a space; between two Chinese characters that
# space is wrong (Chinese has none), so the Chinese prose keeps each paragraph on one line.
# Emphasis marks and quotes next to the break do not change that.
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_MARKS = "*_“”‘’"
SOFT_BREAK = re.compile(rf"([{_CJK}][{_MARKS}]*)\n[ \t]*([{_MARKS}]*[{_CJK}])")


def join_soft_breaks(source: str) -> str:
    """``source`` with the line breaks between Chinese characters removed (code kept)."""
    parts = re.split(r"(```.*?```)", source, flags=re.S)
    return "".join(part if part.startswith("```") else SOFT_BREAK.sub(r"\1\2", part)
                   for part in parts)


def soft_breaks(notebook: nbformat.NotebookNode) -> list[str]:
    """Markdown cells with a line break between two Chinese characters (outside code)."""
    problems = []
    for number, cell in enumerate(notebook.cells, 1):
        if cell.cell_type != "markdown":
            continue
        found = SOFT_BREAK.search(re.sub(r"```.*?```", "", cell.source, flags=re.S))
        if found:
            around = found.string[max(0, found.start() - 12):found.end() + 12]
            problems.append(f"cell {number}: a line break between Chinese characters shows "
                            f"as a space: {around!r}")
    return problems


def _numbers(cell) -> list[str]:
    """The numbers a cell's outputs print, in sorted order (translation may reorder them)."""
    return sorted(_NUMBER.findall("\n".join(_outputs(cell))))


def _own_language(ours, theirs) -> bool:
    """The twin's outputs hold characters the English ones do not: text course_utils printed
    in the twin's language (an exercise's verdict, the explorer's caption)."""
    return bool(set(_NON_ASCII.findall("".join(_outputs(theirs))))
                - set(_NON_ASCII.findall("".join(_outputs(ours)))))


def compare(english: nbformat.NotebookNode, twin: nbformat.NotebookNode) -> list[str]:
    """Every way the twin notebook departs from the English one, as readable lines."""
    kinds = [cell.cell_type for cell in english.cells]
    other_kinds = [cell.cell_type for cell in twin.cells]
    if kinds != other_kinds:
        return [f"cell sequence differs: English {len(kinds)} cells {kinds}, the twin "
                f"{len(other_kinds)} cells {other_kinds}"]
    problems = []
    for number, (ours, theirs) in enumerate(zip(english.cells, twin.cells, strict=True), 1):
        if ours.cell_type != "code":
            continue
        try:
            our_tokens, our_strings = code_shape(ours.source)
            their_tokens, their_strings = code_shape(theirs.source)
        except (tokenize.TokenError, IndentationError, SyntaxError) as error:
            problems.append(f"cell {number}: cannot be read as Python ({error})")
            continue
        if our_tokens != their_tokens:
            at = next((i for i, pair in enumerate(zip(our_tokens, their_tokens, strict=False))
                       if pair[0] != pair[1]), min(len(our_tokens), len(their_tokens)))
            problems.append(
                f"cell {number}: code differs beyond strings and comments, near "
                f"{' '.join(our_tokens[max(0, at - 3):at + 3])!r} (English) vs "
                f"{' '.join(their_tokens[max(0, at - 3):at + 3])!r} (the twin)")
        elif EXCLUDING_TAGS & set(ours.metadata.get("tags", [])):
            pass  # outputs nbval does not compare (timings, CPU-dependent): numbers may differ
        elif EDITION_SPECIFIC in ours.metadata.get("tags", []):
            pass  # declared: e.g. the Chinese edition trains on Chinese text (tags must match)
        elif (our_strings == their_strings and _outputs(ours) != _outputs(theirs)
              and not _own_language(ours, theirs)):
            # Text course_utils makes (an exercise's verdict, the explorer's caption) follows
            # the language, so the same code may print the twin's words: then only numbers
            # must match.
            problems.append(f"cell {number}: same code, different stored outputs")
        elif _numbers(ours) != _numbers(theirs):
            problems.append(f"cell {number}: the stored outputs hold different numbers")
        if ours.metadata.get("tags", []) != theirs.metadata.get("tags", []):
            problems.append(f"cell {number}: tags differ {ours.metadata.get('tags', [])} vs "
                            f"{theirs.metadata.get('tags', [])}")
    return problems


GLOSSARY = ROOT / "GLOSSARY.md"
_GLOSSARY_ROW = re.compile(r"^\| ([^|]+?) \| ([^|]+?) \| (\d+) \|$", re.M)


def glossary(language: str) -> list[tuple[tuple[str, ...], str]]:
    """The glossary's rows for one edition: (English variants, that edition's term). Its
    column is headed by the edition's name (``edition.json``); an edition without a column
    has no glossary yet."""
    text = GLOSSARY.read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("| English |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    name = edition(language).get("name")
    if name not in columns:
        return []
    at = columns.index(name)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines()
            if line.startswith("| ") and not line.startswith(("| English |", "|---"))]
    return [(tuple(v.strip() for v in row[0].split(" / ")), row[at])
            for row in rows if len(row) == len(columns)]


_LINK_TARGET = re.compile(r"\]\([^)]*\)|https?://\S+")


def _prose(notebook: nbformat.NotebookNode) -> str:
    """The markdown cells' text, without link targets (a URL's words are not prose)."""
    return _LINK_TARGET.sub("]", "\n".join(
        cell.source for cell in notebook.cells if cell.cell_type == "markdown"))


def glossary_problems(english: nbformat.NotebookNode, twin: nbformat.NotebookNode,
                      terms: list[tuple[tuple[str, ...], str]]) -> list[str]:
    """Glossary terms (``glossary(edition)``) the English prose uses whose translation the
    twin's prose lacks."""
    english_prose, twin_prose = _prose(english).lower(), _prose(twin)
    problems = []
    for variants, term in terms:
        used = any(re.search(rf"\b{re.escape(v.lower())}\b", english_prose) for v in variants)
        if used and term not in twin_prose:
            problems.append(f"glossary: the English prose says {variants[0]!r}, the twin's "
                            f"prose never says {term!r}")
    return problems


def parity_problems(languages: tuple[str, ...] | None = None) -> list[str]:
    """Differences between English and each edition of ``languages`` (default: every
    translated edition), missing twins too."""
    english_dir = EDITIONS[ENGLISH]
    problems = []
    english = {p.name for p in english_lessons()}
    for language in translated_editions() if languages is None else languages:
        folder = EDITIONS[language]
        twins = {p.name for p in twin_lessons(language)}
        problems += [f"{name}: no {language} edition (notebooks/{language}/{name})"
                     for name in sorted(english - twins)]
        problems += [f"{language}/{name}: no English edition" for name in sorted(twins - english)]
        terms = glossary(language)
        for name in sorted(english & twins):
            ours, theirs = read(english_dir / name), read(folder / name)
            problems += [f"{language}/{name}: {problem}" for problem in
                         compare(ours, theirs) + glossary_problems(ours, theirs, terms)]
            if stated_run_time(english_dir / name) != stated_run_time(folder / name):
                problems.append(f"{language}/{name}: the headers state different run times "
                                f"({stated_run_time(english_dir / name)} s vs "
                                f"{stated_run_time(folder / name)} s)")
        for path in twin_lessons(language):
            notebook = read(path)
            problems += [f"{language}/{path.name}: {problem}" for problem in
                         missing_glyphs(notebook) + soft_breaks(notebook)]
    return problems


def main(argv: list[str]) -> int:
    if argv == ["--join-lines"]:
        for path in (p for language in translated_editions() for p in twin_lessons(language)):
            notebook = read(path)
            for cell in notebook.cells:
                if cell.cell_type == "markdown":
                    cell.source = join_soft_breaks(cell.source)
            nbformat.write(notebook, path)
    problems = parity_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} differences between the editions")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
