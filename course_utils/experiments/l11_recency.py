"""Lesson 11's recency task: the task whose right prior is ALiBi's "prefer recent keys".

A sequence mixes data symbols ``0..num_symbols-1`` (the class of a symbol is ``symbol % 2``)
with two query tokens, ``num_symbols`` (asks for class 0) and ``num_symbols + 1`` (class 1).
At a query the answer is the most recent earlier data symbol of the asked class; every other
position, and a query with no such symbol before it, has no answer (``-1``). Which earlier
symbol is the answer depends only on how recent it is, never on the absolute position, so the
rule is the same at every length.

Notation: tokens and answers ``(batch, seq_len)``, logits ``(batch, seq_len, vocab_size)``
with ``vocab_size = num_symbols + 2``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_callable,
    require_generator,
    require_instance,
    require_int_in_range,
    require_int_tensor,
    require_positive_int,
    require_positive_number,
)
from course_utils.language import _
from course_utils.nn.training import fit

NO_ANSWER = -1


def recency_batch(batch_size: int, seq_len: int, generator: torch.Generator | None = None,
                  num_symbols: int = 8, query_rate: float = 0.25
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``batch_size`` sequences of the recency task; return ``(tokens, answers)``.

    Each position is a query with probability ``query_rate`` (asking for class 0 or 1 at
    random), otherwise a uniformly random data symbol. ``answers[b, t]`` is the most recent
    data symbol before ``t`` of the class that query ``t`` asks for, or ``NO_ANSWER`` (-1)
    where there is nothing to answer. Both are ``(batch, seq_len)`` int64 tensors.

    Used in lesson 11.
    """
    require_positive_int("batch_size", batch_size)
    require_positive_int("seq_len", seq_len)
    require_generator("generator", generator)
    require_int_in_range("num_symbols", num_symbols, 2)
    require_positive_number("query_rate", query_rate)
    data = torch.randint(num_symbols, (batch_size, seq_len), generator=generator)
    is_query = torch.rand(batch_size, seq_len, generator=generator) < query_rate
    asked = torch.randint(2, (batch_size, seq_len), generator=generator)  # class of a query
    tokens = torch.where(is_query, num_symbols + asked, data)
    answers = torch.full((batch_size, seq_len), NO_ANSWER)
    latest = torch.full((batch_size, 2), NO_ANSWER)  # the latest data symbol of each class
    rows = torch.arange(batch_size)
    for t in range(seq_len):
        answers[:, t] = torch.where(is_query[:, t], latest[rows, asked[:, t]], NO_ANSWER)
        seen = ~is_query[:, t]
        latest[rows[seen], data[seen, t] % 2] = data[seen, t]
    return tokens, answers


def train_on_answers(model: nn.Module,
                     batch: Callable[[int, int, torch.Generator], tuple[torch.Tensor,
                                                                       torch.Tensor]],
                     seq_len: int, seed: int, steps: int = 150, batch_size: int = 32,
                     lr: float = 1e-2) -> nn.Module:
    """Train ``model`` with the course's loop on ``batch(batch_size, seq_len, generator)``.

    ``batch`` returns ``(tokens, answers)``, both ``(batch, seq_len)``; the loss is the
    cross-entropy of ``model(tokens)`` ``(batch, seq_len, vocab_size)`` against ``answers``
    at the positions that have one (``answers >= 0``). The batches follow ``seed``; the
    weights are whatever ``model`` was made with. Returns ``model``, trained in place.

    Used in lesson 11.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    require_callable("batch", batch)
    require_positive_int("seq_len", seq_len)
    require_int_in_range("seed", seed, 0)
    require_positive_int("batch_size", batch_size)
    generator = torch.Generator().manual_seed(seed)

    def loss_at_step(step):
        tokens, answers = batch(batch_size, seq_len, generator)
        return F.cross_entropy(model(tokens).transpose(1, 2), answers, ignore_index=NO_ANSWER)

    fit(model, loss_at_step, steps, lr=lr)
    return model


def answer_accuracy(model: nn.Module, tokens: torch.Tensor, answers: torch.Tensor,
                    first_position: int = 0) -> float:
    """Share of the answers at positions ``first_position..`` that ``model``'s argmax gets right.

    ``tokens`` and ``answers`` ``(batch, seq_len)``; positions without an answer (-1) are
    not counted.

    Used in lesson 11.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    tokens = require_int_tensor("tokens", tokens, "(batch, seq_len)", "token ids")
    answers = require_int_tensor("answers", answers, "(batch, seq_len)", "token ids")
    require_int_in_range("first_position", first_position, 0, tokens.shape[-1] - 1)
    with torch.no_grad():
        guess = model(tokens).argmax(-1)  # (batch, seq_len)
    scored = answers[:, first_position:] != NO_ANSWER
    right = (guess[:, first_position:] == answers[:, first_position:]) & scored
    return (right.sum() / scored.sum()).item()
