"""Suite-wide notebook checks, loaded by pyproject's addopts (-p tests.notebook_plugin).

- With --nbval on the whole of notebooks/, a notebook (of either edition) that nbval did not
  collect is an error, unless the run was told to --ignore its folder or runs the other lane.
- ``--lane=1`` / ``--lane=2`` split the suite between two pytest processes, one per core
  (``tools/course.py test`` runs both): lane 2 takes the Chinese edition's nbval items and
  JupyterLab runs, and the Colab-alone runs; lane 1 everything else. Without ``--lane`` the
  whole suite runs in one process.
- The summary lists, per notebook, the cells excluded from output comparison and the time
  its nbval run took against the run time its header states; a lesson that takes much
  longer than it says fails the run. Under ``ATEN_CPU_CAPABILITY`` (the portability run of
  ``tools/course.py test``, with slower portable kernels) times are listed, not judged.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from tools.lessons import (
    NOTEBOOK_DIR,
    ROOT,
    all_lesson_paths,
    edition_of,
    excluded_cells,
    read,
    stated_run_time,
)

# Headers are measured on a loaded machine; allow noise but not a lesson twice as slow.
ALLOWED_OVERRUN = (1.5, 10.0)  # factor, seconds: fail when above both

_seconds_per_notebook: dict[str, float] = defaultdict(float)
# Set by the portability run: other kernels, other speed, so the headers are not judged.
CPU_CAPABILITY = os.environ.get("ATEN_CPU_CAPABILITY")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=("1", "2"), default=None,
                     help="run one of the suite's two lanes (see tests/notebook_plugin.py)")


def _lesson_in_second_lane(path: Path) -> bool:
    return edition_of(path) == "zh-CN"


def in_second_lane(item: pytest.Item) -> bool:
    """The Chinese edition's notebook runs (nbval, JupyterLab) and the Colab-alone runs."""
    path = Path(item.path)
    if path.suffix == ".ipynb":
        return _lesson_in_second_lane(path)
    if path.name == "test_colab.py":
        return True
    return path.name == "test_browser.py" and "zh-CN" in item.nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("lane")
    if lane is None:
        return
    keep = [item for item in items if in_second_lane(item) == (lane == "2")]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def _lesson_in_lane(path: Path, lane: str | None) -> bool:
    return lane is None or _lesson_in_second_lane(path) == (lane == "2")


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    asked = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
             for arg in config.args]
    whole_folder = any(path == NOTEBOOK_DIR or path in NOTEBOOK_DIR.parents for path in asked)
    if not config.option.nbval or not whole_folder:
        return
    collected = {Path(item.path).resolve() for item in session.items
                 if Path(item.path).suffix == ".ipynb"}
    ignored = [Path(config.invocation_params.dir, folder).resolve()
               for folder in config.getoption("ignore") or []]
    lane = config.getoption("lane")
    missing = [_name(p) for p in all_lesson_paths() if p.resolve() not in collected
               and _lesson_in_lane(p, lane)
               and not any(p.resolve().is_relative_to(folder) for folder in ignored)]
    if missing:
        raise pytest.UsageError(f"notebooks not validated by nbval: {', '.join(missing)}")


def _name(path: Path) -> str:
    """A lesson's name in reports: notebooks/ relative, so the two editions stay apart."""
    return Path(path).resolve().relative_to(NOTEBOOK_DIR).as_posix()


def pytest_runtest_logreport(report) -> None:
    path = Path(ROOT, report.fspath)
    if path.suffix == ".ipynb":
        _seconds_per_notebook[_name(path)] += report.duration


def _overran(stated: int | None, measured: float) -> bool:
    factor, seconds = ALLOWED_OVERRUN
    return (CPU_CAPABILITY is None and stated is not None
            and measured > max(stated * factor, stated + seconds))


def pytest_sessionfinish(session: pytest.Session) -> None:
    paths = {_name(p): p for p in all_lesson_paths()}
    for name, measured in _seconds_per_notebook.items():
        if name in paths and _overran(stated_run_time(paths[name]), measured):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    title = "notebooks: cells excluded from comparison, run time"
    if CPU_CAPABILITY is not None:
        title += f" (ATEN_CPU_CAPABILITY={CPU_CAPABILITY}: times not judged)"
    terminalreporter.section(title)
    for path in all_lesson_paths():
        name = _name(path)
        if name not in _seconds_per_notebook:
            continue
        notebook = read(path)
        code_cells = sum(1 for cell in notebook.cells if cell.cell_type == "code")
        line = f"{name}: {excluded_cells(notebook)} of {code_cells} code cells excluded"
        stated, measured = stated_run_time(path), _seconds_per_notebook[name]
        line += f"; ran in {measured:.1f} s, header says about {stated} s"
        if _overran(stated, measured):
            line += "  <-- SLOWER THAN ITS HEADER STATES"
        terminalreporter.write_line(line)
