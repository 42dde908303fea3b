"""The one assertion every exercise test makes about a wrong answer."""

from __future__ import annotations

from course_utils.exercises import INCORRECT, Exercise


def assert_incorrect(exercise: Exercise, answer, words: str) -> None:
    """``answer`` must be judged incorrect, with ``words`` in the reason the learner reads."""
    verdict = exercise.evaluate(answer)
    assert verdict.status == INCORRECT, f"expected incorrect, got: {verdict}"
    assert words in verdict.message, f"{words!r} missing from: {verdict.message}"
