"""The number words and numerals of lesson 15 equal their references; the alignment is sound."""

from __future__ import annotations

import random

import cn2an  # test-only references (requirements-dev.txt), never needed by the lesson
import pytest
import torch
from num2words import num2words

from course_utils.data.number_words import (
    LARGEST,
    SOURCE_WORDS,
    TARGET_CHARACTERS,
    alignment,
    chinese_numerals,
    english_tokens,
    english_words,
    number_splits,
    source_length,
    tokens_of_text,
)


def _many_numbers() -> list[int]:
    draw = random.Random(15)
    numbers = list(range(1, 3001)) + [10**k for k in range(9)]
    numbers += [draw.randint(1, LARGEST) for _ in range(6000)]
    # sparse numbers: the zeros (零) and the empty groups are where spellings differ
    numbers += [draw.randint(1, 9) * 10 ** draw.randint(0, 7) + draw.randint(0, 9)
                * 10 ** draw.randint(0, 6) for _ in range(3000)]
    return [n for n in numbers if n <= LARGEST]


NUMBERS = _many_numbers()


def test_english_words_equal_num2words():
    wrong = [(n, english_words(n), num2words(n)) for n in NUMBERS
             if english_words(n) != num2words(n)]
    assert not wrong, wrong[:5]


def test_chinese_numerals_equal_cn2an():
    wrong = [(n, chinese_numerals(n), cn2an.an2cn(n)) for n in NUMBERS
             if chinese_numerals(n) != cn2an.an2cn(n)]
    assert not wrong, wrong[:5]


def test_examples_of_the_lesson():
    assert english_words(3005) == "three thousand and five"
    assert chinese_numerals(3005) == "三千零五"
    assert chinese_numerals(12300) == "一万二千三百"
    assert english_tokens(12300) == ["twelve", "thousand", ",", "three", "hundred"]
    assert alignment(12300) == [0, 0, 0, 0, 3, 3]
    assert alignment(3005) == [0, 0, None, 3]


def test_alignment_points_at_a_word_that_names_a_digit():
    for n in NUMBERS[::7]:
        tokens, chars, links = english_tokens(n), chinese_numerals(n), alignment(n)
        assert len(links) == len(chars)
        assert set(tokens) <= set(SOURCE_WORDS) and set(chars) <= set(TARGET_CHARACTERS)
        for char, link in zip(chars, links, strict=True):
            assert (link is None) == (char == "零"), (n, chars, links)
            if link is not None:
                assert tokens[link] not in ("and", "-", ",", "hundred", "thousand", "million")
        # every digit word produces at least one character
        named = {i for i, t in enumerate(tokens)
                 if t not in ("and", "-", ",", "hundred", "thousand", "million")}
        assert named == {link for link in links if link is not None}, (n, tokens, links)


def test_splits_are_disjoint_and_longer_is_longer():
    pools = number_splits(torch.Generator().manual_seed(3), train=500, validation=50,
                          test=50, longer=50, max_train_tokens=12)
    assert {k: len(v) for k, v in pools.items()} == {"train": 500, "validation": 50,
                                                     "test": 50, "longer": 50}
    every = [n for pool in pools.values() for n in pool]
    assert len(set(every)) == len(every)
    assert max(map(source_length, pools["train"])) <= 12 < min(map(source_length,
                                                                   pools["longer"]))
    again = number_splits(torch.Generator().manual_seed(3), train=500, validation=50,
                          test=50, longer=50, max_train_tokens=12)
    assert again == pools


def test_tokens_of_text_reads_what_english_words_writes():
    for n in NUMBERS[::31]:
        assert tokens_of_text(english_words(n)) == english_tokens(n)
    assert tokens_of_text("Twenty-one thousand") == ["twenty", "-", "one", "thousand"]


BAD_INPUTS = [
    pytest.param(english_words, (0,), {}, ValueError, ("n", "1..100000000", "got 0"),
                 id="english_words: zero"),
    pytest.param(english_words, (1.5,), {}, TypeError, ("n", "int", "float"),
                 id="english_words: float"),
    pytest.param(english_tokens, (LARGEST + 1,), {}, ValueError, ("n", "1..100000000"),
                 id="english_tokens: too large"),
    pytest.param(chinese_numerals, ("12",), {}, TypeError, ("n", "int", "str"),
                 id="chinese_numerals: str"),
    pytest.param(alignment, (-3,), {}, ValueError, ("n", "got -3"), id="alignment: negative"),
    pytest.param(source_length, (None,), {}, TypeError, ("n", "NoneType"),
                 id="source_length: None"),
    pytest.param(number_splits, (None,), {}, TypeError, ("generator", "torch.Generator"),
                 id="number_splits: no generator"),
    pytest.param(number_splits, (torch.Generator(),), {"train": 0}, ValueError,
                 ("train", "positive int", "0"), id="number_splits: empty train"),
    pytest.param(number_splits, (torch.Generator(),), {"max_train_tokens": 2}, ValueError,
                 ("max_train_tokens", "3..20", "2"), id="number_splits: too short"),
    pytest.param(tokens_of_text, (12,), {}, TypeError, ("text", "str", "int"),
                 id="tokens_of_text: int"),
    pytest.param(tokens_of_text, ("twelve apples",), {}, ValueError,
                 ("text", "English number words", "apples"), id="tokens_of_text: unknown word"),
]
