"""Position schemes for attention: sinusoidal tables, rotary embeddings (RoPE) and ALiBi.

Attention alone cannot tell order; a position scheme tells it. The sinusoidal table is added
to the token embeddings once, at the bottom. RoPE rotates each pair of query/key dimensions
by an angle proportional to the token's position, so the score ``q_m · k_n`` depends on the
positions only through the offset ``m - n``. ALiBi adds a per-head penalty proportional to
the distance to the scores, like an additive mask.
"""

from __future__ import annotations

import functools
import math

import torch

from course_utils.checks import (
    require_cache_sizes,
    require_float_dtype,
    require_int_in_range,
    require_int_tensor,
    require_positive_int,
    require_positive_number,
    require_same_device,
    require_tensor,
)
from course_utils.language import _


def rope_frequencies(d: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
                     ) -> torch.Tensor:
    """The ``d / 2`` angular speeds of RoPE, ``base^(-2i/d)`` for ``i = 0 .. d/2 - 1``.

    Pair ``i`` turns by ``position * base^(-2i/d)`` radians: pair 0 once per token, the last
    pair slowest. A larger ``base`` slows every pair but the first.

    Used in lessons 11 and 14.
    """
    if require_positive_int("d", d) % 2:
        raise ValueError(_("d should be even (RoPE turns pairs of dims), got {d}").format(d=d))
    require_positive_number("base", base)
    dtype = require_float_dtype("dtype", dtype)
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=dtype) / d))


@functools.lru_cache(maxsize=32)
def _frequencies(d: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """:func:`rope_frequencies`, computed once per size: a model applies them to every query
    and key of every layer at every decoding step. Read only."""
    return rope_frequencies(d, base, dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` with ``x1`` the first and ``x2`` the second half of the dims."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _cos_sin(positions: torch.Tensor, d: int, base: float, dtype: torch.dtype
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles, ``(seq_len, d)`` each in ``dtype``: pair ``i`` and
    ``i + d/2`` share the angle ``positions * base^(-2i/d)``, computed in float32 as
    transformers does (in float64 for float64)."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    angles = positions.to(wide)[:, None] * _frequencies(d, base, wide).to(positions.device)
    angles = torch.cat((angles, angles), dim=-1)  # (seq_len, d)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@functools.lru_cache(maxsize=8)
def _cos_sin_from(start: int, seq_len: int, d: int, base: float, dtype: torch.dtype,
                  device: torch.device, inference: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_cos_sin` of positions ``start .. start + seq_len - 1``, kept: a decoder asks for
    the same positions for its queries and its keys in every layer of one step. Read only.
    (``inference`` keys inference-mode tensors apart: autograd may not save those.)"""
    return _cos_sin(torch.arange(start, start + seq_len, device=device), d, base, dtype)


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

    Used in lessons 11, 14 and 18.
    """
    x = _require_rotatable(x)
    positions = require_int_tensor("positions", positions, "(seq_len,)", "positions")
    require_same_device(x=x, positions=positions)
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(
            _(
                "positions should have one entry per row of x: x {shape} has seq_len {seq_len}, "
                "positions has shape {positions_shape}"
            ).format(shape=tuple(x.shape), seq_len=x.shape[-2],
                     positions_shape=tuple(positions.shape))
        )
    cos, sin = _cos_sin(positions, x.shape[-1], base, x.dtype)
    return x * cos + _rotate_half(x) * sin


def apply_rope_from(x: torch.Tensor, start: int, base: float = 10000.0) -> torch.Tensor:
    """:func:`apply_rope` of ``x`` ``(..., seq_len, d)`` at the positions ``start .. start +
    seq_len - 1``, the tokens that follow ``start`` cached ones.

    The same numbers; the angles are computed once per (positions, size, dtype) and shared, as
    transformers shares them: a decoder's queries and keys in every layer of one step sit at
    the same positions, so generating a token computes them once instead of twice per layer.

    Used in lesson 14.
    """
    x = _require_rotatable(x)
    require_int_in_range("start", start, 0)
    cos, sin = _cos_sin_from(start, x.shape[-2], x.shape[-1], base, x.dtype, x.device,
                             torch.is_inference_mode_enabled())
    return x * cos + _rotate_half(x) * sin


def _require_rotatable(x) -> torch.Tensor:
    """``x`` checked: a float tensor ``(..., seq_len, d)`` with an even ``d``."""
    x = require_tensor("x", x, "(..., seq_len, d)")
    if x.shape[-1] % 2:
        raise ValueError(
            _(
                "x should have an even last dim d (RoPE turns pairs of dims), got shape {shape}"
            ).format(shape=tuple(x.shape))
        )
    return x


def apply_rope_interleaved(x: torch.Tensor, positions: torch.Tensor,
                           base: float = 10000.0) -> torch.Tensor:
    """RoPE with adjacent pairs, as Meta's Llama code and GGUF files lay it out.

    Same shapes and arguments as :func:`apply_rope`, but dimension ``2i`` pairs with
    ``2i + 1`` (not ``i`` with ``i + d/2``), turned by the same angle
    ``positions * base^(-2i/d)``::

        x_{2i}'   = x_{2i} cos(angle) - x_{2i+1} sin(angle)
        x_{2i+1}' = x_{2i+1} cos(angle) + x_{2i} sin(angle)

    It is the rotate-half rotation with the dimensions reordered: even ones first, then odd
    ones, rotated by :func:`apply_rope`, then put back.

    Used in lessons 11 and 14.
    """
    x = _require_rotatable(x)
    d = x.shape[-1]
    order = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2))).to(x.device)  # (d,)
    rotated = apply_rope(x[..., order], positions, base)  # pair i is (x_2i, x_2i+1)
    return torch.empty_like(rotated).index_copy_(-1, order, rotated)


