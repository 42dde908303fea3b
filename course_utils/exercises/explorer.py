"""Lesson 09 exercises: make "it" attend to "ball"; which word does each word attend to most;
build a sentence of your own and predict its attention.

All three use the hand-set vectors of ``course_utils.widgets.explorer``: keys say what a
word is, queries what it looks for, over the eight ``PRONOUN_FEATURES``; weights are
softmax(q·k / √8) with no mask unless a task says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_utils.exercises import Exercise, Incorrect, as_number, attempt
from course_utils.widgets.explorer import (
    PRONOUN_FEATURES,
    ROUND_SENTENCE,
    AttentionExample,
    example_from_table,
    pronoun_example,
    round_example,
    weight_matrix,
)

# --- Exercise 1: the query of "it" ------------------------------------------------------------

BALL_WEIGHT = 0.5  # the share of the weight "ball" must get, at least
TIE = 1e-6  # two weights closer than this count as a tie


def _learners_query(strengths) -> dict[str, float]:
    if not isinstance(strengths, Mapping):
        raise Incorrect(f"return a dict {{feature: strength}} such as {{'noun': 2}}, got "
                        f"{type(strengths).__name__}")
    unknown = sorted(set(strengths) - set(PRONOUN_FEATURES))
    if unknown:
        raise Incorrect(f"unknown feature {unknown}: a query can only look for "
                        f"{', '.join(PRONOUN_FEATURES)}")
    return {name: as_number(value, f"the strength of {name!r}")
            for name, value in strengths.items()}


def with_query_of_it(strengths: Mapping[str, float]) -> AttentionExample:
    """"the kitten chased the ball because it was round", "it" looking for ``strengths``."""
    table = [(word, is_, dict(strengths) if word == "it" else wants)
             for word, is_, wants in ROUND_SENTENCE]
    return example_from_table(table, default_query="it", source="lesson 09, exercise 1")


def _check_it_attends_to_ball(answer):
    strengths = _learners_query(attempt(answer))
    example = with_query_of_it(strengths)
    it, ball = example.index("it"), example.index("ball")
    row = weight_matrix(example)[it].tolist()  # (n_k,)
    top = max(row)
    winners = [example.tokens[k] for k, w in enumerate(row) if top - w < TIE]
    if len(winners) > 1:
        if set(winners) == {"kitten", "ball"}:
            raise Incorrect(
                f"'kitten' and 'ball' tie at {top:.3f}: your query rewards what both have "
                "(both are nouns). Look for a property that only 'ball' has")
        extra = (" A negative strength makes a word that has the property less likely, "
                 "not more." if any(v < 0 for v in strengths.values()) else "")
        raise Incorrect(f"no single word stands out: {winners} tie at {top:.3f}.{extra}")
    winner = winners[0]
    if winner == "kitten":
        why = (" It still looks for 'animate', which only 'kitten' has."
               if strengths.get("animate", 0) > 0 else "")
        raise Incorrect(f"'it' still attends most to 'kitten' ({top:.3f}).{why}")
    if winner == "round":
        raise Incorrect(f"'it' attends most to 'round' ({top:.3f}), the quality word itself, "
                        "not the thing that is round: look for what 'ball' is")
    if winner == "it":
        raise Incorrect(f"'it' attends most to itself ({top:.3f}): its key is 'pronoun', "
                        "so looking for a pronoun finds 'it'")
    if winner != "ball":
        raise Incorrect(f"'it' attends most to {winner!r} ({top:.3f}), not to 'ball'")
    if row[ball] < BALL_WEIGHT:
        raise Incorrect(f"'ball' gets the largest weight but only {row[ball]:.3f}; the task "
                        f"asks for at least {BALL_WEIGHT}: look for what 'ball' is more strongly")


def _query_of_it_reference():
    # "ball" is an inanimate noun: look for that, as strongly as "it" looked for animate.
    return {"noun": 2, "inanimate": 5.5, "quality": 1.5}


it_attends_to_ball = Exercise(
    "make 'it' attend to 'ball'",
    _check_it_attends_to_ball,
    _query_of_it_reference,
    hints=(
        "A score is the dot product of the query of 'it' with each key. Which properties "
        "does the key of 'ball' have that the key of 'kitten' does not? "
        "(print(ROUND_SENTENCE) or look at the table at the top of the lesson.)",
        "'ball' is {'noun': 1, 'inanimate': 1}; 'kitten' is {'noun': 1, 'animate': 1}. "
        "Looking for 'noun' alone gives them the same score.",
        "With the 1/√8 scale a score gap of about 5 gives the winner more than half the "
        "weight: try {'noun': 2, 'inanimate': 5.5}.",
    ),
)

# --- Exercise 2: which word does each word attend to most? -----------------------------------


def _random_example(n: int, d_k: int, seed: int) -> AttentionExample:
    generator = torch.Generator().manual_seed(seed)
    return AttentionExample(
        tokens=tuple(f"w{i}" for i in range(n)), queries=torch.randn(n, d_k, generator=generator),
        keys=torch.randn(n, d_k, generator=generator), default_query=0, source="random")


def _fresh(example: AttentionExample) -> AttentionExample:
    """A copy the learner may modify in place without moving the expected answer."""
    return AttentionExample(example.tokens, example.queries.clone(), example.keys.clone(),
                            example.default_query, example.source)


def _most_attended_reference(example, causal=False):
    weights = weight_matrix(example, causal=causal)  # (n_q, n_k): one row per query
    return [example.tokens[k] for k in weights.argmax(dim=-1).tolist()]  # leftmost on a tie


def _cases():
    yield pronoun_example(), False
    yield pronoun_example(), True
    yield round_example(), False
    for seed in range(6):  # random vectors, n = 5..10, d_k = 3..8
        yield _random_example(5 + seed, 3 + seed, seed), seed % 2 == 1


def _attends_to_a_later_word(words, tokens) -> bool:
    """True if some query's word occurs in the sentence only after that query."""
    return any(word in tokens and all(k > q for k, token in enumerate(tokens) if token == word)
               for q, word in enumerate(words))


