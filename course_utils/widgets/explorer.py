"""The attention explorer: pick a word as the query and read its row of weights.

Everything is computed here, in Python, with the course's own attention; the browser only
switches between precomputed states. That is what lets one explorer run in JupyterLab,
in Colab's output frame and on the static course website, where no kernel exists.

Why self-contained HTML and not an ipywidget (the choice, on the evidence):

- an ipywidget needs a kernel: on the static site and on GitHub a widget output is only
  ``VBox(children=...)``, and its state saved in the notebook would still need the
  widget manager's JavaScript, which the usual embedders load from a CDN;
- a custom widget (front-end code shipped with the package) needs a front-end extension
  in JupyterLab, a different loading path in Colab (ipywidgets 7.7.1 there, 8 locally)
  and state embedding for the site: three code paths to test instead of one;
- an HTML output with its data as JSON and an inline script is shown the same way by
  JupyterLab (outputs produced in the session are trusted, so the script runs), by
  Colab (each output is its own frame that runs scripts) and by the site (myst-nb
  copies text/html outputs into the page). It loads nothing from anywhere, and a click
  is handled in the page with no round trip to a kernel: the browser tests measure
  a few milliseconds.

The price: the front end cannot ask Python for a state that was not precomputed. So the
explorer precomputes every combination its controls reach (causal mask x scale x a grid
of temperatures, per prepared sentence; every layer and head of a model), and a new
sentence needs a kernel: build an ``AttentionExample`` and display a new explorer. The
one exception: the reader may edit the hand-set query of a word in the page; that row
alone is recomputed by the script (q·k, scale, mask, softmax, entropy, weighted sum);
node's test runner checks those functions against this module's numbers
(tests/test_explorer_js.py) and the browser tests check the page.

Three layers, so that everything but the clicking is testable without a browser:

- logic: ``AttentionExample`` (tokens, queries, keys, values), ``pronoun_example()`` (the
  default sentence), ``weight_matrix()``, ``explorer_state()`` and ``computation_steps()``;
- view: ``AttentionExplorer`` (a hand-set example) and ``ModelExplorer`` (attention maps
  ``(num_layers, num_heads, n, n)`` of a real model): HTML + JSON + the script and
  styles in ``static/explorer.js`` and ``static/explorer.css`` (package data, read with
  ``importlib.resources`` and inlined: the page fetches nothing), with stable CSS
  classes (``attn-explorer-*``) that tests read;
- figures: ``explorer_figure()`` and ``model_view_figure()``, static pictures for readers
  on GitHub or nbviewer, where no script runs.

Weights are ``(n_q, n_k)``; a row is one query's weights over all keys.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.resources
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from course_utils.attention import scaled_dot_product_attention
from course_utils.checks import (
    require_generator,
    require_instance,
    require_int_in_range,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_tensor,
)
from course_utils.language import N_, _, example_words, join_sentences
from course_utils.masks import causal_mask
from course_utils.scaling import row_entropy

# ---------------------------------------------------------------------------------------
# Logic
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AttentionExample:
    """A sentence with one query, one key and one value vector per token.

    ``queries`` and ``keys`` are ``(seq_len, d_k)``; ``values`` is ``(seq_len, d_v)`` and
    defaults to the keys (what each word *is*, so the output of a query reads as a mix
    of the properties of the words it attends to). ``feature_names`` name the
    dimensions when they have names. ``default_query`` is the token the explorer opens
    on; ``source`` says honestly where the vectors come from.
    """

    tokens: tuple[str, ...]
    queries: torch.Tensor
    keys: torch.Tensor
    default_query: int
    source: str
    values: torch.Tensor | None = None
    feature_names: tuple[str, ...] | None = None

    def __post_init__(self):
        n = len(self.tokens)
        if n == 0:
            raise ValueError("tokens should hold at least one token, got none")
        for name in ("queries", "keys", "values"):
            value = getattr(self, name)
            if name == "values" and value is None:
                continue
            notation = "(seq_len={n}, d_v)" if name == "values" else "(seq_len={n}, d_k)"
            if not isinstance(value, torch.Tensor) or value.dim() != 2 or len(value) != n:
                got = (f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                shape = notation.format(n=n)
                raise ValueError(f"{name} should be a tensor {shape}, got {got}")
            if not torch.isfinite(value).all():
                raise ValueError(f"{name} should hold finite numbers, got NaN or inf")
        if self.queries.shape != self.keys.shape:
            queries, keys = tuple(self.queries.shape), tuple(self.keys.shape)
            raise ValueError(f"queries {queries} and keys {keys} should both be (seq_len, d_k)")
        if not 0 <= self.default_query < n:
            raise ValueError(
                f"default_query should be in 0..{n - 1}, got {self.default_query}")

    @property
    def d_k(self) -> int:
        return self.keys.shape[-1]

    @property
    def value_vectors(self) -> torch.Tensor:
        """The values ``(seq_len, d_v)``: ``values`` if given, else the keys."""
        return self.keys if self.values is None else self.values

    def index(self, query: int | str) -> int:
        """The position of ``query``: an index, or a word that occurs exactly once."""
        if isinstance(query, bool) or not isinstance(query, int | str):
            raise TypeError(f"query should be a token index or a word, got {query!r}")
        if isinstance(query, str):
            positions = [i for i, token in enumerate(self.tokens) if token == query]
            if len(positions) != 1:
                found = "does not occur" if not positions else f"occurs at {positions}"
                raise ValueError(
                    f"query {query!r} {found} in {list(self.tokens)}; pass its index instead")
            return positions[0]
        if not 0 <= query < len(self.tokens):
            raise ValueError(f"query index should be in 0..{len(self.tokens) - 1}, got {query}")
        return query


# The default example's hand-set vectors. Each dimension of a key is a named property a
# word can have; each dimension of a query is how strongly the word looks for that property.
PRONOUN_FEATURES = (
    "determiner", "noun", "animate", "inanimate", "action", "connective", "pronoun", "quality",
)
# (token, what the word is -> its key, what the word looks for -> its query)
PRONOUN_SENTENCE = (
    ("the", {"determiner": 1}, {"noun": 2}),
    ("kitten", {"noun": 1, "animate": 1}, {"determiner": 1, "action": 2}),
    ("chased", {"action": 1}, {"noun": 2, "animate": 1}),
    ("the", {"determiner": 1}, {"noun": 2}),
    ("ball", {"noun": 1, "inanimate": 1}, {"determiner": 1, "action": 2}),
    ("because", {"connective": 1}, {"action": 2}),
    ("it", {"pronoun": 1}, {"noun": 2, "animate": 5.5, "quality": 1.5}),
    ("was", {"action": 1}, {"pronoun": 2, "quality": 2}),
    ("playful", {"quality": 1}, {"pronoun": 2, "animate": 2}),
)
# The same sentence ending in "round": a quality of balls, not of kittens. The words keep
# their vectors, so "it" still looks for an animate noun: one query per word cannot read
# the end of the sentence (lesson 09's first exercise changes what "it" looks for).
ROUND_SENTENCE = PRONOUN_SENTENCE[:-1] + (
    ("round", {"quality": 1}, {"pronoun": 2, "inanimate": 2}),
)
def in_course_language(table: Sequence[tuple[str, Mapping[str, float], Mapping[str, float]]],
                       example: str):
    """``table`` with its words in the current edition's (``language.example_words``): an
    edition gives every word a word of its own language in the same role, so every edition
    computes the same weights."""
    words = example_words(example, tuple(row[0] for row in table))
    return tuple((word, is_, wants) for word, (_word, is_, wants) in
                 zip(words, table, strict=True))


def _feature_vector(strengths: Mapping[str, float], features: Sequence[str]) -> list[float]:
    if not isinstance(strengths, Mapping):
        got = type(strengths).__name__
        raise TypeError(f"feature strengths should be a dict feature -> number, got {got}")
    unknown = set(strengths) - set(features)
    if unknown:
        raise ValueError(
            f"unknown features {sorted(unknown)}; expected some of {tuple(features)}")
    return [float(strengths.get(name, 0.0)) for name in features]


def example_from_table(table: Sequence[tuple[str, Mapping[str, float], Mapping[str, float]]],
                       features: Sequence[str] = PRONOUN_FEATURES,
                       default_query: int | str = 0,
                       source: str = "set by hand") -> AttentionExample:
    """An example from rows ``(word, what it is, what it looks for)``, as in
    ``PRONOUN_SENTENCE``: each row's two dicts map feature names to strengths and become
    the word's key and query (d_k = len(features)). Values are the keys.
    """
    if not isinstance(table, Sequence) or not table:
        raise ValueError("table should be a non-empty list of (word, is, looks_for) rows")
    for row in table:
        if not (isinstance(row, tuple | list) and len(row) == 3 and isinstance(row[0], str)):
            raise ValueError("each row should be (word, {feature: strength}, "
                             f"{{feature: strength}}), got {row!r}")
    tokens = tuple(row[0] for row in table)
    keys = torch.tensor([_feature_vector(row[1], features) for row in table])
    queries = torch.tensor([_feature_vector(row[2], features) for row in table])
    draft = AttentionExample(tokens, queries, keys, 0, source, feature_names=tuple(features))
    return AttentionExample(tokens, queries, keys, draft.index(default_query), source,
                            feature_names=tuple(features))


def pronoun_example() -> AttentionExample:
    """"the kitten chased the ball because it was playful", opening on "it".

    Where the numbers come from: **they are set by hand, not learned.** Each key is a
    vector over eight named properties (``PRONOUN_FEATURES``: determiner, noun, animate,
    ...), 1 where the word has the property. Each query says how strongly the word looks
    for each property (``PRONOUN_SENTENCE``): "it" looks hard for an *animate* noun (5.5),
    a little for any noun (2) and for a quality (1.5), since "playful" describes
    whatever "it" is. The score of query i and key j is their dot product, exactly as in
    a trained model; only the vectors are written by hand, so that every weight has a
    readable reason. A trained model learns such vectors from data, spread over many
    more dimensions and far less tidy. The values are the keys.

    With d_k = 8 and the 1/sqrt(8) scale, "it" puts about 0.59 of its weight on "kitten".
    """
    return example_from_table(
        in_course_language(PRONOUN_SENTENCE, "pronoun_sentence"), default_query=6,
        source=_(
            "set by hand: keys mark what each word is, queries what it looks for (see "
            "pronoun_example's docstring)"),
    )


def round_example() -> AttentionExample:
    """"the kitten chased the ball because it was round": same vectors, last word changed."""
    return example_from_table(in_course_language(ROUND_SENTENCE, "round_sentence"),
                              default_query=6, source=_("set by hand, as pronoun_example"))


def _scale(example: AttentionExample, scaled: bool, temperature: float) -> float:
    require_positive_number("temperature", temperature)
    return (1.0 / math.sqrt(example.d_k) if scaled else 1.0) / float(temperature)


def weight_matrix(example: AttentionExample, causal: bool = False, scaled: bool = True,
                  temperature: float = 1.0) -> torch.Tensor:
    """All attention weights ``(n_q, n_k)`` of ``example``.

    ``causal`` hides every key to the right of its query; ``scaled`` divides the scores
    by sqrt(d_k) (off means a scale of 1); ``temperature`` T divides them once more
    (T > 1 flattens the rows, T < 1 sharpens them).
    """
    require_instance("example", example, AttentionExample, "an AttentionExample")
    return _attend(example, causal, scaled, temperature)[1]


def _attend(example: AttentionExample, causal: bool, scaled: bool,
            temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(example.tokens)
    mask = causal_mask(n) if causal else None
    output, weights = scaled_dot_product_attention(
        example.queries, example.keys, example.value_vectors, mask=mask,
        scale=_scale(example, scaled, temperature),
    )
    return output, weights  # (n_q, d_v), (n_q, n_k)


@dataclass(frozen=True)
class ExplorerState:
    """What the explorer shows: one query's row of weights and its summary numbers."""

    tokens: tuple[str, ...]
    query: int
    weights: tuple[float, ...]
    causal: bool
    scaled: bool
    temperature: float = 1.0

    @property
    def masked(self) -> tuple[bool, ...]:
        """True for each key the query may not see (right of it, with the causal mask)."""
        return tuple(self.causal and key > self.query for key in range(len(self.tokens)))

    @property
    def max_weight(self) -> float:
        return max(self.weights)

    @property
    def argmax(self) -> int:
        return max(range(len(self.weights)), key=self.weights.__getitem__)

    @property
    def entropy(self) -> float:
        """Entropy of the row in nats: log(n) when uniform, 0 when one-hot."""
        return float(row_entropy(torch.tensor([self.weights]))[0]) + 0.0  # + 0.0: never -0.0


