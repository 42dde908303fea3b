"""Position schemes for attention: rotary embeddings (RoPE).

Attention alone cannot tell order; a position scheme tells it. RoPE rotates each pair of
query/key dimensions by an angle proportional to the token's position, so the score
``q_m · k_n`` depends on the positions only through the offset ``m - n``.
"""

from __future__ import annotations

import torch

from course_utils.checks import (
    require_float_dtype,
    require_int_tensor,
    require_positive_int,
    require_positive_number,
    require_same_device,
    require_tensor,
)


def rope_frequencies(d: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
                     ) -> torch.Tensor:
    """The ``d / 2`` angular speeds of RoPE, ``base^(-2i/d)`` for ``i = 0 .. d/2 - 1``.

    Pair ``i`` turns by ``position * base^(-2i/d)`` radians: pair 0 once per token, the last
    pair slowest. A larger ``base`` slows every pair but the first.
    """
    if require_positive_int("d", d) % 2:
        raise ValueError(f"d should be even (RoPE turns pairs of dims), got {d}")
    require_positive_number("base", base)
    dtype = require_float_dtype("dtype", dtype)
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=dtype) / d))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` with ``x1`` the first and ``x2`` the second half of the dims."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys ``x`` ``(..., seq_len, d)`` by their ``positions`` ``(seq_len,)``.

    The "rotate half" pairing of Llama and Hugging Face: dimension ``i`` pairs with
    ``i + d/2`` and the pair turns by the angle ``positions * base^(-2i/d)``::

        x_i'       = x_i cos(angle) - x_{i+d/2} sin(angle)
        x_{i+d/2}' = x_{i+d/2} cos(angle) + x_i sin(angle)

    ``d`` must be even; ``positions`` is an integer tensor (for a cache, the positions of
    the new tokens). Works for ``(batch, num_heads, seq_len, d_k)`` as for ``(seq_len, d)``.
    The angles are computed in float32 as transformers does (in float64 for float64 ``x``);
    the result has ``x``'s dtype.
    """
    x = require_tensor("x", x, "(..., seq_len, d)")
    positions = require_int_tensor("positions", positions, "(seq_len,)", "positions")
    require_same_device(x=x, positions=positions)
    if x.shape[-1] % 2:
        raise ValueError(
            f"x should have an even last dim d (RoPE turns pairs of dims), got shape "
            f"{tuple(x.shape)}"
        )
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(
            f"positions should have one entry per row of x: x {tuple(x.shape)} has seq_len "
            f"{x.shape[-2]}, positions has shape {tuple(positions.shape)}"
        )
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    frequencies = rope_frequencies(x.shape[-1], base, dtype).to(x.device)  # (d / 2,)
    angles = positions.to(dtype)[:, None] * frequencies  # (seq_len, d / 2)
    angles = torch.cat((angles, angles), dim=-1)  # (seq_len, d): pair i and i + d/2 share one
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin
