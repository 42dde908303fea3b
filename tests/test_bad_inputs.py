"""Every public name answers bad input with a clear error: the tables of all test modules.

Any ``tests/test_*.py`` may define a table ``BAD_INPUTS``, a list of rows

    pytest.param(function, args, kwargs, error, words, id="what is wrong")

- ``function``: the public callable (a function, a class to construct, a module instance);
- ``args`` (a tuple) and ``kwargs`` (a dict): the bad call is ``function(*args, **kwargs)``;
- ``error``: the exception type it must raise (``TypeError`` for the wrong kind of thing,
  ``ValueError`` for the right kind with a wrong value, shape or device);
- ``words``: a tuple of strings that must all appear in the message: the argument's name,
  what was expected and what came (e.g. ``("d_model", "positive int", "got 0")``).

This module collects every table (its own included) and runs each row; the ids are prefixed
with the defining module. Rows live next to the tests of the module they exercise. Each row
runs twice: in English, where ``words`` must appear, and under ``setup(language="zh-CN")``,
where a ValueError or TypeError that course_utils raises must read as Chinese (Chinese
characters, no run of English words; what the caller passed is theirs).
``test_every_public_name_has_a_row`` checks that each public name of every module of
``course_utils`` (found with pkgutil, so a new module is covered from its first commit) has
at least one row; the only exceptions are listed, each with its reason, in
``NOT_COVERED`` (whole modules) and ``NO_INPUT_TO_CHECK`` (single names).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import traceback
from pathlib import Path

import pytest
import torch
from torch import nn

import course_utils
from course_utils.language import set_language
from course_utils.nn.training import fit
from course_utils.notebook import claim, lesson_generator, seeds, setup
from tests.test_exercises import assert_chinese

# Modules whose public names need no row, and why. Everything else pkgutil finds is covered.
NOT_COVERED = {
    # diagnose()'s machinery: called only by diagnose() with the Probing, subjects and layouts
    # it builds from its own validated arguments (diagnose's rows are in test_diagnostics.py).
    "course_utils.diagnostics.probes": "diagnose()'s probes",
    "course_utils.diagnostics.probing": "the inputs diagnose() builds for its probes",
    "course_utils.diagnostics.probe_registry": "the probes' declarations",
    "course_utils.diagnostics.subjects": "the implementation under test, as diagnose() wraps it",
    # Specimens, not API: lesson 08 prints their source for the learner to spot the one
    # line that is wrong, and diagnose() must meet their bugs, not a validator's refusal.
    "course_utils.experiments.l08_bug_gallery": "the gallery of broken attention functions",
    "course_utils.exercises.l08": "the broken functions of lesson 08's exercises",
}

# Single public names that take no input a learner could get wrong.
NO_INPUT_TO_CHECK = {
    # Records the package fills and returns (frozen dataclasses); nobody builds them by hand.
    "course_utils.diagnostics.report.Finding",
    "course_utils.diagnostics.report.Report",
    "course_utils.exercises.framework.Verdict",
    "course_utils.experiments.l04_heads.TwoRelationBatch",
    "course_utils.models.gpt.TrainingCurve",
    "course_utils.models.minilm.MiniLMOutput",
    "course_utils.models.smollm2.gguf_file.GGUFFile",
    "course_utils.models.smollm2.gguf_file.GGUFTensor",
    "course_utils.models.smollm2.loading.SmolLM2Config",
    "course_utils.views.explorer_model.ComputationSteps",
    "course_utils.views.explorer_model.ExplorerState",
    "course_utils.views.live_view.LiveState",
    "course_utils.views.live_view.ReadableText",
    "course_utils.views.translator_view.ReadableWords",
    "course_utils.views.translator_view.TranslatorState",
    "course_utils.views.scaling_widget.ScalingState",
    # A protocol: a type tokenizers are checked against, never called.
    "course_utils.data.tokenizer_protocol.TextTokenizer",
}


def _covered_modules() -> list:
    """Every module of course_utils that is not in ``NOT_COVERED``, imported."""
    names = [info.name for info in pkgutil.walk_packages(course_utils.__path__, "course_utils.")]
    return [importlib.import_module(name) for name in sorted(names)
            if not any(name == skip or name.startswith(f"{skip}.") for skip in NOT_COVERED)]


COVERED_MODULES = _covered_modules()

# The rows of the modules that have no test module of their own here.
_model = nn.Linear(2, 1)


def _loss(step):
    return _model(torch.ones(1, 2)).square().sum()


BAD_INPUTS = [
    pytest.param(setup, (1.5,), {}, TypeError, ("seed", "int", "float 1.5"), id="setup: float"),
    pytest.param(setup, ("1",), {}, TypeError, ("seed", "int", "str '1'"), id="setup: str"),
    pytest.param(setup, (-1,), {}, ValueError, ("seed", "0 to 2**32 - 1", "-1"),
                 id="setup: negative"),
    pytest.param(setup, (), {"language": "zh"}, ValueError, ("language", "'zh-CN'", "'zh'"),
                 id="setup: unknown language"),
    pytest.param(claim, (torch.tensor([True, False]), "rows sum to one"), {}, ValueError,
                 ("one truth value", "(2,)", ".all()"), id="claim: a tensor of two"),
    pytest.param(claim, ("yes", "it works"), {}, TypeError, ("bool", "str"), id="claim: a str"),
    pytest.param(seeds, (0,), {}, ValueError, ("n", "positive int", "got 0"), id="seeds: zero"),
    pytest.param(seeds, (1001,), {}, ValueError, ("n", "at most 1000", "1001"),
                 id="seeds: too many"),
    pytest.param(lesson_generator, (-1,), {}, ValueError, ("index", "0..999", "-1"),
                 id="lesson_generator: negative"),
    pytest.param(lesson_generator, (1.0,), {}, TypeError, ("index", "int", "float 1.0"),
                 id="lesson_generator: float"),
    pytest.param(claim, (True, ""), {}, TypeError, ("statement", "str", "''"),
                 id="claim: empty statement"),
    pytest.param(fit, (_model.weight, _loss, 3), {}, TypeError,
                 ("model", "torch.nn.Module", "tensor of shape (1, 2)"),
                 id="fit: not a module"),
    pytest.param(fit, (_model, 0.5, 3), {}, TypeError,
                 ("loss_at_step", "function", "float 0.5"), id="fit: loss not callable"),
    pytest.param(fit, (_model, _loss, 0), {}, ValueError, ("steps", "positive int", "got 0"),
                 id="fit: zero steps"),
    pytest.param(fit, (_model, _loss, 10.0), {}, TypeError, ("steps", "positive int", "float"),
                 id="fit: float steps"),
    pytest.param(fit, (_model, _loss, 3), {"lr": 0}, ValueError, ("lr", "> 0", "0"),
                 id="fit: zero lr"),
    pytest.param(fit, (_model, _loss, 3), {"lr": "1e-3"}, TypeError,
                 ("lr", "positive number", "str"), id="fit: lr a str"),
    pytest.param(fit, (_model, _loss, 3), {"max_grad_norm": -1.0}, ValueError,
                 ("max_grad_norm", "> 0", "-1.0"), id="fit: negative max_grad_norm"),
    pytest.param(fit, (_model, _loss, 3), {"lr_at_step": 0.5}, TypeError,
                 ("lr_at_step", "function", "float 0.5"), id="fit: lr_at_step not callable"),
    pytest.param(fit, (_model, _loss, 3), {"evaluate": 1}, TypeError,
                 ("evaluate", "function", "int 1"), id="fit: evaluate not callable"),
    pytest.param(fit, (_model, _loss, 3), {"eval_every": 0}, ValueError,
                 ("eval_every", "positive int", "0"), id="fit: eval_every 0"),
    pytest.param(fit, (_model, lambda step: 1.0, 3), {}, ValueError,
                 ("loss_at_step(step)", "scalar loss tensor", "float"), id="fit: loss a float"),
    pytest.param(fit, (_model, lambda step: _loss(step).detach(), 3), {}, ValueError,
                 ("loss_at_step(step)", "without a gradient", "no_grad"),
                 id="fit: detached loss"),
]


def _tables() -> list:
    """Every ``BAD_INPUTS`` row of tests/test_*.py, its id prefixed with the module's name."""
    rows = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        for row in getattr(module, "BAD_INPUTS", []):
            function, args, kwargs, error, words = row.values
            assert isinstance(args, tuple) and isinstance(kwargs, dict), (
                f"{path.name} {row.id}: args must be a tuple and kwargs a dict"
            )
            assert isinstance(words, tuple) and words, f"{path.name} {row.id}: words is a tuple"
            rows.append(pytest.param(*row.values, id=f"{path.stem[5:]}: {row.id}",
                                     marks=row.marks))
    return rows


