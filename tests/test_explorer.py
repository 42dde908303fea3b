"""The attention explorer's logic, its HTML output and its data, without a browser
(tests/test_browser.py and tests/test_site.py click it in Chromium)."""

from __future__ import annotations

import importlib.resources
import json
import math
import re

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.language import in_english, set_language, translate
from course_utils.views import explorer as explorer_view
from course_utils.views import explorer_figures, explorer_html, explorer_model
from course_utils.views.explorer import AttentionExplorer, ModelExplorer, synthetic_attentions
from course_utils.views.explorer_figures import explorer_figure, model_view_figure
from course_utils.views.explorer_html import (
    TEMPERATURES,
    UI_TEXT,
    render_heatmap_html,
    render_row_html,
)
from course_utils.views.explorer_model import (
    PRONOUN_SENTENCE,
    AttentionExample,
    computation_steps,
    example_from_table,
    explorer_state,
    pronoun_example,
    round_example,
    weight_matrix,
)

# The page's script and styles as the package ships them (package data, not a Python string).
STATIC = importlib.resources.files("course_utils.views") / "static"
EXPLORER_JS = (STATIC / "explorer.js").read_text(encoding="utf-8")
EXPLORER_CSS = (STATIC / "explorer.css").read_text(encoding="utf-8")

SETTINGS = [(causal, scaled) for causal in (False, True) for scaled in (True, False)]


def shown_weights(html_text: str) -> dict[int, float]:
    """The numbers a reader sees next to the bars, by key index."""
    found = re.findall(r'class="attn-explorer-weight" data-key="(\d+)"[^>]*>([^<]+)<', html_text)
    return {int(key): float(text) for key, text in found}


def shown_query(html_text: str) -> int:
    return int(re.search(r'class="attn-explorer-row" data-query="(\d+)"', html_text).group(1))


def random_example(n: int, d_k: int, seed: int) -> AttentionExample:
    generator = torch.Generator().manual_seed(seed)
    return AttentionExample(
        tokens=tuple(f"w{i}" for i in range(n)),
        queries=torch.randn(n, d_k, generator=generator) * 3,
        keys=torch.randn(n, d_k, generator=generator),
        default_query=n - 1, source="random, for tests",
    )


# --- logic ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("causal", "scaled"), SETTINGS)
def test_weights_match_torch_scaled_dot_product_attention(causal, scaled):
    for example in (pronoun_example(), random_example(7, 5, seed=1)):
        n = len(example.tokens)
        # With the identity as values, torch's output rows are exactly the weights.
        expected = F.scaled_dot_product_attention(
            example.queries, example.keys, torch.eye(n), is_causal=causal,
            scale=None if scaled else 1.0,
        )
        torch.testing.assert_close(weight_matrix(example, causal, scaled), expected)


def test_default_example_opens_on_the_pronoun_and_it_resolves_to_its_antecedent():
    example = pronoun_example()
    state = explorer_state(example)
    assert example.tokens[state.query] == "it"
    assert example.tokens[state.argmax] == "kitten", state.weights
    # The other noun ("ball") is the runner-up among nouns but far behind.
    assert state.weights[example.index("kitten")] > 2 * state.weights[example.index("ball")]


@pytest.mark.parametrize("query", range(9))
def test_causal_mask_zeroes_exactly_the_keys_right_of_the_query(query):
    state = explorer_state(pronoun_example(), query, causal=True)
    assert all(w == 0.0 for w in state.weights[query + 1:]), state.weights
    assert all(w > 0.0 for w in state.weights[:query + 1]), state.weights
    assert state.masked == tuple(key > query for key in range(9))
    assert math.isclose(sum(state.weights), 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_turning_scaling_off_sharpens_the_pronoun_row(causal):
    scaled = explorer_state(pronoun_example(), causal=causal, scaled=True)
    unscaled = explorer_state(pronoun_example(), causal=causal, scaled=False)
    assert unscaled.max_weight > scaled.max_weight + 0.2
    assert unscaled.entropy < scaled.entropy / 2
    assert unscaled.argmax == scaled.argmax


def test_entropy_matches_torch_categorical():
    for causal, scaled in SETTINGS:
        state = explorer_state(pronoun_example(), "kitten", causal=causal, scaled=scaled)
        probs = torch.tensor(state.weights, dtype=torch.float64)
        expected = torch.distributions.Categorical(probs=probs).entropy().item()
        assert state.entropy == pytest.approx(expected, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), d_k=st.integers(1, 16), seed=st.integers(0, 10_000),
       causal=st.booleans(), scaled=st.booleans())
def test_every_row_is_a_distribution_over_the_visible_keys(n, d_k, seed, causal, scaled):
    example = random_example(n, d_k, seed)
    for query in range(n):
        state = explorer_state(example, query, causal=causal, scaled=scaled)
        assert math.isclose(sum(state.weights), 1.0, rel_tol=1e-5)
        assert 0.0 <= state.entropy <= math.log(n) + 1e-6
        assert math.copysign(1.0, state.entropy) == 1.0  # shown as 0.000, never -0.000
        assert all(w == 0.0 for w, hidden in zip(state.weights, state.masked, strict=True)
                   if hidden)


def test_query_by_word_and_its_errors():
    example = pronoun_example()
    assert example.index("kitten") == 1
    with pytest.raises(ValueError, match=r"'the' occurs at \[0, 3\]"):
        example.index("the")
    with pytest.raises(ValueError, match="'dog' does not occur"):
        example.index("dog")
    with pytest.raises(ValueError, match=r"0\.\.8, got 9"):
        example.index(9)
    with pytest.raises(TypeError, match="token index or a word"):
        example.index(True)


def test_bad_examples_are_rejected_with_the_expected_shape():
    with pytest.raises(ValueError, match=r"queries should be a tensor \(seq_len=2, d_k\)"):
        AttentionExample(("a", "b"), torch.ones(3, 4), torch.ones(2, 4), 0, "test")
    with pytest.raises(ValueError, match=r"both be \(seq_len, d_k\)"):
        AttentionExample(("a", "b"), torch.ones(2, 4), torch.ones(2, 3), 0, "test")
    with pytest.raises(ValueError, match="default_query"):
        AttentionExample(("a", "b"), torch.ones(2, 4), torch.ones(2, 4), 2, "test")


# --- rendering -----------------------------------------------------------------------------

def test_row_html_shows_the_rounded_weights_and_summary():
    state = explorer_state(pronoun_example(), causal=True)
    text = render_row_html(state, d_k=8)
    assert shown_query(text) == state.query
    assert shown_weights(text) == {k: round(w, 3) for k, w in enumerate(state.weights)}
    assert f'class="attn-explorer-max">{state.max_weight:.3f}<' in text
    assert f'class="attn-explorer-entropy">{state.entropy:.3f}<' in text
    assert text.count("(masked)") == 2  # "was" and "playful" are right of "it"


def test_tokens_are_escaped_in_html():
    example = AttentionExample(("<b>", "&"), torch.ones(2, 2), torch.ones(2, 2), 0, "test")
    state = explorer_state(example)
    row = render_row_html(state, d_k=2)
    heat = render_heatmap_html(weight_matrix(example), example.tokens, 0)
    for text in (row, heat):
        assert "&lt;b&gt;" in text and "&amp;" in text
        assert "<b></span>" not in text and "<b></th>" not in text and ">&<" not in text


def test_heatmap_outlines_only_the_query_row():
    example = pronoun_example()
    text = render_heatmap_html(weight_matrix(example), example.tokens, query=4)
    rows = re.findall(r"<tr[^>]*>.*?</tr>", text)
    assert len(rows) == 1 + len(example.tokens)  # header + one row per query
    outlined = [i for i, row in enumerate(rows[1:]) if "attn-explorer-query-row" in row]
    assert outlined == [4]


# --- temperature and the step-by-step computation --------------------------------------------

@pytest.mark.parametrize("temperature", [TEMPERATURES[0], 1.0, TEMPERATURES[-1], 0.7])
@pytest.mark.parametrize(("causal", "scaled"), SETTINGS)
def test_temperature_divides_the_scaled_scores_as_torch_does(causal, scaled, temperature):
    example = random_example(6, 3, seed=4)
    scale = (1 / math.sqrt(3) if scaled else 1.0) / temperature
    expected = F.scaled_dot_product_attention(
        example.queries, example.keys, torch.eye(6), is_causal=causal, scale=scale)
    torch.testing.assert_close(weight_matrix(example, causal, scaled, temperature), expected)


