"""Suite-wide notebook checks, loaded by pyproject's addopts (-p tests.notebook_plugin).

- With --nbval on the whole of notebooks/, a notebook (of either edition) that nbval did not
  collect is an error, unless the run was told to --ignore its folder or runs the other lane.
- The English edition's nbval kernels use this CPU's own ATen kernels; every other edition's
  use the portable ones (``PORTABLE_KERNELS``: ATEN_CPU_CAPABILITY=default instead of
  AVX2/AVX-512), so an output that prints differently on another CPU fails here rather than
  for a learner. The twins store the same numbers (tests/test_editions.py), so each edition's
  numbers are checked under both kernel sets.
- ``--lane=1`` / ``--lane=2`` split the suite between two pytest processes, one per core
  (``tools/course.py test`` runs both): lane 2 takes the Colab-alone runs (tests/test_colab.py,
  which is also the seed and re-run pass, in one process because they share .venv-colab) and
  the other editions' nbval runs but ``TWINS_IN_FIRST_LANE``; lane 1 everything else.
  Without ``--lane`` the whole suite runs in one process.
- The summary lists, per notebook, the cells excluded from output comparison and the time
  its nbval run took against the run time its header states; a lesson that takes much
  longer than it says fails the run. Times under portable kernels (slower) are listed, not
  judged.
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
PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "default"}

_seconds_per_notebook: dict[str, float] = defaultdict(float)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=("1", "2"), default=None,
                     help="run one of the suite's two lanes (see tests/support/notebook_plugin.py)")


def _native_kernels(path: Path) -> bool:
    """Whether a lesson's nbval kernel runs on this CPU's own kernels (else portable ones)."""
    return edition_of(path) == "en"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before nbval starts a notebook's kernel (in the first cell's setup), give the kernel
    the ATen kernels of its edition: the kernel inherits this process's environment."""
    path = Path(item.path)
    if path.suffix != ".ipynb":
        return
    for name, value in PORTABLE_KERNELS.items():
        if _native_kernels(path):
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a notebook's last cell, later tests (and kernels) see the environment as it was."""
    if Path(item.path).suffix == ".ipynb" and (nextitem is None or nextitem.path != item.path):
        for name in PORTABLE_KERNELS:
            os.environ.pop(name, None)


# Other editions' lessons validated in lane 1 all the same (under their portable kernels), to
# even the lanes: on c77562c lane 2 ran 18.2 min against lane 1's 17.5, before lane 1 lost
# the JupyterLab re-runs of six lessons (about 3 min) and lane 2 a pip install per lesson.
TWINS_IN_FIRST_LANE = {"13_induction_heads.ipynb", "14_modern_llm.ipynb"}


def in_second_lane(item: pytest.Item) -> bool:
    """Every test of the Colab mirror (its session fixture uninstalls course_utils from
    .venv-colab before and after, so no test of that module may run in the other lane while
    a notebook runs there) and most of the other editions' nbval runs, which balance the lanes
    (lane 1 took 21 min against lane 2's 10 with all nbval runs in lane 1). Lane 1 has the
    rest; the two Chromium passes (JupyterLab, the site) stay in one lane, since side by side
    they slowed MathJax past the site's check."""
    path = Path(item.path)
    return path.name == "test_colab.py" or (path.suffix == ".ipynb"
                                            and _lesson_in_lane(path, "2"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("lane")
    if lane is None:
        return
    keep = [item for item in items if in_second_lane(item) == (lane == "2")]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def _lesson_in_lane(path: Path, lane: str | None) -> bool:
    """English lessons are validated in lane 1, the other editions' in lane 2 but for
    TWINS_IN_FIRST_LANE."""
    second = not _native_kernels(path) and path.name not in TWINS_IN_FIRST_LANE
    return lane is None or (lane == "2") == second


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


def _overran(path: Path, measured: float) -> bool:
    factor, seconds = ALLOWED_OVERRUN
    stated = stated_run_time(path)
    return (_native_kernels(path) and stated is not None
            and measured > max(stated * factor, stated + seconds))


def pytest_sessionfinish(session: pytest.Session) -> None:
    paths = {_name(p): p for p in all_lesson_paths()}
    for name, measured in _seconds_per_notebook.items():
        if name in paths and _overran(paths[name], measured):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.section("notebooks: cells excluded from comparison, run time")
    for path in all_lesson_paths():
        name = _name(path)
        if name not in _seconds_per_notebook:
            continue
        notebook = read(path)
        code_cells = sum(1 for cell in notebook.cells if cell.cell_type == "code")
        line = f"{name}: {excluded_cells(notebook)} of {code_cells} code cells excluded"
        stated, measured = stated_run_time(path), _seconds_per_notebook[name]
        line += f"; ran in {measured:.1f} s, header says about {stated} s"
        if not _native_kernels(path):
            line += " (portable kernels: not judged)"
        elif _overran(path, measured):
            line += "  <-- SLOWER THAN ITS HEADER STATES"
        terminalreporter.write_line(line)
