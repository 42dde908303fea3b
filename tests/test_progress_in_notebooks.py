"""The progress display in a real kernel: a learner sees it move, the stored notebook keeps the
same empty output however fast the run was, and nbval passes on a re-run."""

from __future__ import annotations

import subprocess
import sys

import nbformat
from nbclient import NotebookClient

from course_utils.progress import EMPTY

SWEEP = """\
import time
import course_utils.progress as progress
from course_utils.progress import MODELS, TRAINING_STEPS, Progress, counted
progress.UPDATE_EVERY_S = 0.01
for model in counted(["a", "b"], MODELS):
    with Progress(30, TRAINING_STEPS) as bar:
        for step in range(30):
            time.sleep({pause})
            bar.advance()
print("trained", model)
"""


class RecordingClient(NotebookClient):
    """An nbclient client that keeps every iopub message a front end would have drawn."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.drawn = []

    def process_message(self, msg, cell, cell_index):
        self.drawn.append((msg["msg_type"], msg["content"].get("data", {}).get("text/plain")))
        return super().process_message(msg, cell, cell_index)


def run(pause: float) -> tuple[nbformat.NotebookNode, list]:
    cell = nbformat.v4.new_code_cell(SWEEP.format(pause=pause))
    notebook = nbformat.v4.new_notebook(cells=[cell])
    client = RecordingClient(notebook, timeout=120, kernel_name="python3")
    client.execute()
    return notebook, client.drawn


def test_a_learner_sees_both_bars_move_and_the_notebook_keeps_one_empty_output(tmp_path):
    slow, drawn = run(pause=0.01)
    fast, _drawn = run(pause=0.0)
    updates = [text for kind, text in drawn if kind == "update_display_data"]
    assert any("models ▕" in text and "training steps ▕" in text for text in updates), updates
    assert len(updates) >= 3
    for notebook in (slow, fast):
        outputs = notebook.cells[0].outputs
        assert [o.output_type for o in outputs] == ["display_data", "stream"]
        assert outputs[0].data == EMPTY
        assert outputs[1].text == "trained b\n"
    path = tmp_path / "sweep.ipynb"
    nbformat.write(slow, path)
    nbval = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider",
                            "-q", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert nbval.returncode == 0, nbval.stdout[-2000:]