def test_higher_temperature_flattens_every_row():
    example = pronoun_example()
    for query in range(len(example.tokens)):
        entropies = [explorer_state(example, query, temperature=t).entropy for t in TEMPERATURES]
        assert entropies == sorted(entropies), (query, entropies)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
@pytest.mark.parametrize(("causal", "scaled"), SETTINGS)
def test_computation_steps_match_torch_step_by_step(causal, scaled, temperature):
    generator = torch.Generator().manual_seed(1)
    example = AttentionExample(  # n = 5, d_k = 3, d_v = 2: shape mistakes would show
        tokens=tuple("abcde"), queries=torch.randn(5, 3, generator=generator),
        keys=torch.randn(5, 3, generator=generator), default_query=2, source="random",
        values=torch.randn(5, 2, generator=generator))
    scale = (1 / math.sqrt(3) if scaled else 1.0) / temperature
    output = F.scaled_dot_product_attention(example.queries, example.keys, example.values,
                                            is_causal=causal, scale=scale)
    weights = F.scaled_dot_product_attention(example.queries, example.keys, torch.eye(5),
                                             is_causal=causal, scale=scale)
    for query in range(5):
        steps = computation_steps(example, query, causal, scaled, temperature)
        assert steps.scale == pytest.approx(scale)
        assert steps.scores == pytest.approx((example.queries[query] @ example.keys.T).tolist())
        assert steps.scaled == pytest.approx([s * scale for s in steps.scores])
        assert [m == float("-inf") for m in steps.masked] == [
            causal and key > query for key in range(5)]
        assert steps.weights == pytest.approx(weights[query].tolist(), abs=1e-6)
        assert steps.output == pytest.approx(output[query].tolist(), abs=1e-6)


def test_bad_temperatures_are_rejected():
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature should be a positive number"):
            weight_matrix(pronoun_example(), temperature=bad)
    for bad in (True, "1", None):  # not a number at all: checks.require_positive_number
        with pytest.raises(TypeError, match="temperature should be a positive number"):
            weight_matrix(pronoun_example(), temperature=bad)
    with pytest.raises(ValueError, match=r"temperature \(a value of the slider\) should be one of"):
        AttentionExplorer(temperature=0.3)


# --- examples from a table ----------------------------------------------------------------

def test_example_from_table_rebuilds_the_default_example():
    rebuilt = example_from_table(PRONOUN_SENTENCE, default_query="it")
    default = pronoun_example()
    assert rebuilt.tokens == default.tokens and rebuilt.default_query == default.default_query
    assert torch.equal(rebuilt.queries, default.queries)
    assert torch.equal(rebuilt.keys, default.keys)
    assert torch.equal(default.value_vectors, default.keys)  # values default to the keys


def test_round_example_keeps_the_vectors_so_it_still_picks_kitten():
    example = round_example()
    assert example.tokens[-1] == "round"
    assert example.tokens[explorer_state(example).argmax] == "kitten"


def test_bad_tables_are_rejected():
    with pytest.raises(ValueError, match=r"unknown features \['fluffy'\]"):
        example_from_table([("cat", {"fluffy": 1}, {})])
    with pytest.raises(TypeError, match="dict feature -> number"):
        example_from_table([("cat", ["noun"], {})])
    with pytest.raises(ValueError, match="each row should be"):
        example_from_table([("cat", {})])
    with pytest.raises(ValueError, match="non-empty"):
        example_from_table([])
    with pytest.raises(ValueError, match="'dog' does not occur"):
        example_from_table([("cat", {}, {})], default_query="dog")
    with pytest.raises(ValueError, match="finite"):
        AttentionExample(("a",), torch.tensor([[float("nan")]]), torch.ones(1, 1), 0, "test")


# --- the explorer's output: HTML + JSON + script ------------------------------------------

def assert_close_to(shown, expected: torch.Tensor, atol: float = 1e-4) -> None:
    """Nested lists from the page's data against a tensor, within the data's rounding."""
    torch.testing.assert_close(torch.tensor(shown, dtype=torch.float64), expected.double(),
                               atol=atol, rtol=0)


