"""The explorer's front end (course_utils/views/static/) outside any browser.

- its logic, unit-tested by node's own test runner (tests/js/) against numbers this
  module computes with the course's attention and writes to a JSON fixture (path in the
  environment variable ``EXPLORER_FIXTURE``);
- every .js file of the repository parses (``node --check``) and passes ESLint, pinned in
  package.json / package-lock.json (``npm ci --no-audit --no-fund`` installs it;
  ``tools/course.py test`` does so when node_modules is missing or older than the lock).

Skipped only where ``node`` is absent (CI has it). The Chromium tests (test_browser.py,
test_site.py) check what the page draws.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from course_utils.language import set_language
from course_utils.views.explorer import AttentionExplorer, ModelExplorer, synthetic_attentions
from course_utils.views.explorer_html import TEMPERATURES, render_row_html
from course_utils.views.explorer_model import (
    AttentionExample,
    computation_steps,
    explorer_state,
    round_example,
)

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
ESLINT = ROOT / "node_modules" / ".bin" / "eslint"
JS_TESTS = ROOT / "tests" / "js"
# Every JavaScript file of the course (the environments and node_modules hold others).
JS_FILES = sorted([*ROOT.glob("*.js"), *(ROOT / "course_utils").rglob("*.js"),
                   *JS_TESTS.rglob("*.js")])

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: the explorer's "
                                "JavaScript tests need node 20+ (apt-get install nodejs)")

EDITIONS = ("en", "zh-CN")
EDITS_PER_SETTING = 3  # random edited queries per (causal, scaled, temperature)


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          **kwargs)


def _example_as_sent(payload_sentence: dict, queries: list[list[float]]) -> AttentionExample:
    """The example the page holds (its rounded numbers, in float64), with ``queries``."""
    return AttentionExample(
        tokens=tuple(payload_sentence["tokens"]),
        queries=torch.tensor(queries, dtype=torch.float64),
        keys=torch.tensor(payload_sentence["keys"], dtype=torch.float64),
        values=torch.tensor(payload_sentence["values"], dtype=torch.float64),
        default_query=payload_sentence["query"], source="the page's JSON")


def _python_row(example: AttentionExample, query: int, causal: bool, scaled: bool,
                temperature: float) -> dict:
    """One query's row as the course computes it: scores, scale, weights, entropy, output."""
    steps = computation_steps(example, query, causal=causal, scaled=scaled,
                              temperature=temperature)
    state = explorer_state(example, query, causal=causal, scaled=scaled,
                           temperature=temperature)  # scaled_dot_product_attention's row
    assert torch.allclose(torch.tensor(state.weights, dtype=torch.float64),
                          torch.tensor(steps.weights, dtype=torch.float64), atol=1e-12)
    return {"scores": list(steps.scores), "scale": steps.scale, "weights": list(state.weights),
            "entropy": state.entropy, "output": list(steps.output)}


def _edit_cases(payload: dict, generator: torch.Generator) -> list[dict]:
    """Edited queries (one or two rows at once) on every sentence and setting, with the
    course's numbers for each edited row."""
    cases = []
    for s, sentence in enumerate(payload["sentences"]):
        n, d_k = len(sentence["tokens"]), sentence["d_k"]
        for causal in (False, True):
            for scaled in (True, False):
                for t, temperature in enumerate(TEMPERATURES):
                    for number in range(EDITS_PER_SETTING):
                        rows = torch.randperm(n, generator=generator)[:1 + number % 2].tolist()
                        if number == 0:
                            rows = [0 if causal else n - 1]  # the first row sees one key
                        queries = [list(q) for q in sentence["queries"]]
                        edits = {}
                        for q in rows:
                            vector = torch.round(torch.randn(d_k, generator=generator) * 2,
                                                 decimals=1).tolist()
                            queries[q] = vector
                            edits[str(q)] = vector
                        example = _example_as_sent(sentence, queries)
                        cases.append({
                            "sentence": s, "causal": causal, "scaled": scaled, "t": t,
                            "edits": edits,
                            "rows": {str(q): _python_row(example, q, causal, scaled, temperature)
                                     for q in rows}})
    return cases


