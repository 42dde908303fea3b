"""A small exercise framework in the spirit of Kaggle's learntools.

Each exercise is data: a checker that runs the learner's function, hints in order, and a
reference solution. ``check()`` keeps four outcomes apart and never raises into the
notebook: not attempted, incorrect (with a reason to act on), correct, and the rare case
where the checker itself failed (reported as the course's bug, never as the learner's).

Checkers call the learner's code only through :func:`attempt`, which hands over clones of
the inputs (so in-place edits cannot change what the checker compares against), rejects a
function that writes into its tensor arguments, and tells the learner's exceptions apart
from the checker's own (:mod:`course_utils.learner_code`, shared with ``diagnose()``).
``evaluate`` restores Python's, NumPy's and torch's global random state, so checking never
reseeds the learner's session. Every exercise of the lessons registers itself in a
:class:`course_utils.registry.Registry`: :func:`all_exercises` lists them for the tests.

Messages follow the course language (``setup(language="zh-CN")`` for the Chinese edition):
checkers raise ``Incorrect(_("..."))``, titles and hints are ``N_("...")``, translated when
shown (``course_utils.language``).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from course_utils.checks import require_callable, require_instance
from course_utils.language import Message, _, in_english
from course_utils.learner_code import call_learners_code, kept_random_state, raised_by_learner
from course_utils.listings import source_listing
from course_utils.registry import Registry

# The package whose modules hold the lessons' exercises (``l01`` ... ``lNN``).
_PACKAGE = __name__.rpartition(".")[0]
NOT_ATTEMPTED = "not attempted"
INCORRECT = "incorrect"
CORRECT = "correct"
CHECKER_FAILED = "checker failed"


class Incorrect(Exception):
    """Raised by a checker with a reason the learner can act on.

    Used in every lesson.
    """


class _NotAttempted(Exception):
    pass


@dataclass(frozen=True)
class Verdict:
    """What ``check()`` returns: one of the four outcomes and its message.

    Used in every lesson.
    """
    status: str
    message: str

    def __str__(self) -> str:
        mark = {CORRECT: _("✓ Correct"), INCORRECT: _("✗ Incorrect"),
                NOT_ATTEMPTED: _("… Not attempted"),
                CHECKER_FAILED: _("⚠ Checker failed")}
        return _("{mark}: {message}").format(mark=mark[self.status], message=self.message)


def _cloned(value):
    """A copy of ``value`` the learner may modify freely (tensors cloned, containers copied)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple, dict, torch.nn.Module)):  # a module: .double() is in place
        return copy.deepcopy(value)
    return value


def _unchanged(before, after) -> bool:
    """True if ``after`` holds what ``before`` held: a tensor's values (NaN where it held NaN),
    a list's, tuple's or dict's items and numbers; a module or a function is not compared."""
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or before.shape != after.shape \
                or before.dtype != after.dtype:
            return False
        if before.is_floating_point() or before.is_complex():
            nan = torch.isnan(before)
            return bool((nan == torch.isnan(after)).all()) and bool(
                (before == after)[~nan].all())
        return torch.equal(before, after)
    if isinstance(before, (list, tuple)):
        return isinstance(after, (list, tuple)) and len(before) == len(after) and all(
            map(_unchanged, before, after))
    if isinstance(before, dict):
        return isinstance(after, dict) and before.keys() == after.keys() and all(
            _unchanged(before[name], after[name]) for name in before)
    if isinstance(before, (bool, int, float, str)):  # the items of a list such as lengths
        return before == after or before != before and after != after  # NaN stays NaN
    return True


