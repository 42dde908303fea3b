"""The key/value cache of a decoder that generates, and the protocol every generating model follows.

Generating token by token, a decoder would recompute the keys and values of every earlier
token at every step, although they never change (a token only reads the past). The cache
keeps them instead: per layer, keys and values ``(batch, num_kv_heads, seq_len, d_k)``,
appended to by that layer's attention, so each step computes q, k, v for the new tokens
only and their queries attend to every cached key (the non-square causal mask of lesson 05,
``causal_mask(n_new, past + n_new)``).

**The protocol.** A model that :func:`course_utils.nn.generation.generate` can drive
(``course_utils.models.gpt.GPT``, lesson 14's ``course_utils.models.llama.Llama``):

- ``model(tokens, cache=None)`` returns logits ``(batch, n_new, vocab_size)``, one prediction
  per token given, ``tokens`` being ``(batch, n_new)`` ids;
- with a :class:`KVCache`, ``tokens`` are the next positions after ``cache.seq_len``: the
  first token given sits at position ``cache.seq_len``, and each layer appends the keys and
  values of the new tokens (``layer`` = its index, from 0), so afterwards ``cache.seq_len``
  has grown by ``n_new``. A new, empty ``KVCache()`` starts a sequence;
- a layer that attends only to a sliding window of ``window`` positions (lesson 17) appends
  with ``window=``: the cache then keeps only its last ``window`` positions, in a ring buffer
  (position ``p`` in slot ``p % window``), so that layer's memory stops growing;
- ``model.max_len`` is how many positions the model can see (an int), or ``None`` for no
  limit (e.g. RoPE, which has no table to run out of).
"""

from __future__ import annotations

import torch

from course_utils.checks import (
    require_instance,
    require_int_in_range,
    require_positive_int,
    require_same_device,
    require_tensor,
    require_token_ids,
)
from course_utils.language import _


