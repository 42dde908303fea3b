"""The Chinese edition's style rules (CONTRIBUTING.zh-CN.md, 中文写作规范) as checks.

Every Chinese text a learner reads is checked: the markdown cells of the Chinese lessons and
the Chinese documents (README.zh-CN.md, CONTRIBUTING.zh-CN.md, GLOSSARY.md), rendered with a
CommonMark renderer as JupyterLab, GitHub and the site render them; the string literals of
the Chinese lessons' code cells (what they print), and the tables those cells printed (their
columns must line up by display width); and the zh-CN catalogue's msgstr (what course_utils
prints).

    python -m tools.chinese_style     # list every violation, exit 1 if there is one
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from tools.editions import SOFT_BREAK
from tools.lessons import ROOT, lesson_paths, read

DOCUMENTS = [ROOT / name for name in ("README.zh-CN.md", "CONTRIBUTING.zh-CN.md", "GLOSSARY.md")]
CATALOGUE = ROOT / "course_utils" / "locale" / "zh-CN" / "course_utils.po"
GLOSSARY = ROOT / "GLOSSARY.md"

# CommonMark with the two extensions the lessons use (GFM tables, $math$), so that a table
# cell's emphasis is checked and a `*` inside math is not taken for an emphasis mark.
RENDERER = MarkdownIt("commonmark").enable("table").use(dollarmath_plugin)

IDEOGRAPH = "\u3400-\u4dbf\u4e00-\u9fff"
HAS_CHINESE = re.compile(f"[{IDEOGRAPH}]")

RULE_MARKS = "`**` or `*` shows as typed (put full-width punctuation outside the bold)"
RULE_ITALIC = "italics on Chinese text (Chinese has no italics: bold a new term, or nothing)"
RULE_TIMES = ("“比…N 倍” / “缩小 N 倍” (write 降为 1/N, 缩小为原来的 1/N, "
              "不到原来的百分之一)")
RULE_SECTION = "§ (write 第 N 节)"
RULE_QUOTES = "ASCII quotes around Chinese words (use “” and, inside them, ‘’)"
RULE_BREAK = "a line break between Chinese characters (renders as a space: one line a paragraph)"
RULE_GLOSSARY = "not the glossary's word"
RULE_MILLION = "a count in millions written M beside Chinese (write 2260 万, not 22.6 M)"
RULE_TABLE = ("a printed table padded by characters, so its Chinese columns drift "
              "(pad with course_utils.text_layout.pad)")
RULE_RANGE = "a Python range beside Chinese (write 0～15 or 0 到 15, not 0..15)"
RULE_ARROW = "an ASCII arrow beside Chinese (write →, not ->)"
RULE_RATIO = "a ratio written × beside Chinese (write 4.9 倍, not 4.9×)"
RULE_GROUPING = ("a number grouped by commas or spaces beside Chinese (write 1490, 50 万, "
                 "49152（约 4.9 万）)")
RULES = (RULE_MARKS, RULE_ITALIC, RULE_TIMES, RULE_SECTION, RULE_QUOTES, RULE_BREAK,
         RULE_GLOSSARY, RULE_MILLION, RULE_TABLE, RULE_RANGE, RULE_ARROW, RULE_RATIO,
         RULE_GROUPING)

_NUMBER = r"(?:\d+(?:\.\d+)?|[一二两三四五六七八九十百千万几数]+)"
_CLAUSE = r"[^，。；：！？、\n]"
# Flags 比 A 小 10 倍, 少了一百多倍, 缩小 num_heads / g 倍; passes 之比增长了十倍, 是它的 3 倍.
TIMES = re.compile(rf"(?<![至最大])[小少低短慢轻窄]了?\s*{_NUMBER}\s*多?倍"
                   rf"|(?:缩小|减少|减小|降低|下降)(?![为到])了?{_CLAUSE}{{0,40}}?倍")
# A quoted word, not the stretch between two quoted words or values ('a' 和 'b', {'noun': 1}).
_NOT_QUOTED = "\"'\\n{}:：;；,，。"
ASCII_QUOTED = re.compile(rf"([\"'])(?!\s)[^{_NOT_QUOTED}]{{0,24}}[{IDEOGRAPH}]"
                          rf"[^{_NOT_QUOTED}]{{0,24}}(?<!\s)\1")
# 22.6 M, not SmolLM2-135M (a name) nor 1.5 MiB (a unit).
MILLIONS = re.compile(r"(?<![\w.\-])\d+(?:\.\d+)?\s?M(?![A-Za-z0-9])")
# 0..15 and {first}..{last}; not an ellipsis (…) nor a path (../notebooks).
PYTHON_RANGE = re.compile(r"[\w}]\.\.[\w{]")
ASCII_ARROW = re.compile(r"(?<!-)->(?!>)")
# 4.9× (a ratio), not 64×64 nor 8 × 8 (a shape).
RATIO = re.compile(r"(?:\d(?:\.\d+)?|\})\s?×(?!\s?[\d({a-zA-Z`])")
# 1,490 and 500 000: Chinese groups by 万, not by thousands.
GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:,| )\d{3})+(?![\d.,]|\s?[×x]\s?\d)")
# In printed text (a string literal, a catalogue message) *…* is not emphasis but asterisks.
STARRED = re.compile(rf"(?<!\*)\*(?![\s*])[^*\n]{{0,30}}[{IDEOGRAPH}]"
                     rf"[^*\n]{{0,30}}(?<![\s*])\*(?!\*)")
# A column of a printed table starts after a run of spaces; a row has at least one gap of two.
_COLUMN_START = re.compile(r"( +)(?=\S)")
_TABLE_ROW = re.compile(r"\S {2,}\S")
_OPENING, _CLOSING = "([（", ")]）"
_CODE_COMMENT = re.compile(r" {2}# .*$")
_FIRST_WORD = re.compile(r"[^\s：，；、（]*")
# An English word glossed in full-width brackets, 词元（token）, is not drift.
_GLOSS = re.compile(rf"（[^（）{IDEOGRAPH}]*）")


@dataclass(frozen=True)
class Violation:
    place: str   # file, and cell or message
    rule: str
    text: str    # the offending text, with a little context

    def __str__(self) -> str:
        return f"{self.place}: {self.rule}: {self.text!r}"


def avoided_words() -> list[tuple[str, str]]:
    """GLOSSARY.md's words the Chinese edition does not use: (word, the glossary's word)."""
    table = GLOSSARY.read_text(encoding="utf-8").split("<!-- avoid:", 1)[1]
    return re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", table, re.M)


def _around(text: str, match: re.Match, margin: int = 10) -> str:
    return text[max(0, match.start() - margin):match.end() + margin]


def text_problems(text: str, words=None) -> list[tuple[str, str]]:
    """(rule, excerpt) for every prose rule that ``text`` (one paragraph) breaks."""
    problems = [(RULE_TIMES, match.group()) for match in TIMES.finditer(text)]
    problems += [(RULE_SECTION, _around(text, match)) for match in re.finditer("§", text)]
    problems += [(RULE_QUOTES, match.group()) for match in ASCII_QUOTED.finditer(text)]
    if HAS_CHINESE.search(text):
        problems += [(RULE_MILLION, _around(text, match)) for match in MILLIONS.finditer(text)]
        problems += [(rule, _around(text, match))
                     for rule, pattern in ((RULE_RANGE, PYTHON_RANGE), (RULE_ARROW, ASCII_ARROW),
                                           (RULE_RATIO, RATIO), (RULE_GROUPING, GROUPED))
                     for match in pattern.finditer(text)]
        unglossed = _GLOSS.sub("", text)
        for word, ours in words if words is not None else avoided_words():
            # An English word, not a name in code (example.tokens[k], {tokens!r}).
            pattern = (rf"(?<![\w.{{]){re.escape(word)}s?(?![\w\[({{}}!.])" if word.isascii()
                       else re.escape(word))
            problems += [(f"{RULE_GLOSSARY} (write {ours})", _around(unglossed, match))
                         for match in re.finditer(pattern, unglossed, re.I)]
    return problems


def printed_text_problems(text: str, words=None) -> list[tuple[str, str]]:
    """``text_problems`` of text printed as it is (no markdown), with asterisks around Chinese."""
    return ([(RULE_ITALIC, match.group()) for match in STARRED.finditer(text)]
            + text_problems(text, words))


def _column_starts(line: str) -> dict[int, int]:
    """Where a column starts in ``line`` (a character index) -> how many spaces precede it.
    A space inside brackets, as in a shape ``(2, 3, 5, 4)``, does not start a column, nor
    does the indent before the first one."""
    starts = {}
    for match in _COLUMN_START.finditer(line):
        before = line[:match.start()]
        if not before:
            continue
        if sum(before.count(mark) for mark in _OPENING) == sum(
                before.count(mark) for mark in _CLOSING):
            starts[match.end()] = len(match.group(1))
    return starts


def _cells(row: str) -> list[tuple[int, ...]]:
    """A row's cells, the text between runs of two or more spaces outside brackets, as the
    display columns where each could be aligned: its start, its end, and the end of its first
    word (a right-aligned number followed by its unit or a note)."""
    from course_utils.text_layout import display_width

    gaps = {start: spaces for start, spaces in _column_starts(row).items() if spaces >= 2}
    firsts = [len(row) - len(row.lstrip())] + list(gaps)
    lasts = [start - gaps[start] for start in gaps] + [len(row.rstrip())]
    return [(display_width(row[:first]), display_width(row[:last]),
             display_width(row[:first + len(_FIRST_WORD.match(row, first).group())]))
            for first, last in zip(firsts, lasts, strict=True)]


def table_problems(printed: str) -> list[tuple[str, str]]:
    """(RULE_TABLE, the two rows) where two consecutive rows of printed text do not line up:
    a column starting at the same character but not at the same display column (padding by
    ``len``, an f-string's ``{word:<8}``, with a wide character on the way), or rows of as many
    cells whose cells neither start nor end together. A claim's ✓ line is not a row."""
    from course_utils.text_layout import display_width

    # A printed listing's comments (code  # 注释) are not a column of a table.
    problems, rows = [], [_CODE_COMMENT.sub("", row) for row in printed.split("\n")]
    for upper, lower in itertools.pairwise(rows):
        if not HAS_CHINESE.search(upper + lower) or not all(
                _TABLE_ROW.search(row) and not row.startswith("✓") for row in (upper, lower)):
            continue
        cells_above, cells_below = _cells(upper), _cells(lower)
        if len(cells_above) == len(cells_below):
            # Rows of as many cells are judged cell by cell: a start the two rows share by
            # characters may belong to two different cells (a right-aligned header over a
            # number), so it says nothing about drift.
            misaligned = any(
                all(edge != other for edge, other in zip(cell, other_cell, strict=True))
                for cell, other_cell in zip(cells_above[1:], cells_below[1:], strict=True))
        else:
            above, below = _column_starts(upper), _column_starts(lower)
            misaligned = any(min(above[start], below[start]) >= 2
                             and display_width(upper[:start]) != display_width(lower[:start])
                             for start in above.keys() & below.keys())
        if misaligned:
            problems.append((RULE_TABLE, f"{upper.strip()} / {lower.strip()}"))
    return problems


def printed_outputs(cell) -> list[str]:
    """The text a code cell printed, one text per run of a stream's consecutive outputs: the
    kernel may store one printed table as several chunks, and a reader sees them as one."""
    texts, previous = [], None
    for output in cell.get("outputs", []):
        stream = output.get("name") if output.get("output_type") == "stream" else None
        if stream is not None:
            text = "".join(output.get("text", ""))
            if stream == previous:
                texts[-1] += text
            else:
                texts.append(text)
        previous = stream
    return texts


def _inline_text(token) -> tuple[str, list[str], list[str]]:
    """An inline token as (its rendered text with code as `…`, literal marks, italic texts)."""
    parts, marks, italics, in_italic = [], [], [], []
    for child in token.children or []:
        if child.type == "em_open":
            in_italic.append(len(parts))
        elif child.type == "em_close" and in_italic:
            italics.append("".join(parts[in_italic.pop():]))
        elif child.type == "text":
            parts.append(child.content)
            mark = re.search(r"\*|__", child.content)
            if mark:
                marks.append(_around(child.content, mark))
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type in ("code_inline", "math_inline"):
            parts.append("`…`")
    return "".join(parts), marks, italics


def markdown_problems(markdown: str, words=None) -> list[tuple[str, str]]:
    """(rule, excerpt) for every rule a markdown text breaks, as CommonMark renders it."""
    problems = []
    for token in RENDERER.parse(markdown):
        if token.type != "inline":
            continue
        text, marks, italics = _inline_text(token)
        problems += [(RULE_MARKS, mark) for mark in marks]
        problems += [(RULE_ITALIC, italic) for italic in italics if HAS_CHINESE.search(italic)]
        problems += [(RULE_BREAK, _around(text, match)) for match in SOFT_BREAK.finditer(text)]
        problems += text_problems(text, words)
    return problems


def string_literals(source: str) -> list[str]:
    """The text of a code cell's string literals; an f-string's fields become ``{…}``."""
    # IPython's %magic and !shell lines are not Python.
    source = re.sub(r"^\s*[%!].*$", "", source, flags=re.M)
    texts, inside_fstrings = [], set()
    for node in ast.walk(ast.parse(source)):  # outer nodes come before the nodes they hold
        if id(node) in inside_fstrings:
            continue
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(part.value if isinstance(part, ast.Constant) else "{…}"
                                 for part in node.values))
            inside_fstrings |= {id(inner) for inner in ast.walk(node)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
    return texts


def notebook_problems(path: Path, words=None) -> list[Violation]:
    place = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for number, cell in enumerate(read(path).cells, 1):
        if cell.cell_type == "markdown":
            found = markdown_problems(cell.source, words)
        elif cell.cell_type == "code":
            # A figure's alt text is read aloud as it is written (no markdown).
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt")
            found = [problem for text in string_literals(cell.source) + ([alt] if alt else [])
                     for problem in printed_text_problems(text, words)]
            found += [problem for text in printed_outputs(cell) for problem in table_problems(text)]
        else:
            continue
        problems += [Violation(f"{place} cell {number}", rule, text) for rule, text in found]
    return problems


def document_problems(path: Path, words=None) -> list[Violation]:
    place = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    # The glossary's table of avoided words names them: that is not using them.
    markdown = path.read_text(encoding="utf-8").split("<!-- avoid:", 1)[0]
    return [Violation(str(place), rule, text) for rule, text in markdown_problems(markdown, words)]


def catalogue_problems(path: Path = CATALOGUE, words=None) -> list[Violation]:
    from babel.messages.pofile import read_po

    with path.open("rb") as file:
        catalog = read_po(file)
    place = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for message in catalog:
        if not message.id or not message.string:
            continue
        msgid = message.id if isinstance(message.id, str) else message.id[0]
        translations = [message.string] if isinstance(message.string, str) else message.string
        problems += [Violation(f"{place} msgid {msgid[:40]!r}", rule, text)
                     for translation in translations
                     for rule, text in printed_text_problems(translation, words)]
    return problems


def all_problems() -> list[Violation]:
    words = avoided_words()
    return ([problem for path in lesson_paths("zh-CN")
             for problem in notebook_problems(path, words)]
            + [problem for path in DOCUMENTS for problem in document_problems(path, words)]
            + catalogue_problems(words=words))


def main() -> int:
    problems = all_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} breaches of the Chinese style rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
