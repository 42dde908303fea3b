"""Lesson 01's exercises: the references against direct computations, and the mutation tables
(run by tests/test_exercises.py) of plausible wrong answers and right answers written otherwise."""

from __future__ import annotations

import math

import torch

from course_utils.exercises.l01 import cnn_path_lengths, gradient_through_linear_rnn
from tests.support.exercise_checks import Mutations


def distance_matrix(n):
    positions = torch.arange(n)
    return (positions[:, None] - positions[None, :]).abs()


def reach(kernel_size):
    return (kernel_size - 1) // 2


def _cnn_by_growing_reach(n, kernel_size):
    layers = torch.zeros(n, n, dtype=torch.int32)
    for depth in range(1, n):
        layers += (distance_matrix(n) > (depth - 1) * reach(kernel_size)).int()
    return layers


def _cnn_with_math_ceil(n, kernel_size):
    return torch.tensor([[math.ceil(abs(i - j) / reach(kernel_size)) for j in range(n)]
                         for i in range(n)])


def _norms(w, ks, **kwargs):
    return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k), **kwargs)
                        for k in ks])


def _gradient_by_repeated_product(w, max_k):
    product, norms = torch.eye(w.shape[0], dtype=torch.float64), []
    for _ in range(max_k + 1):
        norms.append(product.pow(2).sum().sqrt())
        product = product @ w.double()
    return torch.stack(norms)  # float64


def _gradient_in_place(w, max_k):
    product, norms = torch.eye(w.shape[0]), []
    for _ in range(max_k + 1):
        norms.append(torch.linalg.norm(product))
        product = product @ w
        w.mul_(1.0)  # in-place edits of the learner's own copy are harmless
    return torch.stack(norms)


def _gradient_with_a_nan(w, max_k):
    norms = _norms(w, range(max_k + 1))
    norms[-1] = float("nan")
    return norms


# A lookup table built for the sizes and kernels a learner tried (n ≤ 16, kernel_size ≤ 7).
_SMALL_TABLES = {w: cnn_path_lengths.reference(16, w) for w in (3, 5, 7)}


def _cnn_from_a_small_table(n, kernel_size):
    return _SMALL_TABLES[min(kernel_size, 7)][:n, :n]


def _gradient_with_eye_4(w, max_k):
    product, norms = torch.eye(4), []  # the size of the lesson's W written in
    for _ in range(max_k + 1):
        norms.append(torch.linalg.norm(product))
        product = product @ w
    return torch.stack(norms)


def _gradient_in_float16(w, max_k):
    w = w.half()  # the right formula, in half precision
    product, norms = torch.eye(w.shape[0], dtype=torch.float16), []
    for _ in range(max_k + 1):
        norms.append(torch.linalg.norm(product.float()).half())
        product = product @ w
    return torch.stack(norms)


