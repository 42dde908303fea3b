"""Translations kept current: ``carry`` brings an English lesson's code to its twins, ``stale``
names every translated cell whose English changed since it was translated.

    python3 tools/course.py carry NN              # English code of lesson NN -> every twin
    python3 tools/course.py stale [NN ...]        # list stale translations, exit 1 if any
    python3 tools/course.py stale --accept NN [CELL ...]   # record: these cells are current
    python3 tools/course.py stale --accept-all    # record every translated cell (once, to start)

**Translation records.** A twin's cell whose source differs from its English cell is a
translated cell. It records in ``metadata["translation"]["source_sha256"]`` the SHA-256 of
the English words it translates: the whole source of a markdown cell; the string literals
and comments of a code cell, in order (``english_words``). A hash, not the English text:
the record stays one line in the notebook and no second copy of the prose can drift or be
edited by mistake; the English it was made from is found again in git's history when
``stale`` shows a diff. Hashing only a code cell's words means a structural change that
``carry`` applies (a line added, a call changed) leaves the translation current, while a
changed message or comment makes it stale.

**carry** pairs the cells by position (the twins have the same cells). For each code cell
whose code (tokens, strings and comments aside) differs from the English, it takes the
English code and puts back the twin's string literals and comments where the token
sequences align; a string or comment the English added is kept in English and the cell is
listed for translation, as is a cell whose English words changed since its record. Prose is
never touched: ``stale`` reports it.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import subprocess
import sys
import tokenize
from pathlib import Path

import nbformat

from course_utils.language import ENGLISH
from tools.editions import code_shape
from tools.lessons import (
    EDITIONS,
    ROOT,
    lesson_paths,
    read,
    translated_editions,
    twin_path,
)
from tools.sync_colab import SETUP_MARKER

RECORD = "translation"
_STRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+ splits f-strings
_STRING_END = getattr(tokenize, "FSTRING_END", None)
_LAYOUT = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER, tokenize.ENCODING}
WORD_KEYS = ("<str>", "<comment>")
# How far back in the English notebook's history stale looks for the translated text.
HISTORY_DEPTH = 60


def _lex(source: str) -> list[tuple[str, int, int]]:
    """(key, start, end) per token of code: ``<str>`` for a string literal (an f-string is
    one), ``<comment>`` for a comment, else the token itself; offsets into ``source``."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position):
        row, column = position
        return starts[row - 1] + column

    found, depth, begin = [], 0, 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if _STRING_START is not None and token.type == _STRING_START:
            if not depth:
                begin = offset(token.start)
            depth += 1
        elif depth:
            if token.type == _STRING_END:
                depth -= 1
                if not depth:
                    found.append(("<str>", begin, offset(token.end)))
        elif token.type == tokenize.STRING:
            found.append(("<str>", offset(token.start), offset(token.end)))
        elif token.type == tokenize.COMMENT:
            found.append(("<comment>", offset(token.start), offset(token.end)))
        elif token.type not in _LAYOUT:
            found.append((token.string, offset(token.start), offset(token.end)))
    return found


def english_words(cell) -> str:
    """What a translation of ``cell`` translates: a markdown cell's source; the string
    literals and comments of a code cell, one per line."""
    if cell.cell_type != "code":
        return cell.source
    try:
        return "\n".join(cell.source[start:end] for key, start, end in _lex(cell.source)
                         if key in WORD_KEYS)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return cell.source


def fingerprint(cell) -> str:
    return hashlib.sha256(english_words(cell).encode("utf-8")).hexdigest()


def recorded(cell) -> str | None:
    return cell.metadata.get(RECORD, {}).get("source_sha256")


def is_translated(english_cell, twin_cell) -> bool:
    """The twin's cell differs from the English one, and is not the setup cell (which
    ``sync`` writes from the catalogue in each edition)."""
    return (twin_cell.source != english_cell.source
            and not (english_cell.cell_type == "code"
                     and SETUP_MARKER.match(english_cell.source)))


