"""The translated editions' prose renders as written: CommonMark (the rule JupyterLab, GitHub
and the site follow) closes ``**`` after full-width punctuation only before a space or more
punctuation, so ``**运行时间：**在`` shows its asterisks; the style guide puts the punctuation
outside the bold (``**运行时间**：在``)."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from tools.lessons import TRANSLATED_EDITIONS, lesson_paths, read

COMMONMARK = MarkdownIt("commonmark")


def unrendered_emphasis(markdown: str) -> list[str]:
    """Text a CommonMark renderer leaves with literal ``**`` or ``__`` (code spans aside)."""
    return [child.content for token in COMMONMARK.parse(markdown) if token.type == "inline"
            for child in token.children or [] if child.type == "text"
            and ("**" in child.content or "__" in child.content)]


def test_the_check_sees_the_full_width_punctuation_case_and_passes_the_fix():
    assert unrendered_emphasis("**运行时间：**在 2 核 CPU 上")
    assert not unrendered_emphasis("**运行时间**：在 2 核 CPU 上")
    assert not unrendered_emphasis("`a ** b` and **bold**")


TRANSLATED_LESSONS = [path for edition in TRANSLATED_EDITIONS for path in lesson_paths(edition)]


@pytest.mark.parametrize("path", TRANSLATED_LESSONS, ids=lambda path: path.name)
def test_every_bold_span_of_the_translated_prose_renders(path):
    for number, cell in enumerate(read(path).cells, 1):
        if cell.cell_type == "markdown":
            assert not unrendered_emphasis(cell.source), (
                f"cell {number}: put full-width punctuation outside the bold: "
                f"{unrendered_emphasis(cell.source)}")
