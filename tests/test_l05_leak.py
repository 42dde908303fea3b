"""Lesson 05's leak experiment: the model, a short training run, the accuracy."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments.l05_leak import (
    OneHeadLM,
    next_token_accuracy,
    train_on_random_tokens,
)


def test_the_correct_mask_keeps_the_past_independent_of_the_future():
    torch.manual_seed(0)
    model = OneHeadLM(16, 6)
    tokens = torch.randint(0, 16, (3, 6))
    changed = tokens.clone()
    changed[:, 3:] = (changed[:, 3:] + 1) % 16
    assert torch.equal(model(tokens)[:, :3], model(changed)[:, :3])
    leaky = OneHeadLM(16, 6, mask_after_softmax=True)
    assert not torch.allclose(leaky(tokens)[:, :3], leaky(changed)[:, :3])


def test_a_short_run_exploits_the_leak_and_the_correct_mask_cannot():
    leaky = train_on_random_tokens(True, seed=0, steps=400)
    correct = train_on_random_tokens(False, seed=0, steps=400)
    generator = torch.Generator().manual_seed(1)
    leaky_accuracy = next_token_accuracy(leaky, generator)
    correct_accuracy = next_token_accuracy(correct, generator)
    assert leaky_accuracy.shape == (8,)
    assert leaky_accuracy[:-1].mean() > 0.2   # chance is 1/16
    assert correct_accuracy.mean() < 0.1
    assert leaky_accuracy[-1] < 0.1           # the last position has no future to read


BAD_INPUTS = [
    pytest.param(OneHeadLM, (0, 8), {}, ValueError, ("vocab_size", "positive int", "got 0"),
                 id="OneHeadLM: zero vocabulary"),
    pytest.param(OneHeadLM, (16, 8), {"mask_after_softmax": 1}, TypeError,
                 ("mask_after_softmax", "True or False", "1"), id="OneHeadLM: int switch"),
    pytest.param(OneHeadLM(16, 8), (torch.zeros(2, 5, dtype=torch.long),), {}, ValueError,
                 ("tokens", "seq_len=8", "(2, 5)"), id="OneHeadLM: wrong length"),
    pytest.param(train_on_random_tokens, (True,), {"seed": -1}, ValueError,
                 ("seed", "int >= 0", "-1"), id="train_on_random_tokens: negative seed"),
    pytest.param(train_on_random_tokens, ("yes",), {"seed": 0}, TypeError,
                 ("mask_after_softmax", "True or False", "'yes'"),
                 id="train_on_random_tokens: str switch"),
    pytest.param(next_token_accuracy, (torch.nn.Linear(2, 2), torch.Generator()), {},
                 TypeError, ("model", "OneHeadLM", "Linear"),
                 id="next_token_accuracy: not a OneHeadLM"),
    pytest.param(next_token_accuracy, (OneHeadLM(16, 8), 3), {}, TypeError,
                 ("generator", "torch.Generator", "int 3"),
                 id="next_token_accuracy: not a generator"),
]
