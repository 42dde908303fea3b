"""Lesson 19's exercises: reference checks and lesson cells (the mutation table is
tests/mutations/l19.py)."""

from __future__ import annotations

import pytest
import torch

from course_utils.exercises.l19 import chunk_boundary, delta_update, recurrent_step
from course_utils.language import set_language
from course_utils.nn.linear_attention import (
    delta_rule_step,
    linear_attention,
    linear_attention_step,
)
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("19_linear_attention.ipynb"))
def test_every_exercise_cell_of_lesson_19_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/19_linear_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_19_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_the_references_agree_with_the_package():
    g = torch.Generator().manual_seed(0)
    state = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    q, k = torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.randn(
        2, 3, 4, generator=g, dtype=torch.float64)
    v, beta = torch.randn(2, 3, 5, generator=g, dtype=torch.float64), torch.rand(
        2, 3, generator=g, dtype=torch.float64)
    for got, want in zip(recurrent_step.reference(state, q, k, v),
                         linear_attention_step(state, q, k, v), strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(delta_update.reference(state, k, v, beta),
                               delta_rule_step(state, q, k, v, beta)[1])
    qs, ks = torch.randn(1, 2, 12, 4, dtype=torch.float64), torch.randn(1, 2, 12, 4,
                                                                       dtype=torch.float64)
    vs = torch.randn(1, 2, 12, 3, dtype=torch.float64)
    first, carried = chunk_boundary.reference(torch.zeros(1, 2, 4, 3, dtype=torch.float64),
                                              qs[..., :5, :], ks[..., :5, :], vs[..., :5, :])
    second, _ = chunk_boundary.reference(carried, qs[..., 5:, :], ks[..., 5:, :], vs[..., 5:, :])
    torch.testing.assert_close(torch.cat([first, second], -2), linear_attention(qs, ks, vs))
