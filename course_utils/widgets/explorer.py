"""The attention explorer: pick a word as the query and read its row of weights.

Three layers, so that everything but the clicking is testable without a browser:

- logic: ``AttentionExample`` (tokens, queries, keys), ``pronoun_example()`` (the default
  sentence), ``weight_matrix()`` and ``explorer_state()`` (what the explorer displays);
- view: ``AttentionExplorer``, built only from ipywidgets APIs that exist in both 7.7
  (Colab) and 8 (JupyterLab 4); its numbers are rendered by ``render_row_html()`` and
  ``render_heatmap_html()`` with stable CSS classes, so a browser test can read them;
- figure: ``explorer_figure()``, a static matplotlib picture of one state for readers
  on GitHub or nbviewer, where widgets do not run.

Weights are ``(n_q, n_k)``; a row is one query's weights over all keys.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from course_utils.attention import scaled_dot_product_attention
from course_utils.masks import causal_mask
from course_utils.scaling import row_entropy

# ---------------------------------------------------------------------------------------
# Logic
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AttentionExample:
    """A sentence with one query and one key vector per token.

    ``queries`` and ``keys`` are ``(seq_len, d_k)``; ``default_query`` is the token the
    explorer opens on; ``source`` says honestly where the vectors come from.
    """

    tokens: tuple[str, ...]
    queries: torch.Tensor
    keys: torch.Tensor
    default_query: int
    source: str

    def __post_init__(self):
        n = len(self.tokens)
        for name in ("queries", "keys"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dim() != 2 or len(value) != n:
                got = (f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise ValueError(f"{name} should be a tensor (seq_len={n}, d_k), got {got}")
        if self.queries.shape != self.keys.shape:
            raise ValueError(
                f"queries {tuple(self.queries.shape)} and keys {tuple(self.keys.shape)} "
                "should both be (seq_len, d_k)"
            )
        if not 0 <= self.default_query < n:
            raise ValueError(f"default_query should be in 0..{n - 1}, got {self.default_query}")

    @property
    def d_k(self) -> int:
        return self.keys.shape[-1]

    def index(self, query: int | str) -> int:
        """The position of ``query``: an index, or a word that occurs exactly once."""
        if isinstance(query, bool) or not isinstance(query, int | str):
            raise TypeError(f"query should be a token index or a word, got {query!r}")
        if isinstance(query, str):
            positions = [i for i, token in enumerate(self.tokens) if token == query]
            if len(positions) != 1:
                found = "does not occur" if not positions else f"occurs at {positions}"
                raise ValueError(
                    f"query {query!r} {found} in {list(self.tokens)}; pass its index instead"
                )
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


def _feature_vector(strengths: Mapping[str, float]) -> list[float]:
    unknown = set(strengths) - set(PRONOUN_FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; expected {PRONOUN_FEATURES}")
    return [float(strengths.get(name, 0.0)) for name in PRONOUN_FEATURES]


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
    more dimensions and far less tidy.

    With d_k = 8 and the 1/sqrt(8) scale, "it" puts about 0.59 of its weight on
    "kitten" (the weight the course's source article shows for its pronoun).
    """
    tokens = tuple(token for token, _, _ in PRONOUN_SENTENCE)
    keys = torch.tensor([_feature_vector(is_) for _, is_, _ in PRONOUN_SENTENCE])
    queries = torch.tensor([_feature_vector(wants) for _, _, wants in PRONOUN_SENTENCE])
    return AttentionExample(
        tokens=tokens, queries=queries, keys=keys, default_query=tokens.index("it"),
        source="set by hand: keys mark what each word is, queries what it looks for "
               "(see pronoun_example's docstring)",
    )


def weight_matrix(example: AttentionExample, causal: bool = False,
                  scaled: bool = True) -> torch.Tensor:
    """All attention weights ``(n_q, n_k)`` of ``example``.

    ``causal`` hides every key to the right of its query; ``scaled`` divides the scores
    by sqrt(d_k) (off means a scale of 1).
    """
    n = len(example.tokens)
    mask = causal_mask(n) if causal else None
    values = example.keys  # only the weights are shown, so any (n_k, d_v) values will do
    _, weights = scaled_dot_product_attention(
        example.queries, example.keys, values, mask=mask, scale=None if scaled else 1.0,
    )
    return weights  # (n_q, n_k)


