"""Static checks of the committed notebooks: what nbval itself does not look at."""

from __future__ import annotations

import re

import pytest

from tools.lessons import ROOT, lesson_paths, read, stated_run_time

LESSONS = lesson_paths()


def test_there_are_lessons_and_they_are_numbered():
    assert LESSONS, "no notebooks found under notebooks/"
    for path in LESSONS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), (
            f"{path.name} should be named NN_slug.ipynb"
        )


def test_every_notebook_is_validated_strictly():
    pyproject = (ROOT / "pyproject.toml").read_text()
    testpaths = re.search(r"^testpaths = (.*)$", pyproject, re.M).group(1)
    addopts = re.search(r"^addopts = (.*)$", pyproject, re.M).group(1)
    assert '"notebooks"' in testpaths
    assert "--nbval " in addopts, "nbval must run in strict mode (--nbval)"
    assert "--nbval-lax" not in addopts


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_cells_ran_top_to_bottom_in_one_fresh_run(path):
    counts = [cell.execution_count for cell in read(path).cells if cell.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts}; re-run it with python3 tools/course.py execute"
    )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_error_output_is_stored(path):
    for index, cell in enumerate(read(path).cells):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{path.name} cell {index}: {output.ename}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_widget_state_is_saved(path):
    assert "widgets" not in read(path).metadata, (
        f"{path.name} stores widget state; re-run it with python3 tools/course.py execute"
    )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_unfinished_prose(path):
    for cell in read(path).cells:
        assert not re.search(r"\bTODO\b|\bFIXME\b|\bXXX\b", cell.source), (
            f"{path.name} has unfinished text: {cell.source[:80]!r}"
        )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_header_states_a_run_time_within_the_budget(path):
    stated = stated_run_time(path)
    assert stated is not None, (
        f"{path.name}: the first cell needs '**Run time:** about N s on 2 CPU cores.'"
    )
    assert stated <= 60, f"{path.name} states {stated} s; a lesson must run in 60 s or less"
