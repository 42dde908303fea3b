"""Every public name of course_utils says which lessons use it, and says it truly.

Its docstring ends with "Used in lesson NN.", "Used in lessons NN, MM and KK." or "Used in
every lesson.", and every lesson whose code imports the name is among those it lists. The
validators of ``course_utils.checks`` are used by every module and taught nowhere.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections import defaultdict

import course_utils
from tools.lessons import lesson_paths, read

EXEMPT_MODULES = {"course_utils.checks"}
_USED = re.compile(r"Used in (every lesson|lessons? ([\d, and]+))\.")


def _lessons_importing() -> dict[tuple[str, str], set[int]]:
    used: dict[tuple[str, str], set[int]] = defaultdict(set)
    for path in lesson_paths():
        number = int(path.name[:2])
        for cell in read(path).cells:
            if cell.cell_type != "code":
                continue
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "course_utils"):
                    for alias in node.names:
                        used[(node.module, alias.name)].add(number)
    return used


def _public_names():
    for info in pkgutil.walk_packages(course_utils.__path__, "course_utils."):
        if info.name in EXEMPT_MODULES:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
                    and value.__module__ == info.name):
                yield info.name, name, value


def test_every_public_name_says_which_lessons_use_it():
    used = _lessons_importing()
    problems = []
    for module, name, value in _public_names():
        match = _USED.search(inspect.getdoc(value) or "")
        if match is None:
            problems.append(f"{module}.{name}: no 'Used in lesson NN.' in its docstring")
            continue
        if match.group(1) == "every lesson":
            continue
        listed = {int(n) for n in re.findall(r"\d+", match.group(2))}
        unlisted = used.get((module, name), set()) - listed
        if unlisted:
            problems.append(f"{module}.{name}: lessons {sorted(unlisted)} import it, its "
                            f"docstring lists {sorted(listed)}")
    assert not problems, "\n".join(problems)


def test_the_lessons_import_names_that_exist():
    missing = [f"{module}.{name}" for module, name in _lessons_importing()
               if not hasattr(importlib.import_module(module), name)]
    assert not missing, missing
