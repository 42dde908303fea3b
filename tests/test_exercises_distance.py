"""Lesson 01's exercises: references pass, stubs are 'not attempted', typical mistakes are named."""

from __future__ import annotations

import pytest
import torch

from course_utils.exercises import CORRECT, NOT_ATTEMPTED
from course_utils.exercises.distance import cnn_path_lengths, gradient_through_linear_rnn
from tests.exercise_checks import assert_incorrect


def distance_matrix(n):
    positions = torch.arange(n)
    return (positions[:, None] - positions[None, :]).abs()


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("exercise", [cnn_path_lengths, gradient_through_linear_rnn])
def test_reference_is_correct_and_stub_not_attempted(exercise):
    assert exercise.evaluate(exercise.reference).status == CORRECT
    assert exercise.evaluate(stub).status == NOT_ATTEMPTED


def test_cnn_reference_matches_a_direct_count_of_layers():
    # Grow the receptive field one layer at a time and record when each pair first connects.
    n, kernel_size = 12, 5
    reach = (kernel_size - 1) // 2
    layers = torch.full((n, n), -1)
    for depth in range(n):
        layers[(layers < 0) & (distance_matrix(n) <= depth * reach)] = depth
    assert torch.equal(cnn_path_lengths.reference(n, kernel_size), layers)


@pytest.mark.parametrize(("answer", "message"), [
    (lambda n, w: distance_matrix(n) // ((w - 1) // 2), "you rounded down"),
    (lambda n, w: -(-distance_matrix(n) // w), "reaches (kernel_size - 1) // 2 = 1 positions"),
    (lambda n, w: -(-distance_matrix(n) // ((w - 1) // 2)) + 1, "the diagonal should be 0"),
    (lambda n, w: distance_matrix(n)[:3], "should have shape (6, 6), got (3, 6)"),
    (lambda n, w: distance_matrix(n).tril(), "should be symmetric"),
])
def test_cnn_path_lengths_names_typical_mistakes(answer, message):
    assert_incorrect(cnn_path_lengths, answer, message)


def test_cnn_path_lengths_accepts_float_answers():
    def as_float(n, kernel_size):
        return torch.ceil(distance_matrix(n) / ((kernel_size - 1) // 2))

    assert cnn_path_lengths.evaluate(as_float).status == CORRECT


def test_gradient_reference_matches_autograd_through_a_linear_rnn():
    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=torch.float64) / 2
    h0 = torch.randn(3, dtype=torch.float64)
    def run_linear_rnn(h, steps):
        for _ in range(steps):
            h = w @ h  # h_t = W h_{t-1} (+ x_t, which does not depend on h)
        return h

    for k in range(5):
        jacobian = torch.autograd.functional.jacobian(lambda h, k=k: run_linear_rnn(h, k), h0)
        expected = torch.linalg.matrix_norm(jacobian)
        torch.testing.assert_close(gradient_through_linear_rnn.reference(w, 4)[k], expected)


@pytest.mark.parametrize(("answer", "message"), [
    (lambda w, max_k: torch.stack([torch.linalg.matrix_norm(w**k) for k in range(max_k + 1)]),
     "matrix power"),
    (lambda w, max_k: torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k))
                                   for k in range(1, max_k + 2)]),
     "shifted by one step"),
    (lambda w, max_k: torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k), ord=2)
                                   for k in range(max_k + 1)]),
     "Frobenius norm"),
    (lambda w, max_k: torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k))
                                   for k in range(max_k)]),
     "should have shape (7,), got (6,)"),
    (lambda w, max_k: [1.0] * (max_k + 1), "should be a torch.Tensor, got list"),
])
def test_gradient_through_linear_rnn_names_typical_mistakes(answer, message):
    assert_incorrect(gradient_through_linear_rnn, answer, message)
