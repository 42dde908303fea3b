"""The attention explorer's logic and widget, without a browser."""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.widgets.explorer import (
    AttentionExample,
    AttentionExplorer,
    explorer_figure,
    explorer_state,
    pronoun_example,
    render_heatmap_html,
    render_row_html,
    weight_matrix,
)

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


# --- the widget ----------------------------------------------------------------------------

def test_widget_opens_on_the_default_state():
    explorer = AttentionExplorer()
    default = explorer_state(pronoun_example())
    assert explorer.state == default
    assert shown_query(explorer.display.value) == default.query
    assert [b.button_style for b in explorer.token_buttons].count("info") == 1
    assert explorer.token_buttons[default.query].button_style == "info"


def test_clicking_a_token_shows_that_tokens_row():
    explorer = AttentionExplorer()
    matrix = weight_matrix(pronoun_example())
    for query in (1, 4, 8, 0):
        explorer.token_buttons[query].click()
        assert shown_query(explorer.display.value) == query
        assert shown_weights(explorer.display.value) == {
            k: round(w, 3) for k, w in enumerate(matrix[query].tolist())
        }
        assert explorer.token_buttons[query].button_style == "info"


def test_toggles_update_the_numbers_live():
    explorer = AttentionExplorer()
    query = explorer.state.query
    before_max = explorer.state.max_weight
    assert explorer.causal_toggle.description == "causal mask: off"
    explorer.causal_toggle.value = True
    assert explorer.causal_toggle.description == "causal mask: on"
    right = {k: w for k, w in shown_weights(explorer.display.value).items() if k > query}
    assert right and set(right.values()) == {0.0}
    explorer.scale_toggle.value = False
    assert explorer.scale_toggle.description == "scale by 1/√8: off"
    assert explorer.state.max_weight > before_max
    assert 'data-scaled="0"' in explorer.display.value
    assert explorer.state == explorer_state(pronoun_example(), causal=True, scaled=False)


def test_toggles_can_be_hidden_and_must_be_known():
    explorer = AttentionExplorer(toggles=("scale",), heatmap=False)
    toggle_box = explorer.view.children[2]
    assert list(toggle_box.children) == [explorer.scale_toggle]
    assert "attn-explorer-heatmap" not in explorer.display.value
    assert AttentionExplorer(toggles=()).view.children[2].children == ()
    with pytest.raises(ValueError, match="subset of"):
        AttentionExplorer(toggles=("mask",))
    with pytest.raises(ValueError, match="subset of"):
        AttentionExplorer(toggles="causal")
    with pytest.raises(TypeError, match="AttentionExample"):
        AttentionExplorer(example="the cat")


def test_widget_can_open_on_another_query_and_setting():
    explorer = AttentionExplorer(query="ball", causal=True, scaled=False)
    assert explorer.state == explorer_state(pronoun_example(), "ball", causal=True, scaled=False)
    assert explorer.causal_toggle.value and not explorer.scale_toggle.value


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
