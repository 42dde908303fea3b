"""Lesson 11's recency task: the answers, the training helper, the accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.experiments.l11_recency import (
    NO_ANSWER,
    answer_accuracy,
    recency_batch,
    train_on_answers,
)


def _answers_by_hand(tokens, num_symbols):
    answers = []
    for row in tokens.tolist():
        latest, out = {}, []
        for token in row:
            asked = token - num_symbols
            out.append(latest.get(asked, NO_ANSWER) if asked >= 0 else NO_ANSWER)
            if asked < 0:
                latest[token % 2] = token
        answers.append(out)
    return torch.tensor(answers)


def test_the_answer_is_the_latest_earlier_symbol_of_the_asked_class():
    tokens, answers = recency_batch(64, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == answers.shape == (64, 20)
    assert int(tokens.min()) >= 0 and int(tokens.max()) <= 9
    assert torch.equal(answers, _answers_by_hand(tokens, 8))
    scored = answers != NO_ANSWER
    assert bool((tokens[scored] >= 8).all())          # only queries are answered
    assert bool((answers[scored] % 2 == tokens[scored] - 8).all())  # of the asked class
    assert 0.1 < scored.float().mean() < 0.3


class _Oracle(nn.Module):
    """Reads the answer off the hand-written rule: a model that is always right."""

    def forward(self, tokens):
        answers = _answers_by_hand(tokens, 8).clamp(min=0)
        return nn.functional.one_hot(answers, 10).float()


def test_accuracy_counts_answered_positions_only():
    tokens, answers = recency_batch(16, 12, torch.Generator().manual_seed(1))
    assert answer_accuracy(_Oracle(), tokens, answers) == 1.0
    assert answer_accuracy(_Oracle(), tokens, answers, first_position=6) == 1.0


def test_a_short_run_learns_the_task_from_the_helper():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 16), nn.Linear(16, 10))  # no attention: cannot
    before = [p.detach().clone() for p in model.parameters()]
    train_on_answers(model, recency_batch, seq_len=8, seed=0, steps=5)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


BAD_INPUTS = [
    pytest.param(recency_batch, (0, 8), {}, ValueError, ("batch_size", "positive int", "0"),
                 id="recency_batch: empty batch"),
    pytest.param(recency_batch, (2, 8), {"num_symbols": 1}, ValueError,
                 ("num_symbols", ">= 2", "1"), id="recency_batch: one symbol"),
    pytest.param(recency_batch, (2, 8, 3), {}, TypeError, ("generator", "torch.Generator"),
                 id="recency_batch: not a generator"),
    pytest.param(train_on_answers, (nn.Linear(2, 2), 3, 8, 0), {}, TypeError, ("batch",),
                 id="train_on_answers: batch not callable"),
    pytest.param(train_on_answers, (nn.Linear(2, 2), recency_batch, 8, -1), {}, ValueError,
                 ("seed", ">= 0", "-1"), id="train_on_answers: negative seed"),
    pytest.param(answer_accuracy, (_Oracle(), torch.zeros(2, 4), torch.zeros(2, 4).long()), {},
                 TypeError, ("tokens", "torch.long", "float32"),
                 id="answer_accuracy: float tokens"),
]