def _settings_shown(example: AttentionExample) -> list[dict]:
    """The settings note Python's row (the no-script fallback) shows, per switch setting."""
    found = []
    for causal in (False, True):
        for scaled in (True, False):
            row = render_row_html(explorer_state(example, causal=causal, scaled=scaled),
                                  example.d_k)
            title = row.split("\n")[1]  # '<div>query <b>it</b> · causal mask on · ...</div>'
            found.append({"causal": causal, "scaled": scaled, "html": title})
    return found


def _softmax_cases(generator: torch.Generator) -> list[dict]:
    """Logit rows (None = -inf, a masked key) and torch's softmax and entropy of them."""
    cases = []
    for n in (1, 2, 5, 9):
        for spread in (0.1, 3.0, 40.0):
            logits = torch.randn(n, generator=generator, dtype=torch.float64) * spread
            hidden = torch.rand(n, generator=generator) < 0.4
            hidden[int(torch.randint(n, (1,), generator=generator))] = False  # one key seen
            logits = logits.masked_fill(hidden, -math.inf)
            weights = torch.softmax(logits, dim=-1)
            entropy = -(weights * weights.clamp_min(1e-300).log()).sum()
            cases.append({"logits": [None if math.isinf(v) else v for v in logits.tolist()],
                          "weights": weights.tolist(), "entropy": float(entropy)})
    return cases


@pytest.fixture(scope="module")
def fixture_file(tmp_path_factory) -> Path:
    generator = torch.Generator().manual_seed(24)
    editions = {}
    try:
        for edition in EDITIONS:
            set_language(edition)
            explorer = AttentionExplorer(sentences=[round_example()], causal=True)
            payload = explorer.payload()
            first = _example_as_sent(payload["sentences"][0], payload["sentences"][0]["queries"])
            model = ModelExplorer([f"w{i}" for i in range(5)], synthetic_attentions(2, 3, 5),
                                  layer=1, head=2)
            editions[edition] = {"toy": payload, "model": model.payload(),
                                 "settings_shown": _settings_shown(first)}
    finally:
        set_language("en")
    data = {"editions": editions,
            "edits": _edit_cases(editions["en"]["toy"], generator),
            "softmax": _softmax_cases(generator)}
    path = tmp_path_factory.mktemp("explorer-js") / "explorer-fixture.json"
    path.write_text(json.dumps(data, allow_nan=False), encoding="utf-8")
    return path


def test_the_explorer_logic_passes_its_node_unit_tests(fixture_file):
    """node --test tests/js/: the page's arithmetic and state changes against Python."""
    result = _run([NODE, "--test", "--test-reporter=spec", str(JS_TESTS)],
                  env={**os.environ, "EXPLORER_FIXTURE": str(fixture_file)})
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    assert "# fail 0" in result.stdout or "ℹ fail 0" in result.stdout, result.stdout


def test_every_js_file_parses():
    assert JS_FILES, "no .js file found"
    for path in JS_FILES:
        result = _run([NODE, "--check", str(path)])
        assert result.returncode == 0, f"{path}:\n{result.stderr}"


def test_the_javascript_passes_eslint():
    """ESLint's recommended rules (eslint.config.js), at package-lock.json's versions."""
    if not ESLINT.exists():
        missing = ("ESLint is not installed: run `npm ci --no-audit --no-fund` at the repository "
                   "root (python3 tools/course.py test does it when node_modules is missing or "
                   "older than package-lock.json)")
        if os.environ.get("CI"):
            pytest.fail(missing)  # CI must lint, never skip it
        pytest.skip(missing)
    result = _run([str(ESLINT), "--max-warnings=0", "."])
    assert result.returncode == 0, f"ESLint found problems:\n{result.stdout}\n{result.stderr}"