def payload_of(html_text: str) -> dict:
    found = re.search(r'<script type="application/json" class="attn-explorer-data">(.*?)'
                      r"</script>", html_text, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_explorer_output_is_self_contained():
    text = AttentionExplorer(sentences=[round_example()])._repr_html_()
    assert text.count('class="attn-explorer"') == 1
    # Nothing is loaded from anywhere: no src/href attribute, no URL, no import. (The
    # SVG namespace is a name, never fetched; the scripts require view_common.js only where
    # node loads them, where `module` exists: the page has it inlined before them.)
    text = text.replace("'http://www.w3.org/2000/svg'", "")
    text = text.replace("require('./view_common.js')", "")
    for forbidden in ("src=", "href=", "http://", "https://", "import(", "require(", "url("):
        assert forbidden not in text, forbidden
    assert text.count("<script") == 3  # the data, the shared helpers and the explorer's code


def test_every_precomputed_state_is_the_course_attention():
    explorer = AttentionExplorer(sentences=[round_example()])
    data = payload_of(explorer._repr_html_())
    assert data["temperatures"] == list(TEMPERATURES)
    for sentence, example in zip(data["sentences"], explorer.examples, strict=True):
        assert sentence["tokens"] == list(example.tokens)
        assert_close_to(sentence["scores"], example.queries @ example.keys.T)
        for causal, scaled in SETTINGS:
            states = sentence["states"][f"c{int(causal)}s{int(scaled)}"]
            for temperature, state in zip(TEMPERATURES, states, strict=True):
                weights = weight_matrix(example, causal, scaled, temperature)
                assert_close_to(state["w"], weights)
                for query in range(len(example.tokens)):
                    steps = computation_steps(example, query, causal, scaled, temperature)
                    assert state["out"][query] == pytest.approx(steps.output, abs=1e-4)
                    assert state["h"][query] == pytest.approx(
                        explorer_state(example, query, causal, scaled, temperature).entropy,
                        abs=1e-4)


def test_fallback_for_readers_without_scripts_is_the_opening_row():
    explorer = AttentionExplorer(query="ball", causal=True, scaled=False)
    text = explorer._repr_html_()
    assert explorer.state == explorer_state(pronoun_example(), "ball", causal=True, scaled=False)
    assert render_row_html(explorer.state, 8) in text
    data = payload_of(text)
    assert data["sentences"][0]["query"] == pronoun_example().index("ball")
    assert data["initial"] == {"causal": True, "scaled": False, "t": TEMPERATURES.index(1.0)}


def test_each_output_has_its_own_id():
    ids = {re.search(r'id="([^"]+)"', AttentionExplorer()._repr_html_()).group(1)
           for _ in range(3)}
    assert len(ids) == 3


@pytest.mark.parametrize(("kwargs", "toggles"), [
    # the calls lessons 02, 03 and 05 make, unchanged
    ({"toggles": ()}, []),
    ({"scaled": False, "toggles": ("scale",)}, ["scale"]),
    ({"causal": True, "toggles": ("causal",)}, ["causal"]),
    ({}, ["causal", "scale", "temperature"]),
])
def test_the_lessons_calls_keep_working(kwargs, toggles):
    explorer = AttentionExplorer(pronoun_example(), **kwargs)
    data = payload_of(explorer._repr_html_())
    assert data["toggles"] == toggles
    assert explorer.state == explorer_state(
        pronoun_example(), causal=kwargs.get("causal", False), scaled=kwargs.get("scaled", True))
    assert "interactive" in repr(explorer)


def test_toggles_must_be_known_and_examples_must_be_examples():
    for bad in (("mask",), "causal"):
        with pytest.raises(ValueError, match="subset of"):
            AttentionExplorer(toggles=bad)
    with pytest.raises(TypeError, match="AttentionExample"):
        AttentionExplorer(example="the cat")
    with pytest.raises(TypeError, match="AttentionExample"):
        AttentionExplorer(sentences=["the cat"])


def test_heatmap_and_steps_can_be_left_out():
    data = payload_of(AttentionExplorer(heatmap=False, steps=False)._repr_html_())
    assert data["heatmap"] is False and data["steps"] is False


# --- the model view ----------------------------------------------------------------------

def test_synthetic_attentions_are_rows_of_weights_with_a_causal_last_head():
    maps = synthetic_attentions(2, 3, 6, generator=torch.Generator().manual_seed(5))
    assert maps.shape == (2, 3, 6, 6)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 3, 6))
    assert (maps[:, -1].triu(diagonal=1) == 0).all()
    assert not (maps[:, 0].triu(diagonal=1) == 0).all()


