"""Each test's kind as a pytest marker, assigned by file (loaded by pyproject's addopts,
-p tests.markers), so that tests need no decorators and ``-m`` picks a lane:

- ``unit``: tests/ modules that neither run notebooks nor need a browser or another
  environment (``python3 tools/course.py test --fast`` runs these);
- ``notebook``: a lesson validated by nbval (collected only with ``--nbval``);
- ``browser``, ``colab``, ``site``, ``kernel``, ``reference``: the modules named in
  ``FILE_MARKERS`` (``kernel``: tools tested on lessons they run in Jupyter kernels;
  ``reference``: the course against its sources, a real model's weights run by the course and
  by transformers' own implementation side by side, and the training texts rebuilt from the
  packages they come from: together about a quarter of the unit tests' time, and nothing a
  lesson's code changes, so only the full suite runs them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

FILE_MARKERS = {
    "test_browser.py": "browser",
    "test_live_browser.py": "browser",
    "test_translator_browser.py": "browser",
    "test_colab.py": "colab",
    "test_site.py": "site",
    "test_audit.py": "kernel",
    "test_progress_in_notebooks.py": "kernel",
    "test_smollm2.py": "reference",
    "test_corpus_sources.py": "reference",
}


def marker_for(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "notebook"
    return FILE_MARKERS.get(path.name, "unit")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(marker_for(Path(item.path)))
