"""Lesson 01's experiment: find a flagged token ``distance`` positions back.

Every position of a sequence shows one of ``num_symbols`` ordinary symbols. Exactly one
position shows the *flagged* twin of its symbol instead, and the last position is a query
token. The answer is the flagged symbol, so the information the model needs sits exactly
``distance`` positions before the position where it must answer. Everything else in the
sequence is noise.

Token ids: ``0 .. S-1`` ordinary symbols, ``S .. 2S-1`` their flagged twins, ``2S`` the
query, with ``S = num_symbols``. With ``flagged=False`` no position is flagged: the answer is
the symbol exactly ``distance`` positions back, which only a model that knows positions can
find (the lesson's counter-task). Models read tokens ``(batch, seq_len)`` and return logits
``(batch, num_symbols)`` for the last position (see ``course_utils.models.sequence_models``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_callable,
    require_instance,
    require_int_in_range,
    require_positive_int,
)
from course_utils.language import _
from course_utils.nn.training import fit


@dataclass(frozen=True)
class DistanceTask:
    """Sequences of up to ``max_len`` tokens over ``num_symbols`` symbols.

    Used in lesson 01.
    """

    num_symbols: int = 32
    max_len: int = 101
    flagged: bool = True

    def __post_init__(self):
        for name in ("num_symbols", "max_len"):
            require_int_in_range(name, getattr(self, name), 2)
        require_bool("flagged", self.flagged)

    @property
    def vocab_size(self) -> int:
        """Ordinary symbols, their flagged twins and the query token."""
        return 2 * self.num_symbols + 1

    @property
    def query_token(self) -> int:
        return 2 * self.num_symbols

    @property
    def chance(self) -> float:
        """Accuracy of guessing: one symbol in ``num_symbols``."""
        return 1.0 / self.num_symbols

    def batch(self, batch_size: int, seq_len: int | None = None, distance: int | None = None,
              min_distance: int = 1, generator: torch.Generator | None = None):
        """Sample ``(tokens, targets, distances)``.

        Args:
            batch_size: number of sequences.
            seq_len: length of every sequence, ``2 .. max_len`` (default ``max_len``).
            distance: query position minus flag position, an int in ``1 .. seq_len - 1``
                used for every sequence, or ``None`` to draw each one uniformly from
                ``min_distance .. seq_len - 1``.
            min_distance: the shortest distance drawn when ``distance`` is ``None``.
            generator: optional ``torch.Generator`` for reproducible batches.

        Returns:
            tokens ``(batch, seq_len)`` long, targets ``(batch,)`` long (the symbol
            ``distance`` back, flagged unless ``flagged=False``) and distances ``(batch,)`` long.
        """
        require_positive_int("batch_size", batch_size)
        seq_len = self.max_len if seq_len is None else seq_len
        require_int_in_range("seq_len", seq_len, 2, self.max_len)
        require_positive_int("min_distance", min_distance)
        if distance is None:
            if min_distance >= seq_len:
                raise ValueError(_("min_distance should be below seq_len={seq_len}, "
                                   "got {min_distance}").format(seq_len=seq_len,
                                                                min_distance=min_distance))
            distances = torch.randint(min_distance, seq_len, (batch_size,), generator=generator)
        elif isinstance(distance, int) and 1 <= distance < seq_len:
            distances = torch.full((batch_size,), distance)
        else:
            raise ValueError(_(
                "distance should be None or an int in 1..{last} "
                "(seq_len={seq_len}), got {distance}"
            ).format(last=seq_len - 1, seq_len=seq_len, distance=repr(distance)))
        tokens = torch.randint(
            0, self.num_symbols, (batch_size, seq_len), generator=generator
        )  # (batch, seq_len)
        rows = torch.arange(batch_size)
        flag_positions = seq_len - 1 - distances  # (batch,)
        targets = tokens[rows, flag_positions]  # (batch,)
        if self.flagged:
            tokens[rows, flag_positions] += self.num_symbols  # the flagged twin
        tokens[:, -1] = self.query_token
        return tokens, targets, distances

    def show(self, tokens: torch.Tensor) -> str:
        """One sequence ``(seq_len,)`` as text: ``[s]`` marks the flag, ``?`` the query."""
        words = []
        for token in tokens.tolist():
            if token == self.query_token:
                words.append("?")
            elif token >= self.num_symbols:
                words.append(f"[{token - self.num_symbols}]")
            else:
                words.append(str(token))
        return " ".join(words)


def _require_task(task) -> None:
    require_instance("task", task, DistanceTask, "a DistanceTask")


def train_reader(model: nn.Module, task: DistanceTask, steps: int, batch_size: int = 64,
                 lr: float = 3e-3, min_distance: int = 1, max_grad_norm: float = 1.0,
                 generator: torch.Generator | None = None,
                 after_steps: dict[int, Callable[[], None]] | None = None,
                 distance: int | None = None) -> list[float]:
    """Train ``model`` on ``steps`` fresh batches of ``task`` with ``training.fit``.

    Each batch has its own length, drawn log-uniformly from ``min_distance + 1 .. max_len``
    so that short and long sequences are equally common on a log scale, and each sequence
    its own distance in ``min_distance .. seq_len - 1``, so one run trains every distance
    at once (``min_distance=50`` trains on long distances only); ``distance`` fixes one
    distance for every sequence (an unflagged task needs it). Gradients are clipped to
    ``max_grad_norm``, the usual guard for recurrent networks. ``after_steps`` maps a step
    count to a function called once that many updates are done (to measure the model
    along the way); returns the loss of every step.

    Used in lesson 01.
    """
    require_instance("model", model, nn.Module, "a torch.nn.Module")
    _require_task(task)
    require_positive_int("min_distance", min_distance)
    if min_distance >= task.max_len:
        raise ValueError(_("min_distance should be below max_len={max_len}, "
                           "got {min_distance}").format(max_len=task.max_len,
                                                        min_distance=min_distance))
    if distance is not None:
        require_int_in_range("distance", distance, 1, task.max_len - 1)
    after_steps = dict(after_steps or {})
    shortest = (min_distance if distance is None else distance) + 1
    log_lengths = (math.log(shortest), math.log(task.max_len + 1))

    def loss_at_step(step):
        if step in after_steps:
            after_steps.pop(step)()
            model.train()
        # exp(log(n)) may round to just below n: never shorter than the distance needs
        seq_len = max(shortest, int(math.exp(torch.empty(()).uniform_(*log_lengths,
                                                                       generator=generator))))
        tokens, targets, _distances = task.batch(batch_size, seq_len=min(seq_len, task.max_len),
                                        distance=distance, min_distance=min_distance,
                                        generator=generator)
        return nn.functional.cross_entropy(model(tokens), targets)

    losses = fit(model, loss_at_step, steps, lr=lr, max_grad_norm=max_grad_norm)
    if steps in after_steps:
        after_steps.pop(steps)()
    return losses


@torch.no_grad()
def accuracy_by_distance(model: nn.Module, task: DistanceTask, distances: Sequence[int],
                         samples: int = 256,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Fraction of ``samples`` fresh sequences of length ``max_len`` answered right,
    at each distance; returns a float tensor ``(len(distances),)``.

    Used in lesson 01.
    """
    require_instance("model", model, nn.Module, "a torch.nn.Module")
    _require_task(task)
    require_positive_int("samples", samples)
    model.eval()
    batches = [task.batch(samples, distance=int(distance), generator=generator)
               for distance in distances]
    # tokens: (len(distances) * samples, max_len)
    tokens = torch.cat([tokens for tokens, *_rest in batches])
    targets = torch.cat([targets for _tokens, targets, *_rest in batches])
    right = model(tokens).argmax(dim=-1) == targets  # one forward pass for every distance
    return right.view(len(batches), samples).float().mean(dim=1)