def _paired(english: nbformat.NotebookNode, twin: nbformat.NotebookNode) -> bool:
    return [c.cell_type for c in english.cells] == [c.cell_type for c in twin.cells]


def stale_cells(english: nbformat.NotebookNode, twin: nbformat.NotebookNode
                ) -> list[tuple[int, str]]:
    """(cell number, why) for every translated cell of ``twin`` that is not current."""
    if not _paired(english, twin):
        return [(0, "the cell sequence differs from the English: add or remove the cells "
                    "in the twin first")]
    found = []
    for number, (ours, theirs) in enumerate(zip(english.cells, twin.cells, strict=True), 1):
        if not is_translated(ours, theirs):
            continue
        record = recorded(theirs)
        if record is None:
            found.append((number, "no translation record (translate it, then stale --accept)"))
        elif record != fingerprint(ours):
            found.append((number, "the English changed since it was translated"))
    return found


def accept(english: nbformat.NotebookNode, twin: nbformat.NotebookNode,
           numbers: list[int] | None = None) -> list[int]:
    """Record that the translated cells ``numbers`` (default: all) translate the current
    English; drop records from cells that are no longer translated. Returns the numbers."""
    if not _paired(english, twin):
        raise ValueError("the cell sequences differ: cannot pair cells")
    done = []
    for number, (ours, theirs) in enumerate(zip(english.cells, twin.cells, strict=True), 1):
        if not is_translated(ours, theirs):
            theirs.metadata.pop(RECORD, None)
        elif numbers is None or number in numbers:
            theirs.metadata[RECORD] = {"source_sha256": fingerprint(ours)}
            done.append(number)
    return done


def translated_from(english_path: Path, number: int, digest: str) -> str | None:
    """The English words a record was made from, found in the notebook's git history."""
    relative = Path(english_path).resolve().relative_to(ROOT).as_posix()
    log = subprocess.run(["git", "log", f"-n{HISTORY_DEPTH}", "--format=%H", "--", relative],
                         cwd=ROOT, capture_output=True, text=True)
    for commit in log.stdout.split():
        shown = subprocess.run(["git", "show", f"{commit}:{relative}"], cwd=ROOT,
                               capture_output=True, text=True)
        if shown.returncode:
            continue
        cells = nbformat.reads(shown.stdout, as_version=4).cells
        # The same position first, then anywhere (a cell may have moved).
        for cell in [*cells[number - 1:number], *cells]:
            if fingerprint(cell) == digest:
                return english_words(cell)
    return None


def stale_report(english_path: Path, twin: Path) -> list[str]:
    """Readable lines for one twin: each stale cell, its first English line, the diff."""
    english, translated = read(english_path), read(twin)
    lines = []
    for number, why in stale_cells(english, translated):
        where = f"{twin.relative_to(ROOT).as_posix()} cell {number}"
        if not number:
            lines.append(f"{where.rsplit(' cell', 1)[0]}: {why}")
            continue
        cell = english.cells[number - 1]
        first = cell.source.strip().partition("\n")[0]
        lines.append(f"{where} ({cell.cell_type}): {why}; English begins {first[:70]!r}")
        record = recorded(translated.cells[number - 1])
        old = translated_from(english_path, number, record) if record else None
        if old is not None:
            lines += ["    " + line.rstrip("\n") for line in difflib.unified_diff(
                old.splitlines(), english_words(cell).splitlines(),
                "English when translated", "English now", lineterm="", n=1)]
    return lines


def carry_code(english_source: str, twin_source: str) -> tuple[str, bool]:
    """The English code with the twin's string literals and comments put back where the
    two token sequences align; True when the English brought words the twin lacks."""
    ours, theirs = _lex(english_source), _lex(twin_source)
    matcher = difflib.SequenceMatcher(None, [key for key, *_ in theirs],
                                      [key for key, *_ in ours], autojunk=False)
    keep: dict[int, str] = {}
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag != "equal":
            continue
        for offset in range(i2 - i1):
            key, start, end = theirs[i1 + offset]
            if key in WORD_KEYS:
                keep[j1 + offset] = twin_source[start:end]
    new_words = any(key in WORD_KEYS and index not in keep
                    for index, (key, _start, _end) in enumerate(ours))
    result = english_source
    for index in sorted(keep, reverse=True):
        _key, start, end = ours[index]
        result = result[:start] + keep[index] + result[end:]
    return result, new_words


