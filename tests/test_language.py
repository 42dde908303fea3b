"""course_utils.language: message language and the CJK font for the Chinese edition."""

from __future__ import annotations

import warnings

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from course_utils import language


@pytest.fixture
def restored():
    """Leave the language and matplotlib's fonts as they were."""
    with matplotlib.rc_context():
        yield
        language.set_language("en")


def _glyph_warnings(title: str) -> list[str]:
    figure, axes = plt.subplots()
    axes.set_title(title)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure.canvas.draw()
    plt.close(figure)
    return [str(w.message) for w in caught if "Glyph" in str(w.message)]


def test_without_the_cjk_font_chinese_glyphs_are_missing(restored):
    matplotlib.rcParams["font.sans-serif"] = ["DejaVu Sans"]
    matplotlib.rcParams["font.family"] = ["sans-serif"]
    assert _glyph_warnings("注意力权重")  # the check below can fail: here it does


def test_the_chinese_edition_draws_chinese_and_latin_without_missing_glyphs(restored):
    language.set_language("zh-CN")
    assert _glyph_warnings("注意力权重 attention weights (n_q, n_k) −1.5") == []
    assert matplotlib.rcParams["font.family"] == ["sans-serif", language.CJK_FONT]


def test_text_follows_the_language(restored):
    assert language.text(en="rows sum to 1", zh="每行之和为 1") == "rows sum to 1"
    language.set_language("zh-CN")
    assert language.current_language() == "zh-CN"
    assert language.text(en="rows sum to 1", zh="每行之和为 1") == "每行之和为 1"


@pytest.mark.parametrize("bad", ["zh", "fr", "", None, 1])
def test_an_unknown_language_is_named(bad, restored):
    with pytest.raises(ValueError, match="language should be one of"):
        language.set_language(bad)


def test_a_missing_font_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(language.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install zhplot"):
        language.cjk_font_path()


def test_the_chinese_pronoun_example_has_the_same_weights_with_chinese_words(restored):
    from course_utils.widgets.explorer import pronoun_example, round_example, weight_matrix

    english, english_round = pronoun_example(), round_example()
    language.set_language("zh-CN")
    chinese, chinese_round = pronoun_example(), round_example()
    assert "".join(chinese.tokens) == "这只小猫追着那个球因为它很好动"
    assert "".join(chinese_round.tokens).endswith("它很圆")
    for ours, theirs in [(english, chinese), (english_round, chinese_round)]:
        for causal in (False, True):
            assert torch.equal(weight_matrix(ours, causal=causal),
                               weight_matrix(theirs, causal=causal))
    it = chinese.tokens.index("它")
    assert chinese.default_query == it
    row = weight_matrix(chinese)[it]
    assert chinese.tokens[int(row.argmax())] == "小猫"
    causal_row = weight_matrix(chinese, causal=True)[it]
    assert (causal_row[it + 1:] == 0).all() and (causal_row[:it + 1] > 0).all()
