"""Lesson 09 exercises: make "it" attend to "ball"; which word does each word attend to most;
build a sentence of your own and predict its attention. Messages, titles and hints follow the
course language; in the Chinese edition the sentence of exercise 1 is its Chinese twin
(这只小猫追着那个球，因为它很圆), word for word in the English roles.

All three use the hand-set vectors of ``course_utils.widgets.explorer``: keys say what a
word is, queries what it looks for, over the eight ``PRONOUN_FEATURES``; weights are
softmax(q·k / √8) with no mask unless a task says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_utils.exercises import Exercise, Incorrect, as_number, attempt
from course_utils.language import Bilingual, text
from course_utils.widgets.explorer import (
    PRONOUN_FEATURES,
    ROUND_SENTENCE,
    ROUND_WORDS_ZH,
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
# Positions in ROUND_SENTENCE (the same in both editions: 小猫 1, 球 4, 它 6, 圆 8).
KITTEN, BALL, IT, ROUND = 1, 4, 6, 8


def _word(position: int) -> str:
    """The word at ``position`` of the exercise's sentence, in the course language."""
    return in_course_language(ROUND_SENTENCE, ROUND_WORDS_ZH)[position][0]


def _learners_query(strengths) -> dict[str, float]:
    if not isinstance(strengths, Mapping):
        got = type(strengths).__name__
        raise Incorrect(text(f"return a dict {{feature: strength}} such as {{'noun': 2}}, got "
                             f"{got}",
                             f"请返回一个字典 {{feature: strength}}，例如 {{'noun': 2}}，"
                             f"而你返回的是 {got}"))
    unknown = sorted(set(strengths) - set(PRONOUN_FEATURES))
    if unknown:
        features = ", ".join(PRONOUN_FEATURES)
        raise Incorrect(text(f"unknown feature {unknown}: a query can only look for {features}",
                             f"未知的特征 {unknown}：查询只能寻找这些特征：{features}"))
    return {name: as_number(value, Bilingual(f"the strength of {name!r}", f"{name!r} 的强度"))
            for name, value in strengths.items()}


def with_query_of_it(strengths: Mapping[str, float]) -> AttentionExample:
    """"the kitten chased the ball because it was round" (in the course language), "it"
    looking for ``strengths``."""
    table = [(word, is_, dict(strengths) if position == IT else wants)
             for position, (word, is_, wants) in
             enumerate(in_course_language(ROUND_SENTENCE, ROUND_WORDS_ZH))]
    return example_from_table(table, default_query=IT,
                              source=text("lesson 09, exercise 1", "第 09 课，练习 1"))


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
            raise Incorrect(text(
                f"{kitten} and {ball} tie at {top:.3f}: your query rewards what both have "
                f"(both are nouns). Look for a property that only {ball} has",
                f"{kitten}和{ball}以 {top:.3f} 并列：你的查询奖励的是两者都有的性质（它们都是"
                f"名词）。请寻找只有{ball}才有的性质"))
        extra = (text(" A negative strength makes a word that has the property less likely, "
                      "not more.", "负的强度会让具有这个性质的词更不可能被关注，而不是更可能。")
                 if any(v < 0 for v in strengths.values()) else "")
        raise Incorrect(text(f"no single word stands out: {winners} tie at {top:.3f}.{extra}",
                             f"没有哪个词单独胜出：{winners} 以 {top:.3f} 并列。{extra}"))
    winner = positions[0]
    if winner == KITTEN:
        why = (text(f" It still looks for 'animate', which only {kitten} has.",
                    f"它仍在寻找 'animate'（有生命），而只有{kitten}具有这个性质。")
               if strengths.get("animate", 0) > 0 else "")
        raise Incorrect(text(f"{it} still attends most to {kitten} ({top:.3f}).{why}",
                             f"{it}仍然最关注{kitten}（{top:.3f}）。{why}"))
    if winner == ROUND:
        raise Incorrect(text(
            f"{it} attends most to {round_} ({top:.3f}), the quality word itself, "
            f"not the thing that is round: look for what {ball} is",
            f"{it}最关注{round_}（{top:.3f}），也就是表示性质的那个词本身，而不是那个圆的东西："
            f"请寻找{ball}是什么"))
    if winner == IT:
        raise Incorrect(text(f"{it} attends most to itself ({top:.3f}): its key is 'pronoun', "
                             f"so looking for a pronoun finds {it}",
                             f"{it}最关注它自己（{top:.3f}）：它的键是 'pronoun'（代词），"
                             f"所以寻找代词就会找到{it}"))
    if winner != BALL:
        raise Incorrect(text(f"{it} attends most to {winners[0]!r} ({top:.3f}), not to {ball}",
                             f"{it}最关注 {winners[0]!r}（{top:.3f}），而不是{ball}"))
    if row[BALL] < BALL_WEIGHT:
        raise Incorrect(text(
            f"{ball} gets the largest weight but only {row[BALL]:.3f}; the task "
            f"asks for at least {BALL_WEIGHT}: look for what {ball} is more strongly",
            f"{ball}得到了最大的权重，但只有 {row[BALL]:.3f}；题目要求至少 {BALL_WEIGHT}："
            f"请更用力地寻找{ball}所具有的性质"))


