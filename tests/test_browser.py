"""The lessons that need a front end, in a real JupyterLab, driven in Debian's Chromium by
playwright.

For each notebook of both editions whose outputs a front end renders (HTML with a script,
widgets: ``tools.lessons.front_end_outputs``): open it, Run All, wait for the kernel to go
idle, then check that no cell raised and that every widget rendered. A failing notebook leaves a
full-page screenshot in tests/screenshots/ (git-ignored); ``COURSE_SCREENSHOTS=1`` saves one
of every notebook for a reviewer to look at (CI skips them: each costs seconds of a
16,000-pixel capture). On the attention explorer:
click tokens and flip its toggles, reading the numbers it shows, and measure how long a
click takes to update them.

The browser never writes a notebook back: autosave is off in this server's own settings,
pages are closed without saving, and each test checks that the file is byte-for-byte
unchanged, so the committed outputs stay exactly as CI produced them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from course_utils.views.explorer import AttentionExplorer, ModelExplorer, synthetic_attentions
from course_utils.views.explorer_html import TEMPERATURES, UI_TEXT
from course_utils.views.explorer_model import (
    computation_steps,
    explorer_state,
    pronoun_example,
    round_example,
    weight_matrix,
)
from tests.support.browser import (
    CLICK_LATENCY_JS,
    LATENCY_TARGET_MS,
    pronoun_example_of,
    require_chromium,
)
from tools.lessons import EDITIONS, ROOT, all_lesson_paths, edition_of, front_end_outputs, read

SCREENSHOTS = ROOT / "tests" / "screenshots"
EXPLORER_NOTEBOOKS = {edition: folder / "09_attention_explorer.ipynb"
                      for edition, folder in EDITIONS.items()}
SERVER_START_TIMEOUT_S = 90
RUN_ALL_TIMEOUT_S = 180  # a lesson runs in at most 60 s; the rest is slack for a busy CI box
WIDGET_RENDER_TIMEOUT_S = 30
LATENCY_CLICKS = 12

# Settings of this server only (its own JUPYTER_CONFIG_DIR): never save notebooks, render
# every cell (windowing would leave off-screen cells out of the page), no news pop-ups.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {
        "checkForUpdates": False, "fetchNews": "false",
    },
}


@dataclass(frozen=True)
class Lab:
    url: str
    token: str
    log_path: Path

    def saves(self) -> list[str]:
        """The server's log lines about saving a file (Jupyter logs every save)."""
        return [line for line in self.log_path.read_text(errors="replace").splitlines()
                if "Saving file at" in line]

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write_lab_settings(settings_dir: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """A JupyterLab on 127.0.0.1 with its own config, data and runtime directories."""
    require_chromium()
    home = tmp_path_factory.mktemp("jupyter")
    config_dir, data_dir, runtime_dir = (home / name for name in ("config", "data", "runtime"))
    settings_dir = config_dir / "lab" / "user-settings"
    _write_lab_settings(settings_dir)
    env = {key: value for key, value in os.environ.items() if not key.startswith("JUPYTER")}
    env.pop("COURSE_UTILS_SOURCE", None)  # course_utils is installed: no pip in the setup cell
    # Portable CPU kernels are for nbval's comparison (lane 2 of the suite); Run All here
    # checks the front end, at the machine's own speed.
    env.pop("ATEN_CPU_CAPABILITY", None)
    env.update(
        JUPYTER_CONFIG_DIR=str(config_dir), JUPYTER_DATA_DIR=str(data_dir),
        JUPYTER_RUNTIME_DIR=str(runtime_dir), IPYTHONDIR=str(home / "ipython"),
        JUPYTER_PLATFORM_DIRS="1", PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    port, token = _free_port(), secrets.token_hex(16)
    log_path = home / "server.log"
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings_dir}",
        f"--LabApp.workspaces_dir={config_dir / 'lab' / 'workspaces'}",
        # Opening a notebook makes a checkpoint copy of it: keep those out of the repo.
        f"--FileCheckpoints.root_dir={home / 'checkpoints'}",
    ]
    with open(log_path, "wb") as log:
        # Own process group, so that the kernels it starts go down with it.
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        lab = Lab(url=f"http://127.0.0.1:{port}", token=token, log_path=log_path)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n"
                            f"{log_path.read_text()[-3000:]}", pytrace=False)
            try:
                lab.api("GET", "/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S} s:\n"
                                f"{log_path.read_text()[-3000:]}", pytrace=False)
                time.sleep(0.5)
        yield lab
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        try:  # kernels the server could not shut down in time
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def browser(lab, chromium):
    return chromium