def test_model_explorer_hands_every_map_to_the_page():
    tokens = [f"t{i}" for i in range(5)]
    maps = synthetic_attentions(3, 2, 5)
    extra = synthetic_attentions(3, 2, 4, generator=torch.Generator().manual_seed(1))
    explorer = ModelExplorer(tokens, maps, layer=2, head=1, query=3,
                             sentences={"a shorter one": (list("abcd"), extra)})
    data = payload_of(explorer._repr_html_())
    assert data["mode"] == "model" and data["initial"] == {"layer": 2, "head": 1}
    first, second = data["sentences"]
    assert first["tokens"] == tokens and first["query"] == 3
    assert_close_to(first["maps"], maps)
    assert second["label"] == "a shorter one"
    assert_close_to(second["maps"], extra)
    assert explorer.state().weights == pytest.approx(maps[2, 1, 3].tolist())
    assert "3 layers x 2 heads" in repr(explorer)


def test_model_explorer_rejects_what_is_not_attention():
    tokens = ["a", "b", "c"]
    good = synthetic_attentions(1, 2, 3)
    with pytest.raises(ValueError, match=r"\(num_layers, num_heads, n, n\).*got shape \(2, 3, 3\)"):
        ModelExplorer(tokens, good[0])
    with pytest.raises(ValueError, match=r"n = len\(tokens\) = 2, got shape \(1, 2, 3, 3\)"):
        ModelExplorer(["a", "b"], good)
    with pytest.raises(ValueError, match="summing to 1"):
        ModelExplorer(tokens, good * 2)
    with pytest.raises(ValueError, match="finite"):
        ModelExplorer(tokens, good.masked_fill(good > 0.5, float("nan")))
    with pytest.raises(TypeError, match="list of strings"):
        ModelExplorer("abc", good)
    with pytest.raises(TypeError, match="attentions"):
        ModelExplorer(tokens, good.tolist())
    with pytest.raises(ValueError, match=r"layer should be an int in 0\.\.0, got 1"):
        ModelExplorer(tokens, good, layer=1)
    with pytest.raises(ValueError, match=r"head should be an int in 0\.\.1, got -1"):
        ModelExplorer(tokens, good, head=-1)


def test_model_view_figure_has_one_map_per_head_and_outlines_the_selected_one():
    maps = synthetic_attentions(2, 3, 5)
    fig = model_view_figure([f"t{i}" for i in range(5)], maps, layer=1, head=2)
    try:
        assert len(fig.axes) == 6
        images = [axis.images[0].get_array() for axis in fig.axes]
        for axis_index, image in enumerate(images):
            layer, head = divmod(axis_index, 3)
            assert_close_to(image.tolist(), maps[layer, head], atol=1e-6)
        widths = [max(s.get_linewidth() for s in axis.spines.values()) for axis in fig.axes]
        assert widths.index(max(widths)) == 5 and widths.count(max(widths)) == 1
    finally:
        plt.close(fig)


# --- the static figure ---------------------------------------------------------------------

def test_figure_draws_the_default_row_as_bars():
    fig = explorer_figure()
    try:
        bars_axis = fig.axes[0]
        heights = [patch.get_height() for patch in bars_axis.patches]
        assert heights == pytest.approx(explorer_state(pronoun_example()).weights)
        assert '"it"' in bars_axis.get_title()
    finally:
        plt.close(fig)


# --- the course language -------------------------------------------------------------------

@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


# Every English word the page, the fallback, the text form or the figures show of their own
# (not the tokens): none may be left in the Chinese edition.
ENGLISH_LABELS = ["query", "key", "causal mask", "scale by", "temperature", "layer", "head",
                  "Click a word", "step", "The computation", "Edit what", "hand-set",
                  "Model view", "scores", "masked", "largest weight", "entropy", "uniform",
                  "Hover a key", "column of", "softmax weight", "output of", "interactive",
                  "edited", "opening state", "attention weight", "no scaling", "all rows",
                  "attention maps", " on", "off"]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _english_left(shown: str) -> list[str]:
    return [label for label in ENGLISH_LABELS if re.search(rf"\b{label.strip()}\b", shown)]


