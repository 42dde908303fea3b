"""Lesson 09: a small model learns which noun "it" means, and its row of "it" shows it.

The sentences all have one shape, nine words::

    the N1 VERB the N2 because it was ADJECTIVE
    0   1  2    3   4  5       6  7   8

One noun is an animal, the other a thing (in either order), and only the adjective decides
which one "it" means: an animal's adjective (playful, hungry, ...) means the animal, a
thing's (round, shiny, ...) the thing. Twelve animals, twelve things, six verbs and eight
adjectives of each kind: no sentence and no position tells the answer, only the rule does.
Some pairs of nouns (always kitten and ball) are kept out of training and make the
held-out sentences.

The model (:class:`PronounModel`) is two attention layers over word + position embeddings:

- layer 0: one head, every word may read every word (the only layer where anything can
  read the adjective, which comes after "it");
- layer 1: one head, causal (a word reads itself and the words to its left), whose values
  are the words' own embeddings; the model's answer is read from this head's output at
  "it" alone. So what reaches the answer is *which words* the row of "it" took, mixed by
  its weights: the model can name the right noun only by weighting it more.

It is trained to name the referent (cross-entropy over the vocabulary), never told where to
look. Every random choice comes from the ``torch.Generator`` passed in (a lesson passes
``course_utils.notebook.lesson_generator(i)``).

The words are ids; the current edition only names them (``words``), so every edition
trains the same model on the same ids and computes the same numbers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_instance,
    require_int_in_range,
    require_positive_int,
    require_positive_number,
    require_token_ids,
)
from course_utils.language import _, example_words
from course_utils.nn.attention import scaled_dot_product_attention
from course_utils.nn.masks import causal_mask
from course_utils.nn.training import fit

ANIMALS = ("kitten", "puppy", "rabbit", "mouse", "fox", "duck", "bird", "goat", "piglet",
           "monkey", "tiger", "panda")
THINGS = ("ball", "box", "cup", "bowl", "bottle", "basket", "pillow", "bucket", "plate", "bell",
          "drum", "jar")
VERBS = ("chased", "watched", "hit", "pushed", "found", "passed")
ANIMAL_ADJECTIVES = ("playful", "hungry", "sleepy", "curious", "scared", "angry", "happy",
                     "tired")
THING_ADJECTIVES = ("round", "square", "shiny", "hard", "smooth", "flat", "broken", "sticky")
FRAME = ("the", "because", "it", "was")
# The vocabulary: ids 0..49 in this order.
VOCAB = FRAME + ANIMALS + THINGS + VERBS + ANIMAL_ADJECTIVES + THING_ADJECTIVES
_THE, _BECAUSE, _IT, _WAS = range(4)
_ANIMAL0 = len(FRAME)
_THING0 = _ANIMAL0 + len(ANIMALS)
_VERB0 = _THING0 + len(THINGS)
_ANIMAL_ADJ0 = _VERB0 + len(VERBS)
_THING_ADJ0 = _ANIMAL_ADJ0 + len(ANIMAL_ADJECTIVES)
# Positions in every sentence.
FIRST_NOUN, SECOND_NOUN, IT, ADJECTIVE, SEQ_LEN = 1, 4, 6, 8, 9
HELD_OUT_PAIRS = 28  # of the 12 x 12 (animal, thing) pairs, kitten-ball among them


def held_out_pairs(generator: torch.Generator) -> torch.Tensor:
    """Which (animal, thing) pairs never meet in a training sentence: bool ``(12, 12)``,
    True = held out; (kitten, ball) always is, and ``HELD_OUT_PAIRS - 1`` others at random.

    Used in lesson 09.
    """
    require_instance("generator", generator, torch.Generator, _("a torch.Generator"))
    others = torch.randperm(len(ANIMALS) * len(THINGS) - 1, generator=generator) + 1
    held = torch.zeros(len(ANIMALS) * len(THINGS), dtype=torch.bool)
    held[0] = True  # kitten (animal 0) with ball (thing 0)
    held[others[:HELD_OUT_PAIRS - 1]] = True
    return held.view(len(ANIMALS), len(THINGS))


def draw_sentences(n: int, pairs: torch.Tensor,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random sentences whose (animal, thing) pair is True in ``pairs`` (12, 12):
    token ids ``(n, seq_len=9)`` and the referent's position ``(n,)`` (1 or 4).

    Used in lesson 09.
    """
    require_positive_int("n", n)
    pairs = _require_pairs(pairs)
    require_instance("generator", generator, torch.Generator, _("a torch.Generator"))
    allowed = pairs.flatten().nonzero().squeeze(1)  # (n_pairs,)
    pick = allowed[torch.randint(len(allowed), (n,), generator=generator)]
    animal, thing = pick // len(THINGS), pick % len(THINGS)
    verb = torch.randint(len(VERBS), (n,), generator=generator)
    adjective = torch.randint(len(ANIMAL_ADJECTIVES), (n,), generator=generator)
    animal_first = torch.randint(2, (n,), generator=generator).bool()
    means_animal = torch.randint(2, (n,), generator=generator).bool()
    return _sentences(animal, thing, verb, adjective, animal_first, means_animal)


