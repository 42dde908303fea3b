"""Colab: badges and setup cells come from one place, and every notebook of both editions
runs alone in an environment with Colab's versions (ipywidgets 7.7.1, ipykernel 6.17.1,
IPython 7.34.0, matplotlib 3.10.0), its setup cell installing course_utils (and, for the
Chinese edition, the font package zhplot) where they are missing: from nothing once per
edition (``INSTALLS_FROM_NOTHING``).

That run is also the suite's robustness pass, so no lesson runs a third time for it: a
learner's run is not the stored one, so each lesson runs under another ``setup(seed=...)``
(its trained models are other ones: every seed of a lesson derives from the setup seed) and,
in the English edition, with each code cell run twice in a row, as a learner re-running a
cell does, except the few cells that take longer than ``tools.execute.RERUN_LIMIT_S`` (the
training runs: run twice, they made this pass the suite's longest; which cells ran once is
printed). Any error fails; outputs are not compared (nbval does that for the stored run).
The Chinese twins run the same code token for token (tests/test_editions.py), so one edition
re-running its cells covers both; the Chinese run adds a second seed. The claims audit
(tools/audit.py) runs every lesson under ten more seeds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import course_utils
from tools.colab import SOURCE_VARIABLE, badge, colab_url, extra_packages, setup_cell_source
from tools.execute import RERUN_LIMIT_S, run_cells, with_seed
from tools.lessons import EDITIONS, ROOT, all_lesson_paths, edition_of, read
from tools.sync_colab import READMES, lesson_table

LESSONS = all_lesson_paths()
# edition: (the setup seed of its Colab-alone run, how many times each code cell runs)
COLAB_RUNS = {"en": (1, 2), "zh-CN": (2, 1)}
OTHER_EDITIONS_RUN = (2, 1)
# Every English lesson runs alone in the mirror; another edition's lessons carry the same
# code (tests/test_editions.py), so for each other edition one lesson that draws figures
# runs there: what only that edition does on Colab, its setup cell installing the edition's
# extras (the figure font) and drawing with them. Its nbval pass runs all of its lessons.
MIRROR_LESSON_OF_OTHER_EDITIONS = "02_qkv_projections.ipynb"
MIRROR_RUNS = [path for path in LESSONS
               if edition_of(path) == "en" or path.name == MIRROR_LESSON_OF_OTHER_EDITIONS]
COLAB_PYTHON = ROOT / ".venv-colab" / ("Scripts" if os.name == "nt" else "bin") / "python"


def relative(path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", LESSONS, ids=relative)
def test_badge_points_at_its_own_notebook(path):
    intro = read(path).cells[0].source
    links = re.findall(r"\(https://colab\.research\.google\.com/github/[^)]+\)", intro)
    assert links == [f"({colab_url(relative(path))})"], (
        f"{path.name}: badge should open {relative(path)}; run python3 tools/course.py sync"
    )
    assert badge(relative(path)) in intro


@pytest.mark.parametrize("path", LESSONS, ids=relative)
def test_first_code_cell_is_the_setup_cell(path):
    first_code = next(c for c in read(path).cells if c.cell_type == "code")
    assert first_code.source == setup_cell_source(edition_of(path)), (
        f"{path.name}: setup cell differs from tools/colab.py; run python3 tools/course.py sync"
    )


@pytest.mark.parametrize("edition", EDITIONS)
def test_readme_lesson_table_lists_every_lesson_with_its_badge_and_run_time(edition):
    readme = READMES[edition].read_text()
    assert lesson_table(edition) in readme, (
        f"{READMES[edition].name}'s lesson table is stale: python3 tools/course.py sync")
    for path in EDITIONS[edition].glob("*.ipynb"):
        assert badge(relative(path)) in readme, f"{READMES[edition].name} lacks {relative(path)}"


def test_the_setup_cells_of_the_two_editions_differ_only_in_strings_and_comments():
    from tools.editions import code_shape

    english, chinese = code_shape(setup_cell_source("en")), code_shape(setup_cell_source("zh-CN"))
    assert english[0] == chinese[0]
    assert '"zhplot"' in chinese[1] and '"zhplot"' not in english[1]


def test_setup_cell_installs_the_version_of_this_checkout():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{course_utils.__version__}"' in pyproject
    assert f"@v{course_utils.__version__}" in setup_cell_source()
    assert "--no-deps" in setup_cell_source(), "the install must leave torch and ipywidgets alone"


@pytest.mark.parametrize("path", LESSONS, ids=relative)
def test_no_notebook_reads_files_by_repository_path(path):
    for cell in read(path).cells:
        if cell.cell_type == "code":
            assert not re.search(r"open\(|read_csv|\.\./|Path\(['\"]", cell.source), (
                f"{path.name} reads a file by path: {cell.source[:120]!r}"
            )


@pytest.fixture(scope="session")
def colab_kernel(tmp_path_factory):
    """A kernelspec for the Colab-mirror environment, without course_utils installed."""
    if not COLAB_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{COLAB_PYTHON} is missing: python3 tools/course.py test builds it")
        pytest.skip("no .venv-colab: run the suite through python3 tools/course.py test")
    subprocess.run([COLAB_PYTHON, "-m", "pip", "uninstall", "-q", "-y", "course_utils"],
                   check=True, capture_output=True)
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", wheels, ROOT], check=True)
    wheel = next(wheels.glob("course_utils-*.whl"))
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    spec_dir = jupyter_path / "kernels" / "colab-mirror"
    spec_dir.mkdir(parents=True)
    spec = {"argv": [str(COLAB_PYTHON), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Colab mirror", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    yield {"JUPYTER_PATH": str(jupyter_path), SOURCE_VARIABLE: str(wheel)}
    subprocess.run([COLAB_PYTHON, "-m", "pip", "uninstall", "-q", "-y", "course_utils"],
                   check=True, capture_output=True)


def test_colab_mirror_has_colabs_versions(colab_kernel):
    pins = dict(re.findall(r"^([\w-]+)==([\w.]+)", (ROOT / "requirements-colab.txt").read_text(),
                           re.M))
    assert pins.keys() >= {"ipywidgets", "ipykernel", "ipython", "matplotlib"}
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    found = json.loads(subprocess.run([COLAB_PYTHON, "-c", code, *pins], check=True,
                                      capture_output=True, text=True).stdout)
    assert found == pins


# Every lesson of an edition has the same setup cell (test_first_code_cell_is_the_setup_cell),
# so its install from nothing, as on a fresh Colab runtime, is run once per edition: by that
# edition's first lesson here. The later ones find the package their setup cell installed
# (it installs only what is missing), which saves a pip uninstall and install per lesson.
INSTALLS_FROM_NOTHING = {next(path for path in MIRROR_RUNS if edition_of(path) == edition)
                         for edition in {edition_of(path) for path in MIRROR_RUNS}}


@pytest.mark.parametrize("path", MIRROR_RUNS, ids=relative)
def test_notebook_runs_alone_in_the_colab_mirror(path, colab_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", colab_kernel["JUPYTER_PATH"])
    if path in INSTALLS_FROM_NOTHING:
        # Colab ships neither course_utils nor the Chinese edition's font package: the setup
        # cell must install what its edition needs.
        absent = ["course_utils", *extra_packages(edition_of(path)).split()]
        subprocess.run([COLAB_PYTHON, "-m", "pip", "uninstall", "-q", "-y", *absent],
                       check=True, capture_output=True)
        for package in absent:
            probe = subprocess.run([COLAB_PYTHON, "-c", f"import {package}"], cwd=tmp_path,
                                   capture_output=True)
            assert probe.returncode != 0, (
                f"{package} must not be importable before the setup cell")
    alone = tmp_path / path.name
    shutil.copy(path, alone)
    # Colab's own kernels, not the portable ones lane 2 of the suite uses for nbval.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "ATEN_CPU_CAPABILITY")}
    env[SOURCE_VARIABLE] = colab_kernel[SOURCE_VARIABLE]
    seed, repeats = COLAB_RUNS.get(edition_of(path), OTHER_EDITIONS_RUN)
    run_once = run_cells(alone, kernel_name="colab-mirror", env=env, seed=seed, repeats=repeats)
    if repeats > 1:
        print(f"{path.name}: cells run once (longer than {RERUN_LIMIT_S} s): "
              + ", ".join(f"{index + 1} ({seconds:.0f} s)" for index, seconds in run_once))


def test_the_colab_runs_use_other_seeds_than_the_stored_one_and_one_reruns_each_cell():
    runs = [*COLAB_RUNS.values(), OTHER_EDITIONS_RUN]
    assert all(seed != 0 for seed, _repeats in runs)
    assert len({seed for seed, _repeats in runs}) >= 2 and COLAB_RUNS["en"][1] >= 2


def test_the_seed_replacement_finds_exactly_one_setup_call():
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("# Setup: install"),
        nbformat.v4.new_code_cell("from course_utils.notebook import setup\n\nsetup()"),
    ])
    assert with_seed(notebook, 3).cells[1].source.endswith("\nsetup(seed=3)")
    assert with_seed(notebook, 1).cells[1].source.endswith("\nsetup(seed=1)")  # from seed=3
    notebook.cells[1].source = 'setup(seed=0, language="zh-CN")'
    assert with_seed(notebook, 2).cells[1].source == 'setup(seed=2, language="zh-CN")'
    notebook.cells[1].source = "print('no setup here')"
    with pytest.raises(AssertionError, match="found 0"):
        with_seed(notebook, 2)
