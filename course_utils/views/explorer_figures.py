"""Static pictures of the attention explorer, for readers on GitHub or nbviewer where no
script runs: ``explorer_figure()`` (a hand-set example's opening state) and
``model_view_figure()`` (one layer and head of a real model).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from course_utils.language import _
from course_utils.views.explorer_html import UI_TEXT
from course_utils.views.explorer_model import (
    AttentionExample,
    explorer_state,
    pronoun_example,
    require_attentions,
    weight_matrix,
)


def explorer_figure(example: AttentionExample | None = None, query: int | str | None = None,
                    causal: bool = False, scaled: bool = True, temperature: float = 1.0):
    """The explorer's state as a picture: the query's row as bars, and all weights
    ``(n_q, n_k)`` with that row outlined. Returns the matplotlib figure.

    Used in lessons 02, 03, 05 and 09.
    """
    example = pronoun_example() if example is None else example
    state = explorer_state(example, query, causal=causal, scaled=scaled, temperature=temperature)
    matrix = weight_matrix(example, causal=causal, scaled=scaled, temperature=temperature)
    n = len(state.tokens)
    positions = range(n)

    fig, (bars, heat) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained",
                                     gridspec_kw={"width_ratios": [1.2, 1]})
    colours = ["#c0392b" if key == state.argmax else "#e6a39a" for key in positions]
    bars.bar(positions, state.weights, color=colours)
    for key, weight in enumerate(state.weights):
        bars.text(key, weight + 0.01, f"{weight:.2f}", ha="center", va="bottom", fontsize=9)
    bars.set_xticks(positions, labels=state.tokens, rotation=45, ha="right")
    bars.set_ylim(0, 1.08)
    bars.set_ylabel(_("attention weight"))
    settings = (_("causal mask on, ") if causal else "") + (
        f"÷√{example.d_k}" if scaled else _("no scaling"))
    if temperature != 1.0:
        settings = _("{settings}, T = {temperature:g}").format(settings=settings,
                                                               temperature=temperature)
    word = state.tokens[state.query]
    bars.set_title(_("query \"{word}\" ({settings})").format(word=word, settings=settings),
                   fontsize=10)

    image = heat.imshow(matrix.numpy(), cmap="Reds", vmin=0.0, vmax=1.0)
    heat.set_xticks(positions, labels=state.tokens, rotation=90)
    heat.set_yticks(positions, labels=state.tokens)
    heat.set_xlabel(_("key"))
    heat.set_ylabel(_("query"))
    heat.add_patch(Rectangle((-0.5, state.query - 0.5), n, 1, fill=False,
                             edgecolor="#1f4e79", linewidth=2.5))
    heat.set_title(_("all rows; the query's row outlined"),
                   fontsize=10)
    fig.colorbar(image, ax=heat, shrink=0.8)
    return fig


def model_view_figure(tokens: Sequence[str], attentions: torch.Tensor, layer: int = 0,
                      head: int = 0):
    """Every head of every layer as a small map (rows: layers, columns: heads), the
    selected one outlined: the model view's opening state as a picture.

    Used in lessons 09 and 10.
    """
    tokens, attentions = require_attentions(tokens, attentions)
    num_layers, num_heads = attentions.shape[:2]
    fig, axes = plt.subplots(num_layers, num_heads, squeeze=False, layout="constrained",
                             figsize=(1.3 * num_heads + 0.6, 1.3 * num_layers + 0.4))
    for (row, column), axis in zip(itertools.product(range(num_layers), range(num_heads)),
                                   axes.flat, strict=True):
        axis.imshow(attentions[row, column].numpy(), cmap="Reds", vmin=0.0, vmax=1.0)
        axis.set_xticks([])
        axis.set_yticks([])
        if row == layer and column == head:
            for side in axis.spines.values():
                side.set_edgecolor("#1f4e79")
                side.set_linewidth(3)
        if row == 0:
            axis.set_title(UI_TEXT["head_n"].format(column), fontsize=8)
        if column == 0:
            axis.set_ylabel(UI_TEXT["layer_n"].format(row), fontsize=8)
    fig.suptitle(_("attention maps: every head of every layer (query rows, key columns)"),
                 fontsize=9)
    return fig