def _names_of(answer: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The learner's parameter name for each argument (positional ones first), where known."""
    try:
        parameters = list(inspect.signature(answer).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        parameters = []
    positional = [parameter.name for parameter in parameters if parameter.kind in (
        parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)][:len(args)]
    return [*positional, *(f"#{number}" for number in range(len(positional) + 1, len(args) + 1)),
            *kwargs]


def _reject_changed_arguments(answer, args, kwargs, copies) -> None:
    """Raise Incorrect if the learner's function wrote into one of its arguments."""
    for name, value, copy_of_value in zip(_names_of(answer, args, kwargs),
                                          (*args, *kwargs.values()), copies, strict=True):
        if not _unchanged(copy_of_value, value):
            raise Incorrect(_(
                "your function changed its argument {name} in place (an operation ending in _ "
                "such as masked_fill_ or add_, +=, or an assignment into a slice): the caller's "
                "{kind} changes too. Work on a copy (.clone()) or use the operation without "
                "the _").format(name=name, kind=type(value).__name__))


def attempt(answer: Callable, *args, **kwargs):
    """Call the learner's function on clones of the arguments.

    A stub (``None`` returned or ``NotImplementedError`` raised) means not attempted; any
    other exception is the learner's and is reported as such. A function that writes into a
    tensor argument (``scores.masked_fill_(...)``) is Incorrect: in the notebook it would
    change the caller's tensor.

    Used in every lesson.
    """
    require_callable("answer", answer)
    args = tuple(_cloned(arg) for arg in args)
    kwargs = {name: _cloned(value) for name, value in kwargs.items()}
    copies = [_cloned(value) for value in (*args, *kwargs.values())]
    try:
        result = call_learners_code(answer, *args, **kwargs)
    except NotImplementedError:
        raise _NotAttempted from None
    if result is None:
        raise _NotAttempted
    _reject_changed_arguments(answer, args, kwargs, copies)
    return result


def _expect_tensor(value, what: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise Incorrect(_(
            "{what} should be a torch.Tensor, got {kind}").format(
            what=what, kind=type(value).__name__))


def expect_shape(value, shape: Sequence[int], what: str) -> None:
    """Raise Incorrect unless ``value`` is a tensor of exactly ``shape``.

    Used in every lesson.
    """
    _expect_tensor(value, what)
    if tuple(value.shape) != tuple(shape):
        raise Incorrect(_(
            "{what} should have shape {shape}, got {value_shape}").format(
            what=what, shape=tuple(shape), value_shape=tuple(value.shape)))


def expect_finite(value: torch.Tensor, what: str) -> None:
    """Raise Incorrect if ``value`` holds NaN or ±inf (never a right answer here).

    Used in every lesson.
    """
    _expect_tensor(value, what)
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = "NaN" if torch.isnan(value).any() else "inf"
        raise Incorrect(_(
            "{what} contains {bad}; look for a division by zero, a softmax over a row with no "
            "allowed key, or -inf that reached a sum").format(what=what, bad=bad))


def expect_stable(value, what: str) -> None:
    """Raise Incorrect naming overflow if ``value``, computed from scores in the hundreds or
    thousands, holds NaN or ±inf: ``exp`` of such a score overflows (or every term underflows
    to 0), which subtracting the row's maximum first avoids.

    Used in every lesson.
    """
    _expect_tensor(value, what)
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = "NaN" if torch.isnan(value).any() else "inf"
        raise Incorrect(_(
            "{what} contains {bad} when the scores are in the thousands (as in a trained model): "
            "exp() of a large score overflows, and exp() of very negative ones all round to 0. "
            "Subtract each row's maximum before exp (torch.softmax and torch.logsumexp do it for "
            "you)").format(what=what, bad=bad))


def far_from_zero(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 copies of ``q`` (..., n_q, d_k) and ``k`` (..., n_k, d_k) whose scores
    ``q @ k^T`` are those of the other d_k - 1 features plus an offset per query in the
    thousands, positive and negative (the first feature: the same for every key, large for
    each query). Each row's softmax is unchanged, so a right answer's weights still depend on
    the keys, while ``exp(scores)`` overflows (or every term underflows) unless the row's
    maximum is subtracted; float64, so that a right answer's rounding stays far inside the
    checkers' tolerance.

    Used in every lesson.
    """
    require_instance("q", q, torch.Tensor, _("a torch.Tensor"))
    require_instance("k", k, torch.Tensor, _("a torch.Tensor"))
    n_q, d_k = q.shape[-2], q.shape[-1]
    pattern = torch.tensor([2500.0, -3000.0, 1200.0, -900.0, 4000.0], dtype=torch.float64)
    offsets = pattern.repeat(n_q // len(pattern) + 1)[:n_q] * d_k ** 0.5  # (n_q,)
    q, k = q.detach().double().clone(), k.detach().double().clone()
    k[..., 0] = 50.0
    q[..., 0] = offsets / 50.0
    return q, k


_HALF_PRECISION = (torch.float16, torch.bfloat16)


def _only_half_precision_rounding(value, expected: torch.Tensor) -> bool:
    """True if ``value`` is a float16/bfloat16 tensor that matches ``expected`` to its own
    rounding (about 3 significant digits) but not to the checker's tolerance."""
    if not (isinstance(value, torch.Tensor) and value.dtype in _HALF_PRECISION
            and expected.dtype not in _HALF_PRECISION
            and tuple(value.shape) == tuple(expected.shape)):
        return False
    got, want = value.detach().double(), expected.detach().double()
    scale = want.abs().max().item() if want.numel() else 0.0
    return bool(torch.isfinite(got).all()) and torch.allclose(
        got, want, atol=1e-2 * max(scale, 1e-3), rtol=1e-2)


def reject_half_precision(value, expected: torch.Tensor, what: str) -> None:
    """Raise Incorrect naming the dtype when ``value`` is right only to float16/bfloat16
    rounding: the cause is the precision, not the formula (checkers that look for known
    mistakes call it first, so a rounding gap is never mistaken for one).

    Used in every lesson.
    """
    require_instance("expected", expected, torch.Tensor, _("a torch.Tensor"))
    if _only_half_precision_rounding(value, expected) and not is_close(value, expected):
        raise Incorrect(_(
            "{what} is {dtype}, which keeps only about 3 significant digits: right to that "
            "precision, but the check needs more; compute and return float32 (or "
            "float64)").format(what=what, dtype=value.dtype))


def reject_low_precision(value, expected: torch.Tensor, what: str) -> None:
    """Raise Incorrect naming the precision when ``value`` (of any float dtype) matches
    ``expected`` only to about 3 significant digits: the formula was right but computed in
    float16 or bfloat16 somewhere (then cast back), which a checker looking for known mistakes
    would otherwise misread as one of them.

    Used in every lesson.
    """
    require_instance("expected", expected, torch.Tensor, _("a torch.Tensor"))
    if not (isinstance(value, torch.Tensor) and value.is_floating_point()
            and tuple(value.shape) == tuple(expected.shape)) or is_close(value, expected):
        return
    reject_half_precision(value, expected, what)
    got, want = value.detach().double(), expected.detach().double()
    scale = want.abs().max().item() if want.numel() else 0.0
    if bool(torch.isfinite(got).all()) and torch.allclose(
            got, want, atol=1e-2 * max(scale, 1e-3), rtol=1e-2):
        gap = (got - want).abs().max().item()
        raise Incorrect(_(
            "{what} is right to about 3 significant digits only (off by up to {gap:.2g}): the "
            "formula is right, but part of it was computed in float16 or bfloat16, which keep "
            "about 3 significant digits. Compute in the inputs' dtype (float32 or "
            "float64)").format(what=what, gap=gap))


def is_close(value, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True if ``value`` would pass :func:`expect_close`: a checker uses it to recognise a
    known mistake (a finite float tensor of the right shape, equal in float64).

    Used in every lesson.
    """
    require_instance("expected", expected, torch.Tensor, _("a torch.Tensor"))
    return (isinstance(value, torch.Tensor) and value.is_floating_point()
            and tuple(value.shape) == tuple(expected.shape)
            and bool(torch.isfinite(value).all())
            and torch.allclose(value.detach().double(), expected.detach().double(),
                               atol=atol, rtol=rtol))


def expect_close(value, expected: torch.Tensor, what: str, atol: float = 1e-5,
                 rtol: float = 1e-4) -> None:
    """Raise Incorrect unless ``value`` matches ``expected`` within ``atol + rtol·|expected|``.

    Any floating dtype is accepted (both sides are compared in float64); an integer or bool
    tensor where floats are expected, another device, or NaN/inf get their own message.

    Used in every lesson.
    """
    require_instance("expected", expected, torch.Tensor, _("a torch.Tensor"))
    expect_shape(value, expected.shape, what)
    if expected.is_floating_point() and not value.is_floating_point():
        raise Incorrect(_(
            "{what} should be a floating-point tensor, got dtype {dtype}").format(
            what=what, dtype=value.dtype))
    if value.device != expected.device:
        raise Incorrect(_(
            "{what} is on {device}, expected {expected_device}").format(
            what=what, device=value.device, expected_device=expected.device))
    expect_finite(value, what)
    got, want = value.detach().double(), expected.detach().double()
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        reject_half_precision(value, expected, what)
        gap = (got - want).abs().max().item()
        raise Incorrect(_(
            "{what} has the right shape but its values are off by up to {gap:.3g}").format(
            what=what, gap=gap))


def as_number(value, what: str) -> float:
    """The learner's scalar answer as a finite float, or Incorrect saying what came.

    Used in every lesson.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise Incorrect(_(
                "{what} should be one number, got a tensor of shape {value_shape}").format(
                what=what, value_shape=tuple(value.shape)))
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise Incorrect(_(
            "{what} should be a number, got {kind}").format(
            what=what, kind=type(value).__name__))
    value = float(value)
    if not np.isfinite(value):
        raise Incorrect(_("{what} is {value}, not a finite number").format(what=what, value=value))
    return value


def as_bool(value, what: str) -> bool:
    """The learner's yes/no answer as a bool: Python's or NumPy's bool, or a one-element bool
    tensor; anything else (an int, a float, a string) gets Incorrect saying what came.

    Used in every lesson.
    """
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.numel() == 1:
        return bool(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise Incorrect(_("{what}: return True or False, got {kind}").format(
        what=what, kind=type(value).__name__))


# The course's exercises, "module:English title" -> exercise (made-up ones of the tests are
# left out: they may reuse a title, and all_exercises() lists the lessons' only).
_EXERCISES: Registry[Exercise] = Registry("exercise")


@dataclass(eq=False)  # compared by identity, so exercises can key the tests' tables
class Exercise:
    """One exercise: ``checker(answer)`` raises Incorrect, ``reference`` is the solution.

    ``title`` and each hint are a str or a :class:`Message`; the English title names the
    exercise in the registry.

    Used in every lesson.
    """

    title: str | Message
    checker: Callable[[Callable], None]
    reference: Callable
    hints: Sequence[str | Message] = field(default_factory=tuple)
    _hints_given: int = field(default=0, init=False, repr=False)

    def __post_init__(self):
        require_instance("title", self.title, (str, Message), _("a str or N_(...)"))
        require_callable("checker", self.checker)
        require_callable("reference", self.reference)
        if self.checker.__module__.startswith(f"{_PACKAGE}."):
            _EXERCISES.add(f"{self.checker.__module__}:{in_english(self.title)}", self)

    def evaluate(self, answer) -> Verdict:
        """Return the verdict for ``answer`` without printing."""
        if answer is None:
            return Verdict(NOT_ATTEMPTED, _(
                "write your solution for '{title}' first").format(title=self.title))
        with kept_random_state():
            try:
                self.checker(answer)
            except _NotAttempted:
                return Verdict(NOT_ATTEMPTED, _(
                    "your function still returns None or raises NotImplementedError"))
            except Incorrect as reason:
                return Verdict(INCORRECT, str(reason))
            except Exception as error:
                if raised_by_learner(error):
                    return Verdict(INCORRECT, _(
                        "your code raised {kind}: {error}").format(
                        kind=type(error).__name__, error=error))
                # Anything else is a bug of the course, not of the answer.
                return Verdict(CHECKER_FAILED, _(
                    "the checker itself failed ({kind}: {error}). This is a bug in the course, "
                    "not in your answer: please report it.").format(
                    kind=type(error).__name__, error=error))
        return Verdict(CORRECT, _("'{title}' works").format(title=self.title))

    def check(self, answer) -> None:
        """Print the verdict for the learner's ``answer`` (a function)."""
        print(self.evaluate(answer))

    def hint(self) -> None:
        """Print the next hint; after the last one, point at the solution."""
        if self._hints_given >= len(self.hints):
            print(_("No more hints: call .solution() to see a reference answer."))
            return
        self._hints_given += 1
        print(_("Hint {number}/{total}: {hint}").format(
            number=self._hints_given, total=len(self.hints),
            hint=self.hints[self._hints_given - 1]))

    def solution(self) -> None:
        """Print the source code of the reference solution."""
        print(source_listing(self.reference))


def all_exercises() -> dict[str, Exercise]:
    """Every exercise of the course, ``{"module:title": exercise}`` (imports all modules).

    Used in every lesson.
    """
    package = importlib.import_module(_PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{_PACKAGE}.{module.name}")
    return dict(_EXERCISES.items())
