"""Lesson 09 exercises: make "it" attend to "ball"; which word does each word attend to most;
build a sentence of your own and predict its attention. Messages, titles and hints follow the
course language; in another edition the sentence of exercise 1 is that edition's twin (its
``edition.json``), word for word in the English roles.

All three use the hand-set vectors of ``course_utils.views.explorer``: keys say what a
word is, queries what it looks for, over the eight ``PRONOUN_FEATURES``; weights are
softmax(q·k / √8) with no mask unless a task says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_utils.checks import require_instance
from course_utils.exercises import Exercise, Incorrect, as_number, attempt
from course_utils.language import N_, _
from course_utils.views.explorer_model import (
    PRONOUN_FEATURES,
    ROUND_SENTENCE,
    AttentionExample,
    example_from_table,
    in_course_language,
    pronoun_example,
    round_example,
    weight_matrix,
)

# --- Exercise 1: the query of "it" ------------------------------------------------------------

BALL_WEIGHT = 0.5  # the share of the weight "ball" must get, at least
TIE = 1e-6  # two weights closer than this count as a tie
# Positions in ROUND_SENTENCE, the same in every edition: kitten 1, ball 4, it 6, round 8.
KITTEN, BALL, IT, ROUND = 1, 4, 6, 8


def _word(position: int) -> str:
    """The word at ``position`` of the exercise's sentence, in the course language."""
    return in_course_language(ROUND_SENTENCE, "round_sentence")[position][0]


def _learners_query(strengths) -> dict[str, float]:
    if not isinstance(strengths, Mapping):
        got = type(strengths).__name__
        raise Incorrect(_(
            "return a dict {{feature: strength}} such as {{'noun': 2}}, got {got}").format(
            got=got))
    unknown = sorted(set(strengths) - set(PRONOUN_FEATURES))
    if unknown:
        features = ", ".join(PRONOUN_FEATURES)
        raise Incorrect(_(
            "unknown feature {unknown}: a query can only look for {features}").format(
            unknown=unknown, features=features))
    return {name: as_number(value, _("the strength of {name!r}").format(name=name))
            for name, value in strengths.items()}


def with_query_of_it(strengths: Mapping[str, float]) -> AttentionExample:
    """"the kitten chased the ball because it was round" (in the course language), "it"
    looking for ``strengths``.

    Used in lesson 09.
    """
    require_instance("strengths", strengths, Mapping, _("a dict feature -> strength"))
    table = [(word, is_, dict(strengths) if position == IT else wants)
             for position, (word, is_, wants) in
             enumerate(in_course_language(ROUND_SENTENCE, "round_sentence"))]
    return example_from_table(table, default_query=IT,
                              source=_("lesson 09, exercise 1"))


def _check_it_attends_to_ball(answer):
    strengths = _learners_query(attempt(answer))
    example = with_query_of_it(strengths)
    row = weight_matrix(example)[IT].tolist()  # (n_k,)
    top = max(row)
    positions = [k for k, w in enumerate(row) if top - w < TIE]
    winners = [example.tokens[k] for k in positions]
    kitten, ball, it, round_ = (f"'{_word(k)}'" for k in (KITTEN, BALL, IT, ROUND))
    if len(winners) > 1:
        if set(positions) == {KITTEN, BALL}:
            raise Incorrect(_(
                "{kitten} and {ball} tie at {top:.3f}: your query rewards what both have (both "
                "are nouns). Look for a property that only {ball} has").format(
                kitten=kitten, ball=ball, top=top))
        extra = (_(
            " A negative strength makes a word that has the property less likely, not more.")
                 if any(v < 0 for v in strengths.values()) else "")
        raise Incorrect(_(
            "no single word stands out: {winners} tie at {top:.3f}.{extra}").format(
            winners=winners, top=top, extra=extra))
    winner = positions[0]
    if winner == KITTEN:
        why = (_(" It still looks for 'animate', which only {kitten} has.").format(kitten=kitten)
               if strengths.get("animate", 0) > 0 else "")
        raise Incorrect(_(
            "{it} still attends most to {kitten} ({top:.3f}).{why}").format(
            it=it, kitten=kitten, top=top, why=why))
    if winner == ROUND:
        raise Incorrect(_(
            "{it} attends most to {round} ({top:.3f}), the quality word itself, not the thing "
            "that is round: look for what {ball} is").format(
            it=it, round=round_, top=top, ball=ball))
    if winner == IT:
        raise Incorrect(_(
            "{it} attends most to itself ({top:.3f}): its key is 'pronoun', so looking for a "
            "pronoun finds {it}").format(it=it, top=top))
    if winner != BALL:
        raise Incorrect(_(
            "{it} attends most to {winners!r} ({top:.3f}), not to {ball}").format(
            it=it, winners=winners[0], top=top, ball=ball))
    if row[BALL] < BALL_WEIGHT:
        raise Incorrect(_(
            "{ball} gets the largest weight but only {row:.3f}; the task asks for at least "
            "{BALL_WEIGHT}: look for what {ball} is more strongly").format(
            ball=ball, row=row[BALL], BALL_WEIGHT=BALL_WEIGHT))


