"""Build the course website from the committed notebooks: ``python3 tools/course.py site``.

The site shows every notebook under notebooks/ with the outputs stored in it (CI has
checked that they equal a fresh run), so nothing is executed and a build takes seconds.

Tool: Sphinx + myst-nb (execution off) + the Furo theme. Why, in short (CONTRIBUTING.md
has the longer version): myst-nb renders stored outputs of every MIME type we produce
(PNG figures, streams, and the explorer's self-contained text/html with its inline
script, which must reach the page unchanged), turns the lessons' ``$...$`` into math,
and gives Sphinx's offline full-text search, page order and prev/next links for free;
Furo uses the system's fonts; only an edition whose script a machine may lack (Chinese)
carries its own, subset to its pages (tools/site_font.py). Jupyter Book 2 moved
to a Node-based engine (mystmd) that loads its theme at build time from the network;
nbconvert alone has no navigation or search.

Offline: the pages must not ask any other host for anything. The only outside asset
Sphinx would load is MathJax, so this script vendors MathJax 3 from the npm registry
(``npm pack``, cached in build/cache/) into the site's own _static/. The Colab badge
image is replaced by a copy in site/_static/ (links to Colab stay links), and widget
outputs, which need a kernel, are replaced by a note (the attention explorer is not a
widget: it runs on the page).

Two editions: the English site is build/site/, the Chinese one build/site/zh-CN/, each a
Sphinx build of its own notebooks (``COURSE_EDITION`` tells site/conf.py which); every page
links to the same page of the other edition (site/_templates/sidebar/language.html).

Accessibility: every page must pass axe-core's WCAG 2 A/AA rules (tests/test_site.py).
Sphinx, Furo and myst-nb leave three kinds of markup that do not, and ``accessible()``
rewrites them in every built page: code and output blocks made focusable and named, the
sidebar caption given its heading level, folded cells' toggles named by their words.

Layout: site/ holds conf.py, templates and static files; build/site-src/<edition>/ is the
generated Sphinx source (lessons copied and prepared); build/site/ is the result
(git-ignored).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import nbformat

from course_utils.language import ENGLISH
from course_utils.progress import EMPTY as PROGRESS_DONE
from tools.audit import claims_page
from tools.colab import colab_url
from tools.lessons import (
    EDITIONS,
    ROOT,
    edition_text,
    lesson_heading,
    lesson_paths,
    readme_path,
    stated_run_time,
)
from tools.site_font import STYLESHEET, has_web_font, stylesheet, write_font
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
LESSONS = "lessons"
CLAIMS_PAGE = "claims"  # the claims audit's report, in each edition's words (tools/audit.py)
DOWNLOADS = "notebooks"
# Where each edition's pages go: English at the top, every other edition in its own folder.
EDITION_OUTPUT = {edition: OUTPUT if edition == ENGLISH else OUTPUT / edition
                  for edition in EDITIONS}


def site_words(edition: str) -> dict[str, str]:
    """The words of the pages this script writes, in ``edition``'s language (its catalogue)."""
    return {
        "widget_note": edition_text(
            edition, "site",
            "An interactive widget is shown here when the notebook runs in JupyterLab or "
            "Colab (it needs a Python kernel): use the Colab badge at the top of the page, "
            "or download the notebook."),
        "download": edition_text(
            edition, "site",
            "{{download}}`Download this notebook (.ipynb) </{path}>` to run it on your "
            "machine."),
        "how_to_run": edition_text(
            edition, "site",
            "Each lesson below is shown with the outputs of its last checked run. To run it, "
            "open it in Colab with its badge, or download the notebook and run it on your "
            "machine (`python3 tools/course.py lab` in a clone of the repository)."),
        "lesson": edition_text(edition, "site", "lesson"),
        "run_time_column": edition_text(edition, "site", "CPU run time"),
        "run_it": edition_text(edition, "site", "run it"),
        "run_time": edition_text(edition, "site", "about {seconds} s"),
        "caption": edition_text(edition, "site", "Lessons"),
        "code_block": edition_text(edition, "site", "code"),
        "output_block": edition_text(edition, "site", "output"),
    }


# A code or output block (Pygments' <pre> in myst-nb's wrapper) scrolls sideways when its
# lines are long: a keyboard reaches it only if it takes the focus, and a screen reader
# announces it as a region with a name (axe-core's scrollable-region-focusable).
_BLOCK = re.compile(r'(<div class="([^"]*)"><div class="highlight">)<pre>')
# Furo's sidebar caption is a heading without a level (axe-core's aria-required-attr).
_CAPTION = '<p class="caption" role="heading">'
# myst-nb names a folded cell's toggle "Toggle hidden content" although it shows "Show code
# cell source": the name must contain the visible words (label-content-name-mismatch).
_TOGGLE = '<summary aria-label="Toggle hidden content">'


def accessible(html: str, edition: str = "en") -> str:
    """A built page with the theme's and myst-nb's markup made to pass axe-core's WCAG 2
    A/AA rules: every code and output block focusable and named, the sidebar's caption a
    heading of level 2, folded cells' toggles named by their visible words."""
    words = site_words(edition)

    def block(match: re.Match) -> str:
        name = words["output_block" if "output" in match[2].split() else "code_block"]
        return f'{match[1]}<pre tabindex="0" role="region" aria-label="{name}">'

    html = _BLOCK.sub(block, html)
    html = html.replace(_CAPTION, '<p class="caption" role="heading" aria-level="2">')
    return html.replace(_TOGGLE, "<summary>")