def test_the_pages_words_come_from_python_in_both_languages(chinese):
    for explorer in (AttentionExplorer(sentences=[round_example()]),
                     ModelExplorer(list("abcd"), synthetic_attentions(2, 2, 4))):
        ui = payload_of(explorer._repr_html_())["ui"]
        assert set(ui) == set(UI_TEXT)
        for key, message in UI_TEXT.items():
            english = ([in_english(m) for m in message] if isinstance(message, list)
                       else in_english(message))
            chinese = ([translate(m, "zh-CN") for m in english] if isinstance(english, list)
                       else translate(english, "zh-CN"))
            assert ui[key] == chinese
            words = " ".join(chinese) if isinstance(chinese, list) else chinese
            if re.search("[a-z]{2}", str(english)):  # '"{0}"' has no words to translate
                assert CJK.search(words), key
            assert not _english_left(words.replace("softmax", "")), (key, words)
    set_language("en")
    ui = payload_of(AttentionExplorer()._repr_html_())["ui"]
    assert ui == {key: [in_english(m) for m in message] if isinstance(message, list)
                  else in_english(message) for key, message in UI_TEXT.items()}


def test_the_output_inlines_the_shipped_script_and_styles():
    """The page's front end is the package data, inlined: no file is fetched by the page."""
    text = AttentionExplorer()._repr_html_()
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert scripts == [(STATIC / "view_common.js").read_text(encoding="utf-8"), EXPLORER_JS]
    assert f"<style>{EXPLORER_CSS}</style>" in text
    assert "</script" not in EXPLORER_JS.lower() and "</style" not in EXPLORER_CSS.lower()
    assert not re.search(r"<script[^>]* src=|<link |@import|url\(", text)