def learning_curve(build: Callable[[], nn.Module], task: DistanceTask, budgets: Sequence[int],
                   distances: Sequence[int], seed: int, min_distance: int = 1,
                   samples: int = 128, lr: float = 5e-3,
                   distance: int | None = None) -> tuple[torch.Tensor, nn.Module]:
    """Accuracy of one fresh ``build()`` model after each budget of training steps.

    The model is initialised under ``torch.manual_seed(seed)`` and trained once for
    ``max(budgets)`` steps on batches drawn from ``seed`` (``min_distance`` and ``distance``
    as in ``train_reader``); after each budget it answers the same ``samples`` sequences of
    ``max_len`` tokens per distance. Returns the accuracies ``(len(budgets),
    len(distances))`` and the trained model.

    Used in lesson 01.
    """
    require_callable("build", build)
    _require_task(task)
    budgets = sorted(require_positive_int("budgets", b) for b in budgets)
    with torch.random.fork_rng():  # seed the initialisation without moving the global RNG
        torch.manual_seed(seed)
        model = build()
    rows = {}

    def measure(budget):
        return lambda: rows.__setitem__(budget, accuracy_by_distance(
            model, task, distances, samples=samples,
            generator=torch.Generator().manual_seed(10_000 + seed)))

    train_reader(model, task, budgets[-1], lr=lr, min_distance=min_distance, distance=distance,
                 generator=torch.Generator().manual_seed(seed),
                 after_steps={budget: measure(budget) for budget in budgets})
    return torch.stack([rows[budget] for budget in budgets]), model