ROWS = _tables()


@pytest.mark.parametrize(("function", "args", "kwargs", "error", "words"), ROWS)
def test_bad_input_gets_a_clear_error(function, args, kwargs, error, words):
    with pytest.raises(Exception) as raised:
        function(*args, **kwargs)
    message = str(raised.value)
    assert raised.type is error, f"expected {error.__name__}, got {raised.type.__name__}: {message}"
    missing = [word for word in words if word not in message]
    assert not missing, f"{missing} missing from the message: {message}"


ROOT = Path(course_utils.__file__).resolve().parent.parent
# A value the learner passed, as repr() quotes it: their words, not the course's.
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


@pytest.mark.parametrize(("function", "args", "kwargs", "error", "words"), ROWS)
def test_in_the_chinese_edition_the_error_is_chinese(function, args, kwargs, error, words,
                                                       chinese):
    with pytest.raises(Exception) as raised:
        function(*args, **kwargs)
    assert raised.type is error, f"expected {error.__name__}, got {raised.type.__name__}"
    origin = Path(traceback.extract_tb(raised.tb)[-1].filename).resolve()
    if (not isinstance(raised.value, ValueError | TypeError)
            or not origin.is_relative_to(ROOT / "course_utils")):
        return  # Python's own words (a call with too many arguments)
    message = str(raised.value)
    given = [value for value in (*args, *kwargs.values()) if isinstance(value, str) and value]
    for words_passed in sorted(given, key=len, reverse=True):  # the caller's, e.g. a name
        message = message.replace(words_passed, "")
    assert_chinese(QUOTED.sub("''", message), "the message")


