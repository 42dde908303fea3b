"""The claims audit: every claim of every lesson, tried under setup seeds nobody looked at.

Each lesson runs (in a fresh kernel started in its folder, as nbval does) once per audit
seed with its ``setup()`` call replaced by ``setup(seed=s)``, so every model it trains is
another one (every seed of a lesson derives from the setup seed, course_utils.notebook).
The N audit seeds of a lesson are drawn from its code fingerprint (``audit_seeds``): they
change whenever its code changes, so nobody can pick claims, margins or seeds to fit them.
``claim()`` records each claim instead of stopping the lesson (``COURSE_CLAIMS_LOG``), so a
failing claim does not hide the later ones. A claim is named by its lesson, its cell and its
place among that cell's claims; its statement is the stored run's. The report
``docs/claims.md`` gives every claim's pass rate k/N, each lesson's seeds and its code
fingerprint, so a lesson whose code changed since it was audited is known to be stale.

A Chinese twin makes the same claims in the same cells, so the English run speaks for both,
except where the twin declares cells ``edition-specific`` (tools/editions.py: e.g. it trains
on Chinese text): such a twin is audited too, under its own name ``zh-CN/NN_slug.ipynb``.

    python -m tools.audit [--seeds N] [NN ...]   # default: 10 seeds, every English lesson
    python -m tools.audit --stale                # only the lessons whose code changed

Two kernels run at a time (each lesson uses one torch thread).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course_utils.language import ENGLISH
from tools.editions import EDITION_SPECIFIC
from tools.execute import CELL_TIMEOUT_S, SKIP_TAGS, with_seed
from tools.lessons import (
    EDITIONS,
    ROOT,
    all_lesson_paths,
    edition_of,
    edition_text,
    lesson_heading,
    lesson_paths,
    read,
)

REPORT = ROOT / "docs" / "claims.md"
CLAIMS_LOG = "COURSE_CLAIMS_LOG"  # course_utils.notebook.CLAIMS_LOG
DEFAULT_SEEDS = 10
PARALLEL = 2
_CHECK_MARK = re.compile(r"^✓ (.*)$", re.M)
_FINGERPRINT = re.compile(r"<!-- (\S+\.ipynb) code (\w+) seeds (\d+) -->")


def code_fingerprint(notebook: nbformat.NotebookNode) -> str:
    """A hash of a lesson's code cells: what its claims depend on (prose does not count)."""
    code = "\n\0".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:16]


# Seeds 0 (the stored run), 1 and 2 (the Colab runs of the test suite) are never drawn.
_SEED_RANGE = range(3, 1_000_000)


def audit_seeds(path: Path, count: int) -> list[int]:
    """The ``count`` setup seeds a lesson is audited under: drawn without repetition by a
    generator seeded with its code fingerprint, so the same code always meets the same seeds
    and any change to it meets new ones."""
    fingerprint = code_fingerprint(read(path))
    return sorted(random.Random(int(fingerprint, 16)).sample(_SEED_RANGE, count))


def report_name(path: Path) -> str:
    """A lesson's name in the report: its file name, under its edition's folder for a twin."""
    folder = Path(path).resolve().parent
    twin = next((name for name, where in EDITIONS.items() if where == folder
                 and name != ENGLISH), None)
    return path.name if twin is None else f"{twin}/{path.name}"


def audited_paths() -> list[Path]:
    """Every English lesson, and every twin with cells whose numbers are its own."""
    return [path for path in all_lesson_paths() if edition_of(path) == ENGLISH or any(
        EDITION_SPECIFIC in cell.metadata.get("tags", []) for cell in read(path).cells)]


@dataclass(frozen=True)
class Claim:
    lesson: str  # the notebook's file name
    cell: int  # 1-based, as tools.editions counts cells
    order: int  # its place among the cell's claims, from 1
    statement: str