def _check_most_attended(answer):
    for example, causal in _cases():
        expected = _most_attended_reference(example, causal)
        result = attempt(answer, _fresh(example), causal)
        tokens = list(example.tokens)
        setting = f"{' '.join(tokens)!r} with causal={causal}"
        if isinstance(result, torch.Tensor) or (isinstance(result, Sequence) and any(
                isinstance(w, int) and not isinstance(w, bool) for w in result)):
            raise Incorrect("return the words (example.tokens[k]), not their positions")
        if isinstance(result, str) or not isinstance(result, Sequence) or not all(
                isinstance(w, str) for w in result):
            raise Incorrect(f"return a list of words, one per query, got {type(result).__name__}")
        result = list(result)
        if len(result) != len(tokens):
            raise Incorrect(f"for {setting} return {len(tokens)} words, one per query, "
                            f"got {len(result)}")
        if result == expected:
            continue
        weights = weight_matrix(example, causal=causal)  # (n_q, n_k)
        by_column = [tokens[q] for q in weights.argmax(dim=0).tolist()]
        if result == by_column and by_column != expected:
            raise Incorrect(
                "you took the largest weight of each column (key) over the queries. A row "
                "is one query's weights over all keys: take the argmax along the last axis")
        if causal and result == _most_attended_reference(example, False):
            raise Incorrect(f"for {setting} your words ignore the causal mask: with it, a "
                            "word may only attend to itself and the words before it")
        smallest = [tokens[k] for k in weights.argmin(dim=-1).tolist()]
        if result == smallest:
            raise Incorrect("you picked each row's smallest weight: take the largest")
        if causal and _attends_to_a_later_word(result, tokens):
            raise Incorrect(f"for {setting} a word attends to a word after it: with the "
                            "causal mask on, a query sees only itself and earlier words")
        wrong = next(q for q, (a, b) in enumerate(zip(result, expected, strict=True)) if a != b)
        row = weights[wrong]
        ties = [tokens[k] for k in range(len(tokens)) if row.max() - row[k] < TIE]
        tie_note = (f" ({' and '.join(ties)} tie: take the leftmost, as argmax does)"
                    if len(ties) > 1 and result[wrong] in ties else "")
        raise Incorrect(
            f"for {setting}, query {wrong} ({tokens[wrong]!r}) attends most to "
            f"{expected[wrong]!r} (weight {row.max().item():.3f}), you said "
            f"{result[wrong]!r}{tie_note}")