@dataclass(frozen=True)
class ExplorerState:
    """What the explorer shows: one query's row of weights and its summary numbers."""

    tokens: tuple[str, ...]
    query: int
    weights: tuple[float, ...]
    causal: bool
    scaled: bool

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
                   causal: bool = False, scaled: bool = True) -> ExplorerState:
    """The explorer's display for ``query`` (default: ``example.default_query``)."""
    index = example.default_query if query is None else example.index(query)
    matrix = weight_matrix(example, causal=causal, scaled=scaled)
    return _row_state(example, index, matrix, causal, scaled)


def _row_state(example: AttentionExample, query: int, matrix: torch.Tensor, causal: bool,
               scaled: bool) -> ExplorerState:
    return ExplorerState(tokens=example.tokens, query=query, weights=tuple(matrix[query].tolist()),
                         causal=bool(causal), scaled=bool(scaled))


# ---------------------------------------------------------------------------------------
# HTML rendering (what the widget shows; plain strings, so tests can read them)
# ---------------------------------------------------------------------------------------

_BAR_COLOUR = "#c0392b"
_BAR_TRACK_PX = 260


def render_row_html(state: ExplorerState, d_k: int) -> str:
    """The query's row as labelled bars with their numbers, and a summary line.

    Stable hooks for tests: ``.attn-explorer-row`` carries ``data-query``,
    ``data-causal`` and ``data-scaled``; each key's number is the text of
    ``.attn-explorer-weight[data-key=j]``; ``.attn-explorer-max`` and
    ``.attn-explorer-entropy`` hold the summary numbers.
    """
    e = html.escape
    query_word = e(state.tokens[state.query])
    scale = f"scores ÷ √{d_k}" if state.scaled else "scores not scaled"
    mask = "causal mask on" if state.causal else "causal mask off"
    lines = [
        f'<div class="attn-explorer-row" data-query="{state.query}" '
        f'data-causal="{int(state.causal)}" data-scaled="{int(state.scaled)}" '
        'style="font-family: monospace; line-height: 1.5;">',
        f'<div>query <b>{query_word}</b> · {mask} · {scale}</div>',
    ]
    for key, (token, weight, hidden) in enumerate(
            zip(state.tokens, state.weights, state.masked, strict=True)):
        width = round(weight * _BAR_TRACK_PX)
        style = "font-weight: bold;" if key == state.argmax else ""
        if key == state.query:
            style += " text-decoration: underline;"
        note = " (masked)" if hidden else ""
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
    lines.append(
        f'<div>largest weight <b class="attn-explorer-max">{state.max_weight:.3f}</b> on '
        f'<b>{e(state.tokens[state.argmax])}</b> · entropy '
        f'<b class="attn-explorer-entropy">{state.entropy:.3f}</b> nats '
        f'(uniform: {math.log(len(state.tokens)):.3f})</div></div>'
    )
    return "\n".join(lines)


def render_heatmap_html(weights: torch.Tensor, tokens: Sequence[str], query: int) -> str:
    """All weights ``(n_q, n_k)`` as a table of shaded cells, the query's row outlined."""
    e = html.escape
    cell = "width: 34px; height: 22px; text-align: center; font-size: 10px; padding: 0;"
    header = "".join(
        f'<th style="{cell} writing-mode: vertical-rl; height: 56px;">{e(t)}</th>'
        for t in tokens
    )
    rows = [f'<tr><th style="font-size: 10px;">query \\ key</th>{header}</tr>']
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
# The widget
# ---------------------------------------------------------------------------------------

TOGGLES = ("causal", "scale")