def prepare_notebook(path: Path, source: Path, edition: str = "en") -> nbformat.NotebookNode:
    """Copy one lesson into the Sphinx ``source``: local badge image, a download link, no
    widget views."""
    notebook = nbformat.read(path, as_version=4)
    words = site_words(edition)
    relative = path.relative_to(EDITIONS[edition]).as_posix()
    target = source / LESSONS / relative
    badge_image = "../" * (len(Path(LESSONS, relative).parts) - 1) + "_static/colab-badge.svg"
    download = nbformat.v4.new_markdown_cell(
        '<span class="course-download">'
        + words["download"].format(path=f"{DOWNLOADS}/{relative}") + "</span>")
    widget_note = f'<p class="course-widget-note">{words["widget_note"]}</p>'
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace(COLAB_BADGE_IMAGE, badge_image)
        if cell.cell_type == "code" and SETUP_MARKER.match(cell.source):
            # Colab's install step means nothing to a reader of the page: fold it away.
            cell.metadata.setdefault("tags", []).append("hide-input")
        if cell.cell_type == "code":  # a finished progress display is empty: not drawn
            cell.outputs = [output for output in cell.outputs
                            if output.get("data") != PROGRESS_DONE]
        for output in cell.get("outputs", []):
            if WIDGET_MIME in output.get("data", {}):
                output["data"] = {"text/html": widget_note, "text/plain": "(widget)"}
    notebook.cells.insert(1, download)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    # The reader downloads the committed notebook, not this prepared copy; it sits in a
    # folder Sphinx does not read as a page (conf.py excludes it).
    original = source / DOWNLOADS / relative
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, original)
    return notebook


def index_page(rows: list[str], edition: str = "en") -> str:
    """The landing page: the README's title and introduction, then the lesson table."""
    words = site_words(edition)
    readme = readme_path(edition).read_text()
    title, intro = readme.split("\n## ", 1)[0].split("\n", 1)
    # The README's own language links point at files, not pages: the sidebar has the switch.
    intro = "\n".join(line for line in intro.strip().splitlines()
                      if "README" not in line).strip()
    # Links to files of the repository (GLOSSARY.md …) are not pages: keep their text.
    intro = re.sub(r"\[([^\]]+)\]\((?!https?:)[^)]+\)", r"\1", intro)
    table = "\n".join(rows)
    toctree = "\n".join([*(f"{LESSONS}/{name}" for name in _lesson_names(edition)), CLAIMS_PAGE])
    lesson, run_time, run_it = words["lesson"], words["run_time_column"], words["run_it"]
    return f"""{title}

{intro}

{words["how_to_run"]}

```{{list-table}}
:header-rows: 1
:class: course-lessons

* - \\#
  - {lesson}
  - {run_time}
  - {run_it}
{table}
```

```{{toctree}}
:hidden:
:maxdepth: 1
:caption: {words["caption"]}

{toctree}
```
"""


def _lesson_names(edition: str = "en") -> list[str]:
    return [p.relative_to(EDITIONS[edition]).with_suffix("").as_posix()
            for p in lesson_paths(edition)]


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


def prepare_source(edition: str = "en") -> Path:
    """build/site-src/<edition>/: the Sphinx source of one edition; returns that folder."""
    source = SOURCE / edition
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(SITE_CONFIG, source)
    rows, run_time_words = [], site_words(edition)["run_time"]
    for path, name in zip(lesson_paths(edition), _lesson_names(edition), strict=True):
        notebook = prepare_notebook(path, source, edition)
        number, title = lesson_heading(notebook)
        relative = path.relative_to(ROOT).as_posix()
        run_time = stated_run_time(path)
        rows += [
            f"* - {number}",
            f"  - [{title}]({LESSONS}/{name}.ipynb)",
            f"  - {run_time_words.format(seconds=run_time)}" if run_time else "  - ",
            f"  - [![Open In Colab](_static/colab-badge.svg)]({colab_url(relative)})",
        ]
    (source / "index.md").write_text(index_page(rows, edition))
    (source / f"{CLAIMS_PAGE}.md").write_text(claims_page(edition))
    if has_web_font(edition):
        (source / "_static" / STYLESHEET).write_text(stylesheet(edition))
    vendor_mathjax(source / "_static")
    return source


def build(jobs: str = "2") -> Path:
    """Build both editions into build/site/ (Chinese in zh-CN/) and return that folder."""
    start = time.monotonic()
    shutil.rmtree(SOURCE, ignore_errors=True)
    shutil.rmtree(OUTPUT, ignore_errors=True)
    for edition, output in EDITION_OUTPUT.items():
        subprocess.run(
            [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-d",
             str(CACHE / "doctrees" / edition), str(prepare_source(edition)), str(output)],
            check=True, env={**os.environ, "COURSE_EDITION": edition},
        )
        for page in output.rglob("*.html"):
            if any(page.is_relative_to(other) for other in EDITION_OUTPUT.values()
                   if other != output and other.is_relative_to(output)):
                continue  # another edition's page, under this one's folder
            page.write_text(accessible(page.read_text(encoding="utf-8"), edition),
                            encoding="utf-8")
        if has_web_font(edition):
            write_font(edition, output)
    (OUTPUT / ".nojekyll").touch()
    print(f"site built in {time.monotonic() - start:.0f} s: {OUTPUT.relative_to(ROOT)}/index.html",
          flush=True)
    return OUTPUT


if __name__ == "__main__":
    build()
