"""The exercise framework, and every exercise of the course walked through its registry."""

from __future__ import annotations

import functools
import importlib
import inspect
import random
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

from course_utils.diagnostics import PROBES
from course_utils.exercises import (
    Exercise,
    Incorrect,
    all_exercises,
    as_number,
    attempt,
    expect_close,
)
from course_utils.exercises import framework as exercises_module
from course_utils.exercises.framework import (
    CHECKER_FAILED,
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    Verdict,
)
from course_utils.exercises.l02 import project_qkv
from course_utils.language import N_, set_language, translate
from tests.support.exercise_checks import MIN_RIGHT, MIN_WRONG, assert_correct, assert_incorrect


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


class ReferenceRun(NamedTuple):
    verdict: Verdict
    calls: list  # (args, kwargs, result) of each call the checker made
    random_state_kept: bool  # the learner's global random numbers came through unmoved


def _draws() -> tuple:
    return random.random(), np.random.rand(), torch.rand(()).item()


@functools.cache  # one checker run on the reference serves the three tests that use it
def _reference_run(key: str) -> ReferenceRun:
    """The exercise's checker run on its reference, from a seeded global random state."""
    reference, calls = EXERCISES[key].reference, []

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        result = reference(*args, **kwargs)
        calls.append((args, kwargs, result))
        return result

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = _draws()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    verdict = EXERCISES[key].evaluate(answer)
    return ReferenceRun(verdict, calls, _draws() == expected)


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_reference_passes_and_every_stub_is_not_attempted(key):
    exercise, verdict = EXERCISES[key], _reference_run(key).verdict
    assert verdict.status == CORRECT, f"expected correct, got: {verdict}"
    assert exercise.evaluate(_stub).status == NOT_ATTEMPTED
    assert exercise.evaluate(lambda *args, **kwargs: None).status == NOT_ATTEMPTED


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_checking_leaves_the_learners_random_state_alone(key):
    assert _reference_run(key).random_state_kept


def _all_mutation_tables() -> dict:
    """``{exercise: Mutations}`` from every tests/mutations/lNN.py module."""
    tables = {}
    for path in sorted((Path(__file__).parent / "mutations").glob("l*.py")):
        tables.update(importlib.import_module(f"tests.mutations.{path.stem}").MUTATIONS)
    return tables


TABLES = _all_mutation_tables()


def _mutation_rows():
    rows = []
    for exercise, table in TABLES.items():
        # ids start with the exercise's module (qkv, masks …): -k qkv selects one lesson's.
        where = f"{exercise.checker.__module__.rsplit('.', 1)[-1]}: {exercise.title}"
        rows += [pytest.param(exercise, answer, words, id=f"{where}: {name}")
                 for name, answer, words in table.wrong]
        rows += [pytest.param(exercise, answer, None, id=f"{where}: ok {name}")
                 for name, answer in table.right]
    return rows


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_exercise_has_a_mutation_table_of_the_course_standard(key):
    exercise = EXERCISES[key]
    assert exercise in TABLES, f"{key}: no MUTATIONS table in tests/mutations/"
    table = TABLES[exercise]
    assert len(table.wrong) >= MIN_WRONG, f"{key}: {len(table.wrong)} wrong answers"
    assert len(table.right) >= MIN_RIGHT, f"{key}: {len(table.right)} right answers"


@pytest.mark.parametrize(("exercise", "answer", "words"), _mutation_rows())
def test_mutation_tables_wrong_rejected_with_their_message_right_accepted(exercise, answer, words):
    if words is None:
        assert_correct(exercise, answer)
    else:
        assert_incorrect(exercise, answer, words)



def _in_another_kind(value, kind: str):
    """``value`` (a reference's result) as a learner might return the same answer: ``value``
    itself where there is nothing of that kind to change."""
    if isinstance(value, (tuple, list)):
        items = [_in_another_kind(item, kind) for item in value]
        if kind == "a list for a tuple" and isinstance(value, tuple):
            return items
        if all(item is old for item, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if kind == "float64 from float32" and isinstance(value, torch.Tensor) \
            and value.dtype == torch.float32:
        return value.double()
    if kind == "numpy scalars" and isinstance(value, (bool, int, float)):
        return {bool: np.bool_, int: np.int64, float: np.float64}[type(value)](value)
    if kind == "0-d tensors" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value)
    return value


ANSWER_KINDS = ("float64 from float32", "numpy scalars", "0-d tensors", "a list for a tuple")


@pytest.mark.parametrize("kind", ANSWER_KINDS)
@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_checker_accepts_the_right_answer_in_any_kind_a_learner_returns(key, kind):
    """A class of right answers no table has to list: the reference's result in float64 (from
    float32 inputs), as NumPy scalars, as 0-d tensors, as a list where a tuple is expected."""
    results = [result for _args, _kwargs, result in _reference_run(key).calls]
    if all(_in_another_kind(result, kind) is result for result in results):
        pytest.skip("the reference's results hold nothing of this kind: the answer would be "
                    "the reference, judged by test_every_reference_passes_...")
    reference = EXERCISES[key].reference

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        return _in_another_kind(reference(*args, **kwargs), kind)

    assert_correct(EXERCISES[key], answer)


