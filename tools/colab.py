"""The one place that knows where the course lives online.

Every notebook starts with an "Open in Colab" badge and a setup cell built from
``REPOSITORY`` and the package version; ``python3 tools/course.py sync`` writes them into
the notebooks and the README, and the tests check that they match. A fork changes
``REPOSITORY`` here and runs ``sync``.
"""

from __future__ import annotations

from course_utils import __version__, language
from course_utils.language import ENGLISH
from tools.lessons import edition_text

REPOSITORY = "self-attention-hands-on/course"
BRANCH = "main"
# Tests (and anyone offline) point the setup cell at another install source with this.
SOURCE_VARIABLE = "COURSE_UTILS_SOURCE"


def colab_url(notebook_path: str) -> str:
    """Colab's address for ``notebook_path`` (relative to the repository root)."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/{notebook_path}"


def badge(notebook_path: str) -> str:
    """Markdown for the "Open in Colab" badge of one notebook."""
    image = "https://colab.research.google.com/assets/colab-badge.svg"
    return f"[![Open In Colab]({image})]({colab_url(notebook_path)})"


def install_source() -> str:
    """What pip installs on Colab: this repository at the tag of the package version."""
    return f"git+https://github.com/{REPOSITORY}@v{__version__}"


def extra_packages(edition: str = ENGLISH) -> str:
    """What the setup cell installs besides course_utils: the package of the edition's
    figure font (the Chinese edition's zhplot, which Colab does not ship), if any."""
    font = language.edition(edition).get("figure_font")
    return font["package"] if font else ""


def setup_comments(edition: str = ENGLISH) -> tuple[str, str]:
    """The setup cell's two comments in ``edition``'s words (the catalogue's "notebook"
    messages): the first line, and the one after ``importlib.invalidate_caches()``."""
    intro = edition_text(edition, "notebook",
                         "Setup: on Colab, install the course's helper package (torch and "
                         "ipywidgets stay as they are).")
    if extra_packages(edition):
        intro = edition_text(edition, "notebook",
                             "Setup: on Colab, install the course's helper package and the "
                             "font package {packages} (torch and ipywidgets stay as they "
                             "are).").format(packages=extra_packages(edition))
    last = edition_text(edition, "notebook", "so this running kernel sees the new package")
    return intro, last


def setup_cell_source(edition: str = ENGLISH) -> str:
    """The first code cell of every lesson of ``edition``.

    On Colab (or when the tests set ``COURSE_UTILS_SOURCE``) it installs course_utils
    without dependencies, so torch and ipywidgets stay exactly as Colab ships them, plus
    the edition's extra packages. Anywhere else it installs nothing: ``python3
    tools/course.py lab`` did that. Both editions' cells have the same code; only the
    string naming the extra packages differs.
    """
    intro, last = setup_comments(edition)
    return f'''\
# {intro}
import importlib.util
import os
import subprocess
import sys

extra_packages = "{extra_packages(edition)}"
if importlib.util.find_spec("course_utils") is None and (
    "google.colab" in sys.modules or "{SOURCE_VARIABLE}" in os.environ
):
    source = os.environ.get("{SOURCE_VARIABLE}", "{install_source()}")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip, source, *extra_packages.split()], check=True)
    importlib.invalidate_caches()  # {last}'''