def explorer_state(example: AttentionExample, query: int | str | None = None,
                   causal: bool = False, scaled: bool = True,
                   temperature: float = 1.0) -> ExplorerState:
    """The explorer's display for ``query`` (default: ``example.default_query``)."""
    require_instance("example", example, AttentionExample, "an AttentionExample")
    index = example.default_query if query is None else example.index(query)
    matrix = weight_matrix(example, causal=causal, scaled=scaled, temperature=temperature)
    return ExplorerState(tokens=example.tokens, query=index,
                         weights=tuple(matrix[index].tolist()), causal=bool(causal),
                         scaled=bool(scaled), temperature=float(temperature))


@dataclass(frozen=True)
class ComputationSteps:
    """One query's way through attention, each step ``(n_k,)`` except the output ``(d_v,)``.

    scores = q·kⱼ → scaled = scores × scale (1/√d_k, or 1 when off, then ÷ T) →
    masked (-inf right of the query with the causal mask) → weights = softmax →
    output = Σⱼ weightⱼ vⱼ.
    """

    query: int
    scale: float
    scores: tuple[float, ...]
    scaled: tuple[float, ...]
    masked: tuple[float, ...]
    weights: tuple[float, ...]
    output: tuple[float, ...]


def computation_steps(example: AttentionExample, query: int | str | None = None,
                      causal: bool = False, scaled: bool = True,
                      temperature: float = 1.0) -> ComputationSteps:
    """Every intermediate number of one query's row, step by step (see ComputationSteps)."""
    require_instance("example", example, AttentionExample, "an AttentionExample")
    index = example.default_query if query is None else example.index(query)
    scale = _scale(example, scaled, temperature)
    scores = example.keys @ example.queries[index]  # (n_k,)
    scaled_scores = scores * scale
    hidden = torch.arange(len(example.tokens)) > index if causal else torch.zeros(
        len(example.tokens), dtype=torch.bool)
    masked = scaled_scores.masked_fill(hidden, float("-inf"))
    weights = torch.softmax(masked, dim=-1)  # (n_k,)
    output = weights @ example.value_vectors  # (d_v,)
    return ComputationSteps(index, scale, *(tuple(t.tolist()) for t in (
        scores, scaled_scores, masked, weights, output)))


