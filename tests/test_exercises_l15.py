"""Lesson 15's exercises: reference checks and lesson cells (the mutation table is
tests/mutations/l15.py)."""

from __future__ import annotations

import pytest
import torch

from course_utils.data.number_words import alignment
from course_utils.exercises.l15 import alignment_score, cross_attention_step, decoder_masks
from course_utils.experiments.l15_translation import score_alignment
from course_utils.language import set_language
from course_utils.nn.cross_attention import cross_attention
from course_utils.nn.cross_attention import decoder_masks as package_decoder_masks
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("15_cross_attention.ipynb"))
def test_every_exercise_cell_of_lesson_15_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/15_cross_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_15_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_references_equal_the_package():
    padding = torch.tensor([[True, True, False], [True, True, True]])
    for mine, theirs in zip(decoder_masks.reference(padding, 4),
                            package_decoder_masks(padding, 4), strict=True):
        assert torch.equal(mine, theirs)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 3, 8), torch.randn(2, 3, 3, 8)
    for mine, theirs in zip(cross_attention_step.reference(q, k, v, padding),
                            cross_attention(q, k, v, padding), strict=True):
        torch.testing.assert_close(mine, theirs)
    weights = torch.softmax(torch.randn(7, 7), -1)
    links = alignment(101010)
    assert alignment_score.reference(weights, links) == score_alignment(weights, links)
