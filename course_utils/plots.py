"""One plotting contract for attention weights, used by every lesson.

``show_heatmaps`` takes a matrix ``(n_q, n_k)``, a stack ``(heads, n_q, n_k)`` or a grid
``(rows, cols, n_q, n_k)`` (e.g. layers × heads) and draws one heatmap per matrix. NaN and
±inf (what a buggy softmax produces) get a colour of their own and a legend entry, and the
colour scale is set by the finite values only, so a panel with NaN is never drawn blank.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch

from course_utils.language import N_, Message, _
from course_utils.text_layout import display_width

# Write the numbers into the cells only while they stay readable.
_MAX_ANNOTATED_CELLS = 100
# A label's width in ems per display column (a Latin letter or half a CJK character), and the
# share of a cell it may fill before it is turned on its side.
_EM_PER_COLUMN, _UPRIGHT_SHARE = 0.55, 0.9
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
        "show_heatmaps expects (n_q, n_k), (heads, n_q, n_k) or (rows, cols, n_q, n_k), "
        f"got shape {tuple(grid.shape)}"
    )


def _key_label_rotation(labels: Sequence[str], cell_width_inches: float) -> int:
    """0 (upright) when every key label fits in its cell's width, else 90: short labels such
    as 小猫 or "cat" stay readable, long ones turn rather than overlap."""
    size = FontProperties(size=plt.rcParams["xtick.labelsize"]).get_size_in_points()
    points = size * _EM_PER_COLUMN * max(map(display_width, labels))
    return 0 if points <= _UPRIGHT_SHARE * cell_width_inches * 72 else 90


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
    """
    grid = _as_grid(matrices)
    rows, cols, n_q, n_k = grid.shape
    for name, labels, size in (("xlabels", xlabels, n_k), ("ylabels", ylabels, n_q)):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} should have {size} entries, got {len(labels)}")
    if titles is not None and len(titles) != rows * cols:
        raise ValueError(f"titles should have {rows * cols} entries, got {len(titles)}")
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
            ax.set_xticks(range(n_k), labels=xlabels,
                          rotation=_key_label_rotation(xlabels, panel_w / n_k))
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
