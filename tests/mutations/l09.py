"""Lesson 09's exercises: plausible wrong answers rejected with their message, right answers
written differently accepted (tests/test_exercises.py runs every row of MUTATIONS)."""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises.l09 import (
    it_attends_to_ball,
    most_attended,
    own_sentence,
)
from course_utils.views.explorer_model import PRONOUN_FEATURES, example_from_table, weight_matrix
from tests.support.exercise_checks import Mutations

# --- exercise 1: the query of "it" -----------------------------------------------------------

IT_WRONG = [
    ("unchanged query", lambda: {"noun": 2, "animate": 5.5, "quality": 1.5}, "'animate'"),
    ("nouns only", lambda: {"noun": 5}, "tie"),
    ("the quality word", lambda: {"quality": 5}, "'round'"),
    ("too weak", lambda: {"inanimate": 1}, "at least 0.5"),
    ("animate and inanimate", lambda: {"animate": 5.5, "inanimate": 5.5}, "only 'ball' has"),
    ("a word as feature", lambda: {"ball": 5}, "unknown feature ['ball']"),
    ("NaN strength", lambda: {"inanimate": float("nan")}, "not a finite number"),
    ("inf strength", lambda: {"inanimate": math.inf}, "not a finite number"),
    ("a list, not a dict", lambda: [0, 2, 0, 5.5, 0, 0, 0, 0], "return a dict"),
    ("looks for a pronoun", lambda: {"pronoun": 5}, "itself"),
    ("negative inanimate", lambda: {"inanimate": -5.5}, "negative strength"),
    ("a vector of strengths", lambda: {"inanimate": torch.tensor([5.5, 1.0])}, "one number"),
]

IT_RIGHT = [
    ("inanimate alone", lambda: {"inanimate": 6}),
    ("numpy numbers", lambda: {"noun": np.float64(2), "inanimate": np.float32(5.5)}),
    ("torch scalars", lambda: {"noun": torch.tensor(2.0), "inanimate": torch.tensor(5.5)}),
    ("every feature spelled out",
     lambda: {name: {"noun": 2, "inanimate": 5.5}.get(name, 0) for name in PRONOUN_FEATURES}),
    ("avoid animate instead", lambda: {"animate": -4, "noun": 8}),
]


# --- exercise 2: which word each word attends to most ---------------------------------------

def _weights(example, causal, scale=None):
    n, d_k = example.queries.shape
    scores = example.queries @ example.keys.T  # (n_q, n_k)
    scores = scores / math.sqrt(d_k) if scale is None else scores * scale
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _words(example, positions):
    return [example.tokens[k] for k in positions]


def _column_argmax(example, causal=False):
    return _words(example, _weights(example, causal).argmax(dim=0).tolist())


def _no_mask(example, causal=False):
    return _words(example, _weights(example, False).argmax(dim=-1).tolist())


def _argmin(example, causal=False):
    return _words(example, _weights(example, causal).argmin(dim=-1).tolist())


def _triu_mask(example, causal=False):
    n = len(example.tokens)
    scores = example.queries @ example.keys.T
    if causal:  # keeps the later words instead of the earlier ones
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-1), float("-inf"))
    return _words(example, scores.argmax(dim=-1).tolist())


def _positions_not_words(example, causal=False):
    return _weights(example, causal).argmax(dim=-1).tolist()


def _rightmost_on_tie(example, causal=False):
    weights = _weights(example, causal)
    n = len(example.tokens)
    return [example.tokens[n - 1 - int(row.flip(0).argmax())] for row in weights]


def _query_dot_query(example, causal=False):
    n = len(example.tokens)
    scores = example.queries @ example.queries.T
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return _words(example, scores.argmax(dim=-1).tolist())


def _off_by_one(example, causal=False):
    positions = _weights(example, causal).argmax(dim=-1).tolist()
    return [example.tokens[min(k + 1, len(example.tokens) - 1)] for k in positions]


def _mask_after_softmax(example, causal=False):
    weights = _weights(example, False)
    if causal:
        n = len(example.tokens)
        weights = weights.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), 0.0)
    return _words(example, weights.argmax(dim=-1).tolist())


def _tensor_answer(example, causal=False):
    return _weights(example, causal).argmax(dim=-1)


def _first_key_above_half(example, causal=False):
    weights = _weights(example, causal)  # the key "most attended" when it has over half the weight
    return [example.tokens[int(row.argmax())] if row.max() > 0.5 else example.tokens[q]
            for q, row in enumerate(weights)]


def _exp_in_float32_without_the_max(example, causal=False):
    scores = example.queries @ example.keys.T / math.sqrt(example.queries.shape[-1])
    if causal:
        n = len(example.tokens)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.exp() / scores.exp().sum(-1, keepdim=True)  # inf / inf = NaN past 88
    return _words(example, weights.argmax(-1).tolist())


def _ten_words_at_most(example, causal=False):
    return _words(example, _weights(example, causal).argmax(dim=-1).tolist()[:10])


def _by_sorting(example, causal=False):
    order = _weights(example, causal).double().sort(dim=-1, descending=True, stable=True)
    return _words(example, order.indices[:, 0].tolist())


