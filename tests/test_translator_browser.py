"""The translator view in Chromium: a page of TranslatorView outputs served on 127.0.0.1.

The page translates what is typed with the Python model's tokens, characters and
cross-attention weights; every control is reachable and usable from the keyboard and has a
label; words the vocabulary lacks are named in the page's language; two views on one page
(a translator and lesson 12's live view) each answer for their own model. Every request must
go to the page's own host: nothing is fetched from elsewhere.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from course_utils.data.corpus import CharTokenizer, load_text
from course_utils.language import set_language
from course_utils.views.live_view import LiveModelView
from course_utils.views.translator_view import UI_TEXT, TranslatorView
from tests.support.browser import (
    served,
)
from tests.support.models import scaled_up_gpt, scaled_up_translator

TOLERANCE = 1e-4
ROOT = "[data-live-translator]"
OPENING = "three thousand and five"

SHOWN_JS = """(selector) => {
    const root = document.querySelector(selector);
    const heat = root.querySelector('.attn-translator-heatmap');
    const row = root.querySelector('.attn-explorer-row');
    return {
        text: root.getAttribute('data-text'),
        box: root.querySelector('.attn-live-text').value,
        output: [...root.querySelectorAll('.attn-translator-out')].map(b => b.textContent),
        pressed: [...root.querySelectorAll('.attn-translator-out')]
            .map(b => b.getAttribute('aria-pressed')),
        read: [...root.querySelectorAll('.attn-translator-words .attn-live-read')]
            .map(s => s.textContent),
        unknown: [...root.querySelectorAll('.attn-translator-words .attn-live-unknown')]
            .map(s => s.textContent),
        notes: root.querySelector('.attn-live-notes').textContent,
        rows: heat ? heat.querySelectorAll('tr[data-query]').length : 0,
        layer: heat ? Number(heat.dataset.layer) : null,
        head: heat ? Number(heat.dataset.head) : null,
        query: row ? Number(row.dataset.query) : null,
        rowWeights: [...root.querySelectorAll('.attn-explorer-row .attn-explorer-weight')]
            .map(s => Number(s.textContent)),
    };
}"""

RUN_JS = """([selector, text]) => {
    const r = window.courseLiveModel(document.querySelector(selector)).run(text);
    return {tokens: r.tokens, output: r.output, cross: r.crossAttentions, unknown: r.unknown,
            finished: r.finished};
}"""


@contextlib.contextmanager
def page_with(chromium, folder: Path, *views) -> Iterator:  # noqa: F811 (the fixture's value)
    """A page of the views' outputs served on 127.0.0.1; fails on a page error, a console
    error, or any request other than the page itself."""
    (folder / "translator.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        "</head><body>" + "<hr>".join(v._repr_html_() for v in views) + "</body></html>",
        encoding="utf-8")
    with served(folder) as base:
        context = chromium.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        errors, requests = [], []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: requests.append(request.url))
        try:
            page.goto(base + "translator.html")
            page.wait_for_selector(f"{ROOT}[data-text]")
            yield page
            assert not errors, errors
            assert requests == [base + "translator.html"], f"the page fetched more: {requests}"
        finally:
            context.close()


@pytest.fixture(scope="module")
def view():
    return TranslatorView(scaled_up_translator(11), text=OPENING, layer=1, head=2)


def assert_page_matches_python(page, view: TranslatorView, text: str, root: str = ROOT) -> dict:
    """The page's run(text) against view.state(text): tokens, characters, every weight."""
    ran = page.evaluate(RUN_JS, [root, text])
    state = view.state(text)
    assert tuple(ran["tokens"]) == state.tokens and tuple(ran["unknown"]) == state.unknown
    assert tuple(ran["output"]) == state.output and ran["finished"] == state.finished
    if state.cross_attentions is None:  # nothing read: nothing written, no weights
        assert ran["cross"] == []
        return ran
    cross = torch.tensor(ran["cross"], dtype=torch.float64)
    assert cross.shape == state.cross_attentions.shape
    assert (cross - state.cross_attentions.double()).abs().max() <= TOLERANCE
    return ran


def wait_for_text(page, text: str) -> None:
    page.wait_for_function("([r, t]) => document.querySelector(r).getAttribute('data-text') "
                           "=== t", arg=[ROOT, text])


