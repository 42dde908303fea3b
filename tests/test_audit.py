"""The claims audit (tools/audit.py) on a made-up lesson whose second claim holds only for
some setup seeds: it counts each claim's runs, names it by cell and order, and knows when a
lesson's code changed since its audit."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tools import audit
from tools.execute import clean, execute

LESSON = [
    "# Lesson 99 · A made-up lesson",
    "from course_utils.notebook import claim, seeds, setup\nsetup(seed=0)",
    'claim(True, "always holds")\nclaim(seeds(1)[0] % 2000 == 0, "holds for even setup seeds")',
    'x = 1  # a cell without claims',
    'claim(x == 1, "holds after a cell without claims")',
]


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lesson") / "99_made_up.ipynb"
    cells = [nbformat.v4.new_markdown_cell(LESSON[0])]
    cells += [nbformat.v4.new_code_cell(source) for source in LESSON[1:]]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    nbformat.write(clean(execute(path)), path)  # the stored run, setup(seed=0)
    return path


def test_the_stored_claims_are_read_from_the_check_mark_lines(lesson):
    assert [(c.cell, c.order, c.statement) for c in audit.stored_claims(lesson)] == [
        (3, 1, "always holds"), (3, 2, "holds for even setup seeds"),
        (5, 1, "holds after a cell without claims")]


def test_each_claim_is_counted_over_the_seeds_and_the_report_says_so(lesson, tmp_path,
                                                                     monkeypatch):
    drawn = audit.audit_seeds(lesson, 2)
    even = sum(seed % 2 == 0 for seed in drawn)
    results = audit.audit([lesson], seeds=2)
    assert {c.statement: held for c, held in results[lesson].items()} == {
        "always holds": 2, "holds for even setup seeds": even,
        "holds after a cell without claims": 2}
    monkeypatch.setattr(audit, "REPORT", tmp_path / "claims.md")
    audit.write_report(results, seeds=2)
    text = audit.REPORT.read_text()
    assert f"| 3 | holds for even setup seeds | {even}/2 |" in text
    assert f"Setup seeds: {drawn[0]}, {drawn[1]}." in text
    assert f"<!-- 99_made_up.ipynb code {audit.code_fingerprint(audit.read(lesson))} seeds 2 -->" \
        in text


def test_a_change_to_a_lessons_code_makes_its_audit_stale_and_prose_does_not(lesson):
    notebook = audit.read(lesson)
    before = audit.code_fingerprint(notebook)
    notebook.cells[0].source += "\nMore prose."
    assert audit.code_fingerprint(notebook) == before
    notebook.cells[3].source = "x = 2"
    assert audit.code_fingerprint(notebook) != before


def test_the_audit_seeds_come_from_the_code_and_change_with_it(lesson, tmp_path):
    drawn = audit.audit_seeds(lesson, 10)
    assert drawn == audit.audit_seeds(lesson, 10) and len(set(drawn)) == 10
    assert not {0, 1, 2} & set(drawn)  # the stored run and the Colab runs
    notebook = audit.read(lesson)
    notebook.cells[3].source = "x = 2  # any change to the code"
    changed = tmp_path / lesson.name
    nbformat.write(notebook, changed)
    assert set(audit.audit_seeds(changed, 10)).isdisjoint(drawn)


def test_a_twin_with_edition_specific_cells_is_audited_under_its_own_name():
    from tools.editions import EDITION_SPECIFIC
    from tools.lessons import lesson_paths

    names = [audit.report_name(path) for path in audit.audited_paths()]
    english = [path.name for path in lesson_paths("en")]
    assert names[:len(english)] == english  # every English lesson, by its file name
    twins = [path for path in audit.audited_paths() if path.name not in names[:len(english)]
             or audit.report_name(path) != path.name]
    assert twins, "lesson 12's Chinese twin trains on Chinese text and declares it"
    for path in twins:
        assert audit.report_name(path) == f"zh-CN/{path.name}"
        assert any(EDITION_SPECIFIC in cell.metadata.get("tags", [])
                   for cell in audit.read(path).cells)
    assert "zh-CN/11_positions.ipynb" not in names  # a twin with the same numbers is not