@pytest.fixture
def page(browser, lab):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()  # closes the page without running beforeunload: nothing is saved
        lab.shut_down_kernels()


def _panel(js_body: str) -> str:
    """A JS function whose body sees the current notebook panel as ``panel``."""
    return f"() => {{ const app = window.jupyterapp; const panel = app.shell.currentWidget; " \
           f"{js_body} }}"


def run_all(page, lab: Lab, notebook: Path) -> dict:
    """Open ``notebook``, Run All, wait until the kernel is idle; return the notebook JSON."""
    relative = notebook.relative_to(ROOT).as_posix()
    page.goto(f"{lab.url}/lab/tree/{relative}?reset&token={lab.token}")
    page.wait_for_function(
        f"""() => {{
            const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            return !!(panel && panel.context && panel.context.path === {json.dumps(relative)}
                      && panel.context.isReady);
        }}""",
        timeout=SERVER_START_TIMEOUT_S * 1000,
    )
    page.evaluate(_panel("""
        app.shell.collapseLeft();
        window.__runAll = {done: false, error: null};
        panel.sessionContext.ready
            .then(() => app.commands.execute('notebook:run-all-cells'))
            .then(() => { window.__runAll.done = true; },
                  (e) => { window.__runAll.error = String(e); window.__runAll.done = true; });
    """))
    page.wait_for_function(_panel("""
        const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
        return window.__runAll.done && !!kernel && kernel.status === 'idle';
    """), timeout=RUN_ALL_TIMEOUT_S * 1000, polling=250)
    error = page.evaluate("() => window.__runAll.error")
    assert error is None, f"{notebook.name}: Run All failed in the browser: {error}"
    return page.evaluate(_panel("return panel.context.model.toJSON();"))


def widget_problems(page) -> list[str]:
    """What is wrong with the widgets on the page now (empty when all rendered)."""
    return page.evaluate(_panel("""
        const problems = [];
        const text = panel.node.innerText;
        for (const phrase of ['Error displaying widget', 'Loading widget']) {
            if (text.includes(phrase)) problems.push(`the page shows "${phrase}"`);
        }
        const outputs = panel.node.querySelectorAll(
            '[data-mime-type="application/vnd.jupyter.widget-view+json"]');
        outputs.forEach((output, i) => {
            if (!output.querySelector('.jupyter-widgets')) {
                problems.push(`widget output ${i} has no rendered widget`);
            }
        });
        return problems;
    """))


def scroll_notebook(page, top: int) -> dict:
    """Scroll the notebook to ``top`` px; return its content's and its window's heights."""
    return page.evaluate("""(top) => {
        // The notebook scrolls inside its own element, not the page: find that element.
        const panel = window.jupyterapp.shell.currentWidget;
        const scrollers = [...panel.node.querySelectorAll('*')].filter(
            e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY));
        const scroller = scrollers.reduce((a, b) => (b.scrollHeight > a.scrollHeight ? b : a));
        scroller.scrollTop = top;
        // Measure to the last cell: JupyterLab pads the end so one can scroll past it.
        const cells = panel.content.node.querySelectorAll('.jp-Cell');
        const last = cells[cells.length - 1].getBoundingClientRect().bottom;
        const total = last - scroller.getBoundingClientRect().top + scroller.scrollTop + 16;
        return {total: Math.ceil(total), visible: scroller.clientHeight};
    }""", top)


MAX_SCREENSHOT_HEIGHT = 16_000  # Chromium's limit for one capture is about 16k pixels
SCREENSHOTS_OF_PASSING = os.environ.get("COURSE_SCREENSHOTS") == "1"


