"""Lesson 09's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l09.py)."""

from __future__ import annotations

import pytest

from course_utils.exercises.l09 import (
    it_attends_to_ball,
    most_attended,
    own_sentence,
    with_query_of_it,
)
from course_utils.views.explorer_model import weight_matrix
from tests.support.exercise_checks import assert_correct


def test_the_reference_query_gives_ball_the_share_the_task_asks():
    example = with_query_of_it(it_attends_to_ball.reference())
    row = weight_matrix(example)[example.index("it")]
    assert example.tokens[row.argmax()] == "ball" and row.max() >= 0.5


def test_a_sentence_where_one_word_wins_every_row_is_rejected_for_few_targets():
    table = [(w, {"noun": 1} if w == "x" else {"action": 1}, {"noun": 3}) for w in "abcxe"]
    verdict = own_sentence.evaluate(lambda: (table, ["x"] * 5))
    assert verdict.status == "incorrect" and "at least 3 different words" in verdict.message


def test_the_reference_sentence_is_accepted_in_place():
    assert_correct(own_sentence, own_sentence.reference)


def test_in_the_chinese_edition_the_sentences_are_chinese_and_the_references_pass():
    from course_utils.language import set_language

    set_language("zh-CN")
    try:
        example = with_query_of_it(it_attends_to_ball.reference())
        assert example.tokens[6] == "它" and example.tokens[-1] == "圆"
        row = weight_matrix(example)[6]
        assert example.tokens[row.argmax()] == "球" and row.max() >= 0.5
        table, predictions = own_sentence.reference()
        assert [word for word, _, _ in table][1] == "狗" and predictions[0] == "狗"
        for exercise in (it_attends_to_ball, most_attended, own_sentence):
            assert_correct(exercise, exercise.reference)
    finally:
        set_language("en")


BAD_INPUTS = [
    pytest.param(with_query_of_it, (3,), {}, TypeError,
                 ("strengths", "dict feature -> strength", "int 3"),
                 id="with_query_of_it: an int"),
]