def _in_float16(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_in_float16(item) for item in value)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.half()
    return value


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_a_right_answer_in_float16_is_accepted_or_told_it_is_the_precision(key):
    """The class "right formula, half precision": a checker that looks for known mistakes must
    not read float16 rounding as one of them (the message names the dtype instead)."""
    reference = EXERCISES[key].reference

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        return _in_float16(reference(*args, **kwargs))

    verdict = EXERCISES[key].evaluate(answer)
    assert verdict.status == CORRECT or (
        verdict.status == INCORRECT and "significant digits" in verdict.message), str(verdict)


def _deep_clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_deep_clone(item) for item in value)
    return value


def _write_into(value) -> bool:
    """Change every tensor of ``value`` in place; True if there was one."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            value.logical_not_()
        else:
            value.add_(1)
        return True
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return any([_write_into(item) for item in value])
    return False


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_checker_rejects_a_right_answer_that_writes_into_its_arguments(key):
    """The class "modifies its input in place": the right result, but the caller's tensors are
    changed (a learner's scores.masked_fill_, x += ...)."""
    reference, wrote = EXERCISES[key].reference, []

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        result = _deep_clone(reference(*args, **kwargs))
        wrote.append(any([_write_into(value) for value in (*args, *kwargs.values())]))
        return result

    verdict = EXERCISES[key].evaluate(answer)
    if not any(wrote):
        assert verdict.status == CORRECT, str(verdict)  # no tensor argument to write into
    else:
        assert verdict.status == INCORRECT and "in place" in verdict.message, str(verdict)


def _same_arguments(first, second) -> bool:
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)
                and first.shape == second.shape and first.dtype == second.dtype
                and bool((first == second).all()))
    if isinstance(first, (tuple, list)) and isinstance(second, (tuple, list)):
        return len(first) == len(second) and all(map(_same_arguments, first, second))
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(
            _same_arguments(first[name], second[name]) for name in first)
    return type(first) is type(second) and first == second if not callable(first) else (
        first is second)


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_checker_rejects_an_answer_hard_coded_to_its_first_input(key):
    """The class "right only for the one input the checker uses": an answer that returns, for
    every call, what the right answer returns for the checker's first call. A checker must try
    a second input with another answer (exercises without arguments excepted)."""
    exercise = EXERCISES[key]
    if not inspect.signature(exercise.reference).parameters:
        pytest.skip("the answer takes no input (the learner's own sentence or query)")
    calls = [(args, kwargs) for args, kwargs, _result in _reference_run(key).calls]
    assert not all(_same_arguments(calls[0], call) for call in calls[1:]), (
        f"{key}: the checker tries one input only")
    first = exercise.reference(*calls[0][0], **calls[0][1])
    verdict = exercise.evaluate(lambda *args, **kwargs: first)
    assert verdict.status == INCORRECT, str(verdict)


CJK = re.compile(r"[\u4e00-\u9fff]")
# Four English words in a row: a sentence left untranslated (identifiers have _ . or digits).
ENGLISH_RUN = re.compile(r"\b[A-Za-z]+(?: [A-Za-z]+){3,}\b")


def assert_chinese(message: str, where: str) -> None:
    """``message`` reads as Chinese: it has Chinese characters and no English sentence. What
    the learner's own exception says (after 抛出了) is theirs, not the course's, and is skipped;
    so are diagnose()'s bracketed probe names."""
    ours = message.split("抛出了")[0]
    for name in PROBES:  # diagnose()'s probe names are identifiers, the same in every edition
        ours = ours.replace(f"[{name}]", "")
    assert CJK.search(ours), f"{where}: no Chinese in {message!r}"
    assert not ENGLISH_RUN.search(ours), (
        f"{where}: English left in {message!r}: {ENGLISH_RUN.search(ours).group()!r}")


@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_in_the_chinese_edition_titles_and_hints_are_chinese(key, chinese):
    exercise = EXERCISES[key]
    assert_chinese(str(exercise.title), f"{key}: title")
    assert exercise.hints, f"{key}: no hints"
    for number, hint in enumerate(exercise.hints, 1):
        assert_chinese(str(hint), f"{key}: hint {number}")


# A right answer's message is the framework's "'{title}' works" (its words are tested above and
# in test_the_frameworks_own_messages_follow_the_language), so only the wrong rows, whose
# messages each checker writes, run again in Chinese.
@pytest.mark.parametrize(("exercise", "answer", "words"),
                         [row for row in _mutation_rows() if row.values[2] is not None])