most_attended = Exercise(
    "which word does each word attend to most",
    _check_most_attended,
    _most_attended_reference,
    hints=(
        "weight_matrix(example, causal=causal) gives the weights (n_q, n_k): row i is "
        "query i's weights over all keys.",
        "The position of the largest weight of every row is weights.argmax(dim=-1); turn "
        "each position k into example.tokens[k].",
        "Does the scale 1/√d_k change which weight is largest? Try it.",
    ),
)

# --- Exercise 3: a sentence of your own ------------------------------------------------------

MIN_WORDS, MIN_TARGETS = 5, 3
MARGIN = 0.01  # the largest weight must beat the runner-up by this much (no near-ties)


def _check_own_sentence(answer):
    result = attempt(answer)
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise Incorrect("return two things: (table, predictions)")
    table, predictions = result
    try:
        example = example_from_table(table, source="lesson 09, exercise 3")
    except (TypeError, ValueError) as error:
        raise Incorrect(f"the table does not build an example: {error}") from None
    tokens = list(example.tokens)
    if len(tokens) < MIN_WORDS:
        raise Incorrect(f"use at least {MIN_WORDS} words, got {len(tokens)}")
    if isinstance(predictions, str) or not isinstance(predictions, Sequence) or not all(
            isinstance(w, str) for w in predictions):
        raise Incorrect("predictions should be a list of words, one per word of the sentence")
    if len(predictions) != len(tokens):
        raise Incorrect(f"predict one word for each of the {len(tokens)} words, got "
                        f"{len(predictions)}")
    unknown = sorted(set(predictions) - set(tokens))
    if unknown:
        raise Incorrect(f"{unknown} are not words of your sentence {tokens}")
    weights = weight_matrix(example)  # (n_q, n_k)
    for query, row in enumerate(weights):
        top2 = row.topk(2).values.tolist()
        if top2[0] - top2[1] < MARGIN:
            near = [tokens[k] for k in range(len(tokens)) if top2[0] - row[k] < MARGIN]
            raise Incorrect(
                f"{tokens[query]!r} (word {query}) has no clear favourite: {near} are within "
                f"{MARGIN} of each other. Change what it looks for so that one key wins")
    actual = [tokens[k] for k in weights.argmax(dim=-1).tolist()]
    by_column = [tokens[k] for k in weights.argmax(dim=0).tolist()]
    if list(predictions) == by_column and by_column != actual:
        raise Incorrect("your predictions say which word attends most *to* each word (a "
                        "column); predict each word's own row: what it attends to")
    wrong = [q for q in range(len(tokens)) if predictions[q] != actual[q]]
    if wrong:
        q = wrong[0]
        raise Incorrect(
            f"{len(wrong)} prediction(s) wrong; first: {tokens[q]!r} (word {q}) attends most "
            f"to {actual[q]!r} ({weights[q].max().item():.3f}), you predicted "
            f"{predictions[q]!r}")
    if len(set(actual)) < MIN_TARGETS:
        raise Incorrect(f"your words attend to only {sorted(set(actual))}: make a sentence "
                        f"where at least {MIN_TARGETS} different words are somebody's favourite")


def _own_sentence_reference():
    table = [
        ("the", {"determiner": 1}, {"noun": 2, "animate": 1}),
        ("dog", {"noun": 1, "animate": 1}, {"action": 3}),
        ("found", {"action": 1}, {"noun": 2, "inanimate": 2}),
        ("a", {"determiner": 1}, {"noun": 2, "inanimate": 1}),
        ("stick", {"noun": 1, "inanimate": 1}, {"action": 2, "determiner": 1}),
        ("and", {"connective": 1}, {"action": 3}),
        ("it", {"pronoun": 1}, {"noun": 2, "animate": 5}),
    ]
    # Row by row: what each word looks for decides its favourite key.
    predictions = ["dog", "found", "stick", "stick", "found", "found", "dog"]
    return table, predictions


own_sentence = Exercise(
    "a sentence of your own, and where each word attends",
    _check_own_sentence,
    _own_sentence_reference,
    hints=(
        "Start from the table at the top of the lesson (PRONOUN_SENTENCE): each row is "
        "(word, what it is, what it looks for), with features from PRONOUN_FEATURES.",
        "For each word, its favourite is the key whose properties best match what it looks "
        "for: the dot product. Ties happen when two keys share the properties looked for.",
        "Check a prediction with example_from_table(table) and weight_matrix(...).argmax(-1) "
        "before you submit (or use your most_attended from exercise 2).",
    ),
)
