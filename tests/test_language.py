"""course_utils.language: message language and the CJK font for the Chinese edition."""

from __future__ import annotations

import warnings

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib import font_manager

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
    family = language.edition("zh-CN")["figure_font"]["family"]
    assert matplotlib.rcParams["font.family"] == ["sans-serif", family]


def test_switching_the_language_again_registers_the_font_once(restored):
    language.set_language("zh-CN")
    fonts = len(font_manager.fontManager.ttflist)
    for edition in ("en", "zh-CN", "en", "zh-CN"):
        language.set_language(edition)
    assert len(font_manager.fontManager.ttflist) == fonts


def test_the_editions_are_english_and_every_catalogue_found():
    assert language.available_languages() == ("en", "zh-CN")


def test_messages_follow_the_language_now_or_when_shown(restored):
    message = language.N_("query")  # made at import, shown later
    assert language._("query") == str(message) == f"{message}" == "query"
    language.set_language("zh-CN")
    assert language.current_language() == "zh-CN"
    assert language._("query") == str(message) == f"{message:>4}".strip() == "查询"
    assert language.in_english(message) == "query" and repr(message) == "N_('query')"
    assert language.translate("query", "en") == "query"


def test_placeholders_are_named_so_a_translation_may_move_them(restored):
    english = language._("head {head}'s weights (d_model={d_model}, {num_heads} heads)")
    language.set_language("zh-CN")
    chinese = language._("head {head}'s weights (d_model={d_model}, {num_heads} heads)")
    sizes = {"head": 2, "d_model": 8, "num_heads": 4}
    assert english.format(**sizes) == "head 2's weights (d_model=8, 4 heads)"
    assert chinese.format(**sizes) == "第 2 个头的权重（d_model=8，共 4 个头）"


def test_a_message_the_catalogue_lacks_shows_in_english(restored):
    language.set_language("zh-CN")
    assert language._("no such message") == "no such message"


def test_sentences_join_as_the_language_writes_them(restored):
    assert language.join_sentences(["One.", "Two."]) == "One. Two."
    language.set_language("zh-CN")
    assert language.join_sentences(["一。", "二。"]) == "一。二。"
    assert language.join_sentences([]) == ""


@pytest.mark.parametrize("bad", ["zh", "fr", "", None, 1])
def test_an_unknown_language_is_named(bad, restored):
    with pytest.raises(ValueError, match="language should be one of"):
        language.set_language(bad)


def test_a_missing_font_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(language.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install zhplot"):
        language.edition_font_path("zh-CN")


def test_an_editions_example_words_must_match_the_english_ones(restored, monkeypatch):
    english = ("the", "kitten")
    assert language.example_words("pronoun_sentence", english) == english
    language.set_language("zh-CN")
    monkeypatch.setitem(language.edition("zh-CN")["examples"], "two", ["一"])
    with pytest.raises(ValueError, match="应当有 2 个词"):
        language.example_words("two", english)
    assert language.example_words("not translated", english) == english


def test_the_chinese_pronoun_example_has_the_same_weights_with_chinese_words(restored):
    from course_utils.views.explorer_model import pronoun_example, round_example, weight_matrix

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


BAD_INPUTS = [
    pytest.param(language.set_language, ("zh",), {}, ValueError,
                 ("language", "'zh-CN'", "'zh'"), id="set_language: unknown"),
    pytest.param(language.require_language, (None,), {}, ValueError,
                 ("language", "'en'", "None"), id="require_language: None"),
    pytest.param(language.Message, (3,), {}, TypeError, ("message", "str", "int"),
                 id="Message: an int"),
    pytest.param(language.N_, (b"key",), {}, TypeError, ("message", "str", "bytes"),
                 id="N_: bytes"),
    pytest.param(language.translate, (3,), {}, TypeError, ("message", "str", "int 3"),
                 id="translate: an int"),
    pytest.param(language.translate, ("key", "fr"), {}, ValueError, ("language", "'fr'"),
                 id="translate: unknown language"),
    pytest.param(language.pgettext, ("figure", 3), {}, TypeError, ("message", "str", "int 3"),
                 id="pgettext: an int"),
    pytest.param(language.in_english, (3,), {}, TypeError, ("message", "N_(...)", "int 3"),
                 id="in_english: an int"),
    pytest.param(language.join_sentences, ("One. Two.",), {}, TypeError,
                 ("sentences", "list", "str"), id="join_sentences: one str"),
    pytest.param(language.example_words, (3, ("a",)), {}, TypeError, ("name", "str", "int 3"),
                 id="example_words: name an int"),
    pytest.param(language.edition_font_path, ("en",), {}, ValueError,
                 ("en edition", "figure_font"), id="edition_font_path: no font"),
    pytest.param(language.use_edition_font, ("xx",), {}, ValueError, ("language", "'xx'"),
                 id="use_edition_font: unknown"),
]
