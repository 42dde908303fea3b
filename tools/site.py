"""Build the course website from the committed notebooks: ``python3 tools/course.py site``.

The site shows every notebook under notebooks/ with the outputs stored in it (CI has
checked that they equal a fresh run), so nothing is executed and a build takes seconds.

Tool: Sphinx + myst-nb (execution off) + the Furo theme. Why, in short (CONTRIBUTING.md
has the longer version): myst-nb renders stored outputs of every MIME type we produce
(PNG figures, streams, and the explorer's self-contained text/html with its inline
script, which must reach the page unchanged), turns the lessons' ``$...$`` into math,
and gives Sphinx's offline full-text search, page order and prev/next links for free;
Furo uses the system's fonts, so no web font is ever requested. Jupyter Book 2 moved
to a Node-based engine (mystmd) that loads its theme at build time from the network;
nbconvert alone has no navigation or search.

Offline: the pages must not ask any other host for anything. The only outside asset
Sphinx would load is MathJax, so this script vendors MathJax 3 from the npm registry
(``npm pack``, cached in build/cache/) into the site's own _static/. The Colab badge
image is replaced by a copy in site/_static/ (links to Colab stay links), and widget
outputs, which need a kernel, are replaced by a note (the attention explorer is not a
widget: it runs on the page).

Layout: site/ holds conf.py and static files; build/site-src/ is the generated Sphinx
source (lessons copied and prepared); build/site/ is the result (git-ignored).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import nbformat

from tools.colab import colab_url
from tools.lessons import NOTEBOOK_DIR, ROOT, lesson_heading, lesson_paths, stated_run_time
from tools.sync_colab import SETUP_MARKER

SITE_CONFIG = ROOT / "site"
SOURCE = ROOT / "build" / "site-src"
OUTPUT = ROOT / "build" / "site"
CACHE = ROOT / "build" / "cache"
MATHJAX = "mathjax@3.2.2"
# The parts of MathJax's es5 folder that tex-chtml.js loads (itself, its fonts, the TeX
# extensions it autoloads, the menu and the accessibility components); not the other
# combined builds.
MATHJAX_PARTS = ("tex-chtml.js", "output/chtml", "input/tex/extensions", "ui", "a11y", "sre",
                 "adaptors")
COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = (
    '<p class="course-widget-note">An interactive widget is shown here when the notebook '
    "runs in JupyterLab or Colab (it needs a Python kernel): use the Colab badge at the "
    "top of the page, or download the notebook.</p>"
)
LESSONS = "lessons"
DOWNLOADS = "notebooks"


def prepare_notebook(path: Path, target: Path, badge_image: str) -> nbformat.NotebookNode:
    """Copy one lesson for the site: local badge image, a download link, no widget views."""
    notebook = nbformat.read(path, as_version=4)
    download = nbformat.v4.new_markdown_cell(
        f'<span class="course-download">{{download}}`Download this notebook (.ipynb) '
        f"</{DOWNLOADS}/{path.relative_to(NOTEBOOK_DIR).as_posix()}>` to run it on your "
        "machine.</span>"
    )
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace(COLAB_BADGE_IMAGE, badge_image)
        if cell.cell_type == "code" and cell.source.startswith(SETUP_MARKER):
            # Colab's install step means nothing to a reader of the page: fold it away.
            cell.metadata.setdefault("tags", []).append("hide-input")
        for output in cell.get("outputs", []):
            if WIDGET_MIME in output.get("data", {}):
                output["data"] = {"text/html": WIDGET_NOTE, "text/plain": "(widget)"}
    notebook.cells.insert(1, download)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    # The reader downloads the committed notebook, not this prepared copy; it sits in a
    # folder Sphinx does not read as a page (conf.py excludes it).
    original = SOURCE / DOWNLOADS / path.relative_to(NOTEBOOK_DIR)
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, original)
    return notebook


def index_page(rows: list[str]) -> str:
    readme = (ROOT / "README.md").read_text()
    intro = readme.split("\n## ", 1)[0].split("\n", 1)[1].strip()
    table = "\n".join(rows)
    toctree = "\n".join(f"{LESSONS}/{name}" for name in _lesson_names())
    return f"""# Self-attention, hands-on

{intro}

Each lesson below is shown with the outputs of its last checked run. To run it, open it in
Colab with its badge, or download the notebook and run it on your machine
(`python3 tools/course.py lab` in a clone of the repository).

```{{list-table}}
:header-rows: 1
:class: course-lessons

* - \\#
  - lesson
  - CPU run time
  - run it
{table}
```

```{{toctree}}
:hidden:
:maxdepth: 1
:caption: Lessons

{toctree}
```
"""


def _lesson_names() -> list[str]:
    return [p.relative_to(NOTEBOOK_DIR).with_suffix("").as_posix() for p in lesson_paths()]


def vendor_mathjax(static: Path) -> None:
    """MathJax's browser files from the npm registry into ``static``/mathjax."""
    name, _, version = MATHJAX.rpartition("@")
    unpacked = CACHE / f"{name}-{version}"
    if not (unpacked / "es5" / "tex-chtml.js").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tarball = CACHE / f"{name}-{version}.tgz"
        if not tarball.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise SystemExit("building the site needs npm (Debian: apt-get install npm) "
                                 f"to fetch {MATHJAX} from the npm registry")
            subprocess.run([npm, "pack", MATHJAX, "--silent", "--pack-destination", str(CACHE)],
                           check=True, stdout=subprocess.DEVNULL)
        staging = CACHE / "unpacking"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(tarball) as archive:
            try:
                archive.extractall(staging, filter="data")  # refuses links and odd paths
            except TypeError:  # a Python older than 3.10.12 / 3.11.4 has no filters
                archive.extractall(staging)
        shutil.rmtree(unpacked, ignore_errors=True)
        (staging / "package").rename(unpacked)
        shutil.rmtree(staging)
    for part in MATHJAX_PARTS:
        source, target = unpacked / "es5" / part, static / "mathjax" / part
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def prepare_source() -> None:
    shutil.rmtree(SOURCE, ignore_errors=True)
    shutil.copytree(SITE_CONFIG, SOURCE)
    rows = []
    for path, name in zip(lesson_paths(), _lesson_names(), strict=True):
        target = SOURCE / LESSONS / f"{name}.ipynb"
        depth = len(Path(LESSONS, name).parts) - 1
        badge_image = "../" * depth + "_static/colab-badge.svg"
        notebook = prepare_notebook(path, target, badge_image)
        number, title = lesson_heading(notebook)
        relative = path.relative_to(ROOT).as_posix()
        run_time = stated_run_time(path)
        rows += [
            f"* - {number}",
            f"  - [{title}]({LESSONS}/{name}.ipynb)",
            f"  - about {run_time} s" if run_time else "  - ",
            f"  - [![Open In Colab](_static/colab-badge.svg)]({colab_url(relative)})",
        ]
    (SOURCE / "index.md").write_text(index_page(rows))
    vendor_mathjax(SOURCE / "_static")


def build(jobs: str = "2") -> Path:
    """Build the site into build/site/ and return that folder."""
    start = time.monotonic()
    prepare_source()
    shutil.rmtree(OUTPUT, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-d",
         str(CACHE / "doctrees"), str(SOURCE), str(OUTPUT)],
        check=True,
    )
    (OUTPUT / ".nojekyll").touch()
    print(f"site built in {time.monotonic() - start:.0f} s: {OUTPUT.relative_to(ROOT)}/index.html",
          flush=True)
    return OUTPUT


if __name__ == "__main__":
    build()