def test_typing_translates_with_the_models_numbers(chromium, tmp_path, view):
    with page_with(chromium, tmp_path, view) as page:
        shown = page.evaluate(SHOWN_JS, ROOT)
        state = view.state()
        assert shown["text"] == shown["box"] == OPENING
        assert tuple(shown["read"]) == state.tokens and tuple(shown["output"]) == state.output
        assert (shown["layer"], shown["head"], shown["query"]) == (1, 2, 0)
        assert shown["rows"] == len(state.output)
        assert shown["rowWeights"] == pytest.approx(
            state.cross_attentions[1, 2, 0].tolist(), abs=6e-4)

        box = page.get_by_label(str(UI_TEXT["text_label"]))  # the text box has its label
        box.fill("twelve thousand")
        wait_for_text(page, "twelve thousand")
        box.press("End")
        for typed in ", three hundred":
            before = page.evaluate(SHOWN_JS, ROOT)["text"]
            page.keyboard.type(typed)
            wait_for_text(page, before + typed)
        text = "twelve thousand, three hundred"
        ran = assert_page_matches_python(page, view, text)
        shown = page.evaluate(SHOWN_JS, ROOT)
        assert shown["output"] == ran["output"] and shown["rows"] == len(ran["output"])


def test_every_control_is_labelled_and_works_from_the_keyboard(chromium, tmp_path,
                                                               view):
    with page_with(chromium, tmp_path, view) as page:
        ran = assert_page_matches_python(page, view, OPENING)
        assert len(ran["output"]) >= 3, "the test needs three characters written"
        page.get_by_label(str(UI_TEXT["text_label"])).focus()
        page.keyboard.press("Tab")  # from the text box to the first character written
        assert page.evaluate("() => document.activeElement.className") == "attn-translator-out"
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")  # the second character's row
        shown = page.evaluate(SHOWN_JS, ROOT)
        assert shown["query"] == 1 and shown["pressed"][:2] == ["false", "true"]
        assert shown["rowWeights"] == pytest.approx(ran["cross"][1][2][1], abs=6e-4)
        page.keyboard.press("Tab")
        page.keyboard.press("Space")  # the third
        assert page.evaluate(SHOWN_JS, ROOT)["query"] == 2
        page.keyboard.press("ArrowLeft")  # the arrow keys move along the characters written
        assert page.evaluate(SHOWN_JS, ROOT)["query"] == 1
        page.keyboard.press("Home")
        assert page.evaluate(SHOWN_JS, ROOT)["query"] == 0
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        assert page.evaluate(SHOWN_JS, ROOT)["query"] == 2

        # a select named by its label (the name ends with the option shown)
        layer = page.get_by_label(re.compile("^" + re.escape(str(UI_TEXT["layer"]))))
        head = page.get_by_label(re.compile("^" + re.escape(str(UI_TEXT["head"]))))
        layer.focus()
        page.keyboard.press("ArrowUp")  # layer 1 -> 0
        head.select_option("3")
        shown = page.evaluate(SHOWN_JS, ROOT)
        assert (shown["layer"], shown["head"], shown["query"]) == (0, 3, 2)
        assert shown["rowWeights"] == pytest.approx(ran["cross"][0][3][2], abs=6e-4)


def test_unknown_words_are_named_not_errors(chromium, tmp_path, view):
    with page_with(chromium, tmp_path, view) as page:
        box = page.locator(".attn-live-text")
        for text in ("fivety 3005 one", "3005"):
            box.fill(text)
            wait_for_text(page, text)
            assert_page_matches_python(page, view, text)
        shown = page.evaluate(SHOWN_JS, ROOT)
        assert shown["unknown"] == ["3005"] and shown["output"] == [] and shown["rows"] == 0
        assert "vocabulary" in shown["notes"] and "at least one" in shown["notes"]


def test_the_chinese_edition_speaks_chinese_beside_lesson_12s_view(chromium,
                                                                    tmp_path):
    tokenizer = CharTokenizer.from_text(load_text("tang_poems"))
    try:
        set_language("zh-CN")
        translator = TranslatorView(scaled_up_translator(12), text="fivety five")
        live = LiveModelView(scaled_up_gpt(tokenizer.vocab_size, 12), tokenizer, text="床前")
        with page_with(chromium, tmp_path, translator, live) as page:
            page.wait_for_selector("[data-live-model][data-text]")
            shown = page.evaluate(SHOWN_JS, ROOT)
            assert "词表" in shown["notes"] and shown["unknown"] == ["fivety"]
            assert "英文读法" in page.locator(f"{ROOT} label").first.text_content()
            assert_page_matches_python(page, translator, "twelve thousand, three hundred")
            ran = page.evaluate("() => window.courseLiveModel(document.querySelector("
                                "'[data-live-model]')).run('床前')")
            assert ran["tokens"] == ["床", "前"]
    finally:
        set_language("en")