def full_page_screenshot(page, name: str) -> list[Path]:
    """Screenshot the whole notebook, top to bottom.

    The window is grown to the notebook's full height; a notebook taller than one capture
    allows is saved in parts (name.png, name_part2.png, ...).
    """
    size = scroll_notebook(page, 0)
    for _ in range(3):  # the layout can shift a little in the taller window: re-measure
        chrome = page.viewport_size["height"] - size["visible"]  # menus, toolbars, status bar
        height = min(size["total"] + chrome, MAX_SCREENSHOT_HEIGHT)
        if height == page.viewport_size["height"]:
            break
        page.set_viewport_size({"width": 1280, "height": height})
        page.wait_for_timeout(300)  # let JupyterLab lay out the taller window
        size = scroll_notebook(page, 0)
    SCREENSHOTS.mkdir(exist_ok=True)
    paths = []
    for part, top in enumerate(range(0, size["total"], size["visible"]), start=1):
        # The last part ends at the last cell (overlapping the part before), not in blank.
        scroll_notebook(page, max(0, min(top, size["total"] - size["visible"])))
        page.wait_for_timeout(100)
        paths.append(SCREENSHOTS / (f"{name}.png" if part == 1 else f"{name}_part{part}.png"))
        page.screenshot(path=str(paths[-1]))
    return paths


def check_runs_cleanly(page, lab: Lab, notebook: Path) -> None:
    executed = run_all(page, lab, notebook)
    errors = [
        f"cell {index}: {output['ename']}: {output['evalue']}"
        for index, cell in enumerate(executed["cells"])
        for output in cell.get("outputs", []) if output["output_type"] == "error"
    ]
    assert not errors, f"{notebook.name} raised in the browser:\n" + "\n".join(errors)
    not_run = [index for index, cell in enumerate(executed["cells"])
               if cell["cell_type"] == "code" and cell["execution_count"] is None]
    assert not not_run, f"{notebook.name}: cells {not_run} did not run"
    deadline = time.monotonic() + WIDGET_RENDER_TIMEOUT_S
    while (problems := widget_problems(page)) and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert not problems, f"{notebook.name}: widgets did not render: {problems}"


def assert_not_saved(lab: Lab, notebook: Path, committed: bytes) -> None:
    """The committed outputs must stay as CI wrote them: the browser saves nothing."""
    assert not lab.saves(), f"JupyterLab saved files during the browser run: {lab.saves()}"
    assert notebook.read_bytes() == committed, (
        f"{notebook.name} changed on disk while the browser ran it (the server logged no "
        "save, so something else wrote it meanwhile)"
    )


def screenshot_name(notebook: Path) -> str:
    """A screenshot's name: the lesson's, prefixed with zh-CN_ for the Chinese edition."""
    edition = edition_of(notebook)
    return notebook.stem if edition == "en" else f"{edition}_{notebook.stem}"


# This pass exists for what only a front end shows: HTML with a script (the explorers, the
# drawn examples) and widgets. A lesson whose outputs are text and images only runs here for
# nothing its other passes do not check (nbval runs it in a kernel, the Colab pass alone), so
# it is left out; the explorer's notebooks are run (and checked the same way) by the explorer
# test below. The other editions' lessons carry the English code and the same front-end
# files with their catalogue's words; the site pass renders their stored outputs in Chromium
# and the explorer test runs their explorer here, so their other lessons are not run again.
FRONT_END_LESSONS = [p for p in all_lesson_paths()
                     if edition_of(p) == "en" and front_end_outputs(read(p))]


@pytest.mark.parametrize(
    "notebook", [p for p in FRONT_END_LESSONS if p not in EXPLORER_NOTEBOOKS.values()],
    ids=lambda path: path.relative_to(ROOT / "notebooks").as_posix())
def test_notebook_runs_in_jupyterlab(page, lab, notebook):
    committed = notebook.read_bytes()
    try:
        check_runs_cleanly(page, lab, notebook)
    except Exception:
        with contextlib.suppress(Exception):  # a picture of the failure, if one can be taken
            full_page_screenshot(page, screenshot_name(notebook))
        raise
    if SCREENSHOTS_OF_PASSING:
        full_page_screenshot(page, screenshot_name(notebook))
    page.close()
    assert_not_saved(lab, notebook, committed)


# --- the attention explorer ------------------------------------------------------------

def shown(page) -> dict:
    """The explorer's displayed state, read from the page as a learner reads it."""
    return page.evaluate("""() => {
        const root = document.querySelector('.attn-explorer');
        const row = root.querySelector('.attn-explorer-row');
        return {
            tokens: [...root.querySelectorAll('.attn-explorer-token')].map(b => b.innerText),
            query: Number(row.dataset.query), causal: row.dataset.causal === '1',
            scaled: row.dataset.scaled === '1',
            weights: [...row.querySelectorAll('.attn-explorer-weight')]
                .map(span => Number(span.textContent)),
            max: Number(row.querySelector('.attn-explorer-max').textContent),
        };
    }""")


