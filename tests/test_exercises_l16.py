"""Lesson 16's exercises: reference checks and lesson cells (the mutation table is
tests/mutations/l16.py)."""

from __future__ import annotations

import pytest
import torch

from course_utils.exercises.l16 import add_sink, merge_results, tile_backward
from course_utils.language import set_language
from course_utils.nn.flash_attention import flash_backward, flash_forward
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("16_flash_attention.ipynb"))
def test_every_exercise_cell_of_lesson_16_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/16_flash_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_16_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_the_tile_reference_summed_over_tiles_is_the_packages_backward():
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    d_output = torch.randn(1, 2, 6, 4, dtype=torch.float64)
    output, logsumexp = flash_forward(q, k, v, block_size=3)
    d_q, d_k, d_v, _ = flash_backward(q, k, v, output, logsumexp, d_output, block_size=3)
    parts = [tile_backward.reference(q, k[..., s:s + 3, :], v[..., s:s + 3, :], output, d_output,
                                     logsumexp) for s in (0, 3)]
    torch.testing.assert_close(parts[0][0] + parts[1][0], d_q)
    torch.testing.assert_close(torch.cat([parts[0][1], parts[1][1]], dim=-2), d_k)
    torch.testing.assert_close(torch.cat([parts[0][2], parts[1][2]], dim=-2), d_v)


def test_the_sink_reference_is_the_packages_forward_with_a_sink():
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    sink = torch.randn(3, dtype=torch.float64)
    plain = flash_forward(q, k, v, block_size=2)
    for mine, package in zip(add_sink.reference(*plain, sink),
                             flash_forward(q, k, v, block_size=2, sink=sink), strict=True):
        torch.testing.assert_close(mine, package)


def test_merging_the_halves_gives_the_whole():
    q, k, v = (torch.randn(2, 1, 4, 3, dtype=torch.float64) for _ in range(3))
    halves = [flash_forward(q, k[..., s, :], v[..., s, :]) for s in (slice(0, 2), slice(2, 4))]
    for mine, whole in zip(merge_results.reference(*halves), flash_forward(q, k, v),
                           strict=True):
        torch.testing.assert_close(mine, whole)
