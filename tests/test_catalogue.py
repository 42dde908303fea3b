"""Words apart from logic: the message catalogues, and an edition that costs no code.

- every edition's catalogue holds every message the code marks, translated, with the same
  placeholders, and its ``.mo`` is compiled from it (tools/catalogue.py);
- no module of course_utils holds CJK text: an edition's words live in its catalogue, its
  examples about language in its ``edition.json``;
- every marked message is visible to the extractor (a literal, not inside an f-string) and
  no module that translates with ``_`` also uses ``_`` as a throwaway name;
- a pseudo-edition ``en-XA`` (every message bracketed and accented), added as a folder to a
  copy of the package, runs end to end through ``setup(language=...)``, an exercise, the
  explorer, ``diagnose()``, ``claim`` and the error a bad argument gets: a new edition needs
  no change to any module;
- every ``raise ValueError/TypeError(...)`` of course_utils has a marked message.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import pseudo_edition
from tests.support.pseudo_edition import pseudo
from tools import catalogue

PACKAGE = catalogue.PACKAGE
MODULES = sorted(PACKAGE.rglob("*.py"))
CJK = re.compile(r"[\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]")
MARKERS = {"_", "N_", "pgettext"}


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


@pytest.mark.parametrize("edition", catalogue.editions())
def test_every_catalogue_is_complete_current_and_compiled(edition):
    assert catalogue.problems(edition) == []


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_no_module_holds_cjk_text(path):
    found = [f"line {number}: {line.strip()}" for number, line in
             enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if CJK.search(line)]
    assert not found, f"{_relative(path)}: words belong in a catalogue: {found}"


def _calls(tree: ast.AST):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id in MARKERS]


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_every_marked_message_is_a_literal_the_extractor_sees(path):
    if path.name == "language.py":
        return  # defines the markers
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in _calls(tree):
        assert node.args and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                                 for arg in node.args), (
            f"{_relative(path)}:{node.lineno}: {ast.unparse(node)}: mark a literal message "
            "and fill placeholders with .format(name=...)")
    in_fstrings = [call for joined in ast.walk(tree) if isinstance(joined, ast.JoinedStr)
                   for call in _calls(joined)]
    assert not in_fstrings, (
        f"{_relative(path)}:{in_fstrings[0].lineno}: a message inside an f-string is invisible "
        "to extraction: use _('... {name} ...').format(name=...)")


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_a_module_that_translates_with_underscore_never_rebinds_it(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if not any(isinstance(node, ast.ImportFrom) and any(a.name == "_" for a in node.names)
               for node in ast.walk(tree)):
        return
    rebound = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Name) and node.id == "_"
               and isinstance(node.ctx, ast.Store)]
    assert not rebound, (f"{_relative(path)} translates with _ and assigns to _ on lines "
                         f"{rebound}: name the value instead")


def test_placeholders_are_named_for_what_they_hold():
    """A translator places ``{lowest}`` and ``{highest}`` in a sentence; ``{value}`` and
    ``{value2}``, or a constant's name like ``{_QK}``, do not say which is which."""
    generic = re.compile(r"^_|^(value|shape|device|dtype|name|arg|item|got|x)\d+$")
    found = [(name, message.id) for message in catalogue.template() if message.id
             for msgid in ([message.id] if isinstance(message.id, str) else message.id)
             for name in catalogue.fields(msgid) if generic.search(name)]
    assert not found, f"name placeholders for what they hold: {found[:5]}"


# ------------------------------------------------------------------ a pseudo-edition
def test_the_pseudo_translation_keeps_placeholders():
    assert pseudo("query {word} · {settings}") == "⟦qúérý {word} · {settings}⟧"
    assert pseudo("{gap:.3g} off, {name!r}") == "⟦{gap:.3g} óff, {name!r}⟧"
    assert pseudo("(word, {{feature}}) {row!r}") == "⟦(wórd, {{féátúré}}) {row!r}⟧"
    assert pseudo("no placeholder {here") == "⟦ñó pláçéhóldér {héré⟧"


def _pseudo_package(folder: Path) -> Path:
    """A copy of course_utils with one more folder: locale/en-XA."""
    copy = folder / "course_utils"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    pseudo_edition.add_to_locale(copy / "locale")
    return folder


