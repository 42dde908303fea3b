"""The heatmap helper draws one panel per matrix, labelled, with values when small."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import itertools  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.language import use_edition_font  # noqa: E402
from course_utils.views.plots import NON_FINITE_COLOUR, show_heatmaps  # noqa: E402


def panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_single_matrix_has_labels_colour_bar_and_values():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = show_heatmaps(weights, xlabels=list("abcd"), ylabels=list("xyz"), titles=["t"])
    (ax,) = panels(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    assert len(fig.axes) == 2, "one panel and one colour bar"
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{w:.2f}" for w in weights.flatten())
    plt.close(fig)


@pytest.mark.parametrize(("shape", "grid"), [((4, 5, 5), (1, 4)), ((2, 3, 5, 5), (2, 3))])
def test_stacks_become_a_grid(shape, grid):
    fig = show_heatmaps(torch.rand(shape))
    assert len(panels(fig)) == grid[0] * grid[1]
    assert panels(fig)[0].get_subplotspec().get_gridspec().get_geometry() == grid
    plt.close(fig)


def _key_labels(fig):
    fig.canvas.draw()
    return panels(fig)[0].get_xticklabels()


def _gaps_between(labels) -> list[float]:
    boxes = [label.get_window_extent() for label in labels]
    return [right.x0 - left.x1 for left, right in itertools.pairwise(boxes)]


@pytest.mark.parametrize("words", [["那只", "小猫", "冲向", "那只", "铃铛"],
                                   ["the", "cat", "sat", "[PAD]", "on"]])
def test_short_key_labels_stand_upright_without_touching(words):
    """Rotated short labels are hard to read (two characters turned on their side); upright
    ones must still leave a gap between neighbours, measured on the drawn figure in the
    edition's own font."""
    with matplotlib.rc_context():
        use_edition_font("zh-CN")
        fig = show_heatmaps(torch.rand(5, 5), xlabels=words, ylabels=words)
        labels = _key_labels(fig)
    assert {label.get_rotation() for label in labels} == {0}
    assert min(_gaps_between(labels)) > 0
    plt.close(fig)


@pytest.mark.parametrize(("shape", "words"), [
    ((5, 5), ["representations", "bidirectional", "transformers", "attention", "heads"]),
    # Four panels shrink each cell once laid out: labels that fit one panel touch here.
    ((4, 12, 12), ["a", "B", "c", "D", "e", "F", "g", "H", "i", "J", "kk", "LL"]),
    ((4, 12, 12), "小猫 冲向 铃铛 它 十分 活泼 那只 小狗 跑 向 门 口".split()),
])
def test_labels_that_would_touch_are_turned(shape, words):
    with matplotlib.rc_context():
        use_edition_font("zh-CN")
        fig = show_heatmaps(torch.rand(shape), xlabels=words, ylabels=words)
        labels = _key_labels(fig)
    assert {label.get_rotation() for label in labels} == {90}
    plt.close(fig)


@pytest.mark.parametrize("shape", [(5, 5), (2, 6, 6), (4, 8, 8), (2, 3, 4, 4), (1, 20, 20)])
def test_upright_key_labels_never_touch(shape):
    """Whatever the grid, labels left upright keep a gap in every panel."""
    keys, queries = [f"k{i}" for i in range(shape[-1])], [f"q{i}" for i in range(shape[-2])]
    fig = show_heatmaps(torch.rand(shape), xlabels=keys, ylabels=queries)
    fig.canvas.draw()
    for ax in panels(fig):
        labels = [label for label in ax.get_xticklabels() if label.get_visible()]
        if labels and labels[0].get_rotation() == 0:
            assert min(_gaps_between(labels)) > 0, shape
    plt.close(fig)


def test_large_matrices_are_not_annotated():
    fig = show_heatmaps(torch.rand(20, 20))
    assert not panels(fig)[0].texts
    plt.close(fig)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"matrices": torch.rand(5)}, "got shape (5,)"),
        ({"matrices": torch.rand(3, 4), "xlabels": ["a"]}, "xlabels should have 4 entries, got 1"),
        ({"matrices": torch.rand(2, 3, 4), "titles": ["a"]}, "titles should have 2 entries"),
    ],
)
def test_bad_input_is_explained(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        show_heatmaps(**kwargs)


def _image(ax):
    (image,) = ax.get_images()
    return image


def test_nan_cells_get_their_own_colour_a_legend_and_finite_limits():
    weights = torch.softmax(torch.randn(2, 4, 4), dim=-1)
    weights[0, :, 2:] = float("nan")  # what a softmax over a row of -inf gives
    weights[1] = float("nan")  # a panel that is all NaN
    fig = show_heatmaps(weights)
    first, second = panels(fig)
    low, high = _image(first).get_clim()
    assert low == 0.0 and high == pytest.approx(float(weights[0, :, :2].max()))
    data = _image(first).get_array()
    assert data.mask[:, 2:].all() and not data.mask[:, :2].any(), "NaN cells are masked"
    bad = _image(first).get_cmap().get_bad()
    assert matplotlib.colors.same_color(bad, NON_FINITE_COLOUR)
    assert _image(second).get_array().mask.all()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["NaN"]
    assert "nan" in [t.get_text() for t in first.texts], "annotated NaN cells read 'nan'"
    plt.close(fig)


def test_inf_is_named_in_the_legend_and_finite_input_gets_no_legend():
    weights = torch.rand(3, 3)
    fig = show_heatmaps(weights)
    assert not fig.legends
    plt.close(fig)
    weights[0, 0] = float("inf")
    fig = show_heatmaps(weights)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["inf"]
    assert np.isfinite(_image(panels(fig)[0]).get_clim()).all()
    plt.close(fig)


@pytest.mark.parametrize("value", [0.0, 0.25, 1.0])
def test_all_equal_values_get_a_usable_colour_scale(value):
    fig = show_heatmaps(torch.full((2, 3, 3), value), vmin=None)
    low, high = _image(panels(fig)[0]).get_clim()
    assert np.isfinite([low, high]).all() and low == value and high > low
    plt.close(fig)


def test_all_nan_input_still_draws_with_finite_limits():
    fig = show_heatmaps(torch.full((3, 3), float("nan")))
    assert np.isfinite(_image(panels(fig)[0]).get_clim()).all()
    plt.close(fig)


BAD_INPUTS = [
    pytest.param(show_heatmaps, (torch.rand(2, 3, 3),), {"titles": ["one"]}, ValueError,
                 ("titles", "2 entries", "got 1"), id="show_heatmaps: titles too few"),
]
