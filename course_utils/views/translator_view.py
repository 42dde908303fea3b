"""The translator view: lesson 15's trained translator running in the page, in JavaScript.

Type an English number in words: the page cuts it into the model's source tokens, runs the
encoder once, then decodes greedily (``static/translator.js``, the same arithmetic as
:class:`course_utils.models.translator.Translator`), shows the Chinese numerals it writes
and, for each character written, its cross-attention row over the English words, in any
decoder layer and head. No kernel, no server, nothing downloaded: the weights travel inside
the output as float16 in base64 (:mod:`course_utils.views.half_weights`), as in lesson 12's
live view (:mod:`course_utils.views.live_view`), whose layer arithmetic and start-up steps the
page shares (``static/live_common.js``); the text and DOM helpers every view shares come first
(``static/view_common.js``).

- logic: :func:`readable_words` (which tokens the translator reads: the words and marks its
  vocabulary knows, the first ``max_src_len`` of them) and :func:`export_translator` (its
  sizes and its float16 weights with their names and shapes);
- view: :class:`TranslatorView`, the HTML output, marked ``data-live-translator``; in the
  page, ``window.courseLiveModel(element).run(text)`` returns ``{tokens, output,
  crossAttentions}``;
- figure: :func:`translator_view_figure`, the opening state as a picture for readers where
  no script runs.

Shapes: cross-attention weights ``(num_layers, num_heads, n_out, n_in)`` for the ``n_in``
source tokens read and the ``n_out`` characters written (the end token not counted).
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
import re
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.font_manager import FontProperties
from torch import nn

from course_utils.checks import require_instance, require_int_in_range, require_positive_int
from course_utils.data.number_words import SOURCE_WORDS
from course_utils.language import N_, _, edition_font_path
from course_utils.models.translator import (
    BOS,
    EOS,
    PAD,
    SOURCE_VOCAB,
    TARGET_VOCAB,
    Translator,
    source_batch,
)
from course_utils.views.explorer_html import front_end
from course_utils.views.half_weights import half_weights, require_half_weights, rounded_to_half
from course_utils.views.live_view import INTERACTIVE_NOTE

# ---------------------------------------------------------------------------------------
# Logic
# ---------------------------------------------------------------------------------------

# On the lower-cased text: words, the marks "-" and ",", and any other run of visible
# characters (a digit, "&"...), which the page marks as unknown. The first two kinds are
# what tokens_of_text reads (course_utils.data.number_words); translator.js uses the same.
WORD_PATTERN = re.compile(r"[a-z]+|[,-]|[^\sa-z,-]+")


@dataclass(frozen=True)
class ReadableWords:
    """What the translator reads of a text: ``tokens`` (at most ``max_src_len`` source
    tokens), ``unknown`` (the tokens its vocabulary lacks, skipped, in order) and
    ``cropped`` (how many known tokens came after the first ``max_src_len``, not read).

    Used in lesson 15.
    """

    tokens: tuple[str, ...]
    unknown: tuple[str, ...]
    cropped: int


def readable_words(text: str, max_src_len: int) -> ReadableWords:
    """The source tokens of ``text`` the translator reads, as the page chooses them: the
    lower-cased text cut by :data:`WORD_PATTERN`; a token outside the vocabulary is skipped
    (the page marks it); then the first ``max_src_len`` known tokens are kept (a model with
    ``max_src_len`` source positions reads no more).

    Used in lesson 15.
    """
    require_instance("text", text, str, "a str")
    require_positive_int("max_src_len", max_src_len)
    found = WORD_PATTERN.findall(text.lower())
    known = [token for token in found if token in SOURCE_WORDS]
    return ReadableWords(tuple(known[:max_src_len]),
                         tuple(token for token in found if token not in SOURCE_WORDS),
                         max(0, len(known) - max_src_len))


def _require_translator(model) -> Translator:
    require_instance("model", model, Translator, "a course_utils.models.translator.Translator")
    return require_half_weights(model)


def export_translator(model: Translator) -> dict:
    """The translator for the page: its sizes (``config``) and every weight as little-endian
    float16 in one base64 string, in the order of ``tensors`` (name and shape of each, as
    ``state_dict``).

    Used in lesson 15.
    """
    model = _require_translator(model)
    blocks = [*model.encoder, *model.decoder]
    if not all(isinstance(block.ffn.activation, nn.ReLU) for block in blocks):
        raise ValueError(_("model's blocks should use ReLU (the blocks' default): the page "
                           "computes it"))
    norms = [module for module in model.modules() if isinstance(module, nn.LayerNorm)]
    if len({norm.eps for norm in norms}) != 1:
        raise ValueError(_("model's LayerNorms should share one eps, as Translator builds them"))
    config = {
        "d_model": model.d_model, "num_heads": model.num_heads, "num_layers": model.num_layers,
        "d_ff": model.decoder[0].ffn.linear1.out_features, "max_src_len": model.max_src_len,
        "max_tgt_len": model.max_len, "eps": norms[0].eps,
        "pad": PAD, "bos": BOS, "eos": EOS,
    }
    return {"config": config, **half_weights(model)}


# ---------------------------------------------------------------------------------------
# The view
# ---------------------------------------------------------------------------------------

# Every word the page shows, read by translator.js from the page's JSON ("ui") in the course
# language; "{0}", "{1}" ... are filled in by the script.
UI_TEXT = {
    "text_label": N_("Type an English number in words (1 to 100,000,000), such as \"three "
                     "thousand and five\":"),
    "layer": N_("layer"),
    "head": N_("head"),
    "layer_head": N_("layer {0}, head {1}"),
    "reads": N_("It reads:"),
    "writes": N_("It writes:"),
    "unknown_note": N_("Words marked like {0} are not in the translator's vocabulary ({1} "
                       "words and marks): it skips them and translates the rest."),
    "cropped_note": N_("The translator reads at most {0} words: the {1} greyed after them "
                       "are not read."),
    "empty_note": N_("Type at least one English number word, such as \"five\"."),
    "unfinished_note": N_("It wrote {0} characters without writing the end token: the most it "
                          "may write."),
    "nothing_written": N_("(nothing: it wrote the end token first)"),
    "pick_note": N_("Pick a character it wrote (click it, or Tab to it and press Enter) to "
                    "read its cross-attention row over the English words."),
    "heatmap_note": N_("Rows: the characters written (queries, from the decoder); columns: the "
                       "English words read (keys and values, from the encoder). No causal "
                       "mask: every character may read every word."),
    "character_word": N_("character \\ word"),
    "row_title": N_("{0} reads · {1}"),
    "summary": N_("largest weight {0} on {1} · row entropy {2} nats (uniform over its {3} "
                  "words: {4})"),
}
_counter = itertools.count()


@dataclass(frozen=True)
class TranslatorState:
    """What the view shows for a text: the source ``tokens`` read, the ``output`` written
    (one target token per greedy step before the end token), every decoder layer's and
    head's cross-attention while writing it ``(num_layers, num_heads, n_out, n_in)`` (None
    when nothing is read), whether it wrote the end token (``finished``), and what was
    skipped (see ``ReadableWords``).

    Used in lesson 15.
    """

    tokens: tuple[str, ...]
    output: tuple[str, ...]
    cross_attentions: torch.Tensor | None
    finished: bool
    unknown: tuple[str, ...]
    cropped: int


class TranslatorView:
    """The trained translator ``model`` running in the page: type English number words, read
    the Chinese numerals it writes and the cross-attention row of each character.

    ``text`` is the opening text; ``layer`` and ``head`` the decoder layer and head opened
    first. Display it by making it the last expression of a cell; :meth:`state` gives the
    numbers of a text as the page computes them (from the float16 weights) and
    :func:`translator_view_figure` the opening state as a picture.

    Used in lesson 15.
    """

    def __init__(self, model: Translator, text: str = "twelve thousand, three hundred",
                 layer: int = 0, head: int = 0):
        self.model = rounded_to_half(_require_translator(model))
        self.text = require_instance("text", text, str, "a str")
        self.layer = require_int_in_range("layer", layer, 0, self.model.num_layers - 1)
        self.head = require_int_in_range("head", head, 0, self.model.num_heads - 1)

    def state(self, text: str | None = None) -> TranslatorState:
        """The view's numbers for ``text`` (default: the opening text), computed by the
        course's Translator (greedy, with its KV cache) with the page's float16 weights."""
        text = self.text if text is None else require_instance("text", text, str, "a str")
        read = readable_words(text, self.model.max_src_len)
        if not read.tokens:
            return TranslatorState((), (), None, False, read.unknown, read.cropped)
        src, mask = source_batch([" ".join(read.tokens)])  # the model's own tokenisation
        out, weights = self.model.translate(src, mask)  # (1, 1 + steps), (1, L, H, steps, n)
        written = out[0, 1:].tolist()
        finished = EOS in written
        output = tuple(TARGET_VOCAB[i] for i in written[:written.index(EOS)
                                                        if finished else len(written)])
        return TranslatorState(read.tokens, output, weights[0, :, :, :len(output)], finished,
                               read.unknown, read.cropped)

    def payload(self) -> dict:
        """Everything the page needs, as JSON-ready data: the model and the settings."""
        model = export_translator(self.model)
        model.pop("bytes")
        return {"model": model, "source_vocab": list(SOURCE_VOCAB),
                "target_vocab": list(TARGET_VOCAB),
                "ui": {key: str(message) for key, message in UI_TEXT.items()},
                "text": self.text, "initial": {"layer": self.layer, "head": self.head}}

    def _fallback_html(self) -> str:
        """The opening state as text, for readers where no script runs."""
        state, e = self.state(), html.escape
        return (f"<p>{e(str(UI_TEXT['reads']))} <b>{e(' '.join(state.tokens))}</b></p>"
                f"<p>{e(str(UI_TEXT['writes']))} <b>{e(''.join(state.output))}</b></p>")

    def _repr_html_(self) -> str:
        data = json.dumps(self.payload(), separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False)
        digest = hashlib.sha1(data.encode()).hexdigest()[:8]
        element_id = f"attn-translator-{next(_counter)}-{digest}"
        data = data.replace("</", "<\\/")  # no "</script>" inside the data
        styles = "".join(front_end(name) for name in ("explorer.css", "live.css",
                                                       "translator.css"))
        return (
            f'<div class="attn-live attn-translator" data-live-translator id="{element_id}">'
            f'<style>{styles}</style>'
            f'<div class="attn-live-fallback">{self._fallback_html()}<p><i>'
            + _("This is the translator view's opening state as text: run the cell in "
                "JupyterLab or Colab, or read the lesson on the course website, to type your "
                "own number.")
            + '</i></p></div>'
            f'<script type="application/json" class="attn-live-data">{data}</script>'
            f'<script>{front_end("view_common.js")}</script>'
            f'<script>{front_end("live_common.js")}</script>'
            f'<script>{front_end("translator.js")}</script></div>'
        )

    def __repr__(self) -> str:
        return _("TranslatorView(translator of {num_layers} encoder and {num_layers} decoder "
                 "layers x {num_heads} heads, text {text!r}) {interactive}").format(
            num_layers=self.model.num_layers, num_heads=self.model.num_heads, text=self.text,
            interactive=INTERACTIVE_NOTE)


# ---------------------------------------------------------------------------------------
# Static figure
# ---------------------------------------------------------------------------------------


def _chinese_font() -> FontProperties | None:
    """The Chinese edition's figure font, for the characters written in either edition; None
    where its package is not installed (then matplotlib's default font draws them)."""
    try:
        return FontProperties(fname=edition_font_path("zh-CN"))
    except ModuleNotFoundError:
        return None


def translator_view_figure(view: TranslatorView, text: str | None = None):
    """The view's state for ``text`` (default: its opening text) as a picture: the opened
    layer's and head's cross-attention ``(n_out, n_in)``, one row per character written, one
    column per English token read. Returns the matplotlib figure.

    Used in lesson 15.
    """
    require_instance("view", view, TranslatorView, "a TranslatorView")
    state = view.state(text)
    if state.cross_attentions is None or not state.output:
        raise ValueError(_("text should be English number words the translator writes at least "
                           "one character for, got {text}").format(text=repr(text)))
    weights = state.cross_attentions[view.layer, view.head].numpy()  # (n_out, n_in)
    n_out, n_in = weights.shape
    # one size for every text: a notebook's stored "<Figure size ...>" must not depend on
    # how many characters a trained model happens to write
    fig, heat = plt.subplots(figsize=(9, 4.5), layout="constrained")
    image = heat.imshow(weights, cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
    heat.set_xticks(range(n_in), labels=state.tokens, rotation=45, ha="right", fontsize=8)
    heat.set_yticks(range(n_out), labels=state.output, fontproperties=_chinese_font())
    heat.set_xlabel(_("English word read (key)"))
    heat.set_ylabel(_("character written (query)"))
    heat.set_title(UI_TEXT["layer_head"].format(view.layer, view.head), fontsize=10)
    fig.colorbar(image, ax=heat, shrink=0.8)
    return fig
