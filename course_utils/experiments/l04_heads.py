"""Why several heads: a task that needs two relations at once, and a sweep over head counts.

The *two-relation task*: a sequence of ``seq_len`` tokens, each a letter and a digit
(shown as e.g. ``"B7"``). Every letter appears exactly twice. At every position the model
must report two digits: the digit of the **previous** token (a relation by position) and
the digit of the **partner**, the other token with the same letter (a relation by content).
A token may not attend to itself, so both digits have to be fetched by attention.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.checks import require_instance, require_int_in_range, require_positive_int
from course_utils.language import _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.training import fit
from course_utils.progress import MODELS, counted

# Target for "previous digit" at position 0, which has no previous token; the loss skips it.
NO_TARGET = -100


@dataclass(frozen=True)
class TwoRelationBatch:
    """Sequences of the two-relation task; every field is an integer tensor ``(batch, seq_len)``.

    Used in lesson 04.
    """

    letters: torch.Tensor
    digits: torch.Tensor
    previous_digit: torch.Tensor  # digits shifted right; NO_TARGET at position 0
    partner_digit: torch.Tensor  # digit of the other token with the same letter

    def labels(self, row: int = 0) -> list[str]:
        """Readable tokens of one sequence, e.g. ``["C4", "A0", "B7", ...]``."""
        return [
            f"{string.ascii_uppercase[letter]}{digit}"
            for letter, digit in zip(
                self.letters[row].tolist(), self.digits[row].tolist(), strict=True
            )
        ]


def make_two_relation_batch(
    batch_size: int, seq_len: int = 8, num_digits: int = 10, generator=None
) -> TwoRelationBatch:
    """Random sequences of the two-relation task; ``seq_len // 2`` letters appear twice each.

    Used in lesson 04.
    """
    if not isinstance(seq_len, int) or seq_len < 4 or seq_len % 2 or seq_len > 52:
        raise ValueError(_(
            "seq_len should be an even int from 4 to 52, got {seq_len!r}"
        ).format(seq_len=seq_len))
    require_positive_int("batch_size", batch_size)
    require_int_in_range("num_digits", num_digits, 2)
    # Each row is a random shuffle of the letters 0, 0, 1, 1, ..., seq_len/2 - 1 twice over.
    pairs = torch.arange(seq_len) // 2
    order = torch.rand(batch_size, seq_len, generator=generator).argsort(dim=1)
    letters = pairs[order]  # (batch, seq_len)
    digits = torch.randint(num_digits, (batch_size, seq_len), generator=generator)

    previous = torch.full_like(digits, NO_TARGET)
    previous[:, 1:] = digits[:, :-1]
    same_letter = letters[:, :, None] == letters[:, None, :]  # (batch, seq_len, seq_len)
    same_letter &= ~torch.eye(seq_len, dtype=torch.bool)  # the partner is another token
    partner_position = same_letter.int().argmax(dim=-1)  # exactly one True per row
    partner = digits.gather(1, partner_position)
    return TwoRelationBatch(letters, digits, previous, partner)


class TwoRelationModel(nn.Module):
    """Embeddings, one MultiHeadAttention with a residual, two linear read-outs.

    ``forward(letters, digits)`` takes ``(batch, seq_len)`` integer tensors and returns the
    logits for the previous digit and for the partner digit, each
    ``(batch, seq_len, num_digits)``, and the attention weights ``(batch, heads, n_q, n_k)``.

    Used in lesson 04.
    """

    def __init__(self, d_model: int, num_heads: int, seq_len: int = 8, num_digits: int = 10):
        super().__init__()
        self.letter_embedding = nn.Embedding(seq_len // 2, d_model)
        self.digit_embedding = nn.Embedding(num_digits, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.read_previous = nn.Linear(d_model, num_digits)
        self.read_partner = nn.Linear(d_model, num_digits)
        # No token may attend to itself: its own letter and digit reach the read-outs
        # through the residual anyway, so attention must be spent on the other tokens.
        self.register_buffer("not_self", ~torch.eye(seq_len, dtype=torch.bool))

    def forward(self, letters, digits):
        seq_len = letters.shape[-1]
        if letters.shape != digits.shape or seq_len != self.not_self.shape[0]:
            raise ValueError(
                _(
                    "letters and digits should both be (batch, seq_len) with "
                    "seq_len={seq_len}, got {letters_shape} and {digits_shape}"
                ).format(seq_len=self.not_self.shape[0], letters_shape=tuple(letters.shape),
                         digits_shape=tuple(digits.shape))
            )
        x = (
            self.letter_embedding(letters) + self.digit_embedding(digits)
            + self.position_embedding.weight
        )  # (batch, seq_len, d_model)
        attended, weights = self.attention(x, mask=self.not_self)
        h = x + attended  # (batch, seq_len, d_model)
        return self.read_previous(h), self.read_partner(h), weights


def _require_model_and_batch(model, batch) -> None:
    require_instance("model", model, nn.Module, _("a TwoRelationModel (an nn.Module)"))
    require_instance("batch", batch, TwoRelationBatch,
                     _("a TwoRelationBatch (make_two_relation_batch or two_relation_test_set)"))


def two_relation_accuracy(model: TwoRelationModel, batch: TwoRelationBatch) -> dict[str, float]:
    """Fraction of positions with the previous digit, the partner digit, and both right.

    Position 0 has no previous token, so it is left out of all three.

    Used in lesson 04.
    """
    _require_model_and_batch(model, batch)
    with torch.no_grad():
        previous_logits, partner_logits, _weights = model(batch.letters, batch.digits)
    previous_ok = (previous_logits.argmax(-1) == batch.previous_digit)[:, 1:]
    partner_ok = (partner_logits.argmax(-1) == batch.partner_digit)[:, 1:]
    return {
        "previous": previous_ok.float().mean().item(),
        "partner": partner_ok.float().mean().item(),
        "both": (previous_ok & partner_ok).float().mean().item(),
    }


def _weights_on_relations(model: TwoRelationModel, batch: TwoRelationBatch):
    """Weight each head puts on the previous token and on the partner, per query.

    Returns two tensors ``(batch, heads, seq_len)``; the weight on "previous" at position 0
    is 0 (it has no previous token).
    """
    _require_model_and_batch(model, batch)
    with torch.no_grad():
        *_logits, weights = model(batch.letters, batch.digits)  # (batch, heads, n_q, n_k)
    seq_len = weights.shape[-1]
    previous = torch.eye(seq_len, dtype=torch.bool).roll(-1, dims=1)  # key = query - 1
    previous[0] = False  # position 0 has no previous token (roll wrapped it around)
    same_letter = batch.letters[:, :, None] == batch.letters[:, None, :]
    partner = same_letter & ~torch.eye(seq_len, dtype=torch.bool)  # (batch, n_q, n_k)
    return (weights * previous).sum(-1), (weights * partner[:, None]).sum(-1)


def head_roles(model: TwoRelationModel, batch: TwoRelationBatch) -> torch.Tensor:
    """How much weight each head puts on the two relations, averaged over the batch.

    Returns ``(heads, 2)``: column 0 is the mean weight on the previous token (positions
    1 onwards), column 1 the mean weight on the partner. A head that does one job well
    scores near 1 in that column; the rest of its weight is spread elsewhere.

    Used in lesson 04.
    """
    on_previous, on_partner = _weights_on_relations(model, batch)  # (batch, heads, seq_len)
    return torch.stack([on_previous[..., 1:].mean(dim=(0, 2)), on_partner.mean(dim=(0, 2))],
                       dim=-1)


def head_specialisation(model: TwoRelationModel, batch: TwoRelationBatch):
    """What each head fetches, broken down by the query's letter and by its position.

    Returns ``partner_by_letter`` ``(heads, num_letters)``: mean weight a head puts on the
    partner when the query has that letter; and ``previous_by_position`` ``(heads, seq_len)``:
    mean weight on the previous token when the query sits at that position (0 at
    position 0). A head that serves one letter (or position) scores near 1 in its column.

    Used in lesson 04.
    """
    on_previous, on_partner = _weights_on_relations(model, batch)  # (batch, heads, seq_len)
    num_letters = batch.letters.shape[-1] // 2
    has_letter = nn.functional.one_hot(batch.letters, num_letters).float()  # (batch, n, L)
    partner_by_letter = torch.einsum("bhn,bnl->hl", on_partner, has_letter) / has_letter.sum(
        dim=(0, 1))
    return partner_by_letter, on_previous.mean(dim=0)


def previous_accuracy_by_position(model: TwoRelationModel, batch: TwoRelationBatch):
    """Fraction of sequences whose previous digit is right, per position ``(seq_len,)``.

    Position 0 has no previous token: its entry is NaN.

    Used in lesson 04.
    """
    _require_model_and_batch(model, batch)
    with torch.no_grad():
        previous_logits, _partner, _weights = model(batch.letters, batch.digits)
    right = (previous_logits.argmax(-1) == batch.previous_digit).float().mean(dim=0)
    right[0] = float("nan")
    return right


def two_relation_test_set(seq_len: int = 8, seed: int = 0) -> TwoRelationBatch:
    """The 1000 test sequences a model trained with ``seed`` is scored on (never trained on).

    Used in lesson 04.
    """
    return make_two_relation_batch(1000, seq_len,
                                   generator=torch.Generator().manual_seed(10_000 + seed))


def train_two_relation_model(
    num_heads: int,
    d_model: int = 16,
    seq_len: int = 8,
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-2,
    seed: int = 0,
) -> tuple[TwoRelationModel, dict[str, float]]:
    """Train a :class:`TwoRelationModel` with Adam; return it and its test accuracy.

    The test set (1000 fresh sequences) depends only on ``seed``, not on ``num_heads``,
    so models with different head counts are scored on the same sequences.

    Used in lesson 04.
    """
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    model = TwoRelationModel(d_model, num_heads, seq_len=seq_len)
    loss_fn = nn.CrossEntropyLoss(ignore_index=NO_TARGET)

    def loss_at_step(step):
        batch = make_two_relation_batch(batch_size, seq_len, generator=data)
        previous_logits, partner_logits, _weights = model(batch.letters, batch.digits)
        loss = loss_fn(previous_logits.flatten(0, 1), batch.previous_digit.flatten())
        return loss + loss_fn(partner_logits.flatten(0, 1), batch.partner_digit.flatten())

    fit(model, loss_at_step, steps, lr=lr)
    return model, two_relation_accuracy(model, two_relation_test_set(seq_len, seed))


def heads_sweep(
    head_counts, seeds=(0,), d_model: int = 16, seq_len: int = 8, steps: int = 300
):
    """Train one model per head count and seed at fixed ``d_model`` (``d_k = d_model / heads``).

    Returns ``{(num_heads, seed): (model, accuracy)}`` with the accuracy dict of
    :func:`two_relation_accuracy`; for one seed every head count sees the same data and
    the same test set.

    Used in lesson 04.
    """
    runs = [(num_heads, seed) for seed in seeds for num_heads in head_counts]
    return {
        (num_heads, seed): train_two_relation_model(
            num_heads, d_model=d_model, seq_len=seq_len, steps=steps, seed=seed
        )
        for num_heads, seed in counted(runs, MODELS)
    }
