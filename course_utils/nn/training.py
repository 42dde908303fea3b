"""The one training loop of the course: Adam on a loss the caller computes per step."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from course_utils.checks import (
    require_callable,
    require_instance,
    require_positive_int,
    require_positive_number,
)
from course_utils.language import _
from course_utils.progress import TRAINING_STEPS, Progress


def fit(model: nn.Module, loss_at_step: Callable[[int], torch.Tensor], steps: int,
        lr: float = 3e-3, max_grad_norm: float | None = None,
        lr_at_step: Callable[[int], float] | None = None,
        evaluate: Callable[[int], None] | None = None, eval_every: int = 100) -> list[float]:
    """Train ``model`` with Adam for ``steps`` steps; return the loss of every step.

    ``loss_at_step(step)`` draws that step's batch and returns the scalar loss, so every
    lesson keeps its own data and loss while sharing the optimiser code. Gradients are
    clipped to ``max_grad_norm`` when given (the usual guard for recurrent networks);
    ``lr_at_step(step)`` multiplies ``lr`` when given (e.g. a warm-up schedule).
    ``evaluate(steps_done)``, when given, is called before the first step, after every
    ``eval_every`` steps and after the last, in eval mode under ``torch.no_grad()`` (e.g. a
    held-out loss for a train/validation curve); it must not draw from the batches'
    generator, so the training is the same with or without it.

    Used in lessons 07, 08, 11 and 13.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    require_callable("loss_at_step", loss_at_step)
    steps = require_positive_int("steps", steps)
    require_positive_number("lr", lr)
    if max_grad_norm is not None:
        require_positive_number("max_grad_norm", max_grad_norm)
    if lr_at_step is not None:
        require_callable("lr_at_step", lr_at_step)
    if evaluate is not None:
        require_callable("evaluate", evaluate)
    require_positive_int("eval_every", eval_every)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = (torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at_step)
                if lr_at_step is not None else None)
    losses = []
    if evaluate is not None:
        _evaluate(model, evaluate, 0)
    model.train()
    with Progress(steps, TRAINING_STEPS) as bar:  # seen while it runs, stored empty
        for step in range(steps):
            losses.append(_step(loss_at_step(step), optimizer, schedule, model, max_grad_norm))
            bar.advance()
            if evaluate is not None and ((step + 1) % eval_every == 0 or step + 1 == steps):
                _evaluate(model, evaluate, step + 1)
    model.eval()
    return losses


def _evaluate(model: nn.Module, evaluate: Callable[[int], None], steps_done: int) -> None:
    """``evaluate(steps_done)`` in eval mode without gradients, then back to training."""
    model.eval()
    with torch.no_grad():
        evaluate(steps_done)
    model.train()


def _step(loss, optimizer, schedule, model: nn.Module, max_grad_norm: float | None) -> float:
    """One update from ``loss``; returns its value."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError(_(
            "loss_at_step(step) should return a scalar loss tensor, got {kind} {shape}"
        ).format(kind=type(loss).__name__, shape=getattr(loss, 'shape', '')))
    if not loss.requires_grad:
        raise ValueError(_(
            "loss_at_step(step) returned a loss without a gradient: it must be computed from the "
            "model's output, not under torch.no_grad() or after .detach()"
        ))
    optimizer.zero_grad()
    loss.backward()
    if max_grad_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    if schedule is not None:
        schedule.step()
    return loss.item()
