"""The exercise framework, and every exercise of the course walked through its registry."""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils.exercises import (
    CHECKER_FAILED,
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    Exercise,
    Incorrect,
    all_exercises,
    as_number,
    attempt,
    expect_close,
)
from course_utils.exercises.qkv import project_qkv
from tests.exercise_checks import MIN_RIGHT, MIN_WRONG, assert_correct, assert_incorrect


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


EXERCISES = all_exercises()


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_reference_passes_and_every_stub_is_not_attempted(key):
    exercise = EXERCISES[key]
    assert_correct(exercise, exercise.reference)
    assert exercise.evaluate(_stub).status == NOT_ATTEMPTED
    assert exercise.evaluate(lambda *args, **kwargs: None).status == NOT_ATTEMPTED


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_checking_leaves_the_learners_random_state_alone(key):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = random.random(), np.random.rand(), torch.rand(()).item()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    EXERCISES[key].evaluate(EXERCISES[key].reference)
    assert (random.random(), np.random.rand(), torch.rand(()).item()) == expected


def _all_mutation_tables() -> dict:
    """``{exercise: Mutations}`` from every tests/test_exercises_*.py module."""
    tables = {}
    for path in sorted(Path(__file__).parent.glob("test_exercises_*.py")):
        tables.update(getattr(importlib.import_module(f"tests.{path.stem}"), "MUTATIONS", {}))
    return tables


TABLES = _all_mutation_tables()


def _mutation_rows():
    rows = []
    for exercise, table in TABLES.items():
        rows += [pytest.param(exercise, answer, words, id=f"{exercise.title}: {name}")
                 for name, answer, words in table.wrong]
        rows += [pytest.param(exercise, answer, None, id=f"{exercise.title}: ok {name}")
                 for name, answer in table.right]
    return rows


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_exercise_has_a_mutation_table_of_the_course_standard(key):
    exercise = EXERCISES[key]
    assert exercise in TABLES, f"{key}: no MUTATIONS table in tests/test_exercises_*.py"
    table = TABLES[exercise]
    assert len(table.wrong) >= MIN_WRONG, f"{key}: {len(table.wrong)} wrong answers"
    assert len(table.right) >= MIN_RIGHT, f"{key}: {len(table.right)} right answers"


@pytest.mark.parametrize(("exercise", "answer", "words"), _mutation_rows())
def test_mutation_tables_wrong_rejected_with_their_message_right_accepted(exercise, answer, words):
    if words is None:
        assert_correct(exercise, answer)
    else:
        assert_incorrect(exercise, answer, words)


def test_an_error_of_the_checker_is_never_blamed_on_the_learner():
    def broken_checker(answer):
        attempt(answer, 1)
        raise RuntimeError("Double did not match Float")

    verdict = Exercise("broken", broken_checker, lambda x: x).evaluate(lambda x: x)
    assert verdict.status == CHECKER_FAILED
    assert "not in your answer" in verdict.message and "your code raised" not in verdict.message


def test_an_error_of_the_learners_code_is_reported_as_theirs():
    def checker(answer):
        try:
            attempt(answer, 1)
        except ZeroDivisionError:  # a checker may still catch the learner's error itself
            raise Incorrect("caught: division by zero") from None

    assert Exercise("ok", checker, lambda x: x).evaluate(lambda x: 1 / 0).message == (
        "caught: division by zero")
    verdict = double.evaluate(lambda x: [][1])
    assert verdict.status == INCORRECT and "your code raised IndexError" in verdict.message


def test_the_learner_gets_clones_so_in_place_edits_cannot_move_the_expected_values():
    original = torch.ones(3)

    def checker(answer):
        attempt(answer, original)
        if not torch.equal(original, torch.ones(3)):
            raise Incorrect("the checker's tensor was modified")

    assert_correct(Exercise("in place", checker, lambda t: t.mul_(2)), lambda t: t.mul_(2))


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (torch.tensor([1.0, float("nan")]), "contains NaN"),
        (torch.tensor([1.0, float("inf")]), "contains inf"),
        (torch.tensor([1, 2]), "floating-point"),
        (torch.tensor([1.0, 2.5]), "off by up to 0.5"),
        (torch.tensor([1.0]), "shape (2,)"),
        ([1.0, 2.0], "torch.Tensor"),
    ],
)
def test_expect_close_rejects_non_finite_wrong_dtype_and_wrong_values(value, words):
    with pytest.raises(Incorrect, match=words.replace("(", r"\(").replace(")", r"\)")):
        expect_close(value, torch.tensor([1.0, 2.0]), "x")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_expect_close_accepts_any_float_dtype_within_the_stated_tolerance(dtype):
    expect_close(torch.tensor([1.0, 2.0], dtype=dtype), torch.tensor([1.0, 2.0]), "x")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3.0), (2.5, 2.5), (torch.tensor(1.5), 1.5), (np.float32(0.5), 0.5)],
)
def test_as_number_accepts_python_numpy_and_one_element_tensors(value, expected):
    assert as_number(value, "x") == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [(float("nan"), "not a finite"), (float("inf"), "not a finite"), ("3", "a number"),
     (True, "a number"), (torch.ones(2), "one number")],
)
def test_as_number_rejects_nan_inf_and_non_numbers(value, words):
    with pytest.raises(Incorrect, match=words):
        as_number(value, "x")