def _require_pairs(pairs) -> torch.Tensor:
    if not isinstance(pairs, torch.Tensor) or pairs.dtype != torch.bool or pairs.shape != (
            len(ANIMALS), len(THINGS)) or not pairs.any():
        got = (f"dtype {pairs.dtype}, shape {tuple(pairs.shape)}" if isinstance(
            pairs, torch.Tensor) else type(pairs).__name__)
        raise ValueError(_(
            "pairs should be a bool tensor (animals=12, things=12) with at least one True, got "
            "{got}"
        ).format(got=got))
    return pairs


def _sentences(animal, thing, verb, adjective, animal_first, means_animal):
    n = len(animal)
    animal_id, thing_id = animal + _ANIMAL0, thing + _THING0
    first = torch.where(animal_first, animal_id, thing_id)
    second = torch.where(animal_first, thing_id, animal_id)
    adjective_id = adjective + torch.where(means_animal, _ANIMAL_ADJ0, _THING_ADJ0)
    column = torch.full((n,), 0, dtype=torch.long)
    tokens = torch.stack([column + _THE, first, verb + _VERB0, column + _THE, second,
                          column + _BECAUSE, column + _IT, column + _WAS, adjective_id], 1)
    referent = torch.where(means_animal == animal_first, FIRST_NOUN, SECOND_NOUN)
    return tokens, referent  # (n, seq_len), (n,)


