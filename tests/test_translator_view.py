"""The translator view (course_utils/views/translator_view.py, static/translator.js) and the
float16 export it shares with the live view (course_utils/views/half_weights.py), outside any
browser.

- Python: which tokens the translator reads, the float16 export (decoded here, it gives back
  the half-precision copy), the state (greedy translation with the page's weights), the HTML
  output (self-contained, marked, no other host), the words in both editions, the figure;
- JavaScript: node's test runner (tests/js/translator.test.js) runs the page's encoder and
  greedy decoder on fixed texts and compares them with the course's Translator, whose numbers
  this module writes to a JSON fixture (path in ``TRANSLATOR_FIXTURE``): tokens, the
  characters written, every cross-attention weight and the logits of every step.

The Chromium test (test_translator_browser.py) types into the page.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from html import escape
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils.data.number_words import SOURCE_WORDS, tokens_of_text
from course_utils.language import in_english, set_language, translate
from course_utils.models.translator import BOS, EOS, TARGET_VOCAB, Translator, source_batch
from course_utils.views.half_weights import half_weights, require_half_weights, rounded_to_half
from course_utils.views.translator_view import (
    UI_TEXT,
    ReadableWords,
    TranslatorView,
    export_translator,
    readable_words,
    translator_view_figure,
)
from tests.support.models import scaled_up_translator

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "course_utils" / "views" / "static"
NODE = shutil.which("node")
TRANSLATOR_JS_TEST = ROOT / "tests" / "js" / "translator.test.js"
TOLERANCE = 1e-4  # JS (float64 on float16 weights) against Python (float32, same weights)

# Texts the fixture runs: typical numbers, mixed case and marks, a long one (cropped by the
# small model), words the vocabulary lacks (and names JavaScript objects already hold),
# digits alone, nothing at all.
TEXTS = ["three thousand and five", "Twelve thousand, three hundred",
         "one hundred and ten million", "ONE-HUNDRED",
         "seventy-seven million, seven hundred and seventy-seven thousand, seven hundred and "
         "seventy-seven", "fivety 3005 one", "constructor toString five", "3005", ""]


@pytest.fixture(scope="module")
def view():
    return TranslatorView(scaled_up_translator(4), text="three thousand and five", layer=1,
                          head=2)


def payload_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" class="attn-live-data">(.*?)</script>',
                      html, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


# --- logic --------------------------------------------------------------------------------

def test_the_translator_reads_known_tokens_and_the_first_max_src_len_of_them():
    read = readable_words("Twenty-ONE thousand, fivety 3005 & one", max_src_len=5)
    assert read == ReadableWords(("twenty", "-", "one", "thousand", ","),
                                 ("fivety", "3005", "&"), 1)
    assert readable_words("3005", 5) == ReadableWords((), ("3005",), 0)
    assert readable_words("", 5) == ReadableWords((), (), 0)
    for text in TEXTS[:5]:  # known words: exactly what the model's own tokenisation reads
        assert list(readable_words(text, 40).tokens) == tokens_of_text(text)
    assert set(readable_words(" ".join(SOURCE_WORDS), 40).tokens) == set(SOURCE_WORDS)


def test_the_export_is_the_half_precision_copy_in_base64(view):
    exported = export_translator(view.model)
    raw = base64.b64decode(exported["weights"])
    state = view.model.state_dict()
    assert len(raw) == exported["bytes"] == 2 * sum(t.numel() for t in state.values())
    halves, offset = np.frombuffer(raw, dtype="<f2"), 0
    for spec, (name, tensor) in zip(exported["tensors"], state.items(), strict=True):
        assert spec == {"name": name, "shape": list(tensor.shape)}
        decoded = torch.from_numpy(halves[offset:offset + tensor.numel()].astype(np.float32))
        assert torch.equal(decoded.view(tensor.shape), tensor)  # the copy is float16 already
        offset += tensor.numel()
    assert exported["config"] == {"d_model": 32, "num_heads": 4, "num_layers": 2, "d_ff": 64,
                                  "max_src_len": 24, "max_tgt_len": 20, "eps": 1e-5,
                                  "pad": 0, "bos": BOS, "eos": EOS}


def test_rounding_to_half_changes_only_the_weights_precision():
    model = scaled_up_translator(5)
    rounded = rounded_to_half(model)
    for (name, exact), half in zip(model.state_dict().items(), rounded.state_dict().values(),
                                   strict=True):
        assert torch.equal(half, exact.half().float()), name
    assert rounded is not model and not rounded.training
    assert half_weights(model)["weights"] == half_weights(rounded)["weights"]
    assert require_half_weights(model) is model


def test_the_state_is_the_translators_greedy_output_on_what_it_reads(view):
    state = view.state("✓ Twelve thousand, three hundred")
    assert state.tokens == ("twelve", "thousand", ",", "three", "hundred")
    assert state.unknown == ("✓",) and state.cropped == 0
    src, mask = source_batch(["twelve thousand, three hundred"])
    out, weights = view.model.translate(src, mask)
    written = out[0, 1:].tolist()
    n_out = written.index(EOS) if EOS in written else len(written)
    assert state.finished == (EOS in written)
    assert state.output == tuple(TARGET_VOCAB[i] for i in written[:n_out])
    assert state.cross_attentions.shape == (2, 4, n_out, 5)
    assert torch.equal(state.cross_attentions, weights[0, :, :, :n_out])
    empty = view.state("3005")
    assert empty.tokens == () and empty.output == () and empty.cross_attentions is None


# --- the HTML output ---------------------------------------------------------------------

def test_the_output_is_self_contained_and_marked(view):
    html = view._repr_html_()
    assert "data-live-translator" in html.split(">", 1)[0]
    assert "data-live-model" not in html  # lesson 12's live view tests would pick it up
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert scripts == [(STATIC / name).read_text(encoding="utf-8")
                       for name in ("view_common.js", "live_common.js", "translator.js")]
    for name in ("explorer.css", "live.css", "translator.css"):
        assert (STATIC / name).read_text(encoding="utf-8") in html
    assert "src=" not in html and "href=" not in html and "://" not in html
    assert "@import" not in html and "url(" not in html
    payload = payload_of(html)
    assert payload["model"] == {k: v for k, v in export_translator(view.model).items()
                                if k != "bytes"}
    assert payload["source_vocab"][1:] == list(SOURCE_WORDS)
    assert payload["target_vocab"] == list(TARGET_VOCAB)
    assert payload["text"] == "three thousand and five"
    assert payload["initial"] == {"layer": 1, "head": 2}
    state = view.state()
    fallback = html.split("<script")[0]  # the no-script form
    assert "attn-live-fallback" in fallback and escape("".join(state.output)) in fallback
    assert "three thousand and five" in html.split("<script")[0]
    assert "</script" not in json.dumps(payload)
    assert "TranslatorView(translator of 2 encoder and 2 decoder layers x 4 heads" in repr(view)


def test_the_weights_of_lesson_15s_size_fit_a_page():
    """Translator(d_model 48, 4 heads, 2 layers), lesson 15's recipe: 100,530 weights, 201 KB of
    float16, 268 KB in base64; the output about 310 KB."""
    model = Translator(d_model=48, num_heads=4, num_layers=2)
    assert export_translator(model)["bytes"] == 2 * sum(p.numel() for p in model.parameters())
    assert len(TranslatorView(model)._repr_html_().encode()) < 350_000


def test_the_figure_shows_the_opened_heads_cross_attention(view):
    fig = translator_view_figure(view, "twelve thousand, three hundred")
    heat = fig.axes[0]
    state = view.state("twelve thousand, three hundred")
    shown = heat.images[0].get_array()
    assert shown.shape == (len(state.output), 5)
    assert np.allclose(shown, state.cross_attentions[1, 2].numpy())
    assert [t.get_text() for t in heat.get_xticklabels()] == list(state.tokens)
    assert [t.get_text() for t in heat.get_yticklabels()] == list(state.output)
    plt.close(fig)


CJK = re.compile(r"[\u4e00-\u9fff]")


def test_the_pages_words_come_from_the_catalogue_in_both_editions():
    model = scaled_up_translator(6)
    try:
        set_language("zh-CN")
        ui = payload_of(TranslatorView(model)._repr_html_())["ui"]
        for key, message in UI_TEXT.items():
            assert ui[key] == translate(in_english(message), "zh-CN")
            assert CJK.search(ui[key]), key
    finally:
        set_language("en")
    ui = payload_of(TranslatorView(model)._repr_html_())["ui"]
    assert ui == {key: in_english(message) for key, message in UI_TEXT.items()}


# --- the JavaScript forward pass against the Python model ---------------------------------

def _cases(view: TranslatorView) -> list[dict]:
    cases = []
    for text in TEXTS:
        state = view.state(text)
        case = {"text": text, "tokens": list(state.tokens), "unknown": list(state.unknown),
                "cropped": state.cropped, "output": list(state.output),
                "finished": state.finished}
        if state.tokens:
            # every step's logits, as the decoder computes them in one pass over what it wrote
            src, mask = source_batch([" ".join(state.tokens)])
            ids = [BOS, *(TARGET_VOCAB.index(t) for t in state.output)][:view.model.max_len]
            with torch.no_grad():
                logits, _ = view.model(src, torch.tensor([ids]), mask)
            case.update(source_ids=src[0].tolist(), target_ids=ids,
                        cross=state.cross_attentions.double().tolist(),
                        logits=logits[0].double().tolist())
        cases.append(case)
    return cases


@pytest.fixture(scope="module")
def fixture_file(tmp_path_factory, view) -> Path:
    views = [
        ("lesson 15's sizes", TranslatorView(scaled_up_translator(7, d_model=48))),
        ("the test's model", view),
        ("3 layers x 2 heads, 6 source and 8 target positions", TranslatorView(
            scaled_up_translator(8, d_model=16, num_heads=2, num_layers=3, d_ff=40,
                                 max_src_len=6, max_tgt_len=8))),
    ]
    data = {"tolerance": TOLERANCE,
            "models": [{"name": name, "payload": v.payload(), "cases": _cases(v)}
                       for name, v in views]}
    path = tmp_path_factory.mktemp("translator-js") / "translator-fixture.json"
    path.write_text(json.dumps(data, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    return path


@pytest.mark.skipif(NODE is None, reason="node is not installed: the translator view's "
                    "JavaScript tests need node 20+ (apt-get install nodejs)")
def test_the_javascript_translator_matches_the_python_model(fixture_file):
    result = subprocess.run([NODE, "--test", "--test-reporter=tap", str(TRANSLATOR_JS_TEST)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRANSLATOR_FIXTURE": str(fixture_file)})
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    assert "# fail 0" in result.stdout and "# skipped 0" in result.stdout, result.stdout
    assert re.search(r"# pass [1-9]", result.stdout), result.stdout
    print(*re.findall(r"# measured: .*", result.stdout), sep="\n")


_SMALL = Translator(d_model=8, num_heads=2, num_layers=1)


def _linear_with(value: float) -> torch.nn.Linear:
    layer = torch.nn.Linear(1, 1)
    with torch.no_grad():
        layer.weight.fill_(value)
    return layer


BAD_INPUTS = [
    pytest.param(readable_words, (3005, 24), {}, TypeError, ("text", "str", "int 3005"),
                 id="readable_words: a number"),
    pytest.param(readable_words, ("five", 0), {}, ValueError, ("max_src_len", "positive int",
                                                               "got 0"),
                 id="readable_words: max_src_len 0"),
    pytest.param(export_translator, (torch.nn.Linear(2, 2),), {}, TypeError,
                 ("model", "Translator", "Linear"), id="export_translator: not a Translator"),
    pytest.param(export_translator, (Translator(d_model=8, num_heads=2, num_layers=1)
                                     .to("meta"),), {}, ValueError,
                 ("model's src_embedding.weight", "meta", "values"),
                 id="export_translator: a model on meta"),
    pytest.param(TranslatorView, ("model",), {}, TypeError, ("model", "Translator", "str"),
                 id="TranslatorView: a str"),
    pytest.param(TranslatorView, (_SMALL,), {"text": 5}, TypeError, ("text", "str", "int 5"),
                 id="TranslatorView: text an int"),
    pytest.param(TranslatorView, (_SMALL,), {"head": 2}, ValueError, ("head", "0..1", "got 2"),
                 id="TranslatorView: head out of range"),
    pytest.param(TranslatorView, (_SMALL,), {"layer": -1}, ValueError,
                 ("layer", "0..0", "got -1"), id="TranslatorView: negative layer"),
    pytest.param(translator_view_figure, ("view",), {}, TypeError,
                 ("view", "TranslatorView", "str"), id="translator_view_figure: a str"),
    pytest.param(translator_view_figure, (TranslatorView(_SMALL),), {"text": "3005"},
                 ValueError, ("text", "English number words", "'3005'"),
                 id="translator_view_figure: nothing the translator reads"),
    pytest.param(require_half_weights, ("model",), {}, TypeError,
                 ("model", "torch.nn.Module", "str"), id="require_half_weights: a str"),
    pytest.param(rounded_to_half, (_linear_with(1e5),), {}, ValueError,
                 ("model's weight", "float16", "65504"), id="rounded_to_half: a weight too large"),
    pytest.param(half_weights, (_linear_with(float("inf")),), {}, ValueError,
                 ("model's weight", "float16", "inf"), id="half_weights: an infinite weight"),
    pytest.param(half_weights, (3,), {}, TypeError, ("model", "torch.nn.Module", "int"),
                 id="half_weights: an int"),
]
