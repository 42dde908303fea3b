"""Suite-wide checks: every notebook is validated, and the excluded cells are reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks import excluded_cells, lesson_paths, read


def pytest_collection_finish(session: pytest.Session) -> None:
    """With --nbval on notebooks/, a notebook that nbval did not collect is an error."""
    config = session.config
    if not config.option.nbval or not any("notebooks" in str(a) for a in config.args):
        return
    collected = {Path(item.path).resolve() for item in session.items
                 if Path(item.path).suffix == ".ipynb"}
    missing = [p.name for p in lesson_paths() if p.resolve() not in collected]
    if missing:
        raise pytest.UsageError(f"notebooks not validated by nbval: {', '.join(missing)}")


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.section("cells excluded from output comparison")
    for path in lesson_paths():
        notebook = read(path)
        code_cells = sum(1 for cell in notebook.cells if cell.cell_type == "code")
        terminalreporter.write_line(
            f"{path.name}: {excluded_cells(notebook)} of {code_cells} code cells excluded"
        )
