"""Schematic diagrams drawn in code (matplotlib): versioned, tested, translatable, no image files.

Each function draws one figure at notebook width and returns it (like ``show_heatmaps``):
in a notebook the figure shows below the cell; elsewhere, close it with ``plt.close(fig)``.
Sizes may be ints (the example's numbers) or strings (the course's names, the default), so
one diagram serves both the general rule and a concrete case.

- ``relay_vs_all_pairs``: an RNN relays information step by step; attention links every pair.
- ``single_head_flow``: X -> Q, K, V -> scores -> softmax -> weights -> output, with shapes.
- ``multi_head_flow``: project, split into heads, attend per head, concatenate, W_O.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from course_utils.checks import require_int_in_range
from course_utils.language import _, pgettext

_HIGHLIGHT = "tab:red"
_COLOURS = {"input": "#dbe9f6", "projection": "#fde9c9", "scores": "#f6d5d5",
            "output": "#d9f0d3", "plain": "#eeeeee"}


def _size(name: str, value) -> str:
    """A size as text: an int as itself, a string (a name such as ``"d_k"``) unchanged."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(_(
            "{name} should be an int or a name (str), got {kind}"
        ).format(name=name, kind=type(value).__name__))
    if isinstance(value, int) and value < 1:
        raise ValueError(_(
            "{name} should be a positive int, got {value}"
        ).format(name=name, value=value))
    return str(value)


_SUBSCRIPT_DIGITS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _plain(name: str, index: int) -> str:
    """``name`` with ``index`` as Unicode subscripts, e.g. "h₁₂": for a symbol inside a translated
    sentence (mathtext has no font fallback, so ``$h_{12}$`` there would lose a CJK script)."""
    return name + str(index).translate(_SUBSCRIPT_DIGITS)


def _shape(*sizes) -> str:
    return "(" + ", ".join(sizes) + ")"


def _box(ax, centre, title: str, shape: str | None = None, colour: str = "plain",
         width: float = 1.7, height: float = 0.8) -> None:
    x, y = centre
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.03,rounding_size=0.1",
                                facecolor=_COLOURS[colour], edgecolor="0.3", linewidth=1))
    if shape is None:
        ax.text(x, y, title, ha="center", va="center", fontsize=10)
    else:
        ax.text(x, y + 0.14, title, ha="center", va="center", fontsize=10)
        ax.text(x, y - 0.19, shape, ha="center", va="center", fontsize=8.5, color="0.25",
                family="monospace")


def _arrow(ax, start, end, label: str | None = None, colour: str = "0.35",
           label_offset=(0.0, 0.12), **text) -> None:
    ax.annotate("", xy=end, xytext=start,
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.3,
                            "shrinkA": 0, "shrinkB": 0})
    if label is not None:
        middle = ((start[0] + end[0]) / 2 + label_offset[0],
                  (start[1] + end[1]) / 2 + label_offset[1])
        ax.text(*middle, label, ha="center", va="bottom", fontsize=8.5, color=colour, **text)


def _canvas(width: float, height: float, figsize):
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def relay_vs_all_pairs(seq_len: int = 6):
    """Two panels: an RNN's chain of hidden states, and one attention layer's all-pairs links.

    ``seq_len`` (int, 2..12) tokens are drawn. Red marks how the first token reaches the last
    position: through ``seq_len - 1`` hand-overs in the RNN, one link in attention.

    Used in lesson 01.
    """
    require_int_in_range("seq_len", seq_len, 2, 12)
    fig, (relay, links) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    last = seq_len
    for ax in (relay, links):
        ax.set_xlim(0.3, seq_len + 0.7)
        ax.set_ylim(-0.6, 2.1)
        ax.axis("off")
        for t in range(1, seq_len + 1):
            ax.text(t, 0, f"$x_{{{t}}}$", ha="center", va="center", fontsize=11,
                    bbox={"boxstyle": "round", "facecolor": _COLOURS["input"]})

    for t in range(1, seq_len + 1):
        on_path = t == 1  # x_1 enters here and is relayed along the whole chain
        relay.text(t, 1.3, f"$h_{{{t}}}$", ha="center", va="center", fontsize=11,
                   bbox={"boxstyle": "circle", "facecolor": _COLOURS["projection"],
                         "edgecolor": _HIGHLIGHT if t == 1 or t == last else "0.3"})
        _arrow(relay, (t, 0.25), (t, 1.0), colour=_HIGHLIGHT if on_path else "0.6")
        if t > 1:
            _arrow(relay, (t - 0.72, 1.3), (t - 0.28, 1.3), colour=_HIGHLIGHT)
    relay.set_title(_("RNN: each step hands everything on to the next"), fontsize=11)
    relay.text((1 + seq_len) / 2, 1.85,
               _("{x} reaches {h} after {hand_overs} hand-overs").format(
                   x=_plain("x", 1), h=_plain("h", seq_len), hand_overs=seq_len - 1),
               ha="center", fontsize=10, color=_HIGHLIGHT)

    for i in range(1, seq_len + 1):
        links.text(i, 1.3, f"$y_{{{i}}}$", ha="center", va="center", fontsize=11,
                   bbox={"boxstyle": "circle", "facecolor": _COLOURS["output"],
                         "edgecolor": _HIGHLIGHT if i == last else "0.3"})
        for j in range(1, seq_len + 1):
            if (i, j) != (last, 1):
                links.plot([j, i], [0.25, 1.05], color="0.75", linewidth=0.8, zorder=0)
    _arrow(links, (1, 0.25), (last, 1.05), colour=_HIGHLIGHT)
    links.set_title(_("self-attention: every pair linked directly"), fontsize=11)
    links.text((1 + seq_len) / 2, 1.85,
               _("{x} reaches {y} in 1 step, at any distance").format(
                   x=_plain("x", 1), y=_plain("y", seq_len)),
               ha="center", fontsize=10, color=_HIGHLIGHT)
    return fig