def wait_for_display(page, attribute: str, value: str) -> None:
    page.wait_for_function(
        f"""() => {{
            const row = document.querySelector('.attn-explorer .attn-explorer-row');
            return row && row.dataset.{attribute} === {json.dumps(value)};
        }}""", timeout=10_000,
    )


def assert_shows(page, expected) -> None:
    seen = shown(page)
    assert seen["query"] == expected.query
    assert seen["weights"] == pytest.approx(expected.weights, abs=6e-4), (
        f"the explorer shows {seen['weights']} for query {expected.query}, "
        f"expected {[round(w, 3) for w in expected.weights]}"
    )


# The words the test clicks, in each edition's sentence.
KITTEN_AND_BALL = {"en": ("kitten", "ball"), "zh-CN": ("小猫", "球")}


@pytest.mark.parametrize("edition", EDITIONS)
def test_explorer_notebook_runs_and_the_explorer_responds_to_clicks(page, lab, capsys, edition):
    notebook = EXPLORER_NOTEBOOKS[edition]
    assert notebook.exists(), f"the explorer's notebook {notebook} is missing"
    committed = notebook.read_bytes()
    check_runs_cleanly(page, lab, notebook)
    if SCREENSHOTS_OF_PASSING:
        full_page_screenshot(page, screenshot_name(notebook))
    example = pronoun_example_of(edition)
    explorer = page.locator(".attn-explorer").first
    tokens = explorer.locator(".attn-explorer-token")

    assert shown(page)["tokens"] == list(example.tokens)
    assert_shows(page, explorer_state(example))  # opens on "it" (它)

    # Clicking a token shows that token's row.
    kitten_word, ball_word = KITTEN_AND_BALL[edition]
    kitten = example.index(kitten_word)
    tokens.nth(kitten).click()
    wait_for_display(page, "query", str(kitten))
    assert_shows(page, explorer_state(example, kitten))
    assert shown(page)["weights"] != pytest.approx(explorer_state(example).weights, abs=6e-4)

    # Causal on: every key right of the query shows 0.
    it = example.default_query
    tokens.nth(it).click()
    wait_for_display(page, "query", str(it))
    explorer.locator(".attn-explorer-causal").click()
    wait_for_display(page, "causal", "1")
    right_of_query = shown(page)["weights"][it + 1:]
    assert right_of_query and all(w == 0 for w in right_of_query), right_of_query
    assert_shows(page, explorer_state(example, it, causal=True))

    # Scaling off: the maximum weight changes (it goes up).
    max_scaled = shown(page)["max"]
    explorer.locator(".attn-explorer-scale").click()
    wait_for_display(page, "scaled", "0")
    assert shown(page)["max"] > max_scaled
    assert_shows(page, explorer_state(example, it, causal=True, scaled=False))

    # Hovering a key shows its column: the weight every query gives it.
    ball = example.index(ball_word)
    explorer.locator(".attn-explorer-line-key").nth(ball).hover()
    column = shown_column(page)
    assert column["key"] == ball
    expected = weight_matrix(example, causal=True, scaled=False)[:, ball].tolist()
    assert column["weights"] == pytest.approx(expected, abs=6e-4)

    # Click-to-update latency: from the click to the new row being in the page.
    n = len(example.tokens)
    targets = [(it + 1 + step) % n for step in range(LATENCY_CLICKS)]  # never the current one
    latencies = [page.evaluate(CLICK_LATENCY_JS, [index, ".attn-explorer"]) for index in targets]
    median = statistics.median(latencies)
    with capsys.disabled():
        print(f"\nexplorer ({edition}) click-to-update latency over {len(latencies)} clicks: "
              f"median "
              f"{median:.0f} ms (min {min(latencies):.0f}, max {max(latencies):.0f}; "
              f"target <= {LATENCY_TARGET_MS} ms)")
    if SCREENSHOTS_OF_PASSING:
        full_page_screenshot(page, f"{screenshot_name(notebook)}_after_clicks")
    page.close()
    assert_not_saved(lab, notebook, committed)
    assert median <= LATENCY_TARGET_MS, f"median click-to-update latency {median:.0f} ms"


