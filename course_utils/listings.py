"""Source code shown to the learner, its docstrings and comments in the learner's language.

A lesson that prints a function's code (lesson 08's gallery of bugs) prints it through
:func:`source_listing`: the code stays as it is, while each docstring and comment is looked up
in the catalogue under the context ``"listing"``. ``tools/catalogue.py`` extracts the same texts
with :func:`listing_texts`, so what is printed and what is translated cannot drift apart.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize

from course_utils.checks import require_instance
from course_utils.language import _, translate

LISTING = "listing"  # the catalogue context of a listing's docstrings and comments


def _docstring_lines(source: str) -> set[int]:
    """The first line (1-based) of every docstring in ``source``."""
    return {node.body[0].lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
            and ast.get_docstring(node, clean=False) is not None}


def _docstring_parts(token: str) -> tuple[str, str, str]:
    """A docstring token as (prefix and opening quotes, the text as written, closing quotes)."""
    prefix = len(token) - len(token.lstrip("rRuU"))
    quotes = 3 if token[prefix:prefix + 3] in ('"' * 3, "'" * 3) else 1
    return token[:prefix + quotes], token[prefix + quotes:-quotes], token[-quotes:]


def _pieces(source: str):
    """(start, end, English text, rebuild) for each docstring and comment of ``source``, where
    start and end are (line, column) and rebuild(text) writes the piece back with new text."""
    docstrings = _docstring_lines(source)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start, token.end, token.string[1:].strip(), lambda text: f"# {text}"
        elif token.type == tokenize.STRING and token.start[0] in docstrings:
            opening, written, closing = _docstring_parts(token.string)
            indent = " " * token.start[1]
            ends_apart = written.endswith("\n" + indent)  # closing quotes on a line of their own

            def rebuild(text, opening=opening, closing=closing, indent=indent,
                        ends_apart=ends_apart):
                lines = text.split("\n")
                body = lines[0] + "".join(f"\n{indent}{line}" if line else "\n"
                                          for line in lines[1:])
                return opening + body + (f"\n{indent}" if ends_apart else "") + closing

            yield token.start, token.end, inspect.cleandoc(written), rebuild


def listing_texts(source: str) -> list[str]:
    """The English docstrings (cleaned) and comments of ``source``, in order: what a listing
    of it translates.

    Used in lesson 08.
    """
    require_instance("source", source, str, _("a str (Python source)"))
    return [text for _start, _end, text, _rebuild in _pieces(source)]


def source_listing(obj) -> str:
    """The source of a function or class as the learner reads it: the code unchanged, each
    docstring and comment in the current language (English: exactly the source).

    Used in lesson 08.
    """
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj)):
        raise TypeError(_("{name} should be a function or a class, got {got}").format(
            name="obj", got=type(obj).__name__))
    source = textwrap.dedent(inspect.getsource(obj))
    lines = source.split("\n")
    for (start_line, start_column), (end_line, end_column), text, rebuild in reversed(
            list(_pieces(source))):
        translated = translate(text, context=LISTING)
        if translated == text:
            continue
        first, last = lines[start_line - 1], lines[end_line - 1]
        written = first[:start_column] + rebuild(translated) + last[end_column:]
        lines[start_line - 1:end_line] = written.split("\n")
    return "\n".join(lines)