def test_the_script_draws_no_english_word_of_its_own():
    """Every label of the page comes from ``ui``: the script's string literals name CSS
    classes, events and attributes only."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", EXPLORER_JS, flags=re.S)  # comments may say anything
    literals = re.findall(r"'([^'\n]*)'", code)
    shown = [s for s in literals if " " in s.strip() and "=\"" not in s
             and not s.startswith(("<", "attn-"))]  # not HTML attributes or class names
    for literal in shown:
        assert not _english_left(literal), literal
    assert not {"query", "key", "mask", "layer", "head", "on", "off"} & set(literals)


def test_the_chinese_explorer_reads_chinese_where_no_script_runs(chinese):
    explorer = AttentionExplorer(sentences=[round_example()], causal=True)
    text = explorer._repr_html_()
    fallback = re.search(r'<div class="attn-explorer-fallback">(.*?)<script', text, re.S).group(1)
    fallback = re.sub(r"<[^>]+>", " ", fallback)
    assert "查询" in fallback and "最大权重" in fallback and "因果掩码" in fallback
    assert "动手操作" in fallback  # the note that it is a static view
    assert not _english_left(fallback.replace("nats", "")), fallback
    shown = repr(explorer)
    assert shown == ("AttentionExplorer('这只 小猫 追着 那个 球 因为 它 很 好动', query='它')"
                     "（可在 JupyterLab、Colab 和课程网站上交互使用）")
    model = repr(ModelExplorer(list("abcd"), synthetic_attentions(2, 3, 4)))
    assert model == ("ModelExplorer（4 个词元，2 层 × 每层 3 个头）"
                     "（可在 JupyterLab、Colab 和课程网站上交互使用）")
    heatmap = render_heatmap_html(weight_matrix(pronoun_example()), pronoun_example().tokens, 6)
    assert "查询 \\ 键" in heatmap and not _english_left(re.sub(r"<[^>]+>", " ", heatmap))


def test_the_chinese_figures_are_labelled_in_chinese(chinese):
    fig = explorer_figure(causal=True, scaled=False, temperature=2.0)
    try:
        bars, heat = fig.axes[:2]
        labels = [bars.get_title(), bars.get_ylabel(), heat.get_title(), heat.get_xlabel(),
                  heat.get_ylabel()]
        assert labels == ["查询“它”（因果掩码开启，不缩放，T = 2）", "注意力权重",
                          "所有行；查询所在的行加了边框", "键", "查询"]
    finally:
        plt.close(fig)
    fig = model_view_figure(list("abcd"), synthetic_attentions(2, 3, 4))
    try:
        shown = [fig.get_suptitle()] + [a.get_title() for a in fig.axes] + [
            a.get_ylabel() for a in fig.axes]
        assert "头 2" in shown and "第 1 层" in shown
        assert all(not _english_left(s) for s in shown), shown
    finally:
        plt.close(fig)


def test_english_stays_as_it_was():
    explorer = AttentionExplorer()
    assert repr(explorer) == ("AttentionExplorer('the kitten chased the ball because it was "
                              "playful', query='it') (interactive in JupyterLab, Colab and on "
                              "the course website)")
    assert repr(ModelExplorer(list("abcd"), synthetic_attentions(2, 3, 4))) == (
        "ModelExplorer(4 tokens, 2 layers x 3 heads) (interactive in JupyterLab, Colab and on "
        "the course website)")
    row = render_row_html(explorer_state(pronoun_example(), causal=True), 8)
    assert "<div>query <b>it</b> · causal mask on · scores ÷ √8</div>" in row
    assert ('<div>largest weight <b class="attn-explorer-max">0.669</b> on <b>kitten</b> · '
            'entropy <b class="attn-explorer-entropy">') in row
    assert " (masked)" in row
    fig = explorer_figure(causal=True, scaled=False, temperature=2.0)
    try:
        assert fig.axes[0].get_title() == 'query "it" (causal mask on, no scaling, T = 2)'
        assert fig.axes[1].get_xlabel() == "key"
    finally:
        plt.close(fig)


def test_the_script_reads_exactly_the_words_python_sends():
    used = set(re.findall(r"\bUI\.(\w+)", EXPLORER_JS))
    assert used == set(UI_TEXT)


_EXAMPLE = explorer_model.pronoun_example()

BAD_INPUTS = [
    pytest.param(explorer_model.require_attentions, (["a", "b"], torch.ones(1, 1, 3, 3) / 3), {},
                 ValueError, ("attentions", "(num_layers, num_heads, n, n)", "(1, 1, 3, 3)"),
                 id="require_attentions: n is not len(tokens)"),
    pytest.param(explorer_model.AttentionExample, (("a",), "q", "k", 0, "by hand"), {},
                 ValueError, ("queries", "(seq_len=1, d_k)", "str"),
                 id="AttentionExample: queries a str"),
    pytest.param(explorer_model.example_from_table, ([],), {}, ValueError,
                 ("table", "non-empty"), id="example_from_table: empty"),
    pytest.param(explorer_model.in_course_language, ([], 3), {}, TypeError,
                 ("name", "str", "int 3"), id="in_course_language: example an int"),
    pytest.param(explorer_model.weight_matrix, ("the cat",), {}, TypeError,
                 ("example", "AttentionExample", "str"), id="weight_matrix: a str"),
    pytest.param(explorer_model.explorer_state, (_EXAMPLE,), {"temperature": "1"}, TypeError,
                 ("temperature", "positive number", "str '1'"),
                 id="explorer_state: temperature a str"),
    pytest.param(explorer_model.computation_steps, (_EXAMPLE,), {"temperature": 0.0},
                 ValueError, ("temperature", "positive number", "0.0"),
                 id="computation_steps: temperature 0"),
    pytest.param(explorer_figures.explorer_figure, (), {"temperature": -1.0}, ValueError,
                 ("temperature", "positive number", "-1.0"), id="explorer_figure: negative T"),
    pytest.param(explorer_view.AttentionExplorer, (), {"temperature": 3.0}, ValueError,
                 ("temperature", "slider", "3.0"), id="AttentionExplorer: T not on the slider"),
    pytest.param(explorer_html.render_row_html, ({"query": 0}, 4), {}, TypeError,
                 ("state", "ExplorerState", "dict"), id="render_row_html: a dict"),
    pytest.param(explorer_html.render_heatmap_html, ([[1.0]], ["a"], 0), {}, TypeError,
                 ("weights", "torch.Tensor", "list"), id="render_heatmap_html: a list"),
    pytest.param(explorer_view.synthetic_attentions, (0, 2, 3), {}, ValueError,
                 ("num_layers", "positive int", "got 0"), id="synthetic_attentions: no layer"),
    pytest.param(explorer_figures.model_view_figure, (["a"], "weights"), {}, TypeError,
                 ("attentions", "torch.Tensor", "str"), id="model_view_figure: a str"),
    pytest.param(explorer_view.ModelExplorer, ("a b", torch.rand(1, 1, 2, 2)), {}, TypeError,
                 ("tokens", "list of strings", "str"), id="ModelExplorer: tokens a str"),
]
