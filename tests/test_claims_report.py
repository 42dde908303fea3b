"""The committed claims audit (docs/claims.md, tools/audit.py) is current and every claim in it
holds in every audited seed; its page on the site carries each edition's own statements."""

from __future__ import annotations

import pytest

from tools import audit
from tools.lessons import EDITIONS, lesson_paths


def test_every_lesson_was_audited_since_its_code_last_changed():
    stale = [path.name for path in audit.stale_lessons()]
    assert not stale, (f"audit these lessons again ({audit.DEFAULT_SEEDS} seeds): "
                       f"python3 tools/course.py audit {' '.join(n[:2] for n in stale)}")


def test_every_claim_holds_in_every_audited_seed():
    below = [(name, cell, f"{held}/{seeds}") for name, rows in audit.recorded_rates().items()
             for cell, held, seeds in rows if held < seeds]
    assert not below, f"claims that do not hold in every seed (restate them): {below}"


def test_the_report_lists_every_claim_of_the_stored_runs_in_order():
    rates = audit.recorded_rates()
    for path in audit.audited_paths():  # the English lessons and the twins audited themselves
        name = audit.report_name(path)
        assert [cell for cell, *_ in rates.get(name, [])] == [
            claim.cell for claim in audit.stored_claims(path)], name


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_site_page_has_every_lessons_claims_in_its_editions_words(edition):
    page = audit.claims_page(edition)
    title = audit.edition_text(edition, "claims", "How sure are these claims?")
    assert page.startswith(f"# {title}\n")
    for path in lesson_paths(edition):
        for claim in audit.stored_claims(path):
            assert claim.statement.replace("|", "\\|") in page, (path.name, claim.statement)
