"""Every lesson survives other seeds and re-run cells: it runs to the end without an error.

A lesson's checks must hold for the run the learner gets, not only for the one stored. Each
lesson is executed once per seed in ``SEEDS``, with its ``setup()`` call replaced by
``setup(seed=s)`` **and** every code cell executed twice in a row (as a learner re-running a
cell does), in a fresh kernel started in notebooks/. Any error fails; outputs are not
compared (nbval does that for the stored run). ``PARALLEL`` kernels run at a time: setup()
gives each one torch thread, so two kernels use the two cores CI has.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tools.execute import CELL_TIMEOUT_S
from tools.lessons import lesson_paths, read, stated_run_time

SEEDS = (1, 2, 3)
PARALLEL = 2
SETUP_CALL = re.compile(r"(?<![\w.])setup\((?:seed=)?\d*\)")  # setup(), setup(seed=0), setup(0)
SKIP_TAGS = {"nbval-skip", "skip-execution"}

LESSONS = lesson_paths()


def with_seed(notebook: nbformat.NotebookNode, seed: int) -> nbformat.NotebookNode:
    """The notebook with its one ``setup()`` (or ``setup(seed=0)``) call: ``setup(seed=seed)``."""
    calls = [cell for cell in notebook.cells
             if cell.cell_type == "code" and SETUP_CALL.search(cell.source)]
    if len(calls) != 1:
        raise AssertionError(f"a lesson calls setup() exactly once; found {len(calls)} calls")
    calls[0].source = SETUP_CALL.sub(f"setup(seed={seed})", calls[0].source)
    return notebook


def run_each_cell_twice(path: Path, seed: int) -> None:
    """Execute ``path`` under ``setup(seed=seed)``, each code cell twice; raise on an error."""
    notebook = with_seed(read(path), seed)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code" or SKIP_TAGS & set(cell.metadata.get("tags", [])):
                continue
            for _ in range(2):
                client.execute_cell(cell, index)  # raises CellExecutionError on an error


def _jobs() -> list[tuple[Path, int]]:
    # Longest lessons first, so that the two workers finish at about the same time.
    by_time = sorted(LESSONS, key=lambda p: -(stated_run_time(p) or 60))
    return [(path, seed) for seed in SEEDS for path in by_time]


@pytest.fixture(scope="module")
def runs():
    """Start every (lesson, seed) run, ``PARALLEL`` at a time; each test waits for its own."""
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = {(path.name, seed): pool.submit(run_each_cell_twice, path, seed)
                   for path, seed in _jobs()}
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed {s}")
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_runs_to_the_end_under_another_seed_with_every_cell_run_twice(path, seed, runs):
    future: Future = runs[(path.name, seed)]
    future.result()


def test_the_seed_replacement_finds_exactly_one_setup_call():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("# Setup: install"),
        nbformat.v4.new_code_cell("from course_utils.notebook import setup\n\nsetup()"),
    ])
    assert with_seed(notebook, 3).cells[1].source.endswith("\nsetup(seed=3)")
    assert with_seed(notebook, 1).cells[1].source.endswith("\nsetup(seed=1)")  # from seed=3
    with pytest.raises(AssertionError, match="found 0"):
        with_seed(notebook, 2)
