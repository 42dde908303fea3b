"""What the browser tests share: Debian's chromium (the ``chromium`` fixture: this module is
a pytest plugin, loaded by pyproject's addopts), a folder served on 127.0.0.1, the explorer's
click latency, and typing into a live view on any page (a served output, a lesson on the
site)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-quic", "--disable-component-update",
    "--disable-sync",
]

# From a click on a word of the explorer found by ``selector`` to its row in the page, in ms
# (the same measurement in JupyterLab here and on the static site in tests/test_site.py).
CLICK_LATENCY_JS = """async ([index, selector]) => {
    const root = document.querySelector(selector);
    const button = root.querySelectorAll('.attn-explorer-token')[index];
    const updated = () => {
        const row = root.querySelector('.attn-explorer-row');
        return row && row.dataset.query === String(index);
    };
    return await new Promise((resolve, reject) => {
        const observer = new MutationObserver(() => {
            if (updated()) { observer.disconnect(); resolve(performance.now() - start); }
        });
        observer.observe(root, {subtree: true, childList: true, attributes: true,
                                characterData: true});
        const start = performance.now();
        button.click();
        setTimeout(() => { observer.disconnect(); reject(new Error('no update in 5 s')); }, 5000);
    });
}"""

LATENCY_TARGET_MS = 50


@pytest.fixture(scope="module")
def chromium():
    """One Chromium for the module (playwright allows one sync instance at a time)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no access log on the test's output
        pass


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()

def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(reason + "; CI must install it", pytrace=False)
    pytest.skip(reason)

def pronoun_example_of(edition: str):
    """The explorer's sentence as that edition shows it (same vectors, its own words)."""
    # Imported here: this module is a plugin of every pytest process, and xdist's controller,
    # which runs no test, would otherwise import torch before it starts the workers.
    from course_utils.language import set_language
    from course_utils.views.explorer_model import pronoun_example

    set_language(edition)
    try:
        return pronoun_example()
    finally:
        set_language("en")

KEYSTROKES = 15

# From a keystroke (the text box's value changed, an input event) to the view showing the
# new text, in ms: the live counterpart of test_browser.py's CLICK_LATENCY_JS.
KEYSTROKE_LATENCY_JS = """async ([selector, text]) => {
    const root = document.querySelector(selector);
    const box = root.querySelector('.attn-live-text');
    return await new Promise((resolve, reject) => {
        const observer = new MutationObserver(() => {
            if (root.getAttribute('data-text') === text) {
                observer.disconnect(); resolve(performance.now() - start);
            }
        });
        observer.observe(root, {subtree: true, childList: true, attributes: true,
                                characterData: true});
        const start = performance.now();
        box.value = text;
        box.dispatchEvent(new Event('input', {bubbles: true}));
        setTimeout(() => { observer.disconnect(); reject(new Error('no update in 5 s')); }, 5000);
    });
}"""

# The page's model run on `text`, and what the view draws for it.
RUN_JS = """([selector, text]) => {
    const root = document.querySelector(selector);
    const r = window.courseLiveModel(root).run(text);
    return {tokens: r.tokens, attentions: r.attentions, next: r.next, unknown: r.unknown,
            cropped: r.cropped};
}"""

def check_live_view(page, root: str) -> list[float]:
    """Type into the live view ``root`` of any page (a served output, a lesson on the site)
    and check what needs no Python model: the view shows each new text, every attention row
    of the page's model sums to 1 and puts exactly 0 on future keys. Returns the latencies
    (ms) of KEYSTROKES keystrokes on a 64-character text of the model's own characters."""
    page.locator(f"{root} .attn-live-text").click()
    page.keyboard.press("End")
    before = page.evaluate("(r) => document.querySelector(r).getAttribute('data-text')", root)
    vocab, max_len = page.evaluate("""(r) => {
        const model = window.courseLiveModel(document.querySelector(r));
        return [model.vocab, model.config.max_len];
    }""", root)
    typed = next(c for c in vocab if c.strip())  # a visible character the model knows
    page.keyboard.type(typed)
    page.wait_for_function(
        "([r, t]) => document.querySelector(r).getAttribute('data-text') === t",
        arg=[root, before + typed])
    known = [c for c in before + typed if c in vocab]
    base = "".join((known * 64)[:63])
    letters = [c for c in vocab if c.strip()][:KEYSTROKES]
    for text in (before + typed, base + letters[0]):
        ran = page.evaluate(RUN_JS, [root, text])
        n = len(ran["tokens"])
        assert n == min(len([c for c in text if c in vocab]), max_len)
        for heads in ran["attentions"]:
            for rows in heads:
                assert len(rows) == n
                for i, row in enumerate(rows):
                    assert abs(sum(row) - 1) < 1e-9, (i, sum(row))
                    assert all(w == 0 for w in row[i + 1:]), f"weight on a future key ({i})"
        assert abs(sum(ran["next"]) - 1) < 1e-9
    page.evaluate(KEYSTROKE_LATENCY_JS, [root, base])
    return [page.evaluate(KEYSTROKE_LATENCY_JS, [root, base + letter]) for letter in letters]