# ---------------------------------------------------------------------------------------
# HTML rendering of one row (the explorer's page shows it before its script runs, and on
# GitHub, where no script runs, it is what a reader sees)
# ---------------------------------------------------------------------------------------

_BAR_COLOUR = "#c0392b"
_BAR_TRACK_PX = 260


def render_row_html(state: ExplorerState, d_k: int, settings: str | None = None) -> str:
    """The query's row as labelled bars with their numbers, and a summary line.

    Stable hooks for tests: ``.attn-explorer-row`` carries ``data-query``,
    ``data-causal`` and ``data-scaled``; each key's number is the text of
    ``.attn-explorer-weight[data-key=j]``; ``.attn-explorer-max`` and
    ``.attn-explorer-entropy`` hold the summary numbers. The explorer's script draws
    the same structure. ``settings`` replaces the "causal mask (when on) · scale" note.
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
            f'{weight:.3f}</span><span style="color: #888;">{note}</span></div>'
        )
    summary = _("largest weight {0} on {1} · entropy {2} nats (uniform: {3})")
    lines.append("<div>" + summary.format(
        f'<b class="attn-explorer-max">{state.max_weight:.3f}</b>',
        f'<b>{e(state.tokens[state.argmax])}</b>',
        f'<b class="attn-explorer-entropy">{state.entropy:.3f}</b>',
        f'{math.log(len(state.tokens)):.3f}') + "</div></div>")
    return "\n".join(lines)


def render_heatmap_html(weights: torch.Tensor, tokens: Sequence[str], query: int) -> str:
    """All weights ``(n_q, n_k)`` as a table of shaded cells, the query's row outlined."""
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
            f'color: {"white" if w > 0.5 else "black"};">{w:.2f}</td>'
            for w in row
        )
        css = ' class="attn-explorer-query-row"' if i == query else ""
        rows.append(f'<tr{css} style="{outline}"><th style="font-size: 10px; '
                    f'text-align: right;">{e(token)}</th>{cells}</tr>')
    return ('<table class="attn-explorer-heatmap" style="border-collapse: collapse; '
            'margin-top: 8px;">' + "".join(rows) + "</table>")


