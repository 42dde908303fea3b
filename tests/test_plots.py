"""The heatmap helper draws one panel per matrix, labelled, with values when small."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.plots import show_heatmaps  # noqa: E402


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