def sentence(words: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One sentence from its nine English words, e.g. "the kitten chased the ball because it
    was playful": token ids ``(1, 9)`` and the referent's position ``(1,)``.

    Used in lesson 09.
    """
    require_instance("words", words, str, _("a sentence of nine English words (a str)"))
    parts = words.split()
    shape = ("the", ANIMALS + THINGS, VERBS, "the", ANIMALS + THINGS, "because", "it", "was",
             ANIMAL_ADJECTIVES + THING_ADJECTIVES)
    if len(parts) != SEQ_LEN or any(
            part not in (allowed if isinstance(allowed, tuple) else (allowed,))
            for part, allowed in zip(parts, shape, strict=True)) or (
            (parts[1] in ANIMALS) == (parts[4] in ANIMALS)):
        raise ValueError(_(
            "words should be 'the <animal or thing> <verb> the <the other kind> because it was "
            "<adjective>' from this lesson's words, got {words!r}"
        ).format(words=words))
    tokens = torch.tensor([[VOCAB.index(part) for part in parts]])
    means_animal = parts[-1] in ANIMAL_ADJECTIVES
    referent = FIRST_NOUN if (parts[1] in ANIMALS) == means_animal else SECOND_NOUN
    return tokens, torch.tensor([referent])


def swap_adjective(tokens: torch.Tensor) -> torch.Tensor:
    """The same sentences with the adjective of the other kind (playful <-> round, the same
    place in each list): the referent moves to the other noun. ``(batch, 9)`` ids.

    Used in lesson 09.
    """
    tokens = _require_sentences(tokens)
    adjective = tokens[:, ADJECTIVE]
    swapped = torch.where(adjective >= _THING_ADJ0, adjective - len(ANIMAL_ADJECTIVES),
                          adjective + len(ANIMAL_ADJECTIVES))
    out = tokens.clone()
    out[:, ADJECTIVE] = swapped
    return out


def _require_sentences(tokens) -> torch.Tensor:
    require_token_ids("tokens", tokens, len(VOCAB), "(batch, seq_len)")
    if tokens.shape[1] != SEQ_LEN or not (tokens[:, ADJECTIVE] >= _ANIMAL_ADJ0).all():
        raise ValueError(_(
            "{name} should be this lesson's sentences (batch, seq_len={SEQ_LEN}) ending in an "
            "adjective, got shape {tokens_shape}"
        ).format(name="tokens", SEQ_LEN=SEQ_LEN, tokens_shape=tuple(tokens.shape)))
    return tokens


# (English determiners, by position and the kind of the noun after them; an edition may
# need several words where English has one, as Chinese does with its measure words.)
_DETERMINERS = ("the", "the", "the", "the")  # first animal, first thing, second animal, second


def words(tokens: torch.Tensor) -> tuple[str, ...]:
    """The words of one sentence ``(9,)`` in the course language (the ids stay the same).

    Used in lesson 09.
    """
    require_token_ids("tokens", tokens, len(VOCAB), "(seq_len,)")
    if len(tokens) != SEQ_LEN:
        raise ValueError(_(
            "{name} should be one sentence (seq_len={SEQ_LEN},), got shape {tokens_shape}"
        ).format(name="tokens", SEQ_LEN=SEQ_LEN, tokens_shape=tuple(tokens.shape)))
    names = (example_words("l09_frame", FRAME) + example_words("l09_animals", ANIMALS)
             + example_words("l09_things", THINGS) + example_words("l09_verbs", VERBS)
             + example_words("l09_animal_adjectives", ANIMAL_ADJECTIVES)
             + example_words("l09_thing_adjectives", THING_ADJECTIVES))
    determiners = example_words("l09_determiners", _DETERMINERS)
    ids = tokens.tolist()
    out = [names[i] for i in ids]
    for position, offset in ((0, 0), (3, 2)):
        if ids[position] == _THE:
            is_thing = ids[position + 1] >= _THING0
            out[position] = determiners[offset + int(is_thing)]
    return tuple(out)


class PronounModel(nn.Module):
    """Two attention layers that name the noun "it" means (see the module docstring).

    ``forward(tokens)`` takes ids ``(batch, 9)`` and returns ``(logits, weights)``: logits
    ``(batch, vocab_size)`` for the referent, read from layer 1's output at "it" only, and
    the weights ``(batch, num_layers=2, num_heads=1, 9, 9)``. ``cut_layer0`` lists positions
    whose layer-0 output is dropped (their embeddings stay): lesson 09's control.

    Used in lesson 09.
    """

    def __init__(self, d_model: int = 32, d_k: int = 16):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("d_k", d_k)
        self.embedding = nn.Embedding(len(VOCAB), d_model)
        self.position = nn.Embedding(SEQ_LEN, d_model)
        self.layer0 = nn.ModuleDict({name: nn.Linear(d_model, size) for name, size in (
            ("w_q", d_k), ("w_k", d_k), ("w_v", d_model))})
        self.layer1 = nn.ModuleDict({name: nn.Linear(d_model, size) for name, size in (
            ("w_q", d_k), ("w_k", d_k), ("w_v", d_model))})
        self.readout = nn.Linear(d_model, len(VOCAB))

    def forward(self, tokens, cut_layer0: tuple[int, ...] = ()):
        tokens = _require_sentences(tokens)
        if not isinstance(cut_layer0, tuple | list) or not all(
                isinstance(p, int) and 0 <= p < SEQ_LEN for p in cut_layer0):
            raise ValueError(_(
                "cut_layer0 should be a tuple of positions in 0..{last}, got {cut_layer0!r}"
            ).format(last=SEQ_LEN - 1, cut_layer0=cut_layer0))
        words_ = self.embedding(tokens)  # (batch, 9, d_model)
        x = words_ + self.position.weight  # (batch, 9, d_model)
        a = self.layer0
        out0, weights0 = scaled_dot_product_attention(a.w_q(x), a.w_k(x), a.w_v(x))
        if cut_layer0:
            out0 = out0.clone()
            out0[:, list(cut_layer0)] = 0.0
        x = x + out0  # (batch, 9, d_model)
        b = self.layer1
        out1, weights1 = scaled_dot_product_attention(
            b.w_q(x), b.w_k(x), b.w_v(words_), mask=causal_mask(SEQ_LEN))
        logits = self.readout(out1[:, IT])  # (batch, vocab_size)
        weights = torch.stack([weights0, weights1], 1).unsqueeze(2)  # (batch, 2, 1, 9, 9)
        return logits, weights


def train_pronoun_model(pairs: torch.Tensor, generator: torch.Generator, steps: int = 1500,
                        batch_size: int = 64, lr: float = 3e-3, max_starts: int = 5,
                        stalled_loss: float = 0.1) -> tuple[PronounModel, list, int]:
    """A ``PronounModel`` trained on sentences of the pairs True in ``pairs``, initialised
    and fed from ``generator``; returns ``(model, losses, starts)``.

    A model this small does not always take off: in some runs the loss stays on a plateau
    (the row of "it" never finds the nouns). A run whose last 100 losses average more than
    ``stalled_loss`` is started again from new weights drawn from ``generator``, at most
    ``max_starts`` starts in all; ``losses`` are the kept run's, ``starts`` how many it took.

    Used in lesson 09.
    """
    pairs = _require_pairs(pairs)
    require_instance("generator", generator, torch.Generator, _("a torch.Generator"))
    require_positive_int("steps", steps)
    require_positive_int("batch_size", batch_size)
    require_positive_int("max_starts", max_starts)
    require_positive_number("stalled_loss", stalled_loss)
    starts = 0
    while True:
        starts += 1
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
            model = PronounModel()

        def loss_at_step(step, model=model):
            tokens, referent = draw_sentences(batch_size, pairs, generator)
            logits, _weights = model(tokens)
            return F.cross_entropy(logits, tokens.gather(1, referent[:, None]).squeeze(1))

        losses = fit(model, loss_at_step, steps, lr=lr)
        tail = losses[-100:]
        if sum(tail) / len(tail) <= stalled_loss or starts == max_starts:
            return model, losses, starts


@torch.no_grad()
def it_rows(model: PronounModel, tokens: torch.Tensor, layer: int = 1) -> torch.Tensor:
    """The row of "it" in ``layer`` (0 or 1) for each sentence: ``(batch, n_k=9)``.

    Used in lesson 09.
    """
    require_instance("model", model, PronounModel, _("a PronounModel"))
    require_int_in_range("layer", layer, 0, 1)
    return model(tokens)[1][:, layer, 0, IT]


@torch.no_grad()
def referent_accuracy(model: PronounModel, tokens: torch.Tensor, referent: torch.Tensor,
                      cut_layer0: tuple[int, ...] = ()) -> float:
    """The share of sentences whose referent the model names (argmax of its logits), with
    layer 0's output dropped at the positions ``cut_layer0``.

    Used in lesson 09.
    """
    require_instance("model", model, PronounModel, _("a PronounModel"))
    _require_referent(referent, len(tokens))
    logits, _weights = model(tokens, cut_layer0=tuple(cut_layer0))
    answer = tokens.gather(1, referent[:, None]).squeeze(1)
    return float((logits.argmax(-1) == answer).float().mean())


def _require_referent(referent, batch: int) -> None:
    if not isinstance(referent, torch.Tensor) or referent.shape != (batch,) or not bool(
            ((referent == FIRST_NOUN) | (referent == SECOND_NOUN)).all()):
        got = (f"shape {tuple(referent.shape)}" if isinstance(referent, torch.Tensor)
               else type(referent).__name__)
        raise ValueError(_(
            "referent should be (batch={batch},) positions {FIRST_NOUN} or {SECOND_NOUN}, got "
            "{got}"
        ).format(batch=batch, FIRST_NOUN=FIRST_NOUN, SECOND_NOUN=SECOND_NOUN, got=got))


def attention_maps(model: PronounModel, tokens: torch.Tensor) -> torch.Tensor:
    """One sentence's weights ``(num_layers=2, num_heads=1, 9, 9)`` for ``ModelExplorer``.

    Used in lesson 09.
    """
    require_instance("model", model, PronounModel, _("a PronounModel"))
    with torch.no_grad():
        return model(tokens[None] if tokens.dim() == 1 else tokens)[1][0]
