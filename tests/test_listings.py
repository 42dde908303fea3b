"""A printed listing: the code exactly as written, its docstrings and comments translated."""

from __future__ import annotations

import inspect
import re
import textwrap

import pytest

from course_utils import language
from course_utils.exercises import l08
from course_utils.exercises.framework import all_exercises
from course_utils.experiments import l08_bug_gallery as gallery
from course_utils.listings import listing_texts, source_listing

pytestmark = pytest.mark.unit

LISTED = ([bug.implementation for bug in gallery.BUGS]
          + [gallery.correct_attention, gallery.torch_attention,
             gallery.additive_mask_nan_to_num, l08.buggy_encoder_attention,
             l08.buggy_half_precision_attention]
          + [exercise.reference for exercise in all_exercises().values()])  # ex.solution()
CJK = re.compile("[\u4e00-\u9fff]")


@pytest.fixture
def chinese():
    language.set_language("zh-CN")
    yield
    language.set_language("en")


def _code(source: str) -> list[str]:
    """The code of a listing: comments and docstrings dropped, blank lines too."""
    without_docstrings = re.sub(r'"""(.|\n)*?"""', "", source)
    return [line for line in (re.sub(r"  # .*$", "", line).rstrip()
                              for line in without_docstrings.split("\n")) if line.strip()]


@pytest.mark.parametrize("listed", LISTED, ids=lambda listed: listed.__qualname__)
def test_an_english_listing_is_the_source_exactly(listed):
    assert source_listing(listed) == textwrap.dedent(inspect.getsource(listed))


@pytest.mark.parametrize("listed", LISTED, ids=lambda listed: listed.__qualname__)
def test_a_chinese_listing_keeps_the_code_and_translates_every_word(chinese, listed):
    english = textwrap.dedent(inspect.getsource(listed))
    chinese_listing = source_listing(listed)
    assert _code(chinese_listing) == _code(english)
    compile(chinese_listing, "<listing>", "exec")  # still Python
    for text in listing_texts(chinese_listing):
        if re.search(r"[A-Za-z]{3,} [A-Za-z]{3,}", text):  # words, not a shape like (..., n_q)
            assert CJK.search(text), f"{listed.__name__}: untranslated {text!r}"


def test_listing_texts_finds_docstrings_and_comments_in_order():
    source = 'def f(x):\n    """Double.\n\n    More.\n    """\n    return 2 * x  # twice\n'
    assert listing_texts(source) == ["Double.\n\nMore.", "twice"]
    assert listing_texts("def g():\n    'Once.'\n    return 1\n") == ["Once."]


BAD_INPUTS = [
    pytest.param(source_listing, (42,), {}, TypeError, ("obj", "function or a class", "int"),
                 id="source_listing: an int"),
    pytest.param(listing_texts, (b"x = 1",), {}, TypeError, ("source", "str", "bytes"),
                 id="listing_texts: bytes"),
]
