"""Input checks that turn a confusing traceback into a message in the course notation."""

from __future__ import annotations

import torch


def require_tensor(name: str, value, notation: str) -> torch.Tensor:
    """Return ``value`` if it is a floating-point tensor of at least two dims.

    ``notation`` is the expected shape in the course notation, e.g. ``"(..., n_q, d_k)"``;
    it appears in the error so the learner sees what was expected next to what came.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} should be a torch.Tensor of shape {notation}, got {type(value).__name__}"
        )
    if not value.is_floating_point():
        raise TypeError(
            f"{name} should be a floating-point tensor of shape {notation}, got dtype "
            f"{value.dtype}; token ids must go through an embedding first"
        )
    min_rank = notation.count(",") + 1 - notation.count("...")
    if value.dim() < min_rank:
        raise ValueError(
            f"{name} should have shape {notation} (at least {min_rank} dims), "
            f"got shape {tuple(value.shape)}"
        )
    return value


def require_bool_mask(mask, target_shape: torch.Size, notation: str) -> torch.Tensor:
    """Return ``mask`` if it is a bool tensor that broadcasts to ``target_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask should be a bool torch.Tensor broadcastable to {notation}, "
            f"got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask should be bool (True = may attend), got dtype {mask.dtype}; "
            "for a 0/1 mask use mask.bool(), for an additive float mask see lesson 05"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, target_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != target_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{notation} = {tuple(target_shape)}; a padding mask (batch, n_k) needs "
            "expand_padding_mask() first"
        )
    return mask


def require_positive_int(name: str, value) -> int:
    """Return ``value`` if it is an int >= 1 (a size: seq_len, d_model, heads, steps...)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} should be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} should be a positive int, got {value}")
    return value
