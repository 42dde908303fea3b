"""The one place that knows where the course lives online.

Every notebook starts with an "Open in Colab" badge and a setup cell built from
``REPOSITORY`` and the package version; ``python3 tools/course.py sync`` writes them into
the notebooks and the README, and the tests check that they match. A fork changes
``REPOSITORY`` here and runs ``sync``.
"""

from __future__ import annotations

from course_utils import __version__

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


def setup_cell_source() -> str:
    """The first code cell of every lesson.

    On Colab (or when the tests set ``COURSE_UTILS_SOURCE``) it installs course_utils
    without dependencies, so torch and ipywidgets stay exactly as Colab ships them.
    Anywhere else it installs nothing: ``python3 tools/course.py lab`` did that.
    """
    return f'''\
# Setup: on Colab, install the course's helper package (torch and ipywidgets stay as they are).
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("course_utils") is None and (
    "google.colab" in sys.modules or "{SOURCE_VARIABLE}" in os.environ
):
    source = os.environ.get("{SOURCE_VARIABLE}", "{install_source()}")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip, source], check=True)
    importlib.invalidate_caches()  # so this running kernel sees the new package'''
