"""Causal and padding masks, combined and converted. Convention: bool, **True = may attend**."""

from __future__ import annotations

import torch

from course_utils.checks import require_bool_mask, require_positive_int, require_tensor


def causal_mask(n: int, device=None) -> torch.Tensor:
    """Bool ``(n, n)``: True on and below the diagonal, so query i sees keys 0..i."""
    require_positive_int("n (the sequence length)", n)
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


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """Allow a key only where *every* mask allows it (logical AND, with broadcasting).

    E.g. ``causal_mask(n)`` ``(n_q, n_k)`` with ``expand_padding_mask(pad)``
    ``(batch, 1, 1, n_k)`` gives ``(batch, 1, n_q, n_k)``.
    """
    if not masks:
        raise ValueError("combine_masks needs at least one bool mask, got none")
    for index, mask in enumerate(masks):
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"mask {index} should be a bool tensor (True = may attend), got {got}")
    try:
        torch.broadcast_shapes(*(mask.shape for mask in masks))
    except RuntimeError:
        shapes = ", ".join(str(tuple(mask.shape)) for mask in masks)
        raise ValueError(
            f"masks of shapes {shapes} do not broadcast together; a padding mask (batch, n_k) "
            "needs expand_padding_mask() before it meets a (n_q, n_k) mask"
        ) from None
    combined = masks[0]
    for mask in masks[1:]:
        combined = combined & mask
    return combined


def to_mha_convention(mask: torch.Tensor) -> torch.Tensor:
    """Flip our convention (True = may attend) into ``nn.MultiheadAttention``'s (True = blocked).

    Use it for both ``attn_mask`` ``(n_q, n_k)`` and ``key_padding_mask`` ``(batch, n_k)``.
    The flip is its own inverse, so it also turns an MHA mask back into ours.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"expected a bool mask (True = may attend), got {got}")
    return ~mask


def _require_fill(fill, dtype: torch.dtype) -> float:
    """A blocking fill value: negative, and representable in ``dtype`` (or exactly -inf)."""
    if isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise TypeError(f"fill should be a number such as float('-inf'), got {type(fill).__name__}")
    fill = float(fill)
    if not fill < 0:
        raise ValueError(f"fill should be negative to block a key, got {fill}")
    if fill != float("-inf") and torch.tensor(fill, dtype=torch.float64).to(dtype).isinf():
        raise ValueError(
            f"fill={fill:g} overflows to -inf in {dtype} (its most negative finite value is "
            f"torch.finfo({dtype}).min = {torch.finfo(dtype).min:g}); pass float('-inf') "
            "if you mean -inf, or a fill the dtype can hold"
        )
    return fill


def additive_mask(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32, fill: float = float("-inf")
) -> torch.Tensor:
    """Turn a bool mask (True = may attend) into a float mask that is *added* to the scores.

    0 where a key is allowed, ``fill`` where it is blocked; same shape as ``mask``. This is
    what ``F.scaled_dot_product_attention`` does with a float ``attn_mask``. A finite
    ``fill`` that overflows to -inf in ``dtype`` (e.g. -1e9 in float16) is refused.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask should be bool (True = may attend), got {got}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype should be a floating-point torch.dtype, got {dtype!r}")
    fill = _require_fill(fill, dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, fill)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, fill: float = float("-inf")):
    """The textbook recipe: blocked scores := ``fill``, then softmax over the keys.

    scores ``(..., n_q, n_k)``, mask bool broadcastable to it (True = may attend); returns
    weights ``(..., n_q, n_k)``. Deliberately naive: a row with no allowed key comes out as
    NaN for ``fill=-inf`` and as a uniform 1/n_k row for a finite fill. Lesson 05 shows both;
    :func:`course_utils.attention.scaled_dot_product_attention` handles such rows.
    """
    scores = require_tensor("scores", scores, "(..., n_q, n_k)")
    mask = require_bool_mask(mask, scores.shape, "(..., n_q, n_k)")
    fill = _require_fill(fill, scores.dtype)
    return torch.softmax(scores.masked_fill(~mask, fill), dim=-1)
