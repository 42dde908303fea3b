"""The lessons' exercises, one module per lesson (``l01`` ... ``l14``), on the framework of
:mod:`course_utils.exercises.framework` (re-exported here, so an exercise module writes
``from course_utils.exercises import Exercise, Incorrect, attempt``)."""

from course_utils.exercises.framework import (
    CHECKER_FAILED,
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    Exercise,
    Incorrect,
    Verdict,
    all_exercises,
    as_bool,
    as_number,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    expect_stable,
    far_from_zero,
    is_close,
    reject_half_precision,
    reject_low_precision,
)

__all__ = ["CHECKER_FAILED", "CORRECT", "INCORRECT", "NOT_ATTEMPTED", "Exercise", "Incorrect",
           "Verdict", "all_exercises", "as_bool", "as_number", "attempt", "expect_close",
           "expect_finite", "expect_shape", "expect_stable",
           "far_from_zero", "is_close", "reject_half_precision",
           "reject_low_precision"]
