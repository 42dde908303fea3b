"""The attention explorer's page: one row and one heatmap as HTML, the controls' words, and
the inlined front end (``static/view_common.js``, the helpers every view's script shares, then
``static/explorer.js``, and ``explorer.css``; package data: the page fetches nothing). Stable
CSS classes (``attn-explorer-*``) are what the tests read.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.resources
import itertools
import json
import math
from collections.abc import Sequence

import torch

from course_utils.checks import (
    require_instance,
    require_tensor,
)
from course_utils.language import N_, _
from course_utils.views.explorer_model import ExplorerState

_BAR_COLOUR = "#c0392b"
_BAR_TRACK_PX = 260


def render_row_html(state: ExplorerState, d_k: int, settings: str | None = None) -> str:
    """The query's row as labelled bars with their numbers, and a summary line.

    Stable hooks for tests: ``.attn-explorer-row`` carries ``data-query``,
    ``data-causal`` and ``data-scaled``; each key's number is the text of
    ``.attn-explorer-weight[data-key=j]``; ``.attn-explorer-max`` and
    ``.attn-explorer-entropy`` hold the summary numbers. The explorer's script draws
    the same structure. ``settings`` replaces the "causal mask (when on) · scale" note.

    Used in lesson 09.
    """
    require_instance("state", state, ExplorerState, "an ExplorerState (explorer_state())")
    e = html.escape
    query_word = e(state.tokens[state.query])
    scale = (_("scores ÷ √{d_k}").format(d_k=d_k) if state.scaled
             else _("scores not scaled"))
    # The mask is named only when it is on: lessons before 05 show no mask at all.
    mask = _("causal mask on · ") if state.causal else ""
    settings = f"{mask}{scale}" if settings is None else html.escape(settings)
    lines = [
        f'<div class="attn-explorer-row" data-query="{state.query}" '
        f'data-causal="{int(state.causal)}" data-scaled="{int(state.scaled)}" '
        'style="font-family: var(--font-stack--monospace, monospace); line-height: 1.5;">',
        "<div>" + _("query {word} · {settings}").format(word=f"<b>{query_word}</b>",
                                                         settings=settings) + "</div>",
    ]
    for key, (token, weight, hidden) in enumerate(
            zip(state.tokens, state.weights, state.masked, strict=True)):
        width = round(weight * _BAR_TRACK_PX)
        style = "font-weight: bold;" if key == state.argmax else ""
        if key == state.query:
            style += " text-decoration: underline;"
        note = _(" (masked)") if hidden else ""
        lines.append(
            '<div style="display: flex; align-items: center; gap: 8px;">'
            f'<span style="width: 80px; text-align: right; {style}">{e(token)}</span>'
            f'<span style="display: inline-block; width: {_BAR_TRACK_PX}px; height: 14px; '
            'background: #eee;">'
            f'<span style="display: block; width: {width}px; height: 14px; '
            f'background: {_BAR_COLOUR};"></span></span>'
            f'<span class="attn-explorer-weight" data-key="{key}" style="{style}">'
            f'{weight:.3f}</span><span style="color: #666;">{note}</span></div>'
        )
    summary = _("largest weight {0} on {1} · entropy {2} nats (uniform: {3})")
    lines.append("<div>" + summary.format(
        f'<b class="attn-explorer-max">{state.max_weight:.3f}</b>',
        f'<b>{e(state.tokens[state.argmax])}</b>',
        f'<b class="attn-explorer-entropy">{state.entropy:.3f}</b>',
        f'{math.log(len(state.tokens)):.3f}') + "</div></div>")
    return "\n".join(lines)


# A weight above this is written in white on its red cell, at or below it in black: where
# both keep WCAG AA's 4.5:1 contrast on rgba(192, 57, 43, w) over white (explorer.js agrees).
INK_SWITCH = 0.89


def render_heatmap_html(weights: torch.Tensor, tokens: Sequence[str], query: int) -> str:
    """All weights ``(n_q, n_k)`` as a table of shaded cells, the query's row outlined.

    Used in lesson 09.
    """
    require_tensor("weights", weights, "(n_q, n_k)")
    e = html.escape
    cell = "width: 34px; height: 22px; text-align: center; font-size: 10px; padding: 0;"
    header = "".join(
        f'<th style="{cell} writing-mode: vertical-rl; height: 56px;">{e(t)}</th>'
        for t in tokens
    )
    corner = _("query \\ key")
    rows = [f'<tr><th style="font-size: 10px;">{corner}</th>{header}</tr>']
    for i, (token, row) in enumerate(zip(tokens, weights.tolist(), strict=True)):
        outline = "outline: 2px solid #1f4e79;" if i == query else ""
        cells = "".join(
            f'<td style="{cell} background: rgba(192, 57, 43, {w:.3f}); '
            f'color: {"white" if w > INK_SWITCH else "black"};">{w:.2f}</td>'
            for w in row
        )
        css = ' class="attn-explorer-query-row"' if i == query else ""
        rows.append(f'<tr{css} style="{outline}"><th style="font-size: 10px; '
                    f'text-align: right;">{e(token)}</th>{cells}</tr>')
    return ('<table class="attn-explorer-heatmap" style="border-collapse: collapse; '
            'margin-top: 8px;">' + "".join(rows) + "</table>")


TOGGLES = ("causal", "scale", "temperature")
# Temperatures the slider offers: a grid in steps of sqrt(2) around 1.
TEMPERATURES = tuple(round(2 ** (k / 2), 4) for k in range(-4, 5))  # 0.25 ... 4
_DIGITS = 4  # numbers sent to the page are rounded to this many decimals
# Every word the page shows: the script reads them from the page's JSON ("ui"), in the
# course language, so one script serves every edition. "{0}", "{1}" ... are filled in by
# the script.
UI_TEXT = {
    "query": N_("query"),
    "key": N_("key"),
    "query_key": N_("query \\ key"),
    "on": N_("on"),
    "off": N_("off"),
    "causal": N_("causal mask: {0}"),
    "scale": N_("scale by 1/√{0}: {1}"),
    "temperature": N_("temperature "),
    "layer": N_("layer"),
    "head": N_("head"),
    "sentence": N_("sentence"),
    "layer_n": N_("layer {0}"),
    "head_n": N_("head {0}"),
    "layer_head": N_("layer {0}, head {1}"),
    "click_note": N_("Click a word to make it the query (hover to preview its row); hover a "
                     "key on the right or a column of the table to see which queries attend "
                     "to it."),
    "step_prev": N_("◀ step"),
    "step_next": N_("step ▶"),
    "computation": N_("The computation for the query:"),
    "step_names": [N_("scores q·k"), N_("× scale"), N_("mask"), N_("softmax"),
                   N_("weighted sum of values")],
    "edit": N_("Edit what the query looks for: "),
    "reset": N_("back to the hand-set vectors"),
    "editor_note": N_("The query of the clicked word, feature by feature. Rows you edit are "
                      "computed in the page (q·k, scale, mask, softmax); all other numbers come "
                      "from Python."),
    "edited_word": N_("\"{0}\""),
    "edited": N_(" (edited)"),
    "model_note": N_("Model view: every head of every layer (rows: layers, columns: heads). "
                     "Click a map to open it above."),
    "causal_on": N_("causal mask on"),
    "scaled": N_("scores ÷ √{0}"),
    "not_scaled": N_("scores not scaled"),
    "row_title": N_("query {0} · {1}"),
    "masked": N_(" (masked)"),
    "summary": N_("largest weight {0} on {1} · row entropy {2} nats (uniform: {3})"),
    "hover_note": N_("Hover a key to see its column: how much each query takes from it."),
    "column": N_("column of key {0}: the weight each query gives it"),
    "score_qk": N_("score q·k"),
    "mask": N_("mask"),
    "softmax_weight": N_("softmax weight"),
    "output": N_("output of {0} = Σ weight × value = [{1}]"),
    "step_on": N_("Step on to see the next column."),
}
# Shown where no script runs, and in the text/plain form of an explorer.
INTERACTIVE_NOTE = N_("(interactive in JupyterLab, Colab and on the course website)")


def ui_text() -> dict:
    """The page's words in the course language at the moment the explorer is shown.

    Used in lesson 09.
    """
    return {key: [str(m) for m in message] if isinstance(message, list) else str(message)
            for key, message in UI_TEXT.items()}

_counter = itertools.count()


def _rounded(tensor: torch.Tensor):
    return torch.round(tensor.double(), decimals=_DIGITS).tolist()


@functools.cache
def front_end(name: str) -> str:
    """The text of the package data file ``static/<name>`` (the page's script or styles).

    Used in lesson 09.
    """
    text = (importlib.resources.files("course_utils.views") / "static" / name).read_text(
        encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():  # it is inlined in HTML
        raise RuntimeError(f"static/{name} may not contain '</script' or '</style'")
    return text


def _explorer_page_html(payload: dict, fallback: str) -> str:
    """The output: a root element with a no-script fallback, the data, and the script."""
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha1(data.encode()).hexdigest()[:8]
    element_id = f"attn-explorer-{next(_counter)}-{digest}"
    data = data.replace("</", "<\\/")  # no "</script>" inside the data
    return (
        f'<div class="attn-explorer" id="{element_id}">'
        f'<style>{front_end("explorer.css")}</style>'
        f'<div class="attn-explorer-fallback">{fallback}<p><i>'
        + _(
            "This is the explorer's opening state as text: run the cell in JupyterLab or Colab, "
            "or read the lesson on the course website, to use it.")
        + '</i></p></div>'
        f'<script type="application/json" class="attn-explorer-data">{data}</script>'
        f'<script>{front_end("view_common.js")}</script>'
        f'<script>{front_end("explorer.js")}</script></div>'
    )