def sinusoidal_positions(seq_len: int, d_model: int) -> torch.Tensor:
    """The fixed position encodings of the original Transformer, ``(seq_len, d_model)``.

    Row ``pos``, columns ``2i`` and ``2i+1`` hold ``sin(pos / 10000^(2i/d_model))`` and
    ``cos(pos / 10000^(2i/d_model))``: each pair of columns is a clock at its own speed.

    Used in lessons 07 and 11.
    """
    require_positive_int("seq_len", seq_len)
    require_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(_(
            "d_model should be even (sin/cos pairs), got {d_model}"
        ).format(d_model=d_model))
    position = torch.arange(seq_len, dtype=torch.float32)[:, None]  # (seq_len, 1)
    frequency = torch.exp(  # (d_model / 2,) = 1 / 10000^(2i/d_model)
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    encoding = torch.zeros(seq_len, d_model)
    encoding[:, 0::2] = torch.sin(position * frequency)
    encoding[:, 1::2] = torch.cos(position * frequency)
    return encoding


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The ALiBi slope of each head, ``(num_heads,)`` float32 (Press et al., 2022).

    For a power of two ``num_heads = n`` the slopes are the geometric sequence
    ``2^(-8(h+1)/n)``, ``h = 0 .. n-1`` (for 8 heads: 1/2, 1/4, ..., 1/256). Otherwise the
    paper's rule: the slopes of the largest power of two ``p < n``, then every other slope of
    ``2p`` heads for the remaining ``n - p`` heads.

    Used in lesson 11.
    """
    require_positive_int("num_heads", num_heads)
    power = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = [2.0 ** (-8.0 * (h + 1) / power) for h in range(power)]
    if power < num_heads:
        slopes += [2.0 ** (-8.0 * (h + 1) / (2 * power)) for h in range(0, 2 * power, 2)]
        slopes = slopes[:num_heads]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(num_heads: int, n_q: int, n_k: int | None = None) -> torch.Tensor:
    """The ALiBi scores bias ``(num_heads, n_q, n_k)``: ``-slope_h * distance(query, key)``.

    Added to the scores before the softmax, like an additive mask (lesson 05). The queries
    are the **last** n_q of the n_k positions (the cache convention of ``causal_mask``):
    query i sits at position ``n_k - n_q + i`` and key j at position j, so for a key at or
    before the query the bias is ``-slope_h * (n_k - n_q + i - j)``; a key after the query
    gets ``-slope_h`` times its distance too (a causal model masks it anyway).

    Used in lesson 11.
    """
    slopes = alibi_slopes(num_heads)  # (num_heads,)
    n_q, n_k = require_cache_sizes("alibi_bias", n_q, n_k)
    query_positions = torch.arange(n_k - n_q, n_k)[:, None]  # (n_q, 1)
    distance = (query_positions - torch.arange(n_k)[None, :]).abs()  # (n_q, n_k)
    return -slopes[:, None, None] * distance  # (num_heads, n_q, n_k)
