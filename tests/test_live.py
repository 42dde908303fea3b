"""The live view (course_utils/views/live_view.py and static/live.js) outside any browser.

- Python: which characters the model reads, the float16 export (decoded here, it gives back
  the half-precision copy), the HTML output, the words in both editions, the figure;
- JavaScript: node's test runner (tests/js/live.test.js) runs the page's forward pass on
  fixed texts and compares it with the course's GPT, whose numbers this module writes to a
  JSON fixture (path in ``LIVE_FIXTURE``): attention weights and logits within 1e-4,
  tokenisation, greedy continuation, erf, float16 decoding.

The Chromium test (test_live_browser.py) types into the page.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils.data.corpus import CharTokenizer, load_text
from course_utils.language import in_english, set_language, translate
from course_utils.models.gpt import GPT
from course_utils.nn.generation import generate
from course_utils.views import live_view as live_module
from course_utils.views.live_view import (
    UI_TEXT,
    LiveModelView,
    export_weights,
    half_precision_copy,
    live_view_figure,
    readable_text,
    shown_character,
)
from tests.support.models import scaled_up_gpt

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
LIVE_JS_TEST = ROOT / "tests" / "js" / "live.test.js"
TOLERANCE = 1e-4  # JS (float64 on float16 weights) against Python (float32, same weights)
GREEDY_TOKENS = 12

# Texts the fixture runs, for the English model (the Chinese one gets Chinese ones): short,
# exactly max_len, longer (cropped), with characters the vocabulary lacks, and blanks.
ENGLISH_TEXTS = ["T", "To be, or not to be", "ROMEO.\nBut soft, what light through yonder",
                 "naïve café — “quoted” ✓", "a\tb  c\n\nd", "x" * 70,
                 "the cat sat on the mat; the cat sat on the mat; the cat sat on"]
CHINESE_TEXTS = ["床", "床前明月光，疑是地上霜。",
                 "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。", "ok 白日依山尽 🙂", "山" * 40]


@pytest.fixture(scope="module")
def english():
    return CharTokenizer.from_text(load_text("shakespeare"))


@pytest.fixture(scope="module")
def chinese_tokenizer():
    return CharTokenizer.from_text(load_text("tang_poems"))


@pytest.fixture(scope="module")
def view(english):
    return LiveModelView(scaled_up_gpt(english.vocab_size, 0), english, text="To be, or not")


def payload_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" class="attn-live-data">(.*?)</script>',
                      html, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


# --- logic --------------------------------------------------------------------------------

def test_the_model_reads_known_characters_and_the_last_max_len_of_them(english):
    read = readable_text(english, "ab✓c" + "d" * 6, max_len=5)
    assert read.unknown == ("✓",)
    assert read.cropped == 4  # a, b, c and one d of the 9 known characters
    assert english.decode(list(read.ids)) == "ddddd"
    assert readable_text(english, "✓✓", 5) == live_module.ReadableText((), ("✓", "✓"), 0)
    assert readable_text(english, "", 5).ids == ()


def test_the_export_is_the_half_precision_copy_in_base64(view, english):
    exported = export_weights(view.model)
    raw = base64.b64decode(exported["weights"])
    assert len(raw) == exported["bytes"] == 2 * sum(
        p.numel() for p in view.model.state_dict().values())
    halves = np.frombuffer(raw, dtype="<f2")
    offset = 0
    for spec, (name, tensor) in zip(exported["tensors"], view.model.state_dict().items(),
                                    strict=True):
        assert spec == {"name": name, "shape": list(tensor.shape)}
        size = tensor.numel()
        decoded = torch.from_numpy(halves[offset:offset + size].astype(np.float32))
        assert torch.equal(decoded.view(tensor.shape), tensor)  # the copy is float16 already
        offset += size
    assert exported["config"] == {"vocab_size": english.vocab_size, "max_len": 32, "d_model": 64,
                                  "num_heads": 4, "num_layers": 2, "d_ff": 256, "eps": 1e-5}


@pytest.mark.parametrize("text_name", ["shakespeare", "tang_poems"])
def test_the_weights_of_lesson_12s_size_fit_a_page(text_name):
    """GPT(max_len 32, d_model 64, 4 heads, 2 layers): 214 KB of float16 for 73 characters,
    395 KB for the 1,491 of the Tang poems (the tied embedding is most of it)."""
    tokenizer = CharTokenizer.from_text(load_text(text_name))
    model = GPT(tokenizer.vocab_size, max_len=32, d_model=64, num_heads=4, num_layers=2)
    exported = export_weights(model)
    assert exported["bytes"] == 2 * sum(p.numel() for p in model.parameters())
    html = LiveModelView(model, tokenizer)._repr_html_()
    assert len(html.encode()) < (350_000 if text_name == "shakespeare" else 600_000)


def test_float16_barely_moves_the_predictions(english):
    """The page's model (float16 weights) against the float32 one: next-token probabilities
    within 2e-3 on a model whose predictions are sharp."""
    model = scaled_up_gpt(english.vocab_size, 1)
    rounded = half_precision_copy(model)
    ids = torch.tensor([english.encode("But soft, what light through yon")])
    with torch.no_grad():
        exact, half = (torch.softmax(m(ids), dim=-1) for m in (model, rounded))
    assert exact.max() > 0.3  # sharp predictions: a real test of the rounding
    assert (exact - half).abs().max() < 2e-3


def test_the_state_is_the_gpts_output_on_what_it_reads(view, english):
    state = view.state("✓To be")
    assert state.tokens == tuple("To be") and state.unknown == ("✓",) and state.cropped == 0
    with torch.no_grad():
        logits, weights = view.model(torch.tensor([english.encode("To be")]),
                                     return_weights=True)
    assert torch.equal(state.attentions, weights[0])
    assert torch.allclose(state.next_probabilities, torch.softmax(logits[0, -1], -1))
    empty = view.state("✓")
    assert empty.attentions is None and empty.next_probabilities is None


# --- the HTML output ---------------------------------------------------------------------

def test_the_output_is_self_contained_and_marked(view):
    html = view._repr_html_()
    static = ROOT / "course_utils" / "views" / "static"
    assert 'data-live-model' in html.split(">", 1)[0]
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert scripts == [(static / name).read_text(encoding="utf-8")
                       for name in ("view_common.js", "live_common.js", "live.js")]
    assert (static / "live.css").read_text(encoding="utf-8") in html
    assert "src=" not in html and "href=" not in html and "http" not in html.split("<script>")[0]
    payload = payload_of(html)
    assert payload["vocab"] == list(view.tokenizer.chars)
    assert payload["model"] == {k: v for k, v in export_weights(view.model).items()
                                if k != "bytes"}
    assert payload["text"] == "To be, or not"
    assert payload["sampling"] == {"tokens": 8, "temperature": 0.8, "seed": 0}
    assert "attn-live-fallback" in html and "To␣be,␣or␣not" in html  # the no-script form
    assert "</script" not in json.dumps(payload)
    assert "LiveModelView(GPT of 2 layers x 4 heads, 73 characters" in repr(view)


def test_shown_character_makes_blanks_visible():
    assert [shown_character(c) for c in " \n\tx"] == ["␣", "↵", "⇥", "x"]


def test_the_figure_shows_the_opened_head_and_the_next_characters(view):
    fig = live_view_figure(view)
    heat, bars = fig.axes[:2]
    n = len(view.state().tokens)
    assert heat.images[0].get_array().shape == (n, n)
    assert heat.images[0].get_array().mask[0, 1]  # the future is left blank
    assert len(bars.patches) == live_module.TOP_SHOWN
    plt.close(fig)


CJK = re.compile(r"[\u4e00-\u9fff]")


def test_the_pages_words_come_from_the_catalogue_in_both_editions(english):
    model = scaled_up_gpt(english.vocab_size, 0)
    try:
        set_language("zh-CN")
        ui = payload_of(LiveModelView(model, english)._repr_html_())["ui"]
        for key, message in UI_TEXT.items():
            assert ui[key] == translate(in_english(message), "zh-CN")
            assert CJK.search(ui[key]), key
    finally:
        set_language("en")
    ui = payload_of(LiveModelView(model, english)._repr_html_())["ui"]
    assert ui == {key: in_english(message) for key, message in UI_TEXT.items()}


# --- the JavaScript forward pass against the Python model ---------------------------------

def _cases(view: LiveModelView, texts: list[str]) -> list[dict]:
    cases = []
    for text in texts:
        read = readable_text(view.tokenizer, text, view.model.max_len)
        case = {"text": text, "ids": list(read.ids), "unknown": list(read.unknown),
                "cropped": read.cropped}
        if read.ids:
            ids = torch.tensor([read.ids])
            with torch.no_grad():
                logits, weights = view.model(ids, return_weights=True)
            greedy = generate(view.model, ids, GREEDY_TOKENS, use_cache=False)
            case.update(attentions=weights[0].double().tolist(),
                        logits=logits[0].double().tolist(),  # (n, vocab): every position
                        next=torch.softmax(logits[0, -1].double(), -1).tolist(),
                        greedy=view.tokenizer.decode(greedy[0, len(read.ids):]))
        cases.append(case)
    return cases


@pytest.fixture(scope="module")
def fixture_file(tmp_path_factory, english, chinese_tokenizer) -> Path:
    models = [
        ("english, lesson 12's sizes", LiveModelView(
            scaled_up_gpt(english.vocab_size, 3), english), ENGLISH_TEXTS),
        ("english, 3 layers x 2 heads, max_len 8, d_ff 96", LiveModelView(
            scaled_up_gpt(english.vocab_size, 4, max_len=8, num_layers=3, num_heads=2, d_ff=96),
            english), ENGLISH_TEXTS),
        ("chinese, lesson 12's sizes", LiveModelView(
            scaled_up_gpt(chinese_tokenizer.vocab_size, 5), chinese_tokenizer), CHINESE_TEXTS),
    ]
    points = torch.linspace(-6, 6, 241, dtype=torch.float64).tolist()
    specials = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 6.1e-5, 5.96e-8, 1e-6, 0.1,
                             float("inf"), -float("inf")], dtype=torch.float16)
    data = {
        "tolerance": TOLERANCE,
        "models": [{"name": name, "payload": view.payload(), "cases": _cases(view, texts)}
                   for name, view, texts in models],
        "erf": [[x, math.erf(x)] for x in points],
        "halves": {"bits": specials.view(torch.int16).tolist(),
                   "values": [v if math.isfinite(v) else str(v)  # "inf", "-inf": not JSON
                              for v in specials.double().tolist()]},
    }
    path = tmp_path_factory.mktemp("live-js") / "live-fixture.json"
    path.write_text(json.dumps(data, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    return path


@pytest.mark.skipif(NODE is None, reason="node is not installed: the live view's JavaScript "
                    "tests need node 20+ (apt-get install nodejs)")
def test_the_javascript_forward_pass_matches_the_python_model(fixture_file):
    result = subprocess.run([NODE, "--test", "--test-reporter=tap", str(LIVE_JS_TEST)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "LIVE_FIXTURE": str(fixture_file)})
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    assert "# fail 0" in result.stdout and "# skipped 0" in result.stdout, result.stdout
    assert re.search(r"# pass [1-9]", result.stdout), result.stdout
    print(*re.findall(r"# measured: .*", result.stdout), sep="\n")


BAD_INPUTS = [
    pytest.param(readable_text, ("abc", "a", 4), {}, TypeError,
                 ("tokenizer", "CharTokenizer", "str"), id="readable_text: tokenizer a str"),
    pytest.param(readable_text, (CharTokenizer("ab"), "a", 0), {}, ValueError,
                 ("max_len", "positive int", "got 0"), id="readable_text: max_len 0"),
    pytest.param(export_weights, (torch.nn.Linear(2, 2),), {}, TypeError,
                 ("model", "GPT", "Linear"), id="export_weights: not a GPT"),
    pytest.param(half_precision_copy, ("gpt",), {}, TypeError,
                 ("model", "GPT", "str"), id="half_precision_copy: a str"),
    pytest.param(LiveModelView, (GPT(2, 4, 8, 2, 1), CharTokenizer("abc")), {}, ValueError,
                 ("tokenizer", "3 characters", "vocab_size=2"),
                 id="LiveModelView: tokenizer of another model"),
    pytest.param(LiveModelView, (GPT(2, 4, 8, 2, 1), CharTokenizer("ab")), {"head": 2},
                 ValueError, ("head", "0..1", "got 2"), id="LiveModelView: head out of range"),
    pytest.param(LiveModelView, (GPT(2, 4, 8, 2, 1), CharTokenizer("ab")),
                 {"temperature": -1.0}, ValueError, ("temperature", ">= 0", "-1.0"),
                 id="LiveModelView: negative temperature"),
    pytest.param(LiveModelView, (GPT(2, 4, 8, 2, 1), CharTokenizer("ab")), {"text": 3},
                 TypeError, ("text", "str", "int 3"), id="LiveModelView: text an int"),
    pytest.param(live_view_figure, ("view",), {}, TypeError,
                 ("view", "LiveModelView", "str"), id="live_view_figure: a str"),
    pytest.param(shown_character, (3,), {}, TypeError, ("char", "str", "int 3"),
                 id="shown_character: an int"),
    pytest.param(shown_character, ("ab",), {}, ValueError, ("char", "one character", "'ab'"),
                 id="shown_character: two characters"),
    pytest.param(LiveModelView, (GPT(2, 4, 8, 2, 1).to("meta"), CharTokenizer("ab")), {},
                 ValueError, ("model's token_embedding.weight", "meta", "values"),
                 id="LiveModelView: a model on meta"),
    pytest.param(export_weights, (GPT(2, 4, 8, 2, 1).to("meta"),), {}, ValueError,
                 ("model's", "meta"), id="export_weights: a model on meta"),
]