def stored_claims(path: Path) -> list[Claim]:
    """The claims of the stored run, read from its "✓ ..." output lines."""
    claims = []
    for number, cell in enumerate(read(path).cells, 1):
        if cell.cell_type != "code":
            continue
        text = "".join(output.get("text", "") for output in cell.get("outputs", [])
                       if output.get("output_type") == "stream")
        claims += [Claim(report_name(path), number, order, statement) for order, statement in
                   enumerate(_CHECK_MARK.findall(text), 1)]
    return claims


def run_under_seed(path: Path, seed: int) -> dict[tuple[int, int], bool]:
    """{(cell, order): held} for one run of ``path`` under ``setup(seed=seed)``. A cell that
    raises ends the run: the claims it and the later cells would have made are missing."""
    notebook = with_seed(read(path), seed)
    results: dict[tuple[int, int], bool] = {}
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "claims.jsonl"
        log.touch()
        client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel(env={**os.environ, CLAIMS_LOG: str(log)}):
            seen = 0
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type != "code" or SKIP_TAGS & set(cell.metadata.get("tags", [])):
                    continue
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError:
                    break
                finally:
                    lines = log.read_text(encoding="utf-8").splitlines()
                    for order, line in enumerate(lines[seen:], 1):
                        results[(index + 1, order)] = json.loads(line)["holds"]
                    seen = len(lines)
    return results


def audit(paths: list[Path], seeds: int) -> dict[Path, dict[Claim, int]]:
    """{lesson: {claim: how many of its ``seeds`` runs (``audit_seeds``) it held in}}."""
    drawn = {path: audit_seeds(path, seeds) for path in paths}
    jobs = [(path, seed) for path in paths for seed in drawn[path]]
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        runs = dict(zip(jobs, pool.map(lambda job: run_under_seed(*job), jobs), strict=True))
    report = {}
    for path in paths:
        report[path] = {claim: sum(runs[(path, seed)].get((claim.cell, claim.order), False)
                                   for seed in drawn[path])
                        for claim in stored_claims(path)}
    return report


def _table(edition: str, path: Path, rows: list[tuple[int, str, int]], seeds: int,
           drawn: list[int]) -> list[str]:
    """A lesson's heading, its audit seeds and its table of (cell, statement, held) rows, in
    edition's words."""
    number, title = lesson_heading(read(path))
    columns = (edition_text(edition, "claims", "cell"), edition_text(edition, "claims", "claim"),
               edition_text(edition, "claims", "holds in"))
    seeds_line = edition_text(edition, "claims", "Setup seeds: {seeds}.").format(
        seeds=", ".join(str(seed) for seed in drawn))
    lines = [f"## {number} · {title}", "", seeds_line, "",
             "| {} | {} | {} |".format(*columns), "|---|---|---|"]
    for cell, statement, held in rows:
        lines.append(f"| {cell} | {statement.replace('|', chr(92) + '|')} | {held}/{seeds} |")
    return lines


def lesson_section(path: Path, passes: dict[Claim, int], seeds: int) -> str:
    lines = _table(ENGLISH, path, [(c.cell, c.statement, held) for c, held in passes.items()],
                   seeds, audit_seeds(path, seeds))
    lines[1:1] = ["", f"<!-- {report_name(path)} code {code_fingerprint(read(path))} "
                      f"seeds {seeds} -->"]
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^\| (\d+) \| .* \| (\d+)/(\d+) \|$", re.M)


def recorded_rates() -> dict[str, list[tuple[int, int, int]]]:
    """{lesson file: [(cell, held, seeds), ...] in claim order} from the committed report."""
    return {name: [(int(cell), int(held), int(seeds)) for cell, held, seeds in _ROW.findall(part)]
            for name, part in sections(REPORT.read_text()).items()} if REPORT.exists() else {}


