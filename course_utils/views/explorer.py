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
  styles in ``static/explorer.js`` (after ``static/view_common.js``, the helpers every view's
  script shares) and ``static/explorer.css`` (package data, read with
  ``importlib.resources`` and inlined: the page fetches nothing), with stable CSS
  classes (``attn-explorer-*``) that tests read;
- figures: ``explorer_figure()`` and ``model_view_figure()``, static pictures for readers
  on GitHub or nbviewer, where no script runs.

Weights are ``(n_q, n_k)``; a row is one query's weights over all keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import torch

from course_utils.checks import (
    require_generator,
    require_instance,
    require_int_in_range,
    require_one_of,
    require_positive_int,
)
from course_utils.language import _, join_sentences
from course_utils.nn.attention import row_entropy
from course_utils.views.explorer_html import (
    INTERACTIVE_NOTE,
    TEMPERATURES,
    TOGGLES,
    UI_TEXT,
    _explorer_page_html,
    _rounded,
    render_row_html,
    ui_text,
)
from course_utils.views.explorer_model import (
    AttentionExample,
    ExplorerState,
    _attend,
    explorer_state,
    pronoun_example,
    require_attentions,
)


def _require_toggles(toggles) -> tuple[str, ...]:
    if isinstance(toggles, str) or not isinstance(toggles, Sequence) or (
            set(toggles) - set(TOGGLES)):
        raise ValueError(_(
            "toggles should be a subset of {TOGGLES}, got {toggles!r}"
        ).format(TOGGLES=TOGGLES, toggles=toggles))
    return tuple(toggles)


class AttentionExplorer:
    """Click a word to make it the query; switch the causal mask, the 1/sqrt(d_k) scale
    and the temperature; step through the computation; hover a key to see its column.

    ``example`` is an ``AttentionExample`` (default: ``pronoun_example()``);
    ``sentences`` optionally adds prepared examples the reader can switch to (the first
    shown is ``example``). ``toggles`` picks which of ``"causal"``, ``"scale"`` and
    ``"temperature"`` are shown. Display it by making it the last expression of a cell.
    ``state`` is the opening state.

    Used in lessons 02, 03, 05 and 09.
    """

    def __init__(self, example: AttentionExample | None = None,
                 query: int | str | None = None, causal: bool = False, scaled: bool = True,
                 toggles: Sequence[str] = TOGGLES, heatmap: bool = True,
                 temperature: float = 1.0, steps: bool = True,
                 sentences: Sequence[AttentionExample] = ()):
        self.example = pronoun_example() if example is None else example
        examples = [self.example, *sentences]
        for item in examples:
            require_instance("example", item, AttentionExample, _("an AttentionExample"))
        require_one_of(_("temperature (a value of the slider)"), temperature, TEMPERATURES)
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
        return _explorer_page_html(self.payload(), render_row_html(self.state, self.example.d_k))

    def __repr__(self) -> str:
        return join_sentences([f"AttentionExplorer({' '.join(self.example.tokens)!r}, query="
                               f"{self.example.tokens[self.state.query]!r})", INTERACTIVE_NOTE])


class ModelExplorer:
    """Attention maps of a real model: pick a layer and a head, or click one of the small
    maps of the model view (all heads of all layers); click a word to read its row,
    hover a key to see its column.

    ``tokens`` is the list of n tokens; ``attentions`` the weights
    ``(num_layers, num_heads, n, n)`` (rows over keys sum to 1), as
    ``course_utils.experiments.l10_real_model.attention_maps(model, tokenizer, text)`` returns them.
    ``sentences`` optionally maps more labels to prepared ``(tokens, attentions)``
    pairs the reader can switch to without a kernel.

    Used in lessons 09 and 10.
    """

    def __init__(self, tokens: Sequence[str], attentions: torch.Tensor, layer: int = 0,
                 head: int = 0, query: int | None = None, heatmap: bool = True,
                 sentences: Mapping[str, tuple[Sequence[str], torch.Tensor]] | None = None):
        self.maps = [(" ".join(tokens), *require_attentions(tokens, attentions))]
        for label, (more_tokens, more) in (sentences or {}).items():
            self.maps.append((str(label), *require_attentions(more_tokens, more)))
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
        return _explorer_page_html(self.payload(), fallback)

    def __repr__(self) -> str:
        num_layers, num_heads = self.maps[0][2].shape[:2]
        return join_sentences([_(
            "ModelExplorer({n_tokens} tokens, {num_layers} layers x {num_heads} heads)").format(
            n_tokens=len(self.tokens), num_layers=num_layers, num_heads=num_heads),
            INTERACTIVE_NOTE])


def synthetic_attentions(num_layers: int, num_heads: int, n: int,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Random but structured attention maps ``(num_layers, num_heads, n, n)`` for tests
    and demos: each head prefers one relative offset (previous token, same token, next,
    ...), with some noise; the last head of each layer is causal. Not a model's output.

    Used in lesson 09.
    """
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
