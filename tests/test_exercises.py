"""The exercise framework's three outcomes; lesson 02's exercises, right and wrong answers."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Incorrect, attempt
from course_utils.exercises.qkv import attention_from_qkv, project_qkv
from tests.exercise_checks import assert_incorrect


def _double_checker(answer):
    if attempt(answer, 2) != 4:
        raise Incorrect("double(2) should be 4")


double = Exercise("double a number", _double_checker, lambda x: 2 * x, hints=("x + x", "2 * x"))


def stub(x):
    raise NotImplementedError


@pytest.mark.parametrize(
    ("answer", "status", "words"),
    [
        (None, NOT_ATTEMPTED, "write your solution"),
        (stub, NOT_ATTEMPTED, "NotImplementedError"),
        (lambda x: None, NOT_ATTEMPTED, "returns None"),
        (lambda x: x + 1, INCORRECT, "double(2) should be 4"),
        (lambda x: 1 / 0, INCORRECT, "ZeroDivisionError"),
        (lambda x: x * 2, CORRECT, "works"),
    ],
    ids=["None", "stub", "returns None", "wrong", "crashes", "right"],
)
def test_three_outcomes_are_kept_apart_and_nothing_raises(answer, status, words):
    verdict = double.evaluate(answer)
    assert verdict.status == status
    assert words in verdict.message


def test_check_prints_the_verdict(capsys):
    double.check(lambda x: x + 1)
    assert capsys.readouterr().out.startswith("✗ Incorrect: double(2) should be 4")


def test_hints_come_one_by_one_then_point_to_the_solution(capsys):
    exercise = Exercise("double", _double_checker, lambda x: 2 * x, hints=("first", "second"))
    for _ in range(3):
        exercise.hint()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["Hint 1/2: first", "Hint 2/2: second",
                     "No more hints: call .solution() to see a reference answer."]


def test_solution_shows_the_reference_code(capsys):
    project_qkv.solution()
    assert "return x @ w_q, x @ w_k, x @ w_v" in capsys.readouterr().out


@pytest.mark.parametrize("exercise", [project_qkv, attention_from_qkv], ids=lambda e: e.title)
def test_reference_solutions_pass(exercise):
    assert exercise.evaluate(exercise.reference).status == CORRECT


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_q, x @ w_q), "own matrix"),
        (lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_v, x @ w_k), "values are off"),
        (lambda x, w_q, w_k, w_v: (w_q.T @ x.T, w_k.T @ x.T, w_v.T @ x.T), "shape (3, 2)"),
        (lambda x, w_q, w_k, w_v: x @ w_q, "as a tuple"),
    ],
    ids=["shared W", "swapped", "transposed", "one tensor"],
)
def test_project_qkv_catches_typical_mistakes(answer, words):
    assert_incorrect(project_qkv, answer, words)


def _softmax_wrong_dim(q, k, v):
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=0)
    return weights @ v, weights


def _no_scale(q, k, v):
    weights = torch.softmax(q @ k.T, dim=-1)
    return weights @ v, weights


def _transposed_weights(q, k, v):
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    return weights.T @ v, weights


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_softmax_wrong_dim, "softmax over the wrong dim"),
        (_no_scale, "divide q @ k.T by sqrt(d_k)"),
        (_transposed_weights, "use weights @ v"),
        (lambda q, k, v: q @ k.T, "return two tensors"),
    ],
    ids=["softmax dim", "no scale", "weights.T @ v", "scores only"],
)
def test_attention_from_qkv_catches_typical_mistakes(answer, words):
    assert_incorrect(attention_from_qkv, answer, words)
