"""Causal, sliding-window, chunked and padding masks, combined and converted.

Convention: bool, **True = may attend**.

Shapes, for scores ``(batch, n_q, n_k)`` or ``(batch, num_heads, n_q, n_k)``:

- ``causal_mask(n_q, n_k)`` is ``(n_q, n_k)``: the same for every sentence and head; so are
  ``band_mask`` (a sliding window) and ``chunked_mask`` (lesson 17's local layers);
- ``padding_mask(lengths)`` is ``(batch, 1, n_k)``: one row of keys per sentence, already
  broadcasting over the queries; ``padding_mask(lengths)[:, None]`` is
  ``(batch, 1, 1, n_k)`` and broadcasts over the heads as well.

A padding mask is never 2-D, because a 2-D mask always means ``(n_q, n_k)``: a
``(batch, n_k)`` mask would otherwise be read as ``(n_q, n_k)`` without an error whenever
batch == n_q, and block the wrong keys.
"""

from __future__ import annotations

import torch

from course_utils.checks import (
    require_bool,
    require_bool_mask,
    require_cache_sizes,
    require_float_dtype,
    require_int_in_range,
    require_positive_int,
    require_same_device,
    require_tensor,
)
from course_utils.language import _


def causal_mask(n_q: int, n_k: int | None = None, *, device=None) -> torch.Tensor:
    """Bool ``(n_q, n_k)``: query i may attend to the keys at or before its own position.

    With ``n_k`` omitted (``n_k == n_q``), that is the lower triangle, diagonal included.
    With ``n_k > n_q`` the queries are the **last** n_q positions of the n_k keys, as in
    decoding with a cache of earlier keys: query i sits at position ``n_k - n_q + i`` and
    sees keys ``0 .. n_k - n_q + i`` (the mask is aligned to the bottom-right corner).
    ``F.scaled_dot_product_attention(is_causal=True)`` aligns to the top-left instead,
    which is only the same when ``n_q == n_k``.

    Used in lessons 04, 05, 06, 07, 08, 09, 11, 12, 13, 14, 16, 17 and 18.
    """
    n_q, n_k = require_cache_sizes("causal_mask", n_q, n_k)
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)


def band_mask(n_q: int, n_k: int | None = None, *, window: int, sinks: int = 0,
              device=None) -> torch.Tensor:
    """Bool ``(n_q, n_k)``: causal and local, a query sees its ``window`` latest positions.

    Query i sits at position ``p = n_k - n_q + i`` (the queries are the **last** n_q of the
    n_k keys, as in :func:`causal_mask`) and may attend to key j when
    ``p - window < j <= p``: ``window`` keys, itself included (Mistral's, Gemma 3's and
    gpt-oss's sliding window). ``window >= n_k`` gives :func:`causal_mask`. ``sinks``: the
    first ``sinks`` keys stay visible to every later query as well (StreamingLLM's attention
    sinks; only meaningful when key 0 is position 0 of the sequence).

    Used in lesson 17.
    """
    n_q, n_k = require_cache_sizes("band_mask", n_q, n_k)
    require_positive_int("window", window)
    require_int_in_range("sinks", sinks, 0)
    query = torch.arange(n_k - n_q, n_k, device=device)[:, None]  # (n_q, 1) positions
    key = torch.arange(n_k, device=device)[None, :]  # (1, n_k)
    recent = (key <= query) & (key > query - window)
    return recent | ((key < sinks) & (key <= query))  # (n_q, n_k)