def single_head_flow(seq_len="seq_len", d_model="d_model", d_k="d_k", d_v="d_v"):
    """One attention head as a data flow, every tensor labelled with its shape.

    X ``(seq_len, d_model)`` -> Q = X W_Q, K = X W_K ``(seq_len, d_k)``, V = X W_V
    ``(seq_len, d_v)`` -> scores = QKᵀ/√d_k ``(n_q, n_k)`` -> softmax over the keys ->
    weights ``(n_q, n_k)`` -> output = weights V ``(n_q, d_v)``. Pass ints to label the
    shapes with an example's sizes, or names (the default) for the general rule.

    Used in lesson 02.
    """
    n, d_model, d_k, d_v = (_size(name, value) for name, value in (
        ("seq_len", seq_len), ("d_model", d_model), ("d_k", d_k), ("d_v", d_v)))
    fig, ax = _canvas(14.0, 4.4, figsize=(10, 3.3))
    x, q, k, v = (1.2, 2.3), (4.6, 3.6), (4.6, 2.3), (4.6, 1.0)
    scores, weights, output = (8.1, 2.95), (11.9, 2.95), (11.9, 1.0)
    _box(ax, x, "X", _shape(n, d_model), "input", width=2.2)
    ax.text(x[0], 0.85, f"W_Q, W_K {_shape(d_model, d_k)}\nW_V {_shape(d_model, d_v)}",
            ha="center", va="center", fontsize=8.5, color="0.3")
    for name, centre, width in (("Q", q, d_k), ("K", k, d_k), ("V", v, d_v)):
        _box(ax, centre, f"{name} = X W_{name}", _shape(n, width), "projection", width=2.2)
        _arrow(ax, (x[0] + 1.1, x[1]), (centre[0] - 1.1, centre[1]))
    _box(ax, scores, _("scores = QKᵀ / √d_k"), _shape(n, n), "scores",
         width=2.6)
    _arrow(ax, (q[0] + 1.1, q[1]), (scores[0] - 1.3, scores[1] + 0.2))
    _arrow(ax, (k[0] + 1.1, k[1]), (scores[0] - 1.3, scores[1] - 0.2))
    _box(ax, weights, pgettext("figure", "weights"), _shape(n, n), "scores", width=2.6)
    ax.text(weights[0], weights[1] + 0.55, _("each row sums to 1"),
            ha="center", fontsize=8.5, color="0.3")
    _arrow(ax, (scores[0] + 1.3, scores[1]), (weights[0] - 1.3, weights[1]),
           label=_("softmax over\nthe keys"),
           label_offset=(0.0, 0.08))
    _box(ax, output, _("output = weights V"), _shape(n, d_v), "output",
         width=2.6)
    _arrow(ax, (weights[0], weights[1] - 0.4), (output[0], output[1] + 0.4))
    _arrow(ax, (v[0] + 1.1, v[1]), (output[0] - 1.3, output[1]),
           label=_("each output row: a weighted average of the rows of V"),
           label_offset=(0.0, 0.06))
    ax.set_title(_("One attention head: Attention(Q, K, V) = softmax(QKᵀ / √d_k) V"),
                 fontsize=11)
    return fig