PSEUDO_RUN = r'''
import json, re, torch
from course_utils.notebook import setup, claim
from course_utils.language import available_languages
from course_utils.exercises.l03 import measure_variance
from course_utils.views.explorer import AttentionExplorer
from course_utils.diagnostics import diagnose
from course_utils.experiments.l08_bug_gallery import BUGS

assert "en-XA" in available_languages()
setup(seed=0, language="en-XA")
print("VERDICT", measure_variance.evaluate(lambda d_k: 0.0))
measure_variance.hint()
html = AttentionExplorer()._repr_html_()
ui = json.loads(re.search(r'class="attn-explorer-data">(.*?)</script>', html).group(1))["ui"]
print("UI", json.dumps(ui, ensure_ascii=False))
print("REPORT", diagnose(BUGS[0].build()))
from course_utils.nn.masks import padding_mask
from course_utils.notebook import seeds
for bad_call in (lambda: padding_mask([2, -1]), lambda: seeds(0)):
    try:
        bad_call()
    except ValueError as error:
        print("ERROR", error)
try:
    claim(False, "a claim")
except AssertionError as error:
    print("CLAIM", error)
'''


def test_a_pseudo_edition_runs_end_to_end_without_changing_any_module(tmp_path):
    folder = _pseudo_package(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(folder), "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", PSEUDO_RUN], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    setup_line, verdict, hint, ui, report = result.stdout.split("\n", 4)
    claimed = result.stdout.rstrip().rsplit("\n", 1)[-1]
    assert setup_line.startswith("⟦sééd 0, dévíçé") and setup_line.endswith("⟧")
    assert verdict.startswith("VERDICT ⟦⟦✗ Íñçórréçt⟧: ⟦ýóúr válúés áré áll ñéár 0")
    assert hint.startswith("⟦Híñt 1/3: ⟦Dráw q áñd k")
    ui = json.loads(ui.removeprefix("UI "))
    assert all(all(str(v).startswith("⟦") for v in (value if isinstance(value, list) else
                                                    [value])) for value in ui.values()), ui
    assert report.startswith("REPORT ⟦díágñósé(softmax_over_wrong_dim): ⟦")
    assert claimed.startswith("CLAIM ⟦✗ thé léssóñ çláíms: a claim")
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert errors == ["ERROR ⟦léñgths shóúld bé ñóñ-ñégátívé, gót [2, -1]⟧",
                      "ERROR ⟦n shóúld bé á pósítívé íñt, gót 0⟧"], errors


def test_no_translation_carries_po_syntax():
    """A translation pasted with its keyword (``msgstr "msgstr \\"…``) still reads Chinese, so
    no other test sees it; the learner would."""
    for edition in catalogue.editions():
        bad = [message.id for message in catalogue.read_catalogue(edition)
               if message.id and re.search(r'm?sgstr \\?"|msgid \\?"', str(message.string))]
        assert not bad, f"{edition}: {bad[:3]}"


# ------------------------------------------------------------------ error messages
ERRORS = {"ValueError", "TypeError"}


def _translated(node: ast.AST, bound: set[str]) -> bool:
    """``node`` is a marked message: ``_(...)``, ``_(...).format(...)``, one of two such, or
    a name assigned one of them."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in MARKERS or (node.func.id == "str" and len(node.args) == 1
                                           and _translated(node.args[0], bound))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _translated(node.func.value, bound)
    if isinstance(node, ast.IfExp):
        return _translated(node.body, bound) and _translated(node.orelse, bound)
    return isinstance(node, ast.Name) and node.id in bound


def untranslated_errors(path: Path) -> list[str]:
    """The ``raise ValueError(...)`` / ``raise TypeError(...)`` of a module whose message is
    not a marked message, as ``line: code``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound: set[str] = set()
    assignments = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    for _round in range(3):  # a name bound from a name bound from a message
        bound |= {target.id for node in assignments if _translated(node.value, bound)
                  for target in node.targets if isinstance(target, ast.Name)}
    return [f"{node.lineno}: {ast.unparse(node)[:100]}" for node in ast.walk(tree)
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id in ERRORS
            and node.exc.args and not _translated(node.exc.args[0], bound)]


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_every_value_and_type_error_speaks_the_learners_language(path):
    left = untranslated_errors(path)
    assert not left, (f"{_relative(path)}: an error message the learner reads in English "
                      f"only; write it as _('... {{name}} ...').format(name=...): {left}")
