"""Mutation tables for the exercise checkers, and the assertions made on them.

Each ``tests/mutations/lNN.py`` defines ``MUTATIONS = {exercise: Mutations(...)}``:
plausible wrong answers, each with words its message must contain, and correct answers
written differently from the reference. ``tests/test_exercises.py`` collects every table
and runs every row, so a checker that ticks a wrong answer or rejects a right one fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from course_utils.exercises import CORRECT, INCORRECT, Exercise

# What every exercise's table must hold at least (the course's standard).
MIN_WRONG, MIN_RIGHT = 6, 4


@dataclass(frozen=True)
class Mutations:
    """``wrong``: (id, answer, words in the message); ``right``: (id, answer)."""

    wrong: Sequence[tuple[str, Callable, str]]
    right: Sequence[tuple[str, Callable]]


def assert_incorrect(exercise: Exercise, answer, words: str) -> None:
    """``answer`` must be judged incorrect, with ``words`` in the reason the learner reads."""
    verdict = exercise.evaluate(answer)
    assert verdict.status == INCORRECT, f"expected incorrect, got: {verdict}"
    assert words in verdict.message, f"{words!r} missing from: {verdict.message}"


def assert_correct(exercise: Exercise, answer) -> None:
    """``answer`` must be judged correct."""
    verdict = exercise.evaluate(answer)
    assert verdict.status == CORRECT, f"expected correct, got: {verdict}"
