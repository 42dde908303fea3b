"""Lesson 04's exercises against their reference solutions and typical wrong answers."""

from __future__ import annotations

import pytest
import torch

from course_utils import attention
from course_utils.exercises import CORRECT, NOT_ATTEMPTED
from course_utils.exercises.heads import merge_heads, split_heads
from tests.exercise_checks import assert_incorrect


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("exercise", [split_heads, merge_heads], ids=lambda e: e.title)
def test_reference_is_correct_and_stub_is_not_attempted(exercise):
    assert exercise.evaluate(exercise.reference).status == CORRECT
    assert exercise.evaluate(stub).status == NOT_ATTEMPTED


def test_references_agree_with_the_package():
    x = torch.randn(2, 5, 12)
    assert torch.equal(split_heads.reference(x, 4), attention.split_heads(x, 4))
    heads = torch.randn(2, 3, 5, 4)
    assert torch.equal(merge_heads.reference(heads), attention.merge_heads(heads))


def test_the_package_helpers_pass_the_checkers():
    assert split_heads.evaluate(attention.split_heads).status == CORRECT
    assert merge_heads.evaluate(attention.merge_heads).status == CORRECT


def _d_k(x, heads):
    return x.shape[-1] // heads


SPLIT_WRONG = {
    "no transpose": (
        lambda x, h: x.view(x.shape[0], x.shape[1], h, _d_k(x, h)),
        "transpose(1, 2)",
    ),
    "reshape straight to heads": (
        lambda x, h: x.reshape(x.shape[0], h, x.shape[1], _d_k(x, h)),
        "deals whole tokens out to the heads",
    ),
    "interleaved features": (
        lambda x, h: x.view(x.shape[0], x.shape[1], _d_k(x, h), h).permute(0, 3, 1, 2),
        "a stride of 3",
    ),
    "hard-coded three heads": (
        lambda x, h: x.view(x.shape[0], x.shape[1], 3, 4).transpose(1, 2),
        "split_heads(x, 4) should have shape (2, 4, 5, 3)",
    ),
    "transposed the wrong axes": (
        lambda x, h: x.view(x.shape[0], x.shape[1], h, _d_k(x, h)).transpose(2, 3),
        "should have shape (2, 3, 5, 4), got (2, 5, 4, 3)",
    ),
}


@pytest.mark.parametrize("name", SPLIT_WRONG)
def test_split_heads_catches_typical_mistakes(name):
    answer, words = SPLIT_WRONG[name]
    assert_incorrect(split_heads, answer, words)


MERGE_WRONG = {
    "view after transpose": (
        lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1),
        "no longer contiguous",
    ),
    "reshape without transpose": (
        lambda x: x.reshape(x.shape[0], x.shape[2], -1),
        "mixes tokens together",
    ),
    "interleaved heads": (
        lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
        "interleaved",
    ),
    "transpose only": (lambda x: x.transpose(1, 2), "concatenated into one feature axis"),
    "averaged the heads": (lambda x: x.mean(dim=1), "should have shape (2, 5, 12)"),
}


@pytest.mark.parametrize("name", MERGE_WRONG)
def test_merge_heads_catches_typical_mistakes(name):
    answer, words = MERGE_WRONG[name]
    assert_incorrect(merge_heads, answer, words)
