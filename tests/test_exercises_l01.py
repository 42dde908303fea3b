"""Lesson 01's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l01.py)."""

from __future__ import annotations

import torch

from course_utils.exercises.l01 import cnn_path_lengths, gradient_through_linear_rnn
from tests.mutations.l01 import distance_matrix, reach


def test_cnn_reference_matches_a_direct_count_of_layers():
    # Grow the receptive field one layer at a time and record when each pair first connects.
    n, kernel_size = 12, 5
    layers = torch.full((n, n), -1)
    for depth in range(n):
        layers[(layers < 0) & (distance_matrix(n) <= depth * reach(kernel_size))] = depth
    assert torch.equal(cnn_path_lengths.reference(n, kernel_size), layers)


def test_gradient_reference_matches_autograd_through_a_linear_rnn():
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(3, 3, dtype=torch.float64, generator=generator) / 2
    h0 = torch.randn(3, dtype=torch.float64, generator=generator)

    def run_linear_rnn(h, steps):
        for _ in range(steps):
            h = w @ h  # h_t = W h_{t-1} (+ x_t, which does not depend on h)
        return h

    for k in range(5):
        jacobian = torch.autograd.functional.jacobian(lambda h, k=k: run_linear_rnn(h, k), h0)
        expected = torch.linalg.matrix_norm(jacobian)
        torch.testing.assert_close(gradient_through_linear_rnn.reference(w, 4)[k], expected)
