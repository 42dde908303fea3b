"""Execute notebooks in place the way CI validates them.

One fresh kernel per notebook, started in the notebook's own folder (as nbval does), cells
run top to bottom; the saved file keeps no timing metadata and no widget state, so a
re-run changes the file only where an output really changed.

    python -m tools.execute notebooks/02_qkv_projections.ipynb [...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT_S = 300


def execute(path: Path, kernel_name: str = "python3", env: dict | None = None,
            allow_errors: bool = False) -> nbformat.NotebookNode:
    """Run every cell of ``path`` in a fresh kernel; return the executed notebook."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False, allow_errors=allow_errors,
    )
    client.execute(**({"env": env} if env is not None else {}))
    return notebook


def clean(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop what must not be committed: widget state and per-run metadata."""
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    return notebook


def main(paths: list[str]) -> int:
    for name in paths:
        path = Path(name).resolve()
        start = time.perf_counter()
        notebook = clean(execute(path))
        nbformat.write(notebook, path)
        print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