# ---------------------------------------------------------------------------------------
# The explorers (HTML + JSON + script; see the module docstring for why)
# ---------------------------------------------------------------------------------------

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
_INTERACTIVE = N_("(interactive in JupyterLab, Colab and on the course website)")


def ui_text() -> dict:
    """The page's words in the course language at the moment the explorer is shown."""
    return {key: [str(m) for m in message] if isinstance(message, list) else str(message)
            for key, message in UI_TEXT.items()}

_counter = itertools.count()


def _rounded(tensor: torch.Tensor):
    return torch.round(tensor.double(), decimals=_DIGITS).tolist()


@functools.cache
def _front_end(name: str) -> str:
    """The text of the package data file ``static/<name>`` (the page's script or styles)."""
    text = (importlib.resources.files("course_utils.widgets") / "static" / name).read_text(
        encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():  # it is inlined in HTML
        raise RuntimeError(f"static/{name} may not contain '</script' or '</style'")
    return text


def _explorer_html(payload: dict, fallback: str) -> str:
    """The output: a root element with a no-script fallback, the data, and the script."""
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha1(data.encode()).hexdigest()[:8]
    element_id = f"attn-explorer-{next(_counter)}-{digest}"
    data = data.replace("</", "<\\/")  # no "</script>" inside the data
    return (
        f'<div class="attn-explorer" id="{element_id}">'
        f'<style>{_front_end("explorer.css")}</style>'
        f'<div class="attn-explorer-fallback">{fallback}<p><i>'
        + _(
            "This is the explorer's opening state as text: run the cell in JupyterLab or Colab, "
            "or read the lesson on the course website, to use it.")
        + '</i></p></div>'
        f'<script type="application/json" class="attn-explorer-data">{data}</script>'
        f'<script>{_front_end("explorer.js")}</script></div>'
    )


def _require_toggles(toggles) -> tuple[str, ...]:
    if isinstance(toggles, str) or not isinstance(toggles, Sequence) or (
            set(toggles) - set(TOGGLES)):
        raise ValueError(f"toggles should be a subset of {TOGGLES}, got {toggles!r}")
    return tuple(toggles)


class AttentionExplorer:
    """Click a word to make it the query; switch the causal mask, the 1/sqrt(d_k) scale
    and the temperature; step through the computation; hover a key to see its column.

    ``example`` is an ``AttentionExample`` (default: ``pronoun_example()``);
    ``sentences`` optionally adds prepared examples the reader can switch to (the first
    shown is ``example``). ``toggles`` picks which of ``"causal"``, ``"scale"`` and
    ``"temperature"`` are shown. Display it by making it the last expression of a cell.
    ``state`` is the opening state.
    """

    def __init__(self, example: AttentionExample | None = None,
                 query: int | str | None = None, causal: bool = False, scaled: bool = True,
                 toggles: Sequence[str] = TOGGLES, heatmap: bool = True,
                 temperature: float = 1.0, steps: bool = True,
                 sentences: Sequence[AttentionExample] = ()):
        self.example = pronoun_example() if example is None else example
        examples = [self.example, *sentences]
        for item in examples:
            require_instance("example", item, AttentionExample, "an AttentionExample")
        require_one_of("temperature (a value of the slider)", temperature, TEMPERATURES)
        self.toggles = _require_toggles(toggles)
        self.examples = tuple(examples)
        self.heatmap, self.steps = bool(heatmap), bool(steps)
        query = self.example.default_query if query is None else self.example.index(query)
        self.state = explorer_state(self.example, query, bool(causal), bool(scaled),
                                    temperature)

    def payload(self) -> dict:
        """Everything the page needs, as JSON-ready data (every state precomputed)."""
        sentences = []
        for number, example in enumerate(self.examples):
            states = {}
            for causal, scaled in itertools.product((False, True), repeat=2):
                states[f"c{int(causal)}s{int(scaled)}"] = [
                    self._state_payload(example, causal, scaled, t) for t in TEMPERATURES]
            sentences.append({
                "label": " ".join(example.tokens),
                "tokens": list(example.tokens),
                "query": self.state.query if number == 0 else example.default_query,
                "d_k": example.d_k,
                "scores": _rounded(example.queries @ example.keys.T),  # (n_q, n_k)
                "queries": _rounded(example.queries), "keys": _rounded(example.keys),
                "values": _rounded(example.value_vectors),  # (n_k, d_v)
                "value_names": list(example.feature_names) if example.feature_names else None,
                "states": states,
            })
        return {
            "mode": "toy", "ui": ui_text(), "toggles": list(self.toggles),
            "heatmap": self.heatmap,
            "steps": self.steps, "temperatures": list(TEMPERATURES), "sentences": sentences,
            "initial": {"causal": self.state.causal, "scaled": self.state.scaled,
                        "t": TEMPERATURES.index(self.state.temperature)},
        }

    @staticmethod
    def _state_payload(example, causal, scaled, temperature) -> dict:
        output, weights = _attend(example, causal, scaled, temperature)
        return {"w": _rounded(weights), "h": _rounded(row_entropy(weights)),
                "out": _rounded(output)}

    def _repr_html_(self) -> str:
        return _explorer_html(self.payload(), render_row_html(self.state, self.example.d_k))

    def __repr__(self) -> str:
        return join_sentences([f"AttentionExplorer({' '.join(self.example.tokens)!r}, query="
                               f"{self.example.tokens[self.state.query]!r})", _INTERACTIVE])


def _require_attentions(tokens, attentions) -> tuple[tuple[str, ...], torch.Tensor]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not all(
            isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens should be a list of strings, got {type(tokens).__name__}")
    attentions = require_tensor("attentions", attentions, "(num_layers, num_heads, n, n)")
    n = len(tokens)
    if attentions.dim() != 4 or attentions.shape[-2:] != (n, n):
        raise ValueError(f"attentions should be (num_layers, num_heads, n, n) with n = "
                         f"len(tokens) = {n}, got shape {tuple(attentions.shape)}")
    if not attentions.is_floating_point() or not torch.isfinite(attentions).all():
        raise ValueError("attentions should hold finite floating-point weights")
    if (attentions < 0).any() or not torch.allclose(
            attentions.double().sum(-1), torch.ones(attentions.shape[:-1], dtype=torch.double),
            atol=1e-3):
        raise ValueError("attentions should be softmax weights: non-negative, each row "
                         "(last axis, over keys) summing to 1 within 1e-3")
    return tuple(tokens), attentions.detach().to("cpu", torch.float64)


class ModelExplorer:
    """Attention maps of a real model: pick a layer and a head, or click one of the small
    maps of the model view (all heads of all layers); click a word to read its row,
    hover a key to see its column.

    ``tokens`` is the list of n tokens; ``attentions`` the weights
    ``(num_layers, num_heads, n, n)`` (rows over keys sum to 1), as
    ``course_utils.pretrained.attention_maps(model, tokenizer, text)`` returns them.
    ``sentences`` optionally maps more labels to prepared ``(tokens, attentions)``
    pairs the reader can switch to without a kernel.
    """

    def __init__(self, tokens: Sequence[str], attentions: torch.Tensor, layer: int = 0,
                 head: int = 0, query: int | None = None, heatmap: bool = True,
                 sentences: Mapping[str, tuple[Sequence[str], torch.Tensor]] | None = None):
        self.maps = [(" ".join(tokens), *_require_attentions(tokens, attentions))]
        for label, (more_tokens, more) in (sentences or {}).items():
            self.maps.append((str(label), *_require_attentions(more_tokens, more)))
        num_layers, num_heads, n = self.maps[0][2].shape[:3]
        for name, value, limit in (("layer", layer, num_layers), ("head", head, num_heads),
                                   ("query", n - 1 if query is None else query, n)):
            require_int_in_range(name, value, 0, limit - 1)
        self.layer, self.head = layer, head
        self.query = n - 1 if query is None else query
        self.heatmap = bool(heatmap)

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.maps[0][1]

    def state(self) -> ExplorerState:
        """The opening row: ``query``'s weights in ``layer``, ``head``."""
        weights = self.maps[0][2][self.layer, self.head, self.query]
        return ExplorerState(self.tokens, self.query, tuple(weights.tolist()), False, True)

    def payload(self) -> dict:
        sentences = [{
            "label": label, "tokens": list(tokens),
            "query": self.query if number == 0 else len(tokens) - 1,
            "maps": _rounded(maps), "h": _rounded(row_entropy(maps)),
        } for number, (label, tokens, maps) in enumerate(self.maps)]
        return {"mode": "model", "ui": ui_text(), "heatmap": self.heatmap,
                "sentences": sentences,
                "initial": {"layer": self.layer, "head": self.head}}

    def _repr_html_(self) -> str:
        fallback = render_row_html(self.state(), d_k=0, settings=UI_TEXT["layer_head"].format(
            self.layer, self.head))
        return _explorer_html(self.payload(), fallback)

    def __repr__(self) -> str:
        num_layers, num_heads = self.maps[0][2].shape[:2]
        return join_sentences([_(
            "ModelExplorer({n_tokens} tokens, {num_layers} layers x {num_heads} heads)").format(
            n_tokens=len(self.tokens), num_layers=num_layers, num_heads=num_heads),
            _INTERACTIVE])


def synthetic_attentions(num_layers: int, num_heads: int, n: int,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Random but structured attention maps ``(num_layers, num_heads, n, n)`` for tests
    and demos: each head prefers one relative offset (previous token, same token, next,
    ...), with some noise; the last head of each layer is causal. Not a model's output."""
    for name, size in (("num_layers", num_layers), ("num_heads", num_heads), ("n", n)):
        require_positive_int(name, size)
    require_generator("generator", generator)
    generator = torch.Generator().manual_seed(0) if generator is None else generator
    positions = torch.arange(n)
    offsets = positions[None, :] - positions[:, None]  # (n_q, n_k): key - query
    maps = torch.empty(num_layers, num_heads, n, n)
    for layer in range(num_layers):
        for head in range(num_heads):
            preferred = (layer + head) % 3 - 1  # -1 previous, 0 itself, +1 next
            scores = -2.0 * (offsets - preferred).abs().float()
            scores = scores + 0.7 * torch.randn(n, n, generator=generator)
            if head == num_heads - 1:
                scores = scores.masked_fill(offsets > 0, float("-inf"))
            maps[layer, head] = torch.softmax(scores, dim=-1)
    return maps


# ---------------------------------------------------------------------------------------
# Static figures
# ---------------------------------------------------------------------------------------


def explorer_figure(example: AttentionExample | None = None, query: int | str | None = None,
                    causal: bool = False, scaled: bool = True, temperature: float = 1.0):
    """The explorer's state as a picture: the query's row as bars, and all weights
    ``(n_q, n_k)`` with that row outlined. Returns the matplotlib figure."""
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
    selected one outlined: the model view's opening state as a picture."""
    tokens, attentions = _require_attentions(tokens, attentions)
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
