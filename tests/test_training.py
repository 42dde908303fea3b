"""The one training loop, course_utils.nn.training.fit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.nn.training import fit


def _regression(seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    return x, y


def test_fit_learns_a_linear_map_and_returns_one_loss_per_step():
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(3, 1), _regression()
    losses = fit(model, lambda step: nn.functional.mse_loss(model(x), y), steps=300, lr=0.05)
    assert len(losses) == 300
    assert losses[-1] < 1e-3 * losses[0]
    assert not model.training


def test_fit_equals_a_hand_written_adam_loop():
    x, y = _regression()
    torch.manual_seed(0)
    ours = nn.Linear(3, 1)
    torch.manual_seed(0)
    theirs = nn.Linear(3, 1)
    fit(ours, lambda step: nn.functional.mse_loss(ours(x), y), steps=20, lr=0.01,
        max_grad_norm=0.5)
    optimizer = torch.optim.Adam(theirs.parameters(), lr=0.01)
    for _ in range(20):
        loss = nn.functional.mse_loss(theirs(x), y)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
        optimizer.step()
    assert torch.allclose(ours.weight, theirs.weight) and torch.allclose(ours.bias, theirs.bias)


def test_a_warm_up_schedule_scales_the_learning_rate():
    x, y = _regression()
    model = nn.Linear(3, 1)
    before = model.weight.detach().clone()
    fit(model, lambda step: nn.functional.mse_loss(model(x), y), steps=1, lr=0.1,
        lr_at_step=lambda step: 0.0)
    assert torch.equal(model.weight, before)


def test_evaluate_runs_before_every_n_steps_and_at_the_end_without_gradients():
    x, y = _regression()
    model = nn.Linear(3, 1)
    seen = []

    def evaluate(steps_done):
        seen.append((steps_done, model.training, torch.is_grad_enabled()))

    losses = fit(model, lambda step: nn.functional.mse_loss(model(x), y), steps=7, lr=0.01,
                 evaluate=evaluate, eval_every=3)
    assert len(losses) == 7
    assert seen == [(0, False, False), (3, False, False), (6, False, False), (7, False, False)]
    assert not model.training


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"steps": 0}, ValueError, "steps should be a positive int"),
        ({"steps": 2.5}, TypeError, "steps should be a positive int"),
        ({"steps": 2, "lr": -1.0}, ValueError, "lr should be a positive number"),
    ],
)
def test_bad_arguments_get_a_clear_error(kwargs, error, words):
    model = nn.Linear(3, 1)
    with pytest.raises(error, match=words):
        fit(model, lambda step: model.weight.sum(), **kwargs)


def test_a_loss_that_is_not_a_scalar_tensor_is_named():
    model = nn.Linear(3, 1)
    with pytest.raises(ValueError, match="scalar loss tensor"):
        fit(model, lambda step: model.weight, steps=1)