def carry(english: nbformat.NotebookNode, twin: nbformat.NotebookNode
          ) -> tuple[list[int], list[int]]:
    """Carry the English code into ``twin`` (in place): (cells carried, cells to translate)."""
    if not _paired(english, twin):
        raise ValueError("the cell sequences differ: add or remove the cells in the twin "
                         "first (carry pairs cells by position)")
    carried, to_translate = [], []
    for number, (ours, theirs) in enumerate(zip(english.cells, twin.cells, strict=True), 1):
        if ours.cell_type != "code":
            continue
        record = recorded(theirs)
        words_changed = record is not None and record != fingerprint(ours)
        if code_shape(ours.source)[0] != code_shape(theirs.source)[0]:
            was_translated = english_words(theirs) != english_words(ours)
            theirs.source, new_words = carry_code(ours.source, theirs.source)
            carried.append(number)
            if new_words and (was_translated or record is not None):
                words_changed = True
            if not is_translated(ours, theirs):
                theirs.metadata.pop(RECORD, None)
        if words_changed:
            to_translate.append(number)
    return carried, to_translate


def english_lesson(number: str) -> Path:
    """The English lesson ``NN`` (its file name's number)."""
    found = [path for path in lesson_paths(ENGLISH) if path.name.split("_")[0] == number]
    if not found:
        raise SystemExit(f"no English lesson numbered {number!r} in "
                         f"{EDITIONS[ENGLISH].relative_to(ROOT)}/")
    return found[0]


def _twins(english_path: Path) -> list[Path]:
    return [twin_path(english_path, edition) for edition in translated_editions()
            if twin_path(english_path, edition).exists()]


def main_carry(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: carry NN", file=sys.stderr)
        return 2
    english_path = english_lesson(argv[0])
    english = read(english_path)
    for twin in _twins(english_path):
        notebook = read(twin)
        carried, to_translate = carry(english, notebook)
        nbformat.write(notebook, twin)
        where = twin.relative_to(ROOT).as_posix()
        print(f"{where}: code carried into cells {carried or 'none'}")
        for number in to_translate:
            print(f"{where} cell {number}: English words changed or added: translate them "
                  "there, then stale --accept")
    print("Next: execute the English lesson and its twins (python3 tools/course.py execute "
          "...), then python3 tools/course.py stale for the prose.")
    return 0


def main_stale(argv: list[str]) -> int:
    if argv[:1] == ["--accept-all"]:
        pairs = [(path, None) for path in lesson_paths(ENGLISH)]
    elif argv[:1] == ["--accept"] and len(argv) >= 2:
        pairs = [(english_lesson(argv[1]), [int(n) for n in argv[2:]] or None)]
    elif argv[:1] and argv[0].startswith("--"):
        print("usage: stale [NN ...] | --accept NN [CELL ...] | --accept-all", file=sys.stderr)
        return 2
    else:
        paths = [english_lesson(n) for n in argv] or lesson_paths(ENGLISH)
        lines = [line for path in paths for twin in _twins(path)
                 for line in stale_report(path, twin)]
        print("\n".join(lines) or "every translation is current")
        return 1 if lines else 0
    for english_path, numbers in pairs:
        english = read(english_path)
        for twin in _twins(english_path):
            notebook = read(twin)
            done = accept(english, notebook, numbers)
            nbformat.write(notebook, twin)
            print(f"{twin.relative_to(ROOT).as_posix()}: recorded cells {done or 'none'}")
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "carry":
        return main_carry(argv[1:])
    if command == "stale":
        return main_stale(argv[1:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