def shown_column(page, root: str = ".attn-explorer") -> dict:
    return page.evaluate("""(root) => {
        const column = document.querySelector(root).querySelector('.attn-explorer-column');
        return {key: Number(column.dataset.key),
                weights: [...column.querySelectorAll('.attn-explorer-colweight')]
                    .map(s => Number(s.textContent))};
    }""", root)


# --- the explorer's features on a plain page (no JupyterLab needed: it has no kernel) -------

@pytest.fixture(scope="module")
def plain_browser(chromium):
    return chromium


@contextlib.contextmanager
def page_with(browser, tmp_path: Path, *explorers) -> Iterator:
    """A file:// page holding the explorers' outputs; fails on errors or any fetch."""
    path = tmp_path / "explorer.html"
    path.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                    + "<hr>".join(e._repr_html_() for e in explorers) + "</body></html>")
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors, requests = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    try:
        page.goto(path.as_uri())
        page.wait_for_selector(".attn-explorer .attn-explorer-row")
        yield page
        assert not errors, errors
        assert requests == [path.as_uri()], f"the explorer fetched something: {requests}"
    finally:
        context.close()


def row_of(page, root: str = ".attn-explorer") -> dict:
    return page.evaluate("""(root) => {
        const row = document.querySelector(root).querySelector('.attn-explorer-row');
        return {query: Number(row.dataset.query), layer: Number(row.dataset.layer),
                head: Number(row.dataset.head), temperature: Number(row.dataset.temperature),
                weights: [...row.querySelectorAll('.attn-explorer-weight')]
                    .map(s => Number(s.textContent)),
                entropy: Number(row.querySelector('.attn-explorer-entropy').textContent)};
    }""", root)


def steps_shown(page) -> dict:
    return page.evaluate("""() => {
        const table = document.querySelector('.attn-explorer-steps-table');
        const cells = {};
        table.querySelectorAll('td.attn-explorer-step').forEach(td => {
            (cells[td.dataset.step] = cells[td.dataset.step] || []).push(td.textContent);
        });
        return {query: Number(table.dataset.query), step: Number(table.dataset.step), cells,
                output: [...document.querySelectorAll('.attn-explorer-output')]
                    .map(s => Number(s.textContent))};
    }""")


def as_numbers(texts: list[str]) -> list[float]:
    return [float("-inf") if text == "−∞" else float(text) for text in texts]


def test_explorer_features_in_chromium(plain_browser, tmp_path):
    example = pronoun_example()
    explorer = AttentionExplorer(example, sentences=[round_example()])
    with page_with(plain_browser, tmp_path, explorer) as page:
        root = page.locator(".attn-explorer")
        assert row_of(page)["weights"] == pytest.approx(explorer_state(example).weights,
                                                        abs=6e-4)
        # Hover previews a row; leaving returns to the clicked query.
        root.locator(".attn-explorer-token").nth(2).hover()
        assert row_of(page)["query"] == 2
        root.locator(".attn-explorer-causal").hover()
        assert row_of(page)["query"] == example.default_query
        # The heatmap outlines the same query row as the lines view shows.
        outlined = page.evaluate("""() => [...document.querySelectorAll(
            '.attn-explorer-heatmap tr')].findIndex(tr =>
            tr.classList.contains('attn-explorer-query-row')) - 1""")
        assert outlined == example.default_query
        # Hover a key (lines view, then heatmap column): its column, lines into it.
        for hover in (root.locator(".attn-explorer-line-key").nth(1),
                      root.locator(".attn-explorer-heatmap th.attn-explorer-key").nth(1)):
            hover.hover()
            column = shown_column(page)
            assert column["key"] == 1
            assert column["weights"] == pytest.approx(weight_matrix(example)[:, 1].tolist(),
                                                      abs=6e-4)
        assert root.locator(".attn-explorer-heatmap td.attn-explorer-key-col").count() == 9
        # Steps: every intermediate number of the query's row, as computation_steps has it.
        root.locator(".attn-explorer-causal").click()
        steps, expected = steps_shown(page), computation_steps(example, causal=True)
        assert steps["step"] == 4 and steps["query"] == example.default_query
        for name in ("scores", "scaled", "masked", "weights"):
            assert as_numbers(steps["cells"][name]) == pytest.approx(
                list(getattr(expected, name)), abs=6e-4), name
        assert steps["output"] == pytest.approx(expected.output, abs=6e-4)
        for _ in range(3):
            root.locator(".attn-explorer-step-prev").click()
        steps = steps_shown(page)
        assert steps["step"] == 1 and set(steps["cells"]["masked"]) == {"·"}
        assert steps["output"] == []
        # Temperature: the row and its entropy follow the slider.
        for index in (0, len(TEMPERATURES) - 1):
            root.locator(".attn-explorer-temperature").evaluate(
                "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", str(index))
            state = explorer_state(example, causal=True, temperature=TEMPERATURES[index])
            shown = row_of(page)
            assert shown["temperature"] == TEMPERATURES[index]
            assert shown["weights"] == pytest.approx(state.weights, abs=6e-4)
            assert shown["entropy"] == pytest.approx(state.entropy, abs=6e-4)
        # Another prepared sentence.
        root.locator(".attn-explorer-sentence").select_option("1")
        assert page.evaluate("() => [...document.querySelectorAll('.attn-explorer-token')]"
                             ".map(b => b.textContent)") == list(round_example().tokens)
        state = explorer_state(round_example(), causal=True, temperature=TEMPERATURES[-1])
        assert row_of(page)["weights"] == pytest.approx(state.weights, abs=6e-4)