def chunked_mask(n_q: int, n_k: int | None = None, *, chunk: int, device=None) -> torch.Tensor:
    """Bool ``(n_q, n_k)``: causal within chunks of ``chunk`` positions (Llama 4's local layers).

    Key j at position j and query i at position ``p = n_k - n_q + i`` (queries last, as in
    :func:`causal_mask`): allowed when ``j <= p`` and ``j // chunk == p // chunk``. The first
    query of a chunk sees only itself; the last sees the whole chunk.

    Used in lesson 17.
    """
    n_q, n_k = require_cache_sizes("chunked_mask", n_q, n_k)
    require_positive_int("chunk", chunk)
    query = torch.arange(n_k - n_q, n_k, device=device)[:, None]  # (n_q, 1) positions
    key = torch.arange(n_k, device=device)[None, :]  # (1, n_k)
    return (key <= query) & (key // chunk == query // chunk)  # (n_q, n_k)


def _lengths_tensor(lengths, device) -> tuple[torch.Tensor, int | None]:
    """``lengths`` as a 1-D integer tensor on ``device``, and the longest length.

    The values are checked where they are (a list: on the CPU); on the meta device they are
    unknown, and the longest length is None.
    """
    message = _("lengths should be a list or 1-D integer tensor of real lengths (batch,), got "
                "{kind} {lengths!r}").format(kind=type(lengths).__name__, lengths=lengths)
    if lengths is None or isinstance(lengths, (str, bytes)):
        raise TypeError(message)
    try:
        tensor = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(message) from None
    if tensor.dim() != 1 or tensor.is_floating_point() or tensor.is_complex() \
            or tensor.dtype == torch.bool:
        raise ValueError(
            _(
                "lengths should be a 1-D list of integer lengths (batch,), got {tensor_dtype} of "
                "shape {tensor_shape}"
            ).format(tensor_dtype=tensor.dtype, tensor_shape=tuple(tensor.shape))
        )
    if len(tensor) == 0:
        raise ValueError(_("lengths should hold one length per sequence, got none"))
    longest = None
    if tensor.device.type != "meta":
        if (tensor < 0).any():
            raise ValueError(_(
                "lengths should be non-negative, got {lengths}"
            ).format(lengths=tensor.tolist()))
        longest = int(tensor.max())
    return (tensor if device is None else tensor.to(device)), longest


def padding_mask(lengths, max_len: int | None = None, *, device=None) -> torch.Tensor:
    """Bool ``(batch, 1, max_len)``: True at the real keys of each sequence (right padding).

    ``lengths`` is a list or 1-D integer tensor of real lengths, ``(batch,)``; ``max_len``
    (an int) defaults to the longest of them. The middle axis of size 1 makes the mask
    broadcast over the queries of scores ``(batch, n_q, n_k)``; for scores with a heads
    axis ``(batch, num_heads, n_q, n_k)`` add one more: ``padding_mask(lengths)[:, None]``
    is ``(batch, 1, 1, max_len)``. Built on ``device``, else on the device of ``lengths``.

    Used in lessons 04, 05, 07 and 08.
    """
    lengths, longest = _lengths_tensor(lengths, device)
    if max_len is None:
        if not longest:
            raise ValueError(_(
                "pass max_len: every length is 0, or the lengths are on the meta device where "
                "their values are unknown"
            ))
        max_len = longest
    require_positive_int("max_len", max_len)
    if longest is not None and max_len < longest:
        raise ValueError(_(
            "max_len={max_len} is shorter than the longest length {longest}"
        ).format(max_len=max_len, longest=longest))
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return (positions < lengths[:, None])[:, None, :]  # (batch, 1, max_len)


def _require_key_padding(mask) -> torch.Tensor:
    """A key padding mask ``(batch, 1, n_k)`` (or the older ``(batch, n_k)``) as (batch, n_k)."""
    mask = require_bool_mask(mask, getattr(mask, "shape", ()), "(batch, 1, n_k)")
    if mask.dim() == 3 and mask.shape[1] == 1:
        return mask[:, 0]
    if mask.dim() == 2:
        return mask
    raise ValueError(
        _(
            "expected a key padding mask of shape (batch, 1, n_k) as padding_mask() makes it (or "
            "(batch, n_k)), got shape {mask_shape}"
        ).format(mask_shape=tuple(mask.shape))
    )


def expand_padding_mask(mask: torch.Tensor, with_heads: bool = True) -> torch.Tensor:
    """A key padding mask ``(batch, 1, n_k)`` or ``(batch, n_k)`` shaped for the scores.

    Returns ``(batch, 1, 1, n_k)`` for scores ``(batch, num_heads, n_q, n_k)``, or
    ``(batch, 1, n_k)`` for scores ``(batch, n_q, n_k)`` when ``with_heads=False``.

    Used in lessons 04, 05 and 08.
    """
    keys = _require_key_padding(mask)  # (batch, n_k)
    require_bool("with_heads", with_heads)
    return keys[:, None, None, :] if with_heads else keys[:, None, :]


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """Allow a key only where *every* mask allows it (logical AND, with broadcasting).

    E.g. ``causal_mask(n)`` ``(n_q, n_k)`` with ``padding_mask(lengths)[:, None]``
    ``(batch, 1, 1, n_k)`` gives ``(batch, 1, n_q, n_k)``.

    Used in lesson 05.
    """
    if not masks:
        raise ValueError(_("combine_masks needs at least one bool mask, got none"))
    for mask in masks:
        require_bool_mask(mask, getattr(mask, "shape", ()), "(..., n_q, n_k)")
    try:
        torch.broadcast_shapes(*(mask.shape for mask in masks))
    except RuntimeError:
        shapes = ", ".join(str(tuple(mask.shape)) for mask in masks)
        raise ValueError(
            _(
                "masks of shapes {shapes} do not broadcast together; a padding mask is (batch, "
                "1, n_k) for scores (batch, n_q, n_k) and (batch, 1, 1, n_k) for scores (batch, "
                "num_heads, n_q, n_k)"
            ).format(shapes=shapes)
        ) from None
    require_same_device(**{f"mask {index}": mask for index, mask in enumerate(masks)})
    combined = masks[0]
    for mask in masks[1:]:
        combined = combined & mask
    return combined


def to_mha_convention(mask: torch.Tensor, *, key_padding: bool = False) -> torch.Tensor:
    """Flip our convention (True = may attend) into ``nn.MultiheadAttention``'s (True = blocked).

    For ``attn_mask`` ``(n_q, n_k)``: ``to_mha_convention(causal_mask(n))``. For
    ``key_padding_mask``, which torch wants as ``(batch, n_k)``, pass
    ``key_padding=True``: a ``padding_mask`` ``(batch, 1, n_k)`` comes back flipped as
    ``(batch, n_k)``. Without ``key_padding`` the flip is its own inverse.

    Used in lessons 04, 05 and 07.
    """
    if require_bool("key_padding", key_padding):
        return ~_require_key_padding(mask)
    mask = require_bool_mask(mask, getattr(mask, "shape", ()), "(..., n_q, n_k)")
    return ~mask


def _require_fill(fill, dtype: torch.dtype) -> float:
    """A blocking fill value: negative, and representable in ``dtype`` (or exactly -inf)."""
    if isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise TypeError(_(
            "fill should be a number such as float('-inf'), got {kind}"
        ).format(kind=type(fill).__name__))
    fill = float(fill)
    if not fill < 0:
        raise ValueError(_("fill should be negative to block a key, got {fill}").format(fill=fill))
    if fill != float("-inf") and torch.tensor(fill, dtype=torch.float64).to(dtype).isinf():
        # Lesson 05 prints this message, so it is in the reader's language.
        raise ValueError(_(
            "fill={fill:g} overflows to -inf in {dtype} (its most negative finite value is "
            "torch.finfo({dtype}).min = {smallest:g}); pass float('-inf') "
            "if you mean -inf, or a fill the dtype can hold"
        ).format(fill=fill, dtype=dtype, smallest=torch.finfo(dtype).min))
    return fill


def additive_mask(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32, fill: float = float("-inf")
) -> torch.Tensor:
    """Turn a bool mask (True = may attend) into a float mask that is *added* to the scores.

    0 where a key is allowed, ``fill`` where it is blocked; same shape and device as
    ``mask``. This is what ``F.scaled_dot_product_attention`` does with a float
    ``attn_mask``. A finite ``fill`` that overflows to -inf in ``dtype`` (e.g. -1e9 in
    float16) is refused.

    Used in lesson 05.
    """
    mask = require_bool_mask(mask, getattr(mask, "shape", ()), "(..., n_q, n_k)")
    fill = _require_fill(fill, require_float_dtype("dtype", dtype))
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, fill)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, fill: float = float("-inf")):
    """The textbook recipe: blocked scores := ``fill``, then softmax over the keys.

    scores ``(..., n_q, n_k)``, mask bool broadcastable to it (True = may attend); returns
    weights ``(..., n_q, n_k)``. Deliberately naive: a row with no allowed key comes out as
    NaN for ``fill=-inf`` and as a uniform 1/n_k row for a finite fill. Lesson 05 shows both;
    :func:`course_utils.nn.attention.scaled_dot_product_attention` handles such rows.

    Used in lesson 05.
    """
    scores = require_tensor("scores", scores, "(..., n_q, n_k)")
    mask = require_bool_mask(mask, scores.shape, "(..., n_q, n_k)")
    require_same_device(scores=scores, mask=mask)
    fill = _require_fill(fill, scores.dtype)
    return torch.softmax(scores.masked_fill(~mask, fill), dim=-1)
