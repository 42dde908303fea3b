"""Calling the learner's code: what an exercise's checker and ``diagnose()`` share.

Both run code the learner wrote and must blame the right one when something raises: an
exception raised inside the learner's code is marked (:func:`call_learners_code`) and
recognised later (:func:`raised_by_learner`), so a verdict says "your code raised ..." and
never reports it as the course's bug. Both also leave the learner's session as it was:
:func:`kept_random_state` restores Python's, NumPy's and torch's global random generators.
Protecting the caller's tensors differs (an exercise rejects an in-place edit, ``diagnose()``
has a probe that names it), so each does it its own way.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

from course_utils.checks import require_callable, require_instance, require_seed
from course_utils.language import _

# Set on an exception raised inside the learner's code, to tell it apart from one of the
# course's own (a checker may still catch it, e.g. a RuntimeError it expects).
_RAISED_BY_LEARNER = "_raised_by_learners_code"


def call_learners_code(function: Callable, *args, **kwargs):
    """``function(*args, **kwargs)``; an exception it raises is marked as the learner's and
    raised on.

    Used in every lesson.
    """
    require_callable("function", function)
    try:
        return function(*args, **kwargs)
    except Exception as error:
        setattr(error, _RAISED_BY_LEARNER, True)
        raise


def raised_by_learner(error: BaseException) -> bool:
    """True if ``error`` came out of :func:`call_learners_code`: the learner's code raised it.

    Used in every lesson.
    """
    require_instance("error", error, BaseException, _("an exception"))
    return getattr(error, _RAISED_BY_LEARNER, False)


def kept_random_state(seed: int | None = None):
    """A context that runs its block from the random state ``seed`` (if given: Python's,
    NumPy's and torch's CPU generators seeded with it) and restores the three generators
    afterwards, so that checking the learner's code never moves the learner's random numbers.

    Used in every lesson.
    """
    return _random_state_kept(None if seed is None else require_seed("seed", seed))


@contextmanager
def _random_state_kept(seed: int | None) -> Iterator[None]:
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed)
            # The CPU generator only, the one restored below: torch.manual_seed would also
            # reseed (and leave reseeded) every GPU generator, and where torch has no GPU it
            # queues those seeds with a formatted copy of the call stack, two thirds of what
            # a diagnose() costs.
            torch.default_generator.manual_seed(seed)
        yield
    finally:
        python_state, numpy_state, torch_state = states
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