class AttentionExplorer:
    """Click a word to make it the query; toggle the causal mask and the 1/sqrt(d_k) scale.

    ``toggles`` picks which of ``"causal"`` and ``"scale"`` are shown (a lesson about
    choosing the query can show none). Display it by making it the last expression of a
    cell. ``state`` is what is shown right now.
    """

    def __init__(self, example: AttentionExample | None = None,
                 query: int | str | None = None, causal: bool = False, scaled: bool = True,
                 toggles: Sequence[str] = TOGGLES, heatmap: bool = True):
        self.example = pronoun_example() if example is None else example
        if not isinstance(self.example, AttentionExample):
            raise TypeError(
                f"example should be an AttentionExample, got {type(self.example).__name__}"
            )
        unknown = set(toggles) - set(TOGGLES)
        if isinstance(toggles, str) or unknown:
            raise ValueError(f"toggles should be a subset of {TOGGLES}, got {toggles!r}")
        self.heatmap = heatmap
        self._matrices: dict[tuple[bool, bool], torch.Tensor] = {}
        self._query = (self.example.default_query if query is None
                       else self.example.index(query))

        self.token_buttons = []
        for index, token in enumerate(self.example.tokens):
            button = widgets.Button(description=token, layout=widgets.Layout(width="auto"))
            button.add_class("attn-explorer-token")
            button.on_click(lambda _, index=index: self.select(index))
            self.token_buttons.append(button)
        self.causal_toggle = widgets.ToggleButton(value=bool(causal))
        self.causal_toggle.add_class("attn-explorer-causal")
        self.scale_toggle = widgets.ToggleButton(value=bool(scaled))
        self.scale_toggle.add_class("attn-explorer-scale")
        for toggle in (self.causal_toggle, self.scale_toggle):
            toggle.observe(self._refresh, names="value")
        self.display = widgets.HTML()
        self.display.add_class("attn-explorer-display")

        shown = [t for name, t in zip(TOGGLES, (self.causal_toggle, self.scale_toggle),
                                      strict=True) if name in toggles]
        hint = widgets.HTML("<i>Click a word to make it the query.</i>")
        self.view = widgets.VBox([
            hint,
            widgets.HBox(self.token_buttons, layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox(shown),
            self.display,
        ])
        self.view.add_class("attn-explorer")
        self._refresh()

    @property
    def state(self) -> ExplorerState:
        causal, scaled = self.causal_toggle.value, self.scale_toggle.value
        return _row_state(self.example, self._query, self._matrix(causal, scaled), causal, scaled)

    def _matrix(self, causal: bool, scaled: bool) -> torch.Tensor:
        # Four settings, computed once each: a click then only re-renders HTML.
        settings = (bool(causal), bool(scaled))
        if settings not in self._matrices:
            self._matrices[settings] = weight_matrix(self.example, *settings)
        return self._matrices[settings]

    def select(self, query: int | str) -> None:
        """Make ``query`` (an index or a unique word) the query, as a click does."""
        self._query = self.example.index(query)
        self._refresh()

    def _refresh(self, _change=None) -> None:
        state = self.state
        for index, button in enumerate(self.token_buttons):
            button.button_style = "info" if index == state.query else ""
        # Say the state on the toggle itself: a pressed button alone is easy to misread.
        self.causal_toggle.description = f"causal mask: {'on' if state.causal else 'off'}"
        self.scale_toggle.description = (
            f"scale by 1/√{self.example.d_k}: {'on' if state.scaled else 'off'}")
        parts = [render_row_html(state, self.example.d_k)]
        if self.heatmap:
            matrix = self._matrix(state.causal, state.scaled)
            parts.append(render_heatmap_html(matrix, state.tokens, state.query))
        self.display.value = "\n".join(parts)

    def _ipython_display_(self):
        # Both IPython 7.34 (Colab) and 8+ honour _ipython_display_.
        from IPython.display import display

        display(self.view)


# ---------------------------------------------------------------------------------------
# Static figure
# ---------------------------------------------------------------------------------------


def explorer_figure(example: AttentionExample | None = None, query: int | str | None = None,
                    causal: bool = False, scaled: bool = True):
    """The explorer's state as a picture: the query's row as bars, and all weights
    ``(n_q, n_k)`` with that row outlined. Returns the matplotlib figure."""
    example = pronoun_example() if example is None else example
    state = explorer_state(example, query, causal=causal, scaled=scaled)
    matrix = weight_matrix(example, causal=causal, scaled=scaled)
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
    bars.set_ylabel("attention weight")
    settings = (f"causal mask {'on' if causal else 'off'}, "
                f"{'÷√' + str(example.d_k) if scaled else 'no scaling'}")
    bars.set_title(f'query "{state.tokens[state.query]}" ({settings})', fontsize=10)

    image = heat.imshow(matrix.numpy(), cmap="Reds", vmin=0.0, vmax=1.0)
    heat.set_xticks(positions, labels=state.tokens, rotation=90)
    heat.set_yticks(positions, labels=state.tokens)
    heat.set_xlabel("key")
    heat.set_ylabel("query")
    heat.add_patch(Rectangle((-0.5, state.query - 0.5), n, 1, fill=False,
                             edgecolor="#1f4e79", linewidth=2.5))
    heat.set_title("all rows; the query's row outlined", fontsize=10)
    fig.colorbar(image, ax=heat, shrink=0.8)
    return fig