def test_in_the_chinese_edition_every_wrong_answer_is_rejected_in_chinese(
        exercise, answer, words, chinese):
    verdict = exercise.evaluate(answer)
    assert verdict.status == INCORRECT, str(verdict)
    assert_chinese(verdict.message, f"{exercise.title}")


def test_the_frameworks_own_messages_follow_the_language(chinese, capsys):
    assert_chinese(str(double.evaluate(None)), "not attempted")
    assert_chinese(str(double.evaluate(stub)), "stub")
    assert_chinese(str(double.evaluate(lambda x: x)), "incorrect")
    hint = project_qkv.hints[0]
    exercise = Exercise("double", _double_checker, lambda x: 2 * x, hints=(hint,))
    exercise.hint()
    exercise.hint()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"提示 1/1：{translate(hint.english, 'zh-CN')}"
    assert_chinese(lines[1], "after the last hint")
    with pytest.raises(Incorrect) as caught:
        expect_close(torch.tensor([1.0]), torch.tensor([1.0, 2.0]), N_("output"))
    assert str(caught.value).startswith("输出的形状应当是 (2,)")


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


def test_the_learner_gets_clones_and_writing_into_an_argument_is_named():
    original = torch.ones(3)

    def checker(answer):
        attempt(answer, original)
        if not torch.equal(original, torch.ones(3)):
            raise Incorrect("the checker's tensor was modified")

    exercise = Exercise("in place", checker, lambda t: t * 2)
    assert_correct(exercise, lambda t: t * 2)
    assert_correct(exercise, lambda t: t.clone().mul_(2))  # its own copy may change
    assert_incorrect(exercise, lambda t: t.mul_(2), "changed its argument t in place")
    assert_incorrect(exercise, lambda *ts: ts[0].mul_(2), "changed its argument #1 in place")
    assert torch.equal(original, torch.ones(3))
    lengths = [3, 1, 2]
    in_a_list = Exercise("list", lambda answer: attempt(answer, lengths), sorted)
    assert_correct(in_a_list, sorted)
    assert_incorrect(in_a_list, lambda lengths: lengths.sort() or lengths,
                     "changed its argument lengths in place")
    assert_incorrect(in_a_list, lambda lengths: lengths.append(0) or lengths,
                     "the caller's list changes too")
    assert lengths == [3, 1, 2]
    nan = torch.tensor([float("nan"), 1.0])
    assert_correct(Exercise("NaN kept", lambda answer: attempt(answer, nan), abs), abs)


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


BAD_INPUTS = [
    pytest.param(exercises_module.as_bool, (1, "is it equivariant"), {},
                 exercises_module.Incorrect, ("is it equivariant", "True or False", "int"),
                 id="as_bool: an int"),
    pytest.param(exercises_module.reject_half_precision, (torch.ones(2), [1.0, 1.0], "x"), {},
                 TypeError, ("expected", "torch.Tensor", "list"),
                 id="reject_half_precision: expected a list"),
    pytest.param(exercises_module.Exercise, (3, print, print), {}, TypeError,
                 ("title", "N_(...)", "int 3"), id="Exercise: title an int"),
    pytest.param(exercises_module.Exercise, ("title", "checker", print), {}, TypeError,
                 ("checker", "function", "str"), id="Exercise: checker a str"),
    pytest.param(exercises_module.attempt, (3,), {}, TypeError, ("answer", "function", "int 3"),
                 id="attempt: not a function"),
    pytest.param(exercises_module.as_number, ("0.5", "the variance"), {},
                 exercises_module.Incorrect, ("the variance", "number", "str"),
                 id="as_number: a str"),
    pytest.param(exercises_module.expect_shape, ([1.0], (1,), "the output"), {},
                 exercises_module.Incorrect, ("the output", "torch.Tensor", "list"),
                 id="expect_shape: a list"),
    pytest.param(exercises_module.expect_finite, (1.0, "the output"), {},
                 exercises_module.Incorrect, ("the output", "torch.Tensor", "float"),
                 id="expect_finite: a float"),
    pytest.param(exercises_module.expect_close, (torch.ones(2), [1.0, 1.0], "the output"), {},
                 TypeError, ("expected", "torch.Tensor", "list"),
                 id="expect_close: expected a list"),
    pytest.param(exercises_module.is_close, (torch.ones(2), 1.0), {}, TypeError,
                 ("expected", "torch.Tensor", "float"), id="is_close: expected a float"),
    pytest.param(exercises_module.expect_stable, (1.0, "the weights"), {},
                 exercises_module.Incorrect, ("the weights", "torch.Tensor", "float"),
                 id="expect_stable: a float"),
    pytest.param(exercises_module.far_from_zero, ([1.0], torch.ones(2, 2)), {}, TypeError,
                 ("q", "torch.Tensor", "list"), id="far_from_zero: q a list"),
    pytest.param(exercises_module.reject_low_precision, (torch.ones(2), [1.0, 1.0], "x"), {},
                 TypeError, ("expected", "torch.Tensor", "list"),
                 id="reject_low_precision: expected a list"),
]
