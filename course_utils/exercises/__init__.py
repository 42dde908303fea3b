"""A small exercise framework in the spirit of Kaggle's learntools.

Each exercise is data: a checker that runs the learner's function, hints in order, and a
reference solution. ``check()`` keeps three outcomes apart and never raises into the
notebook: not attempted, incorrect (with a reason to act on), correct.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

NOT_ATTEMPTED = "not attempted"
INCORRECT = "incorrect"
CORRECT = "correct"


class Incorrect(Exception):
    """Raised by a checker with a reason the learner can act on."""


class _NotAttempted(Exception):
    pass


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str

    def __str__(self) -> str:
        mark = {CORRECT: "✓ Correct", INCORRECT: "✗ Incorrect", NOT_ATTEMPTED: "… Not attempted"}
        return f"{mark[self.status]}: {self.message}"


def attempt(answer: Callable, *args, **kwargs):
    """Call the learner's function; a stub (None or NotImplementedError) means not attempted."""
    try:
        result = answer(*args, **kwargs)
    except NotImplementedError:
        raise _NotAttempted from None
    if result is None:
        raise _NotAttempted
    return result


def expect_shape(value, shape: Sequence[int], what: str) -> None:
    """Raise Incorrect unless ``value`` is a tensor of exactly ``shape``."""
    if not isinstance(value, torch.Tensor):
        raise Incorrect(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise Incorrect(f"{what} should have shape {tuple(shape)}, got {tuple(value.shape)}")


def expect_close(value, expected: torch.Tensor, what: str, atol: float = 1e-5) -> None:
    """Raise Incorrect unless ``value`` matches ``expected`` in shape and within ``atol``."""
    expect_shape(value, expected.shape, what)
    if not torch.allclose(value.to(expected.dtype), expected, atol=atol):
        gap = (value.to(expected.dtype) - expected).abs().max().item()
        raise Incorrect(f"{what} has the right shape but its values are off by up to {gap:.3g}")


@dataclass
class Exercise:
    """One exercise: ``checker(answer)`` raises Incorrect, ``reference`` is the solution."""

    title: str
    checker: Callable[[Callable], None]
    reference: Callable
    hints: Sequence[str] = field(default_factory=tuple)
    _hints_given: int = field(default=0, init=False, repr=False)

    def evaluate(self, answer) -> Verdict:
        """Return the verdict for ``answer`` without printing."""
        if answer is None:
            return Verdict(NOT_ATTEMPTED, f"write your solution for '{self.title}' first")
        try:
            self.checker(answer)
        except _NotAttempted:
            return Verdict(
                NOT_ATTEMPTED,
                "your function still returns None or raises NotImplementedError",
            )
        except Incorrect as reason:
            return Verdict(INCORRECT, str(reason))
        except Exception as error:  # the learner's code failed: report it, don't raise
            return Verdict(INCORRECT, f"your code raised {type(error).__name__}: {error}")
        return Verdict(CORRECT, f"'{self.title}' works")

    def check(self, answer) -> None:
        """Print the verdict for the learner's ``answer`` (a function)."""
        print(self.evaluate(answer))

    def hint(self) -> None:
        """Print the next hint; after the last one, point at the solution."""
        if self._hints_given >= len(self.hints):
            print("No more hints: call .solution() to see a reference answer.")
            return
        self._hints_given += 1
        print(f"Hint {self._hints_given}/{len(self.hints)}: {self.hints[self._hints_given - 1]}")

    def solution(self) -> None:
        """Print the source code of the reference solution."""
        print(textwrap.dedent(inspect.getsource(self.reference)))
