"""Lesson 09's pronoun task and model (course_utils.experiments.l09_pronoun)."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments.l09_pronoun import (
    ADJECTIVE,
    ANIMAL_ADJECTIVES,
    FIRST_NOUN,
    IT,
    SECOND_NOUN,
    VOCAB,
    PronounModel,
    attention_maps,
    draw_sentences,
    held_out_pairs,
    it_rows,
    referent_accuracy,
    sentence,
    swap_adjective,
    train_pronoun_model,
    words,
)
from course_utils.language import set_language

pytestmark = pytest.mark.unit

_PAIRS = torch.ones(12, 12, dtype=torch.bool)
_TOKENS, _REFERENT = draw_sentences(4, _PAIRS, torch.Generator().manual_seed(0))


def _generator(seed=0):
    return torch.Generator().manual_seed(seed)


def test_held_out_pairs_always_keep_kitten_and_ball_out():
    pairs = held_out_pairs(_generator(3))
    assert pairs.shape == (12, 12) and pairs.dtype == torch.bool
    assert pairs[0, 0] and int(pairs.sum()) == 28
    assert torch.equal(pairs, held_out_pairs(_generator(3)))


def test_sentences_follow_the_rule():
    tokens, referent = draw_sentences(500, _PAIRS, _generator(1))
    assert tokens.shape == (500, 9)
    noun = tokens.gather(1, referent[:, None]).squeeze(1)
    animal_adjective = tokens[:, ADJECTIVE] < VOCAB.index(ANIMAL_ADJECTIVES[-1]) + 1
    is_animal = (noun >= VOCAB.index("kitten")) & (noun < VOCAB.index("ball"))
    assert torch.equal(animal_adjective, is_animal)
    assert 0.4 < float((referent == FIRST_NOUN).float().mean()) < 0.6  # no position hint


def test_draw_sentences_uses_only_the_allowed_pairs():
    pairs = torch.zeros(12, 12, dtype=torch.bool)
    pairs[0, 0] = True
    tokens, _ = draw_sentences(50, pairs, _generator(2))
    nouns = {VOCAB[t] for t in tokens[:, [FIRST_NOUN, SECOND_NOUN]].flatten().tolist()}
    assert nouns == {"kitten", "ball"}


def test_sentence_and_swap():
    tokens, referent = sentence("the ball hit the kitten because it was round")
    assert referent.tolist() == [FIRST_NOUN]
    swapped = swap_adjective(tokens)
    assert VOCAB[int(swapped[0, ADJECTIVE])] == "playful"
    assert torch.equal(swap_adjective(swapped), tokens)


def test_words_in_both_editions():
    tokens, _ = sentence("the kitten chased the ball because it was playful")
    assert words(tokens[0]) == tuple("the kitten chased the ball because it was playful".split())
    try:
        set_language("zh-CN")
        assert "".join(words(tokens[0])) == "这只小猫追着那个球因为它很好动"
        ball_first, _ = sentence("the ball hit the kitten because it was round")
        assert "".join(words(ball_first[0])) == "这个球撞到了那只小猫因为它很圆"
    finally:
        set_language("en")


def test_model_shapes_and_rows():
    model = PronounModel()
    logits, weights = model(_TOKENS)
    assert logits.shape == (4, len(VOCAB)) and weights.shape == (4, 2, 1, 9, 9)
    rows = it_rows(model, _TOKENS)
    assert torch.allclose(rows.sum(-1), torch.ones(4))
    assert (rows[:, IT + 1:] == 0).all()  # layer 1 is causal
    assert attention_maps(model, _TOKENS[0]).shape == (2, 1, 9, 9)


def test_a_stalled_run_starts_again_from_new_weights_and_says_so():
    pairs = held_out_pairs(_generator(0))
    # Nothing reaches a loss of 1e-9 in 30 steps: every start stalls, the last one is kept.
    model, losses, starts = train_pronoun_model(~pairs, _generator(5), steps=30,
                                                max_starts=3, stalled_loss=1e-9)
    first, first_losses, _ = train_pronoun_model(~pairs, _generator(5), steps=30, max_starts=1)
    assert starts == 3 and len(losses) == 30
    assert losses != first_losses  # new weights, new batches: not the first start again


def test_training_is_seeded_and_learns_something():
    pairs = held_out_pairs(_generator(0))
    model, losses, starts = train_pronoun_model(~pairs, _generator(5), steps=60, max_starts=1)
    again, losses_again, _ = train_pronoun_model(~pairs, _generator(5), steps=60, max_starts=1)
    assert losses == losses_again and starts == 1
    assert losses[-1] < losses[0]
    tokens, referent = draw_sentences(100, pairs, _generator(6))
    assert 0.0 <= referent_accuracy(model, tokens, referent) <= 1.0


BAD_INPUTS = [
    pytest.param(held_out_pairs, (0,), {}, TypeError, ("generator", "torch.Generator", "int"),
                 id="held_out_pairs: an int"),
    pytest.param(draw_sentences, (0, _PAIRS, _generator()), {}, ValueError,
                 ("n", "positive int", "got 0"), id="draw_sentences: n 0"),
    pytest.param(draw_sentences, (3, torch.zeros(12, 12, dtype=torch.bool), _generator()), {},
                 ValueError, ("pairs", "at least one True", "shape (12, 12)"),
                 id="draw_sentences: no pair"),
    pytest.param(draw_sentences, (3, torch.ones(3, 3, dtype=torch.bool), _generator()), {},
                 ValueError, ("pairs", "(animals=12, things=12)", "shape (3, 3)"),
                 id="draw_sentences: wrong shape"),
    pytest.param(draw_sentences, (3, _PAIRS, None), {}, TypeError,
                 ("generator", "torch.Generator", "None"), id="draw_sentences: no generator"),
    pytest.param(sentence, ("the kitten chased the dog because it was playful",), {},
                 ValueError, ("words", "because it was", "dog"), id="sentence: unknown word"),
    pytest.param(sentence, ("the kitten chased the puppy because it was playful",), {},
                 ValueError, ("words", "the other kind", "puppy"),
                 id="sentence: two animals"),
    pytest.param(swap_adjective, (_TOKENS[:, :5],), {}, ValueError,
                 ("tokens", "seq_len=9", "(4, 5)"), id="swap_adjective: too short"),
    pytest.param(swap_adjective, (_TOKENS.float(),), {}, TypeError,
                 ("tokens", "integer", "float32"), id="swap_adjective: floats"),
    pytest.param(words, (_TOKENS,), {}, ValueError, ("tokens", "(seq_len,)", "(4, 9)"),
                 id="words: a batch"),
    pytest.param(PronounModel, (0,), {}, ValueError, ("d_model", "positive int", "got 0"),
                 id="PronounModel: d_model 0"),
    pytest.param(PronounModel(), (_TOKENS,), {"cut_layer0": (9,)}, ValueError,
                 ("cut_layer0", "positions in 0..8", "(9,)"), id="PronounModel: cut position 9"),
    pytest.param(train_pronoun_model, (_PAIRS, _generator()), {"steps": 0}, ValueError,
                 ("steps", "positive int", "got 0"), id="train_pronoun_model: no steps"),
    pytest.param(train_pronoun_model, (_PAIRS, _generator()), {"max_starts": 0}, ValueError,
                 ("max_starts", "positive int", "got 0"), id="train_pronoun_model: no start"),
    pytest.param(it_rows, (PronounModel(), _TOKENS), {"layer": 2}, ValueError,
                 ("layer", "0..1", "got 2"), id="it_rows: layer 2"),
    pytest.param(it_rows, (torch.nn.Linear(2, 2), _TOKENS), {}, TypeError,
                 ("model", "PronounModel", "Linear"), id="it_rows: not the model"),
    pytest.param(referent_accuracy, (PronounModel(), _TOKENS, _REFERENT[:2]), {}, ValueError,
                 ("referent", "(batch=4,)", "shape (2,)"), id="referent_accuracy: short"),
    pytest.param(attention_maps, ("model", _TOKENS[0]), {}, TypeError,
                 ("model", "PronounModel", "str"), id="attention_maps: a str"),
]