class KVCache:
    """Per layer, the keys and values ``(batch, num_kv_heads, seq_len, d_k)`` seen so far.

    Starts empty and grows as the attention layers :meth:`append` to it; ``KVCache()`` knows
    nothing of the model, so the same class serves every model that follows the protocol
    above. ``keys[layer]`` and ``values[layer]`` are the tensors of one layer.

    A layer appended to with ``window=W`` keeps at most W positions: ``keys[layer]`` is then
    a ring buffer of ``min(seen, W)`` slots, position ``p`` in slot ``p % W``, so its slots
    are in chronological order only until it wraps; :meth:`append` hands the attention its
    keys in chronological order.

    Used in lessons 12, 14, 17 and 18.
    """

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.seen: list[int] = []  # positions each layer has been given (held or dropped)
        self.windows: list[int | None] = []  # each layer's window (None: keeps everything)

    @property
    def num_layers(self) -> int:
        """How many layers have stored keys and values."""
        return len(self.keys)

    def layer_seq_len(self, layer: int) -> int:
        """The positions ``layer`` has been given (0 for a layer that has stored nothing yet).

        The same as :meth:`layer_held` unless the layer has a window and has dropped some.
        """
        require_int_in_range("layer", layer, 0)
        return self.seen[layer] if layer < self.num_layers else 0

    def layer_held(self, layer: int) -> int:
        """The positions ``layer`` holds now: at most its window (0 before it stored any)."""
        require_int_in_range("layer", layer, 0)
        return self.keys[layer].shape[2] if layer < self.num_layers else 0

    @property
    def seq_len(self) -> int:
        """The positions cached: what every layer holds (0 while empty).

        Between two forward passes every layer holds the same number; during one, the layers
        that already ran hold more.
        """
        return min(self.seen, default=0)

    @property
    def nbytes(self) -> int:
        """Bytes the cached keys and values take: ``2 · batch · num_layers · num_kv_heads ·
        seq_len · d_k · bytes per number``
        (``course_utils.experiments.l06_cost.kv_cache_bytes``)."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def append(self, layer: int, k, v, window: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' keys and values ``(batch, num_kv_heads, n_new, d_k)`` to
        ``layer`` and return all of that layer's, ``(batch, num_kv_heads, past + n_new, d_k)``.

        Layers are numbered from 0 and a new layer must come right after the last one. The
        values may be narrower or wider than the keys (``d_v != d_k``): lesson 18's latent
        attention keeps its shared RoPE key in one slot and its latent in the other.
        With ``window=W`` (the same at every call for one layer) the layer keeps only its
        last W positions, and the keys returned are the ``held + n_new`` positions from the
        oldest held to the newest, in order: ``band_mask(n_new, held + n_new, window=W)``
        of :mod:`course_utils.nn.masks` is then the mask of its attention.
        """
        require_int_in_range("layer", layer, 0, self.num_layers)
        if window is not None:
            require_positive_int("window", window)
        k = require_tensor("k", k, "(batch, num_kv_heads, n_new, d_k)")
        v = require_tensor("v", v, "(batch, num_kv_heads, n_new, d_k)")
        require_same_device(k=k, v=v)
        if k.dim() != 4 or k.shape[:3] != v.shape[:3] or k.dtype != v.dtype:
            raise ValueError(_(
                "k and v should be (batch, num_kv_heads, n_new, d_k) and (batch, num_kv_heads, "
                "n_new, d_v) of one dtype, alike but for the last dim, got {k_dtype} {k_shape} "
                "and {v_dtype} {v_shape}"
            ).format(k_dtype=k.dtype, k_shape=tuple(k.shape), v_dtype=v.dtype,
                     v_shape=tuple(v.shape)))
        if layer == self.num_layers:
            self.keys.append(k[:, :, :0])
            self.values.append(v[:, :, :0])
            self.seen.append(0)
            self.windows.append(window)
        elif window != self.windows[layer]:
            raise ValueError(_("window should stay {first} for layer {layer}, as at its first "
                               "append, got {window}").format(first=self.windows[layer],
                                                              layer=layer, window=window))
        held, held_v = self.keys[layer], self.values[layer]
        if (held.shape[:2] != k.shape[:2] or held.shape[3] != k.shape[3]
                or held.dtype != k.dtype or held.device != k.device):
            raise ValueError(_(
                "layer {layer} holds keys {held_dtype} (batch, num_kv_heads, seq_len, d_k) = "
                "{held_shape} on {held_device}; the new k should match in batch, num_kv_heads, "
                "d_k, dtype and device, got {k_dtype} {k_shape} on {k_device}"
            ).format(layer=layer, held_dtype=held.dtype, held_shape=tuple(held.shape),
                     held_device=held.device, k_dtype=k.dtype, k_shape=tuple(k.shape),
                     k_device=k.device))
        if held_v.shape[3] != v.shape[3]:
            raise ValueError(_(
                "layer {layer} holds values (batch, num_kv_heads, seq_len, d_v) = {held_shape}; "
                "the new v should have d_v={d_v}, got {v_shape}"
            ).format(layer=layer, held_shape=tuple(held_v.shape), d_v=held_v.shape[3],
                     v_shape=tuple(v.shape)))
        seen, n_new = self.seen[layer], k.shape[2]
        self.seen[layer] = seen + n_new
        if window is None:
            # torch.cat copies what is held at every step (quadratic in total, but simple and
            # small here; production caches preallocate max_len positions instead).
            self.keys[layer] = torch.cat((held, k), dim=2)
            self.values[layer] = torch.cat((held_v, v), dim=2)
            return self.keys[layer], self.values[layer]
        return self._append_to_ring(layer, seen, window, k, v)

    def _append_to_ring(self, layer: int, seen: int, window: int, k, v):
        """The windowed append: chronological keys for the attention, the ring kept."""
        held_k, held_v = self.keys[layer], self.values[layer]  # (batch, kv_heads, held, d_k)
        held = held_k.shape[2]
        # The oldest held position is seen - held; it sits in slot (seen - held) % window.
        oldest = (seen - held) % window
        order = [(oldest + i) % window for i in range(held)]  # slots, oldest first
        keys = torch.cat((held_k[:, :, order], k), dim=2)  # (batch, kv_heads, held + n_new, d_k)
        values = torch.cat((held_v[:, :, order], v), dim=2)
        # Keep the last min(window, seen + n_new) positions, position p in slot p % window.
        end = seen + k.shape[2]
        kept = min(window, end)
        slots = torch.tensor([p % window for p in range(end - kept, end)])
        ring_k = keys.new_empty((*keys.shape[:2], kept, keys.shape[3]))
        ring_v = values.new_empty((*values.shape[:2], kept, values.shape[3]))
        self.keys[layer] = ring_k.index_copy(2, slots.to(keys.device), keys[:, :, -kept:])
        self.values[layer] = ring_v.index_copy(2, slots.to(keys.device), values[:, :, -kept:])
        return keys, values


def require_next_tokens(tokens, cache, vocab_size: int, max_len: int) -> tuple[torch.Tensor, int]:
    """The checks every model of the protocol makes on ``forward(tokens, cache)``: ``tokens``
    ``(batch, n_new)`` ids below ``vocab_size``, at least one, continuing what ``cache`` holds
    without passing position ``max_len - 1``. Returns ``(tokens, past)``, ``past`` being the
    number of cached positions (0 without a cache).

    Used in lessons 12 and 14.
    """
    tokens = require_token_ids("tokens", tokens, vocab_size, "(batch, n_new)")
    past = 0
    if cache is not None:
        past = require_instance("cache", cache, KVCache,
                                "a course_utils.nn.kv_cache.KVCache or None").seq_len
    n_new = tokens.shape[1]
    if n_new == 0:
        raise ValueError(_("{name} should hold at least one token, got shape {shape}")
                         .format(name="tokens", shape=tuple(tokens.shape)))
    if past + n_new > max_len:
        raise ValueError(_(
            "{name} (batch, n_new) = {shape} after {past} cached positions would reach position "
            "{last}, but the model has max_len={max_len} positions (0..{max_position}); crop "
            "the context"
        ).format(name="tokens", shape=tuple(tokens.shape), past=past, last=past + n_new - 1,
                 max_len=max_len, max_position=max_len - 1))
    return tokens, past
