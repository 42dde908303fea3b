"""The flagged-token recall task: a long-range dependency whose distance we choose.

Every position of a sequence shows one of ``num_symbols`` ordinary symbols. Exactly one
position shows the *flagged* twin of its symbol instead, and the last position is a query
token. The answer is the flagged symbol, so the information the model needs sits exactly
``distance`` positions before the position where it must answer. Everything else in the
sequence is noise.

Token ids: ``0 .. S-1`` ordinary symbols, ``S .. 2S-1`` their flagged twins, ``2S`` the
query, with ``S = num_symbols``. Models read tokens ``(batch, seq_len)`` and return logits
``(batch, num_symbols)`` for the last position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.checks import require_positive_int
from course_utils.training import fit


@dataclass(frozen=True)
class RecallTask:
    """Sequences of up to ``max_len`` tokens over ``num_symbols`` symbols."""

    num_symbols: int = 32
    max_len: int = 101

    def __post_init__(self):
        if not isinstance(self.num_symbols, int) or self.num_symbols < 2:
            raise ValueError(f"num_symbols should be an int >= 2, got {self.num_symbols!r}")
        if not isinstance(self.max_len, int) or self.max_len < 2:
            raise ValueError(f"max_len should be an int >= 2, got {self.max_len!r}")

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

    @property
    def max_distance(self) -> int:
        return self.max_len - 1

    def batch(self, batch_size: int, seq_len: int | None = None, distance: int | None = None,
              generator: torch.Generator | None = None):
        """Sample ``(tokens, targets, distances)``.

        Args:
            batch_size: number of sequences.
            seq_len: length of every sequence, ``2 .. max_len`` (default ``max_len``).
            distance: query position minus flag position, an int in ``1 .. seq_len - 1``
                used for every sequence, or ``None`` to draw each one uniformly.
            generator: optional ``torch.Generator`` for reproducible batches.

        Returns:
            tokens ``(batch, seq_len)`` long, targets ``(batch,)`` long (the flagged
            symbol) and distances ``(batch,)`` long.
        """
        require_positive_int("batch_size", batch_size)
        seq_len = self.max_len if seq_len is None else seq_len
        if not isinstance(seq_len, int) or not 2 <= seq_len <= self.max_len:
            raise ValueError(f"seq_len should be an int in 2..{self.max_len}, got {seq_len!r}")
        if distance is None:
            distances = torch.randint(1, seq_len, (batch_size,), generator=generator)
        elif isinstance(distance, int) and 1 <= distance < seq_len:
            distances = torch.full((batch_size,), distance)
        else:
            raise ValueError(
                f"distance should be None or an int in 1..{seq_len - 1} "
                f"(seq_len={seq_len}), got {distance!r}"
            )
        tokens = torch.randint(
            0, self.num_symbols, (batch_size, seq_len), generator=generator
        )  # (batch, seq_len)
        rows = torch.arange(batch_size)
        flag_positions = seq_len - 1 - distances  # (batch,)
        targets = tokens[rows, flag_positions]  # (batch,)
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


def check_tokens(tokens, vocab_size: int) -> torch.Tensor:
    """Return ``tokens`` if it is an integer tensor ``(batch, seq_len)`` of valid ids."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            "tokens should be a torch.Tensor of shape (batch, seq_len), "
            f"got {type(tokens).__name__}"
        )
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens should hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens should have shape (batch, seq_len), got {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"token ids should lie in 0..{vocab_size - 1}, "
            f"got {int(tokens.min())}..{int(tokens.max())}"
        )
    return tokens


def train(model: nn.Module, task: RecallTask, steps: int, batch_size: int = 64,
          lr: float = 3e-3, max_grad_norm: float = 1.0,
          generator: torch.Generator | None = None) -> list[float]:
    """Train ``model`` with Adam on ``steps`` fresh batches; return the losses.

    Each batch has its own length, drawn log-uniformly from ``2 .. max_len`` so that short
    and long sequences are equally common on a log scale, and each sequence its own
    distance, so one run trains every distance at once. Gradients are clipped to
    ``max_grad_norm``, the usual guard for recurrent networks.
    """
    log_lengths = (math.log(2), math.log(task.max_len + 1))

    def loss_at_step(step):
        seq_len = int(math.exp(torch.empty(()).uniform_(*log_lengths, generator=generator)))
        tokens, targets, _ = task.batch(batch_size, seq_len=min(seq_len, task.max_len),
                                        generator=generator)
        return nn.functional.cross_entropy(model(tokens), targets)

    return fit(model, loss_at_step, steps, lr=lr, max_grad_norm=max_grad_norm)


@torch.no_grad()
def accuracy_by_distance(model: nn.Module, task: RecallTask, distances, samples: int = 256,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Fraction of ``samples`` fresh sequences of length ``max_len`` answered right,
    at each distance; returns a float tensor ``(len(distances),)``."""
    model.eval()
    accuracies = []
    for distance in distances:
        tokens, targets, _ = task.batch(samples, distance=int(distance), generator=generator)
        predictions = model(tokens).argmax(dim=-1)  # (samples,)
        accuracies.append((predictions == targets).float().mean())
    return torch.stack(accuracies)
