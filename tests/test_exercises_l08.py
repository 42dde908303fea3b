"""Lesson 08's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l08.py)."""

from __future__ import annotations

from course_utils.exercises.l08 import (
    buggy_half_precision_attention,
    fix_half_precision_attention,
)


def test_probes_that_fail_only_through_the_shapes_problem_are_named_once():
    verdict = fix_half_precision_attention.evaluate(buggy_half_precision_attention)
    assert "[shapes] works on (batch, seq_len, d_k) inputs" in verdict.message
    assert "right without heads, raised with a heads axis (see shapes)" in verdict.message
    assert verdict.message.count("see the shapes probe") == 0
