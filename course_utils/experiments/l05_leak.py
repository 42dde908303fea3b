"""Lesson 05's leak experiment: does training exploit a mask applied after the softmax?

A one-head causal language model reads tokens drawn uniformly at random and predicts the
next one. Nothing in the past says anything about the next token, so a correct causal mask
can do no better than chance, ``1 / vocab_size``. With the mask applied *after* the softmax
the future keys still sit in each row's denominator: the row sum of the kept weights depends
on the future, and the model can learn to read the next token from it.

Notation: tokens ``(batch, seq_len)``, scores and weights ``(batch, n_q, n_k)`` with
``n_q = n_k = seq_len``, logits ``(batch, seq_len, vocab_size)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_bool,
    require_instance,
    require_int_in_range,
    require_positive_int,
    require_positive_number,
    require_token_ids,
)
from course_utils.language import _
from course_utils.nn.masks import causal_mask
from course_utils.nn.training import fit


class OneHeadLM(nn.Module):
    """Token and position embeddings, one causal attention head, a linear read-out.

    ``mask_after_softmax=False`` masks the scores with ``-inf`` before the softmax (correct);
    ``True`` zeroes the future weights after it (the leak of lesson 05, section 2).
    ``forward(tokens)``: tokens ``(batch, seq_len)`` ids give logits
    ``(batch, seq_len, vocab_size)``; position i predicts token i + 1.

    Used in lesson 05.
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int = 32,
                 mask_after_softmax: bool = False):
        super().__init__()
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        self.seq_len = require_positive_int("seq_len", seq_len)
        require_positive_int("d_model", d_model)
        self.mask_after_softmax = require_bool("mask_after_softmax", mask_after_softmax)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _projection in range(3))
        self.readout = nn.Linear(2 * d_model, vocab_size)  # reads [x, attention output]

    def forward(self, tokens):
        tokens = require_token_ids("tokens", tokens, self.vocab_size)
        if tokens.dim() != 2 or tokens.shape[1] != self.seq_len:
            raise ValueError(_(
                "{name} should be (batch, seq_len) with seq_len={seq_len}, got shape {shape}"
            ).format(name="tokens", seq_len=self.seq_len, shape=tuple(tokens.shape)))
        x = self.token_embedding(tokens) + self.position_embedding.weight  # (batch, n, d)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, n_q, n_k)
        allowed = causal_mask(self.seq_len, device=tokens.device)
        if self.mask_after_softmax:
            weights = torch.softmax(scores, dim=-1) * allowed  # the leak
        else:
            weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return self.readout(torch.cat([x, weights @ v], dim=-1))


def train_on_random_tokens(mask_after_softmax: bool, seed: int, vocab_size: int = 16,
                           seq_len: int = 8, steps: int = 1500, batch_size: int = 64,
                           lr: float = 5e-3) -> OneHeadLM:
    """Train a :class:`OneHeadLM` to predict the next of uniformly random tokens, from ``seed``.

    The weights and the batches both follow ``seed``; ``steps`` Adam steps of ``batch_size``
    sequences of ``seq_len + 1`` tokens each.

    Used in lesson 05.
    """
    require_bool("mask_after_softmax", mask_after_softmax)
    require_int_in_range("seed", seed, 0)
    require_positive_int("steps", steps)
    require_positive_int("batch_size", batch_size)
    require_positive_number("lr", lr)
    torch.manual_seed(seed)
    model = OneHeadLM(vocab_size, seq_len, mask_after_softmax=mask_after_softmax)
    generator = torch.Generator().manual_seed(seed)

    def loss_at_step(step):
        tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator)
        logits = model(tokens[:, :-1])  # (batch, seq_len, vocab_size)
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    fit(model, loss_at_step, steps, lr=lr)
    return model


def next_token_accuracy(model: OneHeadLM, generator: torch.Generator,
                        num_sequences: int = 2000) -> torch.Tensor:
    """Share of next tokens predicted right on fresh random tokens, per position: ``(seq_len,)``.

    Used in lesson 05.
    """
    require_instance("model", model, OneHeadLM, "a OneHeadLM")
    require_instance("generator", generator, torch.Generator, "a torch.Generator")
    require_positive_int("num_sequences", num_sequences)
    tokens = torch.randint(0, model.vocab_size, (num_sequences, model.seq_len + 1),
                           generator=generator)
    with torch.no_grad():
        predicted = model(tokens[:, :-1]).argmax(dim=-1)  # (num_sequences, seq_len)
    return (predicted == tokens[:, 1:]).float().mean(dim=0)