def multi_head_flow(num_heads=4, seq_len="seq_len", d_model="d_model", d_k=None,
                    batch_size="batch", shown_heads: int = 3):
    """Multi-head attention as a data flow: project, split, attend per head, concatenate, W_O.

    Args:
        num_heads: number of heads h (an int, or a name such as ``"num_heads"``).
        seq_len, d_model: sizes of the input x ``(batch, seq_len, d_model)``; ints or names.
        d_k: width of one head; default ``d_model // num_heads`` when both are ints, else
            ``"d_k"``.
        batch_size: the batch axis as drawn (int or name); ``None`` draws one sequence
            without a batch axis.
        shown_heads: how many head boxes to draw (1..4); with more heads, the last box
            stands for head h and a "⋮" for those in between.

    Shapes: x and Q, K, V ``(batch, seq_len, d_model)`` -> split ``(batch, num_heads,
    seq_len, d_k)`` -> per head weights ``(batch, seq_len, seq_len)`` and output
    ``(batch, seq_len, d_k)`` -> concatenated ``(batch, seq_len, num_heads·d_k)`` ->
    output = concat W_O ``(batch, seq_len, d_model)``.

    Used in lesson 04.
    """
    h, n, d_model_text = (_size(name, value) for name, value in (
        ("num_heads", num_heads), ("seq_len", seq_len), ("d_model", d_model)))
    if d_k is None:
        both_ints = isinstance(num_heads, int) and isinstance(d_model, int)
        d_k = d_model // num_heads if both_ints else "d_k"
    d_k_text = _size("d_k", d_k)
    batch = [] if batch_size is None else [_size("batch_size", batch_size)]
    require_int_in_range("shown_heads", shown_heads, 1, 4)
    if isinstance(num_heads, int):
        shown_heads = min(shown_heads, num_heads)
    concat_width = (str(num_heads * d_k) if isinstance(num_heads, int) and isinstance(d_k, int)
                    else f"{h}·{d_k_text}")

    fig, ax = _canvas(14.4, 5.0, figsize=(10, 3.6))
    middle, w = 2.4, 2.3
    x, qkv, concat, output = (1.2, middle), (4.3, middle), (10.3, middle), (13.2, middle)
    _box(ax, x, "x", _shape(*batch, n, d_model_text), "input", width=w)
    _box(ax, qkv, "Q, K, V", _shape(*batch, n, d_model_text), "projection", width=w)
    _arrow(ax, (x[0] + w / 2, x[1]), (qkv[0] - w / 2, qkv[1]), label="W_Q, W_K, W_V",
           label_offset=(0.0, -0.75))
    ax.text(5.9, 4.6, _("split the features into {h} heads").format(h=h)
            + f"\n{_shape(*batch, h, n, d_k_text)}", ha="center", va="center", fontsize=9,
            color="0.25")

    ys = [middle + 1.4 - 2.8 * i / max(shown_heads - 1, 1) for i in range(shown_heads)]
    if shown_heads == 1:
        ys = [middle]
    labels = [_("head {number}").format(number=i + 1) for i in range(shown_heads)]
    more = not (isinstance(num_heads, int) and num_heads == shown_heads)
    if more and shown_heads > 1:
        labels[-1] = _("head {h}").format(h=h)
    for y, label in zip(ys, labels, strict=True):
        centre = (7.3, y)
        _box(ax, centre, _("{label}: attention").format(label=label),
             _shape(*batch, n, d_k_text), "scores",
             width=w, height=0.75)
        _arrow(ax, (qkv[0] + w / 2, qkv[1]), (centre[0] - w / 2, y), colour="0.5")
        _arrow(ax, (centre[0] + w / 2, y), (concat[0] - w / 2, concat[1]), colour="0.5")
    if more and shown_heads > 1:
        ax.text(7.3, (ys[-2] + ys[-1]) / 2, "⋮", ha="center", va="center", fontsize=14)
    ax.text(7.3, 0.25, _(
        "each head: softmax(Q_i K_iᵀ / √{d_k_text}) V_i, weights {shape}").format(
        d_k_text=d_k_text, shape=_shape(*batch, n, n)),
            ha="center", fontsize=8.5, color="0.35")
    _box(ax, concat, _("concatenate"), _shape(*batch, n, concat_width), "plain",
         width=w)
    _box(ax, output, _("output"), _shape(*batch, n, d_model_text), "output",
         width=w)
    _arrow(ax, (concat[0] + w / 2, concat[1]), (output[0] - w / 2, output[1]), label="W_O")
    ax.text(output[0], output[1] - 0.75, f"W_O {_shape(concat_width, d_model_text)}",
            ha="center", fontsize=8, color="0.35")
    ax.set_title(_("Multi-head attention: split, attend per head, concatenate, project with W_O"),
                 fontsize=11)
    return fig
