"""The schematic diagrams draw, carry their labels and shapes, reject bad sizes, and close;
in the Chinese edition they draw Chinese words, every glyph found."""

from __future__ import annotations

import io
import re
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.language import set_language  # noqa: E402
from course_utils.views import diagrams as diagrams_module  # noqa: E402
from course_utils.views.diagrams import multi_head_flow, relay_vs_all_pairs, single_head_flow  # noqa: E402


def texts(fig) -> str:
    """Every piece of text in the figure (titles and annotations), joined."""
    fig.canvas.draw()  # the figure must actually render
    return "\n".join(t.get_text() for ax in fig.axes for t in [ax.title, *ax.texts])


@pytest.fixture(autouse=True)
def no_figure_left_open():
    before = plt.get_fignums()
    yield
    left_open = [number for number in plt.get_fignums() if number not in before]
    for number in left_open:
        plt.close(number)
    assert not left_open, "a test left a figure open"


def test_relay_vs_all_pairs_draws_the_chain_and_every_link():
    fig = relay_vs_all_pairs(seq_len=5)
    text = texts(fig)
    assert "after 4 hand-overs" in text and "in 1 step" in text
    relay, links = fig.axes
    assert len(links.lines) == 5 * 5 - 1, "one grey link per (query, key) pair but the red one"
    assert sum(t.get_text().startswith("$h_") for t in relay.texts) == 5
    plt.close(fig)


def test_single_head_flow_labels_every_step_with_shapes():
    fig = single_head_flow()
    text = texts(fig)
    for label in ("X", "Q = X W_Q", "K = X W_K", "V = X W_V", "scores = QKᵀ / √d_k",
                  "softmax", "weights", "output = weights V", "(seq_len, d_model)",
                  "(seq_len, d_k)", "(seq_len, d_v)", "(seq_len, seq_len)"):
        assert label in text, label
    plt.close(fig)


def test_single_head_flow_shows_an_examples_sizes():
    fig = single_head_flow(seq_len=3, d_model=4, d_k=2, d_v=5)
    text = texts(fig)
    assert all(shape in text for shape in ("(3, 4)", "(3, 2)", "(3, 5)", "(3, 3)", "(4, 5)"))
    plt.close(fig)


def test_multi_head_flow_labels_split_heads_concatenate_and_w_o():
    fig = multi_head_flow(num_heads=8, seq_len=10, d_model=64, shown_heads=3)
    text = texts(fig)
    for label in ("split the features into 8 heads", "(batch, 8, 10, 8)", "head 1", "head 2",
                  "head 8", "⋮", "concatenate", "(batch, 10, 64)", "W_O", "(64, 64)"):
        assert label in text, label
    assert "head 3" not in text
    plt.close(fig)


def test_multi_head_flow_symbolic_and_without_batch():
    fig = multi_head_flow(num_heads="num_heads", batch_size=None, shown_heads=2)
    text = texts(fig)
    assert "(num_heads, seq_len, d_k)" in text and "num_heads·d_k" in text
    assert "batch" not in text
    plt.close(fig)
    fig = multi_head_flow(num_heads=2, d_model=8, shown_heads=4)  # never more boxes than heads
    assert "head 2" in texts(fig) and "⋮" not in texts(fig)
    plt.close(fig)


@pytest.mark.parametrize(("draw", "error", "words"), [
    (lambda: relay_vs_all_pairs(seq_len=1), ValueError, "seq_len should be an int in 2..12"),
    (lambda: single_head_flow(d_k=0), ValueError, "d_k should be a positive int"),
    (lambda: single_head_flow(d_k=2.5), TypeError, "d_k should be an int or a name"),
    (lambda: multi_head_flow(shown_heads=0), ValueError, "shown_heads should be an int in 1..4"),
    (lambda: multi_head_flow(num_heads=True), TypeError, "num_heads should be an int or a name"),
])
def test_bad_sizes_are_named(draw, error, words):
    with pytest.raises(error, match=words):
        draw()


CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


@pytest.mark.parametrize("draw", [
    lambda: relay_vs_all_pairs(seq_len=6),
    single_head_flow,
    lambda: single_head_flow(seq_len=3, d_model=4, d_k=2, d_v=2),
    lambda: multi_head_flow(num_heads=8, seq_len=10, d_model=64, shown_heads=3),
    lambda: multi_head_flow(num_heads="num_heads", batch_size=None, shown_heads=2),
], ids=["relay", "single head", "single head, sizes", "multi head", "multi head, names"])
def test_in_chinese_every_diagram_draws_chinese_without_a_missing_glyph(draw, chinese, caplog):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = draw()
        text = texts(fig)  # renders: a missing glyph warns here
        fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    assert CJK.search(text), f"no Chinese in {text!r}"
    problems = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    assert not [p for p in problems if "missing from font" in p or "glyph" in p.lower()], problems


def test_in_chinese_the_words_are_chinese_and_the_shapes_unchanged(chinese):
    fig = relay_vs_all_pairs(seq_len=5)
    text = texts(fig)
    assert "4 次传递" in text and "1 步" in text and "hand-overs" not in text
    plt.close(fig)
    fig = single_head_flow(seq_len=3, d_model=4, d_k=2, d_v=5)
    text = texts(fig)
    assert "注意力权重" in text and "weights" not in text and "(3, 5)" in text
    plt.close(fig)
    fig = multi_head_flow(num_heads=8, seq_len=10, d_model=64, shown_heads=3)
    text = texts(fig)
    for label in ("把特征拆分成 8 个头", "头 1", "头 8", "拼接", "多头注意力", "(batch, 10, 64)"):
        assert label in text, label
    assert "head" not in text and "concatenate" not in text
    plt.close(fig)


BAD_INPUTS = [
    pytest.param(diagrams_module.relay_vs_all_pairs, (1,), {}, ValueError,
                 ("seq_len", "2..12", "got 1"), id="relay_vs_all_pairs: seq_len 1"),
    pytest.param(diagrams_module.relay_vs_all_pairs, (4.0,), {}, TypeError,
                 ("seq_len", "int", "float 4.0"), id="relay_vs_all_pairs: float"),
    pytest.param(diagrams_module.single_head_flow, (), {"seq_len": 0}, ValueError,
                 ("seq_len", "positive int", "got 0"), id="single_head_flow: zero"),
    pytest.param(diagrams_module.single_head_flow, (), {"d_k": 2.5}, TypeError,
                 ("d_k", "int or a name", "float"), id="single_head_flow: float"),
    pytest.param(diagrams_module.multi_head_flow, (), {"shown_heads": 9}, ValueError,
                 ("shown_heads", "1..4", "got 9"), id="multi_head_flow: too many shown"),
]
