"""Lesson 05's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l05.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises.l05 import build_combined_mask, safe_weights
from course_utils.nn.attention import scaled_dot_product_attention
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("05_masks.ipynb"))
def test_every_exercise_cell_of_lesson_05_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


def test_combined_mask_reference_matches_torch_is_causal_on_full_sentences():
    # With no padding, the combined mask must be exactly what SDPA's is_causal uses.
    q = torch.randn(2, 1, 4, 8)
    mask = build_combined_mask.reference([4, 4], 4)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
        F.scaled_dot_product_attention(q, q, q, is_causal=True),
    )


def test_safe_weights_reference_gives_the_weights_of_the_course_and_of_torch():
    scores = torch.randn(3, 2, 5, 7)
    mask = torch.rand(3, 1, 5, 7) < 0.4
    mask[0, 0, 2] = False  # an empty row
    ours = safe_weights.reference(scores, mask)
    # Weights times the identity as values are the weights themselves.
    _, course = scaled_dot_product_attention(scores, torch.eye(7).expand(3, 2, 7, 7),
                                             torch.eye(7), mask=mask, scale=1.0)
    torch.testing.assert_close(ours, course)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(
        scores, torch.eye(7).expand(3, 2, 7, 7), torch.eye(7), attn_mask=mask, scale=1.0))