def _takes_arguments(value) -> bool:
    try:
        return bool(inspect.signature(value).parameters)
    except ValueError:  # a class with a C constructor, such as an Exception subclass
        return False


def _public_names(module) -> set[str]:
    """Functions and classes a module defines that take arguments (so can get bad ones).

    An exercise module's ``reference_*`` functions are left out: they are the solutions the
    learner reads, called by their checkers only with valid input.
    """
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__ and _takes_arguments(value)
        and f"{module.__name__}.{name}" not in NO_INPUT_TO_CHECK
        and not (module.__name__.startswith("course_utils.exercises.")
                 and name.startswith("reference_"))
    }


def _row_target(function):
    """The public function or class a row exercises (a method or an instance: its class)."""
    function = getattr(function, "__self__", None) or function
    return function if inspect.isclass(function) or inspect.isfunction(function) \
        else type(function)


def test_every_module_is_covered_or_excused():
    found = {info.name for info in pkgutil.walk_packages(course_utils.__path__, "course_utils.")}
    assert {"course_utils.nn.attention", "course_utils.views.explorer"} <= found
    stale = [name for name in NOT_COVERED if name not in found]
    assert not stale, f"NOT_COVERED names modules that do not exist: {stale}"
    covered = {module.__name__ for module in COVERED_MODULES}
    excused = {name for name in found
               if any(name == skip or name.startswith(f"{skip}.") for skip in NOT_COVERED)}
    assert covered | excused >= found


def test_the_exemptions_name_real_records():
    for dotted in NO_INPUT_TO_CHECK:
        module, name = dotted.rsplit(".", 1)
        assert inspect.isclass(getattr(importlib.import_module(module), name)), dotted


@pytest.mark.parametrize("module", COVERED_MODULES, ids=lambda m: m.__name__)
def test_every_public_name_has_a_row(module):
    targets = [_row_target(row.values[0]) for row in ROWS]
    covered = {target.__name__ for target in targets if target.__module__ == module.__name__}
    missing = sorted(_public_names(module) - covered)
    assert not missing, f"{module.__name__}: no BAD_INPUTS row for {', '.join(missing)}"
