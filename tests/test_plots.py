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
from course_utils.plots import NON_FINITE_COLOUR, show_heatmaps  # noqa: E402


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
    boxes = [label.get_window_extent() for label in labels]
    assert all(left.x1 < right.x0 for left, right in itertools.pairwise(boxes))
    plt.close(fig)


def test_labels_too_wide_for_their_cells_are_turned():
    words = ["representations", "bidirectional", "transformers", "attention", "heads"]
    fig = show_heatmaps(torch.rand(5, 5), xlabels=words)
    assert {label.get_rotation() for label in _key_labels(fig)} == {90}
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
