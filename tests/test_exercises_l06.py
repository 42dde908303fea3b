"""Lesson 06's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l06.py)."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.exercises.l06 import layer_flops, merge_partials
from course_utils.experiments.l06_cost import attention_flops
from course_utils.language import set_language
from course_utils.nn.online_softmax import online_softmax_update
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("06_cost_of_attention.ipynb"))
def test_every_exercise_cell_of_lesson_06_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/06_cost_of_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_06_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_layer_flops_reference_equals_the_package_count():
    counts = attention_flops(100, 64, 8, batch_size=3)
    assert layer_flops.reference(100, 64, 8, 3) == sum(counts.values()) - counts["softmax"]


def test_merge_partials_reference_merges_online_states():
    scores, values = torch.randn(3, 10), torch.randn(10, 2)
    empty = (torch.full((3, 1), -math.inf), torch.zeros(3, 1), torch.zeros(3, 2))
    a = online_softmax_update(*empty, scores[:, :4], values[:4])
    b = online_softmax_update(*empty, scores[:, 4:], values[4:])
    _, total, out = merge_partials.reference(a, b)
    assert torch.allclose(out / total, torch.softmax(scores, -1) @ values, atol=1e-6)
