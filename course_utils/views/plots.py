"""One plotting contract for attention weights, used by every lesson.

``show_heatmaps`` takes a matrix ``(n_q, n_k)``, a stack ``(heads, n_q, n_k)`` or a grid
``(rows, cols, n_q, n_k)`` (e.g. layers × heads) and draws one heatmap per matrix. NaN and
±inf (what a buggy softmax produces) get a colour of their own and a legend entry, and the
colour scale is set by the finite values only, so a panel with NaN is never drawn blank.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Patch

from course_utils.language import N_, Message, _

# Write the numbers into the cells only while they stay readable.
_MAX_ANNOTATED_CELLS = 100
# The least space between two upright key labels; closer ones are turned on their side.
_LABEL_GAP_POINTS = 2.0
# Cells holding NaN or ±inf: a colour no sequential colour map of the course uses.
NON_FINITE_COLOUR = "#3b7dd8"


# The axes' default names, in the course language when the figure is drawn.
KEY_LABEL, QUERY_LABEL = N_("key"), N_("query")


def _as_grid(matrices) -> torch.Tensor:
    grid = torch.as_tensor(matrices).detach().float().cpu()
    if grid.dim() == 2:
        return grid[None, None]
    if grid.dim() == 3:
        return grid[None]
    if grid.dim() == 4:
        return grid
    raise ValueError(
        _(
            "show_heatmaps expects (n_q, n_k), (heads, n_q, n_k) or (rows, cols, n_q, n_k), got "
            "shape {grid_shape}"
        ).format(grid_shape=tuple(grid.shape))
    )


def _turn_touching_key_labels(fig, axes) -> None:
    """Key labels stay upright (short ones, two CJK characters or a word, are hard to read on
    their side) unless two neighbours touch once the figure is laid out: then every panel's
    key labels turn to 90°. Measured on the drawn labels, after constrained layout has sized
    the panels, in whatever font the figure uses."""
    fig.draw_without_rendering()
    for ax in axes.flat:
        boxes = [label.get_window_extent() for label in ax.get_xticklabels()
                 if label.get_visible() and label.get_text()]
        gap = _LABEL_GAP_POINTS * fig.dpi / 72
        if any(left.x1 + gap > right.x0 for left, right in itertools.pairwise(boxes)):
            for panel in axes.flat:
                panel.tick_params(axis="x", labelrotation=90)
            return


def show_heatmaps(
    matrices,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    xlabel: str | Message = KEY_LABEL,
    ylabel: str | Message = QUERY_LABEL,
    cmap: str = "Reds",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    annotate: bool | None = None,
    cell_size: float = 0.6,
):
    """Draw attention weights with token labels and one shared colour bar; return the figure.

    ``titles`` names the panels in reading order. ``annotate`` writes each value in its cell
    (default: when a panel has at most 100 cells). The colour limits come from the finite
    values (``vmax`` defaults to their maximum); NaN and ±inf cells are drawn in
    ``NON_FINITE_COLOUR`` with a legend entry.

    Used in lessons 01, 02, 04, 05, 07, 08 and 10.
    """
    grid = _as_grid(matrices)
    rows, cols, n_q, n_k = grid.shape
    for name, labels, size in (("xlabels", xlabels, n_k), ("ylabels", ylabels, n_q)):
        if labels is not None and len(labels) != size:
            raise ValueError(_(
                "{name} should have {size} entries, got {n_labels}"
            ).format(name=name, size=size, n_labels=len(labels)))
    if titles is not None and len(titles) != rows * cols:
        raise ValueError(_(
            "titles should have {expected} entries, got {n_titles}"
        ).format(expected=rows * cols, n_titles=len(titles)))
    if annotate is None:
        annotate = n_q * n_k <= _MAX_ANNOTATED_CELLS
    finite = grid.isfinite()
    vmin, vmax = _colour_limits(grid[finite], vmin, vmax)
    colours = plt.get_cmap(cmap).with_extremes(bad=NON_FINITE_COLOUR)

    panel_w = min(max(n_k * cell_size, 3.0), 9.0 / cols)
    panel_h = min(max(n_q * cell_size, 2.6), 9.0 / cols * n_q / max(n_k, 1) + 0.6)
    fig, axes = plt.subplots(
        rows, cols, figsize=(panel_w * cols + 1.2, panel_h * rows + 0.4),
        squeeze=False, sharex=True, sharey=True, layout="constrained",
    )
    for index, ax in enumerate(axes.flat):
        r, c = divmod(index, cols)
        panel = grid[r, c].numpy()
        image = ax.imshow(np.ma.masked_invalid(panel), cmap=colours, vmin=vmin, vmax=vmax)
        if titles is not None:
            ax.set_title(titles[index], fontsize=10)
        if xlabels is not None:
            ax.set_xticks(range(n_k), labels=xlabels)
        if ylabels is not None:
            ax.set_yticks(range(n_q), labels=ylabels)
        if r == rows - 1:
            ax.set_xlabel(str(xlabel))
        if c == 0:
            ax.set_ylabel(str(ylabel))
        if annotate:
            threshold = (vmax + vmin) / 2
            for i in range(n_q):
                for j in range(n_k):
                    value = float(panel[i, j])
                    light = not np.isfinite(value) or value > threshold
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                            color="white" if light else "black")
    fig.colorbar(image, ax=axes, shrink=0.8)
    if not finite.all():
        label = "NaN" if not grid.isinf().any() else ("inf" if not grid.isnan().any()
                                                      else _("NaN or inf"))
        fig.legend(handles=[Patch(color=NON_FINITE_COLOUR, label=label)], loc="outside lower "
                   "right", fontsize=9, frameon=False)
    if xlabels is not None:
        _turn_touching_key_labels(fig, axes)
    return fig


def _colour_limits(finite_values: torch.Tensor, vmin, vmax) -> tuple[float, float]:
    """Finite colour limits: the given ones, else from the finite values, never vmin == vmax."""
    low = float(finite_values.min()) if finite_values.numel() else 0.0
    high = float(finite_values.max()) if finite_values.numel() else 1.0
    vmin = low if vmin is None else float(vmin)
    vmax = high if vmax is None else float(vmax)
    if not vmax > vmin:  # all values equal (or limits given the wrong way round)
        vmax = vmin + 1.0
    return vmin, vmax
