"""Causal and padding masks. Convention: bool, **True = may attend**."""

from __future__ import annotations

import torch


def causal_mask(n: int, device=None) -> torch.Tensor:
    """Bool ``(n, n)``: True on and below the diagonal, so query i sees keys 0..i."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"causal_mask(n) needs a sequence length n >= 1, got {n!r}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """Bool ``(batch, max_len)``: True at the real tokens of each sequence.

    ``lengths`` is a list or 1-D integer tensor of real lengths; ``max_len`` defaults
    to the longest of them.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths should be a 1-D list of integer lengths (batch,), got "
            f"{lengths.dtype} of shape {tuple(lengths.shape)}"
        )
    if len(lengths) == 0 or (lengths < 0).any():
        raise ValueError(f"lengths should be non-negative and non-empty, got {lengths.tolist()}")
    longest = int(lengths.max())
    if max_len is None:
        max_len = longest
    if max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    return torch.arange(max_len) < lengths[:, None]  # (batch, max_len)


def expand_padding_mask(mask: torch.Tensor, with_heads: bool = True) -> torch.Tensor:
    """Turn a key padding mask ``(batch, n_k)`` into one that broadcasts over the scores.

    Returns ``(batch, 1, 1, n_k)`` for scores ``(batch, heads, n_q, n_k)``, or
    ``(batch, 1, n_k)`` for scores ``(batch, n_q, n_k)`` when ``with_heads=False``.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
        got = f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) \
            else type(mask).__name__
        raise ValueError(f"expected a bool padding mask of shape (batch, n_k), got {got}")
    return mask[:, None, None, :] if with_heads else mask[:, None, :]
