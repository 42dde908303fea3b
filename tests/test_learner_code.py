"""Calling the learner's code (course_utils/learner_code.py): exceptions marked as the
learner's, and the global random state kept."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from course_utils.learner_code import call_learners_code, kept_random_state, raised_by_learner


def _draws() -> tuple:
    return random.random(), np.random.rand(), torch.rand(()).item()


def test_an_exception_of_the_learners_code_is_marked_and_others_are_not():
    with pytest.raises(ZeroDivisionError) as raised:
        call_learners_code(lambda x: x / 0, 1)
    assert raised_by_learner(raised.value)
    assert not raised_by_learner(ZeroDivisionError("the course's own"))
    assert call_learners_code(lambda x, y=0: x + y, 1, y=2) == 3


@pytest.mark.parametrize("seed", [None, 3])
def test_the_random_state_is_kept_even_when_the_block_raises(seed):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = _draws()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    with pytest.raises(RuntimeError), kept_random_state(seed):
        _draws()
        raise RuntimeError
    assert _draws() == expected


def test_a_seed_gives_the_same_draws_every_time_as_seeding_each_generator_would():
    firsts = []
    for _ in range(2):
        with kept_random_state(5):
            firsts.append(_draws())
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    assert firsts[0] == firsts[1] == _draws()


BAD_INPUTS = [
    pytest.param(call_learners_code, (None,), {}, TypeError, ("function", "None"),
                 id="call_learners_code: not callable"),
    pytest.param(raised_by_learner, ("boom",), {}, TypeError, ("error", "an exception", "str"),
                 id="raised_by_learner: not an exception"),
    pytest.param(kept_random_state, (-1,), {}, ValueError, ("seed", "-1"),
                 id="kept_random_state: negative seed"),
    pytest.param(kept_random_state, (1.5,), {}, TypeError, ("seed", "float"),
                 id="kept_random_state: float seed"),
]