MOST_WRONG = [
    ("argmax over the column", _column_argmax, "each column"),
    ("ignores the causal mask", _no_mask, "ignore the causal mask"),
    ("smallest weight", _argmin, "smallest weight"),
    ("mask on the wrong side", _triu_mask, "a word attends to a word after it"),
    ("positions not words", _positions_not_words, "not their positions"),
    ("a tensor of positions", _tensor_answer, "not their positions"),
    ("rightmost on a tie", _rightmost_on_tie, "take the leftmost"),
    ("q·q instead of q·k", _query_dot_query, "attends most to"),
    ("off by one", _off_by_one, "you said"),
    ("one word only", lambda example, causal=False: example.tokens[0], "list of words"),
    ("the key above 0.5, else the word itself", _first_key_above_half, "attends most to"),
    ("exp in float32 without the max", _exp_in_float32_without_the_max, "attends most to"),
    ("ten words at most", _ten_words_at_most, "return 14 words, one per query, got 10"),
]


def _python_max(example, causal=False):
    weights = _weights(example, causal).tolist()
    return [example.tokens[max(range(len(row)), key=row.__getitem__)] for row in weights]


def _manual_float64(example, causal=False):
    q, k = example.queries.double(), example.keys.double()
    scores = torch.einsum("qd,kd->qk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n = len(example.tokens)
        hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(hidden, torch.finfo(torch.float64).min)
    weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
    return _words(example, weights.argmax(-1).tolist())


def _no_scale_same_ranking(example, causal=False):
    # Scaling does not change which weight is largest: this answer is right.
    return _words(example, _weights(example, causal, scale=1.0).argmax(dim=-1).tolist())


def _in_place(example, causal=False):
    scores = example.queries.mul_(1 / math.sqrt(example.queries.shape[-1])) @ example.keys.T
    if causal:
        scores.masked_fill_(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    return tuple(example.tokens[k] for k in scores.argmax(-1).tolist())


MOST_RIGHT = [
    ("python max over each row", _python_max),
    ("einsum, float64, manual softmax, finfo.min", _manual_float64),
    ("without the scale", _no_scale_same_ranking),
    ("in-place ops, a tuple", _in_place),
    ("stable descending sort, first index", _by_sorting),
    ("scores only, no softmax", lambda example, causal=False: _words(
        example, _weights(example, causal).log().argmax(-1).tolist())),
]

# --- exercise 3: a sentence of your own --------------------------------------------------------

GOOD_TABLE, GOOD_PREDICTIONS = own_sentence.reference()


def _with_predictions(predictions):
    return lambda: (GOOD_TABLE, predictions)


def _by_column():
    example = example_from_table(GOOD_TABLE)
    weights = weight_matrix(example)
    return GOOD_TABLE, [example.tokens[k] for k in weights.argmax(dim=0).tolist()]


TIED_TABLE = [
    ("the", {"determiner": 1}, {"noun": 2}),
    ("kitten", {"noun": 1, "animate": 1}, {"action": 2}),
    ("saw", {"action": 1}, {"noun": 2, "animate": 1}),
    ("the", {"determiner": 1}, {"noun": 2, "inanimate": 1}),
    ("ball", {"noun": 1, "inanimate": 1}, {"action": 2}),
]

DULL_TABLE = [(word, {"noun": 1}, {"action": 1} if word == "go" else {"noun": 1})
              for word in ("a", "b", "c", "go", "d")]

OWN_WRONG = [
    ("one prediction wrong", _with_predictions(["dog", "found", "stick", "stick", "dog", "found",
                                                "dog"]), "you predicted 'dog'"),
    ("predicting the column", _by_column, "a column"),
    ("a near-tie", lambda: (TIED_TABLE, ["kitten", "saw", "kitten", "ball", "saw"]),
     "no clear favourite"),
    ("too short", lambda: (GOOD_TABLE[:3], GOOD_PREDICTIONS[:3]), "at least 5 words"),
    ("a missing prediction", _with_predictions(GOOD_PREDICTIONS[:-1]), "predict one word"),
    ("a word not in the sentence", _with_predictions(["cat", *GOOD_PREDICTIONS[1:]]),
     "not words of your sentence"),
    ("unknown feature", lambda: ([("dog", {"furry": 1}, {})] + GOOD_TABLE[1:], GOOD_PREDICTIONS),
     "unknown features ['furry']"),
    ("NaN strength", lambda: ([("the", {"determiner": 1}, {"noun": math.nan})] + GOOD_TABLE[1:],
                              GOOD_PREDICTIONS), "finite"),
    ("only one thing returned", lambda: GOOD_TABLE, "return two things"),
    ("everyone likes the same word", lambda: (DULL_TABLE, ["a", "a", "a", "a", "a"]),
     "no clear favourite"),
]

OWN_RIGHT = [
    ("the reference as lists", lambda: ([list(row) for row in GOOD_TABLE], GOOD_PREDICTIONS)),
    ("a tuple of predictions", lambda: (GOOD_TABLE, tuple(GOOD_PREDICTIONS))),
    ("numpy strengths", lambda: ([(w, {f: np.float32(v) for f, v in is_.items()}, wants)
                                  for w, is_, wants in GOOD_TABLE], GOOD_PREDICTIONS)),
    ("another sentence", lambda: ([
        ("a", {"determiner": 1}, {"noun": 2, "animate": 1}),
        ("cat", {"noun": 1, "animate": 1}, {"action": 2}),
        ("slept", {"action": 1}, {"animate": 2, "noun": 1}),
        ("on", {"connective": 1}, {"inanimate": 2, "noun": 1}),
        ("mats", {"noun": 1, "inanimate": 1}, {"connective": 2}),
    ], ["cat", "slept", "cat", "mats", "on"])),
]


MUTATIONS = {
    it_attends_to_ball: Mutations(wrong=IT_WRONG, right=IT_RIGHT),
    most_attended: Mutations(wrong=MOST_WRONG, right=MOST_RIGHT),
    own_sentence: Mutations(wrong=OWN_WRONG, right=OWN_RIGHT),
}