def _query_of_it_reference():
    # "ball" is an inanimate noun: look for that, as strongly as "it" looked for animate.
    return {"noun": 2, "inanimate": 5.5, "quality": 1.5}


it_attends_to_ball = Exercise(
    N_("make 'it' attend to 'ball'"),
    _check_it_attends_to_ball,
    _query_of_it_reference,
    hints=(
        N_(
            "A score is the dot product of the query of 'it' with each key. Which properties does "
            "the key of 'ball' have that the key of 'kitten' does not? (print(ROUND_SENTENCE) or "
            "look at the table at the top of the lesson.)"),
        N_(
            "'ball' is {'noun': 1, 'inanimate': 1}; 'kitten' is {'noun': 1, 'animate': 1}. "
            "Looking for 'noun' alone gives them the same score."),
        N_(
            "With the 1/√8 scale a score gap of about 5 gives the winner more than half the "
            "weight: try {'noun': 2, 'inanimate': 5.5}."),
    ),
)

# --- Exercise 2: which word does each word attend to most? -----------------------------------


def _random_example(n: int, d_k: int, seed: int, scale: float = 1.0) -> AttentionExample:
    generator = torch.Generator().manual_seed(seed)
    return AttentionExample(
        tokens=tuple(f"w{i}" for i in range(n)),
        queries=scale * torch.randn(n, d_k, generator=generator),
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
    # Flat rows (no weight above 0.5, so "the key above 0.5" is not "the largest"), and
    # scores in the hundreds (weights of exactly 0 and 1), with longer sentences.
    yield _random_example(14, 4, 6, scale=0.3), False
    yield _random_example(12, 6, 7, scale=0.3), True
    yield _random_example(16, 8, 8, scale=60.0), False


def _attends_to_a_later_word(words, tokens) -> bool:
    """True if some query's word occurs in the sentence only after that query."""
    return any(word in tokens and all(k > q for k, token in enumerate(tokens) if token == word)
               for q, word in enumerate(words))


def _check_most_attended(answer):
    for example, causal in _cases():
        expected = _most_attended_reference(example, causal)
        result = attempt(answer, _fresh(example), causal)
        tokens = list(example.tokens)
        setting = _("{names!r} with causal={causal}").format(names=' '.join(tokens), causal=causal)
        if isinstance(result, torch.Tensor) or (isinstance(result, Sequence) and any(
                isinstance(w, int) and not isinstance(w, bool) for w in result)):
            raise Incorrect(_("return the words (example.tokens[k]), not their positions"))
        if isinstance(result, str) or not isinstance(result, Sequence) or not all(
                isinstance(w, str) for w in result):
            got = type(result).__name__
            raise Incorrect(_("return a list of words, one per query, got {got}").format(got=got))
        result = list(result)
        if len(result) != len(tokens):
            raise Incorrect(_(
                "for {setting} return {n_tokens} words, one per query, got {n_result}").format(
                setting=setting, n_tokens=len(tokens), n_result=len(result)))
        if result == expected:
            continue
        weights = weight_matrix(example, causal=causal)  # (n_q, n_k)
        by_column = [tokens[q] for q in weights.argmax(dim=0).tolist()]
        if result == by_column and by_column != expected:
            raise Incorrect(_(
                "you took the largest weight of each column (key) over the queries. A row is one "
                "query's weights over all keys: take the argmax along the last axis"))
        if causal and result == _most_attended_reference(example, False):
            raise Incorrect(_(
                "for {setting} your words ignore the causal mask: with it, a word may only attend "
                "to itself and the words before it").format(setting=setting))
        smallest = [tokens[k] for k in weights.argmin(dim=-1).tolist()]
        if result == smallest:
            raise Incorrect(_("you picked each row's smallest weight: take the largest"))
        if causal and _attends_to_a_later_word(result, tokens):
            raise Incorrect(_(
                "for {setting} a word attends to a word after it: with the causal mask on, a "
                "query sees only itself and earlier words").format(setting=setting))
        wrong = next(q for q, (a, b) in enumerate(zip(result, expected, strict=True)) if a != b)
        row = weights[wrong]
        ties = [tokens[k] for k in range(len(tokens)) if row.max() - row[k] < TIE]
        tie_note = (_(" ({ties} tie: take the leftmost, as argmax does)").format(
                        ties=_(" and ").join(ties))
                    if len(ties) > 1 and result[wrong] in ties else "")
        best = row.max().item()
        raise Incorrect(_(
            "for {setting}, query {wrong} ({tokens!r}) attends most to {expected!r} (weight "
            "{best:.3f}), you said {result!r}{tie_note}").format(
            setting=setting, wrong=wrong, tokens=tokens[wrong], expected=expected[wrong],
            best=best, result=result[wrong], tie_note=tie_note))


most_attended = Exercise(
    N_("which word does each word attend to most"),
    _check_most_attended,
    _most_attended_reference,
    hints=(
        N_(
            "weight_matrix(example, causal=causal) gives the weights (n_q, n_k): row i is query "
            "i's weights over all keys."),
        N_(
            "The position of the largest weight of every row is weights.argmax(dim=-1); turn each "
            "position k into example.tokens[k]."),
        N_("Does the scale 1/√d_k change which weight is largest? Try it."),
    ),
)

# --- Exercise 3: a sentence of your own ------------------------------------------------------

MIN_WORDS, MIN_TARGETS = 5, 3
MARGIN = 0.01  # the largest weight must beat the runner-up by this much (no near-ties)


def _learners_table(table) -> list:
    """The learner's rows, checked here (with messages in the course language) so that
    ``example_from_table`` cannot refuse them."""
    if isinstance(table, str) or not isinstance(table, Sequence) or not table:
        raise Incorrect(_("the table should be a non-empty list of rows (word, what it is, "
                          "what it looks for)"))
    rows = []
    for number, row in enumerate(table):
        if not (isinstance(row, tuple | list) and len(row) == 3 and isinstance(row[0], str)
                and all(isinstance(strengths, Mapping) for strengths in row[1:])):
            raise Incorrect(_("row {number} should be (word, {{feature: strength}}, "
                              "{{feature: strength}}), got {row!r}").format(number=number,
                                                                           row=row))
        word, is_, wants = row
        unknown = sorted((set(is_) | set(wants)) - set(PRONOUN_FEATURES))
        if unknown:
            raise Incorrect(_("row {number} ({word!r}): unknown features {unknown}; a word can "
                              "only be or look for {features}").format(
                number=number, word=word, unknown=unknown, features=", ".join(PRONOUN_FEATURES)))
        rows.append((word, *({name: as_number(value, _(
            "the strength of {name!r} in row {number}").format(name=name, number=number))
            for name, value in strengths.items()} for strengths in (is_, wants))))
    return rows


def _check_own_sentence(answer):
    result = attempt(answer)
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise Incorrect(_("return two things: (table, predictions)"))
    table, predictions = result
    example = example_from_table(_learners_table(table), source=_("lesson 09, exercise 3"))
    tokens = list(example.tokens)
    if len(tokens) < MIN_WORDS:
        raise Incorrect(_(
            "use at least {MIN_WORDS} words, got {n_tokens}").format(
            MIN_WORDS=MIN_WORDS, n_tokens=len(tokens)))
    if isinstance(predictions, str) or not isinstance(predictions, Sequence) or not all(
            isinstance(w, str) for w in predictions):
        raise Incorrect(_("predictions should be a list of words, one per word of the sentence"))
    if len(predictions) != len(tokens):
        raise Incorrect(_(
            "predict one word for each of the {n_tokens} words, got {n_predictions}").format(
            n_tokens=len(tokens), n_predictions=len(predictions)))
    unknown = sorted(set(predictions) - set(tokens))
    if unknown:
        raise Incorrect(_(
            "{unknown} are not words of your sentence {tokens}").format(
            unknown=unknown, tokens=tokens))
    weights = weight_matrix(example)  # (n_q, n_k)
    for query, row in enumerate(weights):
        top2 = row.topk(2).values.tolist()
        if top2[0] - top2[1] < MARGIN:
            near = [tokens[k] for k in range(len(tokens)) if top2[0] - row[k] < MARGIN]
            raise Incorrect(_(
                "{tokens!r} (word {query}) has no clear favourite: {near} are within {MARGIN} of "
                "each other. Change what it looks for so that one key wins").format(
                tokens=tokens[query], query=query, near=near, MARGIN=MARGIN))
    actual = [tokens[k] for k in weights.argmax(dim=-1).tolist()]
    by_column = [tokens[k] for k in weights.argmax(dim=0).tolist()]
    if list(predictions) == by_column and by_column != actual:
        raise Incorrect(_(
            "your predictions say which word attends most *to* each word (a column); predict each "
            "word's own row: what it attends to"))
    wrong = [q for q in range(len(tokens)) if predictions[q] != actual[q]]
    if wrong:
        q = wrong[0]
        best = weights[q].max().item()
        raise Incorrect(_(
            "{n_wrong} prediction(s) wrong; first: {tokens!r} (word {q}) attends most to "
            "{actual!r} ({best:.3f}), you predicted {predictions!r}").format(
            n_wrong=len(wrong), tokens=tokens[q], q=q, actual=actual[q], best=best,
            predictions=predictions[q]))
    if len(set(actual)) < MIN_TARGETS:
        targets = sorted(set(actual))
        raise Incorrect(_(
            "your words attend to only {targets}: make a sentence where at least {MIN_TARGETS} "
            "different words are somebody's favourite").format(
            targets=targets, MIN_TARGETS=MIN_TARGETS))


def _own_sentence_reference():
    words = _("the dog found a stick and it").split()
    the, dog, found, a, stick, and_, it = words
    table = [
        (the, {"determiner": 1}, {"noun": 2, "animate": 1}),
        (dog, {"noun": 1, "animate": 1}, {"action": 3}),
        (found, {"action": 1}, {"noun": 2, "inanimate": 2}),
        (a, {"determiner": 1}, {"noun": 2, "inanimate": 1}),
        (stick, {"noun": 1, "inanimate": 1}, {"action": 2, "determiner": 1}),
        (and_, {"connective": 1}, {"action": 3}),
        (it, {"pronoun": 1}, {"noun": 2, "animate": 5}),
    ]
    # Row by row: what each word looks for decides its favourite key.
    predictions = [dog, found, stick, stick, found, found, dog]
    return table, predictions


own_sentence = Exercise(
    N_("a sentence of your own, and where each word attends"),
    _check_own_sentence,
    _own_sentence_reference,
    hints=(
        N_(
            "Start from the table at the top of the lesson (PRONOUN_SENTENCE): each row is (word, "
            "what it is, what it looks for), with features from PRONOUN_FEATURES."),
        N_(
            "For each word, its favourite is the key whose properties best match what it looks "
            "for: the dot product. Ties happen when two keys share the properties looked for."),
        N_(
            "Check a prediction with example_from_table(table) and weight_matrix(...).argmax(-1) "
            "before you submit (or use your most_attended from exercise 2)."),
    ),
)