def test_explorer_model_view_in_chromium(plain_browser, tmp_path):
    tokens = [f"t{i}" for i in range(7)]
    maps = synthetic_attentions(3, 4, 7)
    explorer = ModelExplorer(tokens, maps, query=6)
    with page_with(plain_browser, tmp_path, explorer) as page:
        root = page.locator(".attn-explorer")
        assert root.locator("canvas.attn-explorer-thumb").count() == 12
        assert row_of(page)["weights"] == pytest.approx(maps[0, 0, 6].tolist(), abs=6e-4)
        root.locator("canvas.attn-explorer-thumb[data-layer='2'][data-head='3']").click()
        shown = row_of(page)
        assert (shown["layer"], shown["head"]) == (2, 3)
        assert shown["weights"] == pytest.approx(maps[2, 3, 6].tolist(), abs=6e-4)
        assert root.locator(".attn-explorer-layer").input_value() == "2"
        assert root.locator("canvas.attn-explorer-selected").count() == 1
        root.locator(".attn-explorer-head").select_option("1")
        root.locator(".attn-explorer-token").nth(3).click()
        shown = row_of(page)
        assert (shown["layer"], shown["head"], shown["query"]) == (2, 1, 3)
        assert shown["weights"] == pytest.approx(maps[2, 1, 3].tolist(), abs=6e-4)
        root.locator(".attn-explorer-line-key").nth(0).hover()
        assert shown_column(page)["weights"] == pytest.approx(maps[2, 1, :, 0].tolist(),
                                                              abs=6e-4)
        # No steps and no toggles: a real model's weights come as they are.
        assert root.locator(".attn-explorer-steps, .attn-explorer-causal").count() == 0


