"""The live view: the course's trained GPT running in the page, in JavaScript.

Type any text: the page tokenises it with the model's vocabulary, runs the model's forward
pass (``static/live.js``, the same arithmetic as :class:`course_utils.models.gpt.GPT`) and draws
every layer's and head's attention, the next-character probabilities, and a "continue"
button that samples a few characters. No kernel, no server, nothing downloaded: the
weights travel inside the output, as float16 numbers in base64, so one output works in
JupyterLab, in Colab's output frame and on the static site (why one self-contained HTML
output and not an ipywidget: see :mod:`course_utils.views.explorer`).

- logic: :func:`readable_text` (which characters the model reads: those its vocabulary
  knows, the last ``max_len`` of them), :func:`half_precision_copy` (the model as the page
  holds it, every weight rounded to float16) and :func:`export_weights` (those weights
  as base64 with their names and shapes);
- view: :class:`LiveModelView`, the HTML output (``static/live.js`` after the helpers every
  view shares, ``static/view_common.js``, and the arithmetic and start-up steps it shares with
  lesson 15's translator view, ``static/live_common.js``; ``static/live.css`` and the
  explorer's styles; all inlined), marked ``data-live-model``; in the page,
  ``window.courseLiveModel(element).run(text)`` returns ``{tokens, attentions, next}``;
- figure: :func:`live_view_figure`, the opening state as a picture for readers where no
  script runs.

Shapes: attention weights ``(num_layers, num_heads, n, n)`` for the ``n`` characters read;
next-character probabilities ``(vocab_size,)``.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

from course_utils.checks import (
    require_instance,
    require_int_in_range,
    require_positive_int,
    require_seed,
    require_temperature,
)
from course_utils.data.corpus import CharTokenizer
from course_utils.language import N_, _
from course_utils.models.gpt import GPT
from course_utils.views.explorer_html import front_end
from course_utils.views.half_weights import half_weights, require_half_weights, rounded_to_half

# ---------------------------------------------------------------------------------------
# Logic
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReadableText:
    """What the model reads of a text: ``ids`` (at most ``max_len``), and what it skips.

    ``unknown`` holds the characters the vocabulary lacks (skipped, in order), ``cropped``
    how many known characters came before the last ``max_len`` (not read).

    Used in lesson 12.
    """

    ids: tuple[int, ...]
    unknown: tuple[str, ...]
    cropped: int


def readable_text(tokenizer: CharTokenizer, text: str, max_len: int) -> ReadableText:
    """The characters of ``text`` the model reads, as the page chooses them: every character
    the vocabulary lacks is skipped (the page marks it), then the last ``max_len`` known
    characters are kept (a model with ``max_len`` position vectors sees no more).

    Used in lesson 12.
    """
    require_instance("tokenizer", tokenizer, CharTokenizer,
                     "a course_utils.data.corpus.CharTokenizer")
    require_instance("text", text, str, "a str")
    require_positive_int("max_len", max_len)
    known = [char for char in text if char in tokenizer.chars]
    unknown = tuple(char for char in text if char not in tokenizer.chars)
    kept = known[-max_len:]
    return ReadableText(tuple(tokenizer.encode("".join(kept))), unknown, len(known) - len(kept))


def _require_gpt(model) -> GPT:
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    return require_half_weights(model)


def half_precision_copy(model: GPT) -> GPT:
    """A copy of ``model`` whose every weight is rounded to float16 (computing in float32):
    the model exactly as the page holds it.

    Used in lesson 12.
    """
    return rounded_to_half(_require_gpt(model))


def export_weights(model: GPT) -> dict:
    """The model for the page: its sizes, and every weight as little-endian float16 in one
    base64 string, in the order of ``tensors`` (name and shape of each, as ``state_dict``).

    Used in lesson 12.
    """
    model = _require_gpt(model)
    block = model.blocks[0]
    if not isinstance(block.ffn.activation, nn.GELU) or block.ffn.activation.approximate != "none":
        raise ValueError(_("model should use the exact GELU (GPT's default): the page computes it"))
    config = {
        "vocab_size": model.vocab_size, "max_len": model.max_len,
        "d_model": model.token_embedding.embedding_dim, "num_heads": block.self_attn.num_heads,
        "num_layers": model.num_layers, "d_ff": block.ffn.linear1.out_features,
        "eps": model.final_norm.eps,
    }
    for layer in model.blocks:
        if (layer.norm1.eps, layer.norm2.eps) != (config["eps"], config["eps"]):
            raise ValueError(_("model's LayerNorms should share one eps, as GPT builds them"))
    return {"config": config, **half_weights(model)}


# ---------------------------------------------------------------------------------------
# The view
# ---------------------------------------------------------------------------------------

# Every word the page shows, read by live.js from the page's JSON ("ui") in the course
# language; "{0}", "{1}" ... are filled in by the script.
UI_TEXT = {
    "text_label": N_("Type any text: the model reads it character by character."),
    "layer": N_("layer"),
    "head": N_("head"),
    "layer_n": N_("layer {0}"),
    "head_n": N_("head {0}"),
    "layer_head": N_("layer {0}, head {1}"),
    "continue": N_("continue ▶ {0} characters"),
    "continue_note": N_("Each press samples {0} characters at temperature {1}, one at a time, "
                        "from the model's next-character probabilities (seeded: the same "
                        "presses give the same text)."),
    "unknown_note": N_("Characters marked like {0} are not in the model's vocabulary ({1} "
                       "characters): it skips them."),
    "cropped_note": N_("The model sees at most {0} characters: it reads the last {0}; the {1} "
                       "greyed before them are not read."),
    "empty_note": N_("Type at least one character the model knows."),
    "click_note": N_("Click a character to read its row of weights (by default the last one: "
                     "it predicts the next character)."),
    "heatmap_note": N_("Rows: queries (the character reading), columns: keys. The causal mask "
                       "hides every key to the right of its query (grey): no weight falls on "
                       "the future."),
    "query_key": N_("query \\ key"),
    "row_title": N_("query {0} · {1}"),
    "masked": N_(" (masked)"),
    "summary": N_("largest weight {0} on {1} · row entropy {2} nats (uniform over its {3} "
                  "keys: {4})"),
    "next_title": N_("Next character after {0}: the top {1} of {2}"),
    "model_note": N_("Every head of every layer (rows: layers, columns: heads). Click a map to "
                     "open it."),
}
INTERACTIVE_NOTE = N_("(interactive in JupyterLab, Colab and on the course website)")
TOP_SHOWN = 10  # next-character probabilities listed
_counter = itertools.count()


def ui_text() -> dict:
    """The page's words in the course language at the moment the view is shown.

    Used in lesson 12.
    """
    return {key: str(message) for key, message in UI_TEXT.items()}


@dataclass(frozen=True)
class LiveState:
    """What the view shows for a text: the characters read, every head's weights
    ``(num_layers, num_heads, n, n)`` and the next-character probabilities ``(vocab_size,)``
    (None when no character is read), with what was skipped (see ``ReadableText``).

    Used in lesson 12.
    """

    tokens: tuple[str, ...]
    attentions: torch.Tensor | None
    next_probabilities: torch.Tensor | None
    unknown: tuple[str, ...]
    cropped: int


def shown_character(char: str) -> str:
    """``char`` as the page shows it: space, newline and tab as visible signs.

    Used in lesson 12.
    """
    require_instance("char", char, str, "a str")
    if len(char) != 1:
        raise ValueError(_("char should be one character, got {char} ({count} characters)")
                         .format(char=repr(char), count=len(char)))
    return {" ": "␣", "\n": "↵", "\t": "⇥"}.get(char, char)


class LiveModelView:
    """The trained ``model`` running in the page: type a text, read every head's attention
    and the next-character probabilities, press "continue" to sample.

    ``tokenizer`` is the model's :class:`~course_utils.data.corpus.CharTokenizer`; ``text`` the
    opening text; ``layer`` and ``head`` the head opened first. "continue" samples
    ``continue_tokens`` characters at ``temperature`` (0 = greedy) with a generator seeded
    by ``seed`` in the page. Display it by making it the last expression of a cell;
    :meth:`state` gives the numbers of a text as the page computes them (from the float16
    weights) and :func:`live_view_figure` the opening state as a picture.

    Used in lesson 12.
    """

    def __init__(self, model: GPT, tokenizer: CharTokenizer, text: str = "", layer: int = 0,
                 head: int = 0, continue_tokens: int = 8, temperature: float = 0.8,
                 seed: int = 0):
        self.model = half_precision_copy(model)
        self.tokenizer = require_instance("tokenizer", tokenizer, CharTokenizer,
                                          "a course_utils.data.corpus.CharTokenizer")
        if tokenizer.vocab_size != model.vocab_size:
            raise ValueError(_("tokenizer has {characters} characters but the model "
                               "vocab_size={vocab_size}: pass the model's own tokenizer")
                             .format(characters=tokenizer.vocab_size,
                                     vocab_size=model.vocab_size))
        self.text = require_instance("text", text, str, "a str")
        config = export_weights(self.model)["config"]
        self.layer = require_int_in_range("layer", layer, 0, config["num_layers"] - 1)
        self.head = require_int_in_range("head", head, 0, config["num_heads"] - 1)
        self.continue_tokens = require_positive_int("continue_tokens", continue_tokens)
        self.temperature = require_temperature("temperature", temperature)
        self.seed = require_seed("seed", seed)

    def state(self, text: str | None = None) -> LiveState:
        """The view's numbers for ``text`` (default: the opening text), computed by the
        course's GPT with the page's float16 weights."""
        text = self.text if text is None else require_instance("text", text, str, "a str")
        read = readable_text(self.tokenizer, text, self.model.max_len)
        tokens = tuple(self.tokenizer.decode(list(read.ids)))
        if not read.ids:
            return LiveState(tokens, None, None, read.unknown, read.cropped)
        with torch.no_grad():
            logits, weights = self.model(torch.tensor([read.ids]), return_weights=True)
        return LiveState(tokens, weights[0], torch.softmax(logits[0, -1], dim=-1),
                         read.unknown, read.cropped)

    def payload(self) -> dict:
        """Everything the page needs, as JSON-ready data: the model and the settings."""
        model = export_weights(self.model)
        model.pop("bytes")
        return {"model": model, "vocab": list(self.tokenizer.chars), "ui": ui_text(),
                "text": self.text, "top": TOP_SHOWN,
                "initial": {"layer": self.layer, "head": self.head},
                "sampling": {"tokens": self.continue_tokens, "temperature": self.temperature,
                             "seed": self.seed}}

    def _fallback_html(self) -> str:
        """The opening state as text, for readers where no script runs."""
        state, e = self.state(), html.escape
        lines = [f"<p><b>{e(''.join(map(shown_character, state.tokens)))}</b></p>"]
        if state.next_probabilities is not None:
            top = torch.topk(state.next_probabilities, min(TOP_SHOWN, self.model.vocab_size))
            title = UI_TEXT["next_title"].format(
                e(shown_character(state.tokens[-1])), len(top.indices), self.model.vocab_size)
            items = "".join(
                f"<li>{e(shown_character(self.tokenizer.chars[index]))} {p:.3f}</li>"
                for p, index in zip(top.values.tolist(), top.indices.tolist(), strict=True))
            lines.append(f"<p>{title}</p><ol>{items}</ol>")
        return "".join(lines)

    def _repr_html_(self) -> str:
        data = json.dumps(self.payload(), separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False)
        element_id = f"attn-live-{next(_counter)}-{hashlib.sha1(data.encode()).hexdigest()[:8]}"
        data = data.replace("</", "<\\/")  # no "</script>" inside the data
        return (
            f'<div class="attn-live" data-live-model id="{element_id}">'
            f'<style>{front_end("explorer.css")}{front_end("live.css")}</style>'
            f'<div class="attn-live-fallback">{self._fallback_html()}<p><i>'
            + _("This is the live view's opening state as text: run the cell in JupyterLab or "
                "Colab, or read the lesson on the course website, to type your own text.")
            + '</i></p></div>'
            f'<script type="application/json" class="attn-live-data">{data}</script>'
            f'<script>{front_end("view_common.js")}</script>'
            f'<script>{front_end("live_common.js")}</script>'
            f'<script>{front_end("live.js")}</script></div>'
        )

    def __repr__(self) -> str:
        config = export_weights(self.model)["config"]
        return _("LiveModelView(GPT of {num_layers} layers x {num_heads} heads, {vocab} "
                 "characters, text {text!r}) {interactive}").format(
            num_layers=config["num_layers"], num_heads=config["num_heads"],
            vocab=config["vocab_size"], text=self.text, interactive=INTERACTIVE_NOTE)


# ---------------------------------------------------------------------------------------
# Static figure
# ---------------------------------------------------------------------------------------


def live_view_figure(view: LiveModelView, text: str | None = None):
    """The view's state for ``text`` (default: its opening text) as a picture: the opened
    head's weights ``(n, n)`` (future keys blank) and the top next-character probabilities.
    Returns the matplotlib figure.

    Used in lesson 12.
    """
    require_instance("view", view, LiveModelView, "a LiveModelView")
    state = view.state(text)
    if state.attentions is None:
        raise ValueError(_("text should hold a character the model knows, got {text}")
                         .format(text=repr(text)))
    shown = [shown_character(char) for char in state.tokens]
    n = len(shown)
    weights = state.attentions[view.layer, view.head].numpy()  # (n, n)
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    fig, (heat, bars) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained",
                                     gridspec_kw={"width_ratios": [1.3, 1]})
    image = heat.imshow(np.ma.masked_where(future, weights), cmap="Reds", vmin=0.0, vmax=1.0)
    heat.set_xticks(range(n), labels=shown, fontsize=7)
    heat.set_yticks(range(n), labels=shown, fontsize=7)
    heat.set_xlabel(_("key"))
    heat.set_ylabel(_("query"))
    heat.set_title(UI_TEXT["layer_head"].format(view.layer, view.head), fontsize=10)
    fig.colorbar(image, ax=heat, shrink=0.8)
    top = torch.topk(state.next_probabilities, min(TOP_SHOWN, view.model.vocab_size))
    labels = [shown_character(view.tokenizer.chars[i]) for i in top.indices.tolist()]
    bars.barh(range(len(labels)), top.values.numpy(), color="#c0392b")
    bars.set_yticks(range(len(labels)), labels=labels)
    bars.invert_yaxis()
    bars.set_xlim(0, 1)
    bars.set_xlabel(_("probability"))
    bars.set_title(UI_TEXT["next_title"].format(shown[-1], len(labels), view.model.vocab_size),
                   fontsize=10)
    return fig
