"""The package's shape: layers that import only downwards, no cycle, one module per name.

The layers are pyproject's import-linter contract (``lint-imports``): exercises, views,
experiments, diagnostics and models, data, nn, then the floor of shared modules.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[1] / "course_utils"
MAX_LINES = 500
MAX_TOP_LEVEL_MODULES = 8


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_layers_contract_is_kept():
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                          " lint_imports_command()"], cwd=PACKAGE.parent,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_no_import_cycle():
    graph = grimp.build_graph("course_utils")
    modules = sorted(graph.modules)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if not imported.startswith("course_utils"):
                continue
            if state.get(imported) == 1:
                return [*path, module, imported]
            if imported not in state and (cycle := visit(imported, [*path, module])):
                return cycle
        state[module] = 2
        return None

    for module in modules:
        if module not in state and (cycle := visit(module, [])):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_no_module_name_is_used_twice():
    names = Counter(path.stem for path in _modules() if path.stem != "__init__")
    assert not [name for name, count in names.items() if count > 1], names.most_common(3)


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_the_top_level_is_a_small_floor():
    top = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