def test_explorer_works_from_the_keyboard_with_every_control_named(plain_browser, tmp_path):
    """The arrow keys (and Home, End) move the query along the words; Space and Enter toggle
    the mask and the scale; the sentence picker is named; in the model view a head's
    thumbnail is pressed with Enter and the head picker moves with the arrow keys."""
    example = pronoun_example()
    n, q = len(example.tokens), example.default_query
    with page_with(plain_browser, tmp_path, AttentionExplorer(
            example, sentences=[round_example()])) as page:
        root = page.locator(".attn-explorer")
        root.locator(".attn-explorer-token").nth(q).focus()
        page.keyboard.press("ArrowRight")
        assert row_of(page)["query"] == q + 1
        assert page.evaluate("() => document.activeElement.getAttribute('aria-pressed')") == "true"
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
        assert row_of(page)["query"] == q - 1
        page.keyboard.press("Home")
        assert row_of(page)["query"] == 0
        page.keyboard.press("ArrowLeft")  # stops at the first word
        assert row_of(page)["query"] == 0
        page.keyboard.press("End")
        assert row_of(page)["query"] == n - 1
        assert row_of(page)["weights"] == pytest.approx(
            explorer_state(example, query=n - 1).weights, abs=6e-4)
        root.locator(".attn-explorer-causal").focus()
        page.keyboard.press("Space")
        assert root.locator(".attn-explorer-causal").get_attribute("aria-pressed") == "true"
        assert row_of(page)["weights"] == pytest.approx(
            explorer_state(example, query=n - 1, causal=True).weights, abs=6e-4)
        root.locator(".attn-explorer-scale").focus()
        page.keyboard.press("Enter")
        assert root.locator(".attn-explorer-scale").get_attribute("aria-pressed") == "false"
        assert row_of(page)["weights"] == pytest.approx(explorer_state(
            example, query=n - 1, causal=True, scaled=False).weights, abs=6e-4)
        page.get_by_label(str(UI_TEXT["sentence"]), exact=True).focus()
        page.keyboard.press("ArrowDown")
        assert page.evaluate("() => [...document.querySelectorAll('.attn-explorer-token')]"
                             ".map(b => b.textContent)") == list(round_example().tokens)

    maps = synthetic_attentions(2, 3, 5)
    with page_with(plain_browser, tmp_path, ModelExplorer(
            [f"t{i}" for i in range(5)], maps, query=4)) as page:
        page.get_by_role("button", name=str(UI_TEXT["layer_head"]).format(1, 2)).focus()
        page.keyboard.press("Enter")
        shown = row_of(page)
        assert (shown["layer"], shown["head"]) == (1, 2)
        page.locator(".attn-explorer-head").focus()
        page.keyboard.press("ArrowUp")
        page.locator(".attn-explorer-token").nth(4).focus()
        page.keyboard.press("ArrowLeft")
        shown = row_of(page)
        assert (shown["layer"], shown["head"], shown["query"]) == (1, 1, 3)
        assert shown["weights"] == pytest.approx(maps[1, 1, 3].tolist(), abs=6e-4)


def test_explorer_shows_odd_tokens_literally(plain_browser, tmp_path):
    tokens = ["<b>", "a&b", "</script>", '"q"']
    explorer = ModelExplorer(tokens, synthetic_attentions(1, 2, 4))
    with page_with(plain_browser, tmp_path, explorer) as page:
        shown_tokens = page.evaluate(
            "() => [...document.querySelectorAll('.attn-explorer-token')].map(b => b.textContent)")
        assert shown_tokens == tokens
        assert page.locator(".attn-explorer-row b").first.text_content() == '"q"'


def test_explorer_editing_a_query_recomputes_its_row_as_python_does(plain_browser, tmp_path):
    from course_utils.exercises.l09 import with_query_of_it
    from course_utils.views.explorer_model import round_example

    explorer = AttentionExplorer(round_example())
    edit = {"noun": 2, "inanimate": 5.5, "animate": 0, "quality": 1.5}
    edited = with_query_of_it(edit)  # the same sentence, "it" looking for the ball
    with page_with(plain_browser, tmp_path, explorer) as page:
        root = page.locator(".attn-explorer")
        for feature, value in edit.items():
            root.locator(f".attn-explorer-feature[data-feature='{feature}']").fill(str(value))
        assert "(edited)" in root.locator(".attn-explorer-editor-word").text_content()
        for causal, temperature in ((False, 1.0), (True, TEMPERATURES[-2])):
            if causal:
                root.locator(".attn-explorer-causal").click()
                root.locator(".attn-explorer-temperature").evaluate(
                    "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }",
                    str(len(TEMPERATURES) - 2))
            state = explorer_state(edited, causal=causal, temperature=temperature)
            shown = row_of(page)
            assert shown["weights"] == pytest.approx(state.weights, abs=6e-4)
            assert shown["entropy"] == pytest.approx(state.entropy, abs=6e-4)
            steps, expected = steps_shown(page), computation_steps(
                edited, causal=causal, temperature=temperature)
            assert as_numbers(steps["cells"]["scores"]) == pytest.approx(list(expected.scores))
            assert steps["output"] == pytest.approx(expected.output, abs=6e-4)
        # Another word's row is still the precomputed one; reset brings back the original.
        root.locator(".attn-explorer-token").nth(1).click()
        assert row_of(page)["weights"] == pytest.approx(explorer_state(
            round_example(), 1, causal=True, temperature=TEMPERATURES[-2]).weights, abs=6e-4)
        root.locator(".attn-explorer-token").nth(edited.default_query).click()
        root.locator(".attn-explorer-reset").click()
        assert row_of(page)["weights"] == pytest.approx(explorer_state(
            round_example(), causal=True, temperature=TEMPERATURES[-2]).weights, abs=6e-4)