MUTATIONS = {
    cnn_path_lengths: Mutations(
        wrong=[
            ("rounded down", lambda n, w: distance_matrix(n) // reach(w), "you rounded down"),
            ("kernel_size 3 of the first call written in",
             lambda n, w: distance_matrix(n) // reach(3), "cnn_path_lengths(10, kernel_size=5)"),
            ("divided by kernel_size", lambda n, w: -(-distance_matrix(n) // w),
             "reaches (kernel_size - 1) // 2"),
            ("divided by kernel_size - 1", lambda n, w: -(-distance_matrix(n) // (w - 1)),
             "reaches (kernel_size - 1) // 2"),
            ("diagonal 1", lambda n, w: -(-distance_matrix(n) // reach(w)) + 1,
             "the diagonal should be 0"),
            ("the RNN's |i - j|", lambda n, w: distance_matrix(n) + 0 * w,
             "that is |i - j|, the RNN's path length"),
            ("not rounded", lambda n, w: distance_matrix(n) / reach(w), "round up (torch.ceil)"),
            ("wrong shape", lambda n, w: distance_matrix(n)[:3], "should have shape (6, 6)"),
            ("lower triangle only", lambda n, w: -(-distance_matrix(n) // reach(w)).tril(),
             "should be symmetric"),
            ("bool", lambda n, w: distance_matrix(n) > 0, "whole numbers of layers"),
            ("NaN", lambda n, w: torch.full((n, n), float("nan")), "contains NaN"),
            ("a lookup table for n ≤ 16 and kernels up to 7", _cnn_from_a_small_table,
             "cnn_path_lengths(23, kernel_size=9) should have shape (23, 23)"),
            ("reach from a dict of the kernels tried",
             lambda n, w: -(-distance_matrix(n) // {3: 1, 5: 2, 7: 3}[w]),
             "your code raised KeyError"),
            ("reach capped at 3", lambda n, w: -(-distance_matrix(n) // min(reach(w), 3)),
             "cnn_path_lengths(23, kernel_size=9): entry"),
        ],
        right=[
            ("float ceil", lambda n, w: torch.ceil(distance_matrix(n) / reach(w))),
            ("grow the reach layer by layer", _cnn_by_growing_reach),
            ("math.ceil in Python", _cnn_with_math_ceil),
            ("float64 division", lambda n, w: (distance_matrix(n).double() / reach(w)).ceil()),
            ("negated floor division", lambda n, w: -(-distance_matrix(n) // reach(w))),
            ("layers counted up to each position", lambda n, w: torch.tensor(
                [[sum(1 for _ in range(0, abs(i - j), reach(w))) for j in range(n)]
                 for i in range(n)])),
        ],
    ),
    gradient_through_linear_rnn: Mutations(
        wrong=[
            ("element-wise power",
             lambda w, max_k: torch.stack([torch.linalg.matrix_norm(w**k)
                                           for k in range(max_k + 1)]),
             "matrix power"),
            ("shifted by one", lambda w, max_k: _norms(w, range(1, max_k + 2)),
             "shifted by one step"),
            ("W^0 taken as W", lambda w, max_k: _norms(w, [1, *range(1, max_k + 1)]),
             "entry 0 should be ‖W^0‖ = ‖I‖"),
            ("spectral norm", lambda w, max_k: _norms(w, range(max_k + 1), ord=2),
             "Frobenius norm"),
            ("norm to the power k",
             lambda w, max_k: torch.linalg.matrix_norm(w) ** torch.arange(max_k + 1),
             "only an upper bound"),
            ("one entry short", lambda w, max_k: _norms(w, range(max_k)),
             "should have shape (7,), got (6,)"),
            ("a list", lambda w, max_k: [1.0] * (max_k + 1), "should be a torch.Tensor, got list"),
            ("integer dtype", lambda w, max_k: _norms(w, range(max_k + 1)).long(),
             "floating-point"),
            ("NaN", _gradient_with_a_nan, "contains NaN"),
            ("max_k of the first call written in", lambda w, max_k: _norms(w, range(7)),
             "gradient_through_linear_rnn(w, max_k=3) should have shape (4,), got (7,)"),
            ("float16", lambda w, max_k: gradient_through_linear_rnn.reference(w, max_k).half(),
             "only about 3 significant digits"),
            ("the identity of a 4 × 4 W written in", _gradient_with_eye_4,
             "your code raised RuntimeError"),
            ("‖I‖ = 2 written in", lambda w, max_k: torch.cat(
                [torch.tensor([2.0]), _norms(w, range(1, max_k + 1))]),
             "entry 0 should be ‖W^0‖ = ‖I‖ = sqrt(3) for a 3 × 3 W"),
            ("computed in float16", _gradient_in_float16, "only about 3 significant digits"),
        ],
        right=[
            ("repeated product in float64", _gradient_by_repeated_product),
            ("in place, torch.linalg.norm", _gradient_in_place),
            ("transposed matrix", lambda w, max_k: _norms(w.T, range(max_k + 1))),
            ("singular values", lambda w, max_k: torch.stack([
                torch.linalg.svdvals(torch.linalg.matrix_power(w, k)).pow(2).sum().sqrt()
                for k in range(max_k + 1)])),
            ("einsum squares",
             lambda w, max_k: torch.stack([torch.einsum("ij,ij->", p, p).sqrt() for p in (
                 torch.linalg.matrix_power(w, k) for k in range(max_k + 1))])),
        ],
    ),
}