def _query_of_it_reference():
    # "ball" is an inanimate noun: look for that, as strongly as "it" looked for animate.
    return {"noun": 2, "inanimate": 5.5, "quality": 1.5}


it_attends_to_ball = Exercise(
    Bilingual("make 'it' attend to 'ball'", "让“它”关注“球”"),
    _check_it_attends_to_ball,
    _query_of_it_reference,
    hints=(
        Bilingual(
            "A score is the dot product of the query of 'it' with each key. Which properties "
            "does the key of 'ball' have that the key of 'kitten' does not? "
            "(print(ROUND_SENTENCE) or look at the table at the top of the lesson.)",
            "分数是“它”的查询与每个键的点积。“球”的键有哪些性质是“小猫”的键没有的？"
            "（print(ROUND_SENTENCE)，或者看本课开头的那张表。）"),
        Bilingual(
            "'ball' is {'noun': 1, 'inanimate': 1}; 'kitten' is {'noun': 1, 'animate': 1}. "
            "Looking for 'noun' alone gives them the same score.",
            "“球”是 {'noun': 1, 'inanimate': 1}；“小猫”是 {'noun': 1, 'animate': 1}。"
            "只寻找 'noun'（名词）会让它们分数相同。"),
        Bilingual(
            "With the 1/√8 scale a score gap of about 5 gives the winner more than half the "
            "weight: try {'noun': 2, 'inanimate': 5.5}.",
            "在 1/√8 缩放下，分数相差约 5 就能让胜出者拿到一半以上的权重："
            "试试 {'noun': 2, 'inanimate': 5.5}。"),
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
        setting = text(f"{' '.join(tokens)!r} with causal={causal}",
                       f"{' '.join(tokens)!r}（causal={causal}）")
        if isinstance(result, torch.Tensor) or (isinstance(result, Sequence) and any(
                isinstance(w, int) and not isinstance(w, bool) for w in result)):
            raise Incorrect(text("return the words (example.tokens[k]), not their positions",
                                 "请返回词本身（example.tokens[k]），而不是它们的位置"))
        if isinstance(result, str) or not isinstance(result, Sequence) or not all(
                isinstance(w, str) for w in result):
            got = type(result).__name__
            raise Incorrect(text(f"return a list of words, one per query, got {got}",
                                 f"请返回一个词的列表，每个查询一个词，而你返回的是 {got}"))
        result = list(result)
        if len(result) != len(tokens):
            raise Incorrect(text(f"for {setting} return {len(tokens)} words, one per query, "
                                 f"got {len(result)}",
                                 f"对 {setting} 应返回 {len(tokens)} 个词（每个查询一个），"
                                 f"而你返回了 {len(result)} 个"))
        if result == expected:
            continue
        weights = weight_matrix(example, causal=causal)  # (n_q, n_k)
        by_column = [tokens[q] for q in weights.argmax(dim=0).tolist()]
        if result == by_column and by_column != expected:
            raise Incorrect(text(
                "you took the largest weight of each column (key) over the queries. A row "
                "is one query's weights over all keys: take the argmax along the last axis",
                "你取的是每一列（键）在所有查询上的最大权重。一行是一个查询对所有键的权重："
                "请沿最后一个轴取 argmax"))
        if causal and result == _most_attended_reference(example, False):
            raise Incorrect(text(f"for {setting} your words ignore the causal mask: with it, a "
                                 "word may only attend to itself and the words before it",
                                 f"对 {setting}，你的结果忽略了因果掩码：加上它之后，一个词"
                                 "只能关注它自己和它前面的词"))
        smallest = [tokens[k] for k in weights.argmin(dim=-1).tolist()]
        if result == smallest:
            raise Incorrect(text("you picked each row's smallest weight: take the largest",
                                 "你选的是每一行最小的权重：请取最大的"))
        if causal and _attends_to_a_later_word(result, tokens):
            raise Incorrect(text(f"for {setting} a word attends to a word after it: with the "
                                 "causal mask on, a query sees only itself and earlier words",
                                 f"对 {setting}，有一个词关注了它后面的词：打开因果掩码时，"
                                 "查询只能看到它自己和更早的词"))
        wrong = next(q for q, (a, b) in enumerate(zip(result, expected, strict=True)) if a != b)
        row = weights[wrong]
        ties = [tokens[k] for k in range(len(tokens)) if row.max() - row[k] < TIE]
        tie_note = (text(f" ({' and '.join(ties)} tie: take the leftmost, as argmax does)",
                         f"（{'、'.join(ties)} 并列：像 argmax 那样取最左边的）")
                    if len(ties) > 1 and result[wrong] in ties else "")
        best = row.max().item()
        raise Incorrect(text(
            f"for {setting}, query {wrong} ({tokens[wrong]!r}) attends most to "
            f"{expected[wrong]!r} (weight {best:.3f}), you said "
            f"{result[wrong]!r}{tie_note}",
            f"对 {setting}，第 {wrong} 个查询（{tokens[wrong]!r}）最关注 "
            f"{expected[wrong]!r}（权重 {best:.3f}），你给出的是 {result[wrong]!r}{tie_note}"))


most_attended = Exercise(
    Bilingual("which word does each word attend to most", "每个词最关注哪个词"),
    _check_most_attended,
    _most_attended_reference,
    hints=(
        Bilingual("weight_matrix(example, causal=causal) gives the weights (n_q, n_k): row i is "
                  "query i's weights over all keys.",
                  "weight_matrix(example, causal=causal) 给出权重 (n_q, n_k)：第 i 行是"
                  "第 i 个查询对所有键的权重。"),
        Bilingual("The position of the largest weight of every row is weights.argmax(dim=-1); "
                  "turn each position k into example.tokens[k].",
                  "每一行最大权重的位置是 weights.argmax(dim=-1)；再把每个位置 k 换成 "
                  "example.tokens[k]。"),
        Bilingual("Does the scale 1/√d_k change which weight is largest? Try it.",
                  "缩放 1/√d_k 会改变哪个权重最大吗？试一试。"),
    ),
)

# --- Exercise 3: a sentence of your own ------------------------------------------------------

MIN_WORDS, MIN_TARGETS = 5, 3
MARGIN = 0.01  # the largest weight must beat the runner-up by this much (no near-ties)


def _check_own_sentence(answer):
    result = attempt(answer)
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise Incorrect(text("return two things: (table, predictions)",
                             "请返回两样东西：(table, predictions)"))
    table, predictions = result
    try:
        example = example_from_table(table, source=text("lesson 09, exercise 3",
                                                        "第 09 课，练习 3"))
    except (TypeError, ValueError) as error:
        raise Incorrect(text(f"the table does not build an example: {error}",
                             f"这张表构造不出例子（原因见后）：{error}")) from None
    tokens = list(example.tokens)
    if len(tokens) < MIN_WORDS:
        raise Incorrect(text(f"use at least {MIN_WORDS} words, got {len(tokens)}",
                             f"至少要用 {MIN_WORDS} 个词，而你用了 {len(tokens)} 个"))
    if isinstance(predictions, str) or not isinstance(predictions, Sequence) or not all(
            isinstance(w, str) for w in predictions):
        raise Incorrect(text("predictions should be a list of words, one per word of the "
                             "sentence", "predictions 应当是一个词的列表，句子里每个词对应一个"))
    if len(predictions) != len(tokens):
        raise Incorrect(text(f"predict one word for each of the {len(tokens)} words, got "
                             f"{len(predictions)}",
                             f"请为 {len(tokens)} 个词各预测一个词，而你给出了 "
                             f"{len(predictions)} 个"))
    unknown = sorted(set(predictions) - set(tokens))
    if unknown:
        raise Incorrect(text(f"{unknown} are not words of your sentence {tokens}",
                             f"{unknown} 不是你的句子 {tokens} 里的词"))
    weights = weight_matrix(example)  # (n_q, n_k)
    for query, row in enumerate(weights):
        top2 = row.topk(2).values.tolist()
        if top2[0] - top2[1] < MARGIN:
            near = [tokens[k] for k in range(len(tokens)) if top2[0] - row[k] < MARGIN]
            raise Incorrect(text(
                f"{tokens[query]!r} (word {query}) has no clear favourite: {near} are within "
                f"{MARGIN} of each other. Change what it looks for so that one key wins",
                f"{tokens[query]!r}（第 {query} 个词）没有明确的最爱：{near} 彼此相差不到 "
                f"{MARGIN}。改一改它要找的性质，让某一个键胜出"))
    actual = [tokens[k] for k in weights.argmax(dim=-1).tolist()]
    by_column = [tokens[k] for k in weights.argmax(dim=0).tolist()]
    if list(predictions) == by_column and by_column != actual:
        raise Incorrect(text("your predictions say which word attends most *to* each word (a "
                             "column); predict each word's own row: what it attends to",
                             "你预测的是哪个词最关注*这个*词（一列）；请预测每个词自己的那一行："
                             "它关注的是谁"))
    wrong = [q for q in range(len(tokens)) if predictions[q] != actual[q]]
    if wrong:
        q = wrong[0]
        best = weights[q].max().item()
        raise Incorrect(text(
            f"{len(wrong)} prediction(s) wrong; first: {tokens[q]!r} (word {q}) attends most "
            f"to {actual[q]!r} ({best:.3f}), you predicted {predictions[q]!r}",
            f"有 {len(wrong)} 个预测错了；第一个：{tokens[q]!r}（第 {q} 个词）最关注 "
            f"{actual[q]!r}（{best:.3f}），你预测的是 {predictions[q]!r}"))
    if len(set(actual)) < MIN_TARGETS:
        targets = sorted(set(actual))
        raise Incorrect(text(f"your words attend to only {targets}: make a sentence "
                             f"where at least {MIN_TARGETS} different words are somebody's "
                             "favourite",
                             f"你的词只关注了 {targets}：请造一个句子，让至少 {MIN_TARGETS} 个"
                             "不同的词成为某个词的最爱"))


def _own_sentence_reference():
    words = text("the dog found a stick and it", "那只 狗 找到了 一根 树枝 然后 它").split()
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
    Bilingual("a sentence of your own, and where each word attends",
              "你自己的句子，以及每个词关注哪里"),
    _check_own_sentence,
    _own_sentence_reference,
    hints=(
        Bilingual("Start from the table at the top of the lesson (PRONOUN_SENTENCE): each row "
                  "is (word, what it is, what it looks for), with features from "
                  "PRONOUN_FEATURES.",
                  "从本课开头的那张表（PRONOUN_SENTENCE）出发：每行是（词，它是什么，它在找什么），"
                  "特征取自 PRONOUN_FEATURES；词可以是中文。"),
        Bilingual("For each word, its favourite is the key whose properties best match what it "
                  "looks for: the dot product. Ties happen when two keys share the properties "
                  "looked for.",
                  "每个词的最爱，是其性质与它要找的东西最匹配的那个键：也就是点积最大的键。"
                  "如果两个键都具有它要找的性质，就会出现并列。"),
        Bilingual("Check a prediction with example_from_table(table) and "
                  "weight_matrix(...).argmax(-1) before you submit (or use your most_attended "
                  "from exercise 2).",
                  "提交之前，先用 example_from_table(table) 和 weight_matrix(...).argmax(-1) "
                  "核对你的预测（或者用你在练习 2 中写的 most_attended）。"),
    ),
)
