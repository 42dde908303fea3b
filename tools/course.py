"""Set up and run the course: ``python3 tools/course.py lab | test | execute``.

Needs only Python 3.10+. The first run creates ``.venv`` (and, for the tests, a second
environment ``.venv-colab`` with Colab's versions); later runs reuse them and reinstall
only when a requirements or constraints file changed.

    lab              open notebooks/ in JupyterLab
    test [ARGS]      lint, then run the whole test suite (pytest ARGS)
    execute [NB...]  re-execute notebooks in place exactly as CI validates them
    sync             write the Colab badges and setup cells (see tools/colab.py)
    site             build the offline course website into build/site/ (see tools/site.py)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
COLAB_VENV = ROOT / ".venv-colab"
CHROMIUM = Path("/usr/bin/chromium")


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / name


def _run(*command, **kwargs) -> None:
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], check=True, **kwargs)


def ensure_env(env: Path, requirement_files: list[str], constraints: str, editable: bool) -> Path:
    """Create ``env`` if needed and install what the files ask, unless already done."""
    inputs = [constraints, *requirement_files] + (["pyproject.toml"] if editable else [])
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in inputs)).hexdigest()
    stamp = env / ".course-installed"
    if stamp.exists() and stamp.read_text() == digest:
        return env
    if not _bin(env, "python").exists():
        print(f"Creating {env.name} ...", flush=True)
        venv.create(env, with_pip=True)
    pip = [_bin(env, "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    args = ["-c", ROOT / constraints]
    for requirement_file in requirement_files:
        args += ["-r", ROOT / requirement_file]
    if editable:
        args += ["-e", ROOT]
    _run(*pip, *args)
    stamp.write_text(digest)
    return env


def dev_env() -> Path:
    """The one main environment, with the test tools, so that lab and test share it."""
    return ensure_env(VENV, ["requirements.txt", "requirements-dev.txt"], "constraints-ci.txt",
                      editable=True)


def ensure_chromium() -> None:
    """Install Debian's chromium for the browser tests when it is missing and we can."""
    if CHROMIUM.exists():
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get", "update", "-qq", env=env)
        _run("apt-get", "install", "-y", "-qq", "chromium", env=env)
    else:
        print("chromium not found at /usr/bin/chromium and cannot install it here: "
              "the browser tests will be skipped (CI installs it).", flush=True)


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("help", [])
    os.chdir(ROOT)
    if command == "lab":
        env = dev_env()
        # JupyterLab refuses to start as root (containers, cloud shells) unless told it may.
        as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        os.execv(_bin(env, "jupyter"), ["jupyter", "lab", "notebooks", *as_root, *args])
    if command == "test":
        dev_env()
        ensure_env(COLAB_VENV, ["requirements-colab.txt"], "constraints-colab.txt",
                   editable=False)
        ensure_chromium()
        python = _bin(VENV, "python")
        _run(python, "-m", "ruff", "check", ".")
        return subprocess.run([python, "-m", "pytest", *args]).returncode
    if command == "execute":
        dev_env()
        notebooks = args or sorted(str(p) for p in (ROOT / "notebooks").glob("*.ipynb"))
        return subprocess.run(
            [_bin(VENV, "python"), "-m", "tools.execute", *notebooks]
        ).returncode
    if command == "sync":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.sync_colab"]).returncode
    if command == "site":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.site"]).returncode
    print(__doc__)
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
