"""The attention explorer's logic: an example sentence, its weights, one query's state.

``AttentionExample`` (tokens, queries, keys, values), ``pronoun_example()`` (the default
sentence), ``weight_matrix()``, ``explorer_state()`` and ``computation_steps()``: pure
functions of the example, computed with the course's own attention, so the page only switches
between precomputed states (see :mod:`course_utils.views.explorer`).

Weights are ``(n_q, n_k)``; a row is one query's weights over all keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from course_utils.checks import (
    require_instance,
    require_positive_number,
    require_tensor,
)
from course_utils.language import _, example_words
from course_utils.nn.attention import row_entropy, scaled_dot_product_attention
from course_utils.nn.masks import causal_mask


@dataclass(frozen=True, eq=False)
class AttentionExample:
    """A sentence with one query, one key and one value vector per token.

    ``queries`` and ``keys`` are ``(seq_len, d_k)``; ``values`` is ``(seq_len, d_v)`` and
    defaults to the keys (what each word *is*, so the output of a query reads as a mix
    of the properties of the words it attends to). ``feature_names`` name the
    dimensions when they have names. ``default_query`` is the token the explorer opens
    on; ``source`` says honestly where the vectors come from.

    Used in lesson 09.
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
            raise ValueError(_("{name} should hold at least one token, got none").format(
                name="tokens"))
        for name in ("queries", "keys", "values"):
            value = getattr(self, name)
            if name == "values" and value is None:
                continue
            notation = "(seq_len={n}, d_v)" if name == "values" else "(seq_len={n}, d_k)"
            if not isinstance(value, torch.Tensor) or value.dim() != 2 or len(value) != n:
                got = (f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                shape = notation.format(n=n)
                raise ValueError(_(
                    "{name} should be a tensor {shape}, got {got}"
                ).format(name=name, shape=shape, got=got))
            if not torch.isfinite(value).all():
                raise ValueError(_(
                    "{name} should hold finite numbers, got NaN or inf"
                ).format(name=name))
        if self.queries.shape != self.keys.shape:
            queries, keys = tuple(self.queries.shape), tuple(self.keys.shape)
            raise ValueError(_(
                "queries {queries} and keys {keys} should both be (seq_len, d_k)"
            ).format(queries=queries, keys=keys))
        if not 0 <= self.default_query < n:
            raise ValueError(
                _(
                    "default_query should be in 0..{last}, got {default_query}"
                ).format(last=n - 1, default_query=self.default_query))

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
            raise TypeError(_(
                "query should be a token index or a word, got {query!r}"
            ).format(query=query))
        if isinstance(query, str):
            positions = [i for i, token in enumerate(self.tokens) if token == query]
            if len(positions) != 1:
                message = (_("query {query!r} does not occur in {tokens}; pass its index instead")
                           if not positions else
                           _("query {query!r} occurs at {positions} in {tokens}; pass its index "
                             "instead"))
                raise ValueError(message.format(query=query, positions=positions,
                                                tokens=list(self.tokens)))
            return positions[0]
        if not 0 <= query < len(self.tokens):
            raise ValueError(_(
                "query index should be in 0..{last}, got {query}"
            ).format(last=len(self.tokens) - 1, query=query))
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
    computes the same weights.

    Used in lesson 09.
    """
    words = example_words(example, tuple(row[0] for row in table))
    return tuple((word, is_, wants) for word, (_word, is_, wants) in
                 zip(words, table, strict=True))


def _feature_vector(strengths: Mapping[str, float], features: Sequence[str]) -> list[float]:
    if not isinstance(strengths, Mapping):
        got = type(strengths).__name__
        raise TypeError(_(
            "feature strengths should be a dict feature -> number, got {got}"
        ).format(got=got))
    unknown = set(strengths) - set(features)
    if unknown:
        raise ValueError(
            _(
                "unknown features {unknown}; expected some of {features}"
            ).format(unknown=sorted(unknown), features=tuple(features)))
    return [float(strengths.get(name, 0.0)) for name in features]


def example_from_table(table: Sequence[tuple[str, Mapping[str, float], Mapping[str, float]]],
                       features: Sequence[str] = PRONOUN_FEATURES,
                       default_query: int | str = 0,
                       source: str = "set by hand") -> AttentionExample:
    """An example from rows ``(word, what it is, what it looks for)``, as in
    ``PRONOUN_SENTENCE``: each row's two dicts map feature names to strengths and become
    the word's key and query (d_k = len(features)). Values are the keys.

    Used in lesson 09.
    """
    if not isinstance(table, Sequence) or not table:
        raise ValueError(_("table should be a non-empty list of (word, is, looks_for) rows"))
    for row in table:
        if not (isinstance(row, tuple | list) and len(row) == 3 and isinstance(row[0], str)):
            raise ValueError(_(
                "each row should be (word, {{feature: strength}}, {{feature: strength}}), got "
                "{row!r}"
            ).format(row=row))
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

    Used in lessons 02, 03, 05 and 09.
    """
    return example_from_table(
        in_course_language(PRONOUN_SENTENCE, "pronoun_sentence"), default_query=6,
        source=_(
            "set by hand: keys mark what each word is, queries what it looks for (see "
            "pronoun_example's docstring)"),
    )


def round_example() -> AttentionExample:
    """"the kitten chased the ball because it was round": same vectors, last word changed.

    Used in lesson 09.
    """
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

    Used in lesson 09.
    """
    require_instance("example", example, AttentionExample, _("an AttentionExample"))
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
    """What the explorer shows: one query's row of weights and its summary numbers.

    Used in lesson 09.
    """

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
    """The explorer's display for ``query`` (default: ``example.default_query``).

    Used in lessons 02, 03, 05 and 09.
    """
    require_instance("example", example, AttentionExample, _("an AttentionExample"))
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

    Used in lesson 09.
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
    """Every intermediate number of one query's row, step by step (see ComputationSteps).

    Used in lesson 09.
    """
    require_instance("example", example, AttentionExample, _("an AttentionExample"))
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


def require_attentions(tokens, attentions) -> tuple[tuple[str, ...], torch.Tensor]:
    """``tokens`` and a model's weights ``(num_layers, num_heads, n, n)``, checked.

    Used in lesson 09.
    """
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not all(
            isinstance(t, str) for t in tokens):
        raise TypeError(_(
            "{name} should be a list of strings, got {kind}"
        ).format(name="tokens", kind=type(tokens).__name__))
    attentions = require_tensor("attentions", attentions, "(num_layers, num_heads, n, n)")
    n = len(tokens)
    if attentions.dim() != 4 or attentions.shape[-2:] != (n, n):
        raise ValueError(_(
            "attentions should be (num_layers, num_heads, n, n) with n = len(tokens) = {n}, got "
            "shape {attentions_shape}"
        ).format(n=n, attentions_shape=tuple(attentions.shape)))
    if not attentions.is_floating_point() or not torch.isfinite(attentions).all():
        raise ValueError(_("attentions should hold finite floating-point weights"))
    if (attentions < 0).any() or not torch.allclose(
            attentions.double().sum(-1), torch.ones(attentions.shape[:-1], dtype=torch.double),
            atol=1e-3):
        raise ValueError(_(
            "attentions should be softmax weights: non-negative, each row (last axis, over keys) "
            "summing to 1 within 1e-3"
        ))
    return tuple(tokens), attentions.detach().to("cpu", torch.float64)