def claims_page(edition: str) -> str:
    """The site's page of the report in ``edition``: its own lessons' statements (a twin makes
    the same claims, in the same cells and order) beside the rates the audit measured: its
    own where it was audited itself (``audited_paths``), else its English twin's."""
    rates = recorded_rates()
    parts = [page_header(edition, max((s for rows in rates.values() for *_, s in rows),
                                      default=DEFAULT_SEEDS))]
    for path in lesson_paths(edition):
        recorded = rates.get(report_name(path), rates.get(path.name, []))
        claims = stored_claims(path)
        if [cell for cell, *_ in recorded] != [claim.cell for claim in claims]:
            raise ValueError(f"{path.name}: its claims differ from the report's; audit it again")
        rows = [(claim.cell, claim.statement, held)
                for claim, (_cell, held, _seeds) in zip(claims, recorded, strict=True)]
        seeds = recorded[0][2] if recorded else DEFAULT_SEEDS
        audited = path if report_name(path) in rates else EDITIONS[ENGLISH] / path.name
        parts.append("\n".join(_table(edition, path, rows, seeds,
                                       audit_seeds(audited, seeds))) + "\n")
    return "\n".join(parts)


def page_header(edition: str, seeds: int) -> str:
    """The report's title and introduction, in ``edition``'s words."""
    title = edition_text(edition, "claims", "How sure are these claims?")
    intro = edition_text(
        edition, "claims",
        "Every sentence of a lesson that states a result is checked in code where it is made, "
        "and the stored notebooks show one run: `setup(seed=0)`. A learner's run is another "
        "one, and a claim about a trained model must hold for models nobody looked at. So each "
        "lesson was run again under {seeds} other setup seeds, drawn from the lesson's own code "
        "(they change whenever its code does; each lesson lists its own), training other "
        "models each time, and each claim's line below says in how many of those runs it held. "
        "Every claim should hold in every run; a claim that held only usually is restated by "
        "its lesson as the rate, band or budget that does hold.").format(seeds=seeds)
    made_by = edition_text(
        edition, "claims",
        "Made by `python3 tools/course.py audit`; a lesson whose code changed since is audited "
        "again.")
    return f"# {title}\n\n{intro}\n\n{made_by}\n"


def sections(text: str) -> dict[str, str]:
    """The report's sections by lesson file name."""
    found = {}
    for part in re.split(r"(?m)^(?=## )", text):
        match = _FINGERPRINT.search(part)
        if match:
            found[match.group(1)] = part.rstrip() + "\n"
    return found


def stale_lessons(seeds: int = DEFAULT_SEEDS) -> list[Path]:
    """Audited lessons (``audited_paths``) missing from the report, audited with fewer seeds,
    or whose code changed since."""
    recorded = {match.group(1): (match.group(2), int(match.group(3)))
                for match in _FINGERPRINT.finditer(REPORT.read_text())} if REPORT.exists() else {}
    return [path for path in audited_paths()
            if recorded.get(report_name(path), (None, 0)) != (code_fingerprint(read(path)), seeds)]


def write_report(results: dict[Path, dict[Claim, int]], seeds: int) -> None:
    kept = sections(REPORT.read_text()) if REPORT.exists() else {}
    kept.update({report_name(path): lesson_section(path, passes, seeds)
                 for path, passes in results.items()})
    ordered = [kept[name] for name in sorted(kept)]  # lesson files sort in learning order
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(page_header(ENGLISH, seeds) + "\n" + "\n".join(ordered))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/course.py audit", description=__doc__)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    parser.add_argument("--stale", action="store_true", help="only lessons whose code changed")
    parser.add_argument("lessons", nargs="*", help="lesson numbers, e.g. 01 07")
    args = parser.parse_args(argv)
    paths = audited_paths()
    if args.lessons:
        paths = [p for p in paths if p.name.split("_")[0] in args.lessons]
    if args.stale:
        paths = [p for p in paths if p in stale_lessons(args.seeds)]
    results = audit(paths, args.seeds)
    write_report(results, args.seeds)
    failing = [(claim, held) for passes in results.values()
               for claim, held in passes.items() if held < args.seeds]
    for claim, held in failing:
        print(f"{claim.lesson} cell {claim.cell}: {held}/{args.seeds}: {claim.statement}")
    print(f"{len(failing)} claims held in fewer than {args.seeds} of {args.seeds} runs; "
          f"report: {REPORT.relative_to(ROOT)}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
