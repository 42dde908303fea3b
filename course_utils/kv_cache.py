"""The key/value cache of a decoder that generates, and the protocol every generating model follows.

Generating token by token, a decoder would recompute the keys and values of every earlier
token at every step, although they never change (a token only reads the past). The cache
keeps them instead: per layer, keys and values ``(batch, num_kv_heads, seq_len, d_k)``,
appended to by that layer's attention, so each step computes q, k, v for the new tokens
only and their queries attend to every cached key (the non-square causal mask of lesson 05,
``causal_mask(n_new, past + n_new)``).

**The protocol.** A model that :func:`course_utils.generation.generate` can drive
(``course_utils.gpt.GPT``, lesson 14's ``course_utils.llama.Llama``):

- ``model(tokens, cache=None)`` returns logits ``(batch, n_new, vocab_size)``, one prediction
  per token given, ``tokens`` being ``(batch, n_new)`` ids;
- with a :class:`KVCache`, ``tokens`` are the next positions after ``cache.seq_len``: the
  first token given sits at position ``cache.seq_len``, and each layer appends the keys and
  values of the new tokens (``layer`` = its index, from 0), so afterwards ``cache.seq_len``
  has grown by ``n_new``. A new, empty ``KVCache()`` starts a sequence;
- ``model.max_len`` is how many positions the model can see (an int), or ``None`` for no
  limit (e.g. RoPE, which has no table to run out of).
"""

from __future__ import annotations

import torch

from course_utils.checks import require_int_in_range, require_same_device, require_tensor


class KVCache:
    """Per layer, the keys and values ``(batch, num_kv_heads, seq_len, d_k)`` seen so far.

    Starts empty and grows as the attention layers :meth:`append` to it; ``KVCache()`` knows
    nothing of the model, so the same class serves every model that follows the protocol
    above. ``keys[layer]`` and ``values[layer]`` are the tensors of one layer.
    """

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def num_layers(self) -> int:
        """How many layers have stored keys and values."""
        return len(self.keys)

    def layer_seq_len(self, layer: int) -> int:
        """The positions ``layer`` holds (0 for a layer that has stored nothing yet)."""
        require_int_in_range("layer", layer, 0)
        return self.keys[layer].shape[2] if layer < self.num_layers else 0

    @property
    def seq_len(self) -> int:
        """The positions cached: what every layer holds (0 while empty).

        Between two forward passes every layer holds the same number; during one, the layers
        that already ran hold more.
        """
        return min((k.shape[2] for k in self.keys), default=0)

    @property
    def nbytes(self) -> int:
        """Bytes the cached keys and values take: ``2 · batch · num_layers · num_kv_heads ·
        seq_len · d_k · bytes per number`` (``course_utils.cost.kv_cache_bytes``)."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def append(self, layer: int, k, v) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' keys and values ``(batch, num_kv_heads, n_new, d_k)`` to
        ``layer`` and return all of that layer's, ``(batch, num_kv_heads, past + n_new, d_k)``.

        Layers are numbered from 0 and a new layer must come right after the last one. The
        values may be narrower or wider than the keys (``d_v != d_k``): lesson 18's latent
        attention keeps its shared RoPE key in one slot and its latent in the other.
        """
        require_int_in_range("layer", layer, 0, self.num_layers)
        k = require_tensor("k", k, "(batch, num_kv_heads, n_new, d_k)")
        v = require_tensor("v", v, "(batch, num_kv_heads, n_new, d_k)")
        require_same_device(k=k, v=v)
        if k.dim() != 4 or k.shape[:3] != v.shape[:3] or k.dtype != v.dtype:
            raise ValueError(
                "k and v should be (batch, num_kv_heads, n_new, d_k) and (batch, num_kv_heads, "
                "n_new, d_v) of one dtype, alike but for the last dim, "
                f"got {k.dtype} {tuple(k.shape)} and {v.dtype} {tuple(v.shape)}"
            )
        if layer == self.num_layers:
            self.keys.append(k)
            self.values.append(v)
            return k, v
        held, held_v = self.keys[layer], self.values[layer]
        if (held.shape[:2] != k.shape[:2] or held.shape[3] != k.shape[3]
                or held.dtype != k.dtype or held.device != k.device):
            raise ValueError(
                f"layer {layer} holds keys {held.dtype} (batch, num_kv_heads, seq_len, d_k) = "
                f"{tuple(held.shape)} on {held.device}; the new k should match in batch, "
                f"num_kv_heads, d_k, dtype and device, got {k.dtype} {tuple(k.shape)} on "
                f"{k.device}"
            )
        if held_v.shape[3] != v.shape[3]:
            raise ValueError(
                f"layer {layer} holds values (batch, num_kv_heads, seq_len, d_v) = "
                f"{tuple(held_v.shape)}; the new v should have d_v={held_v.shape[3]}, got "
                f"{tuple(v.shape)}"
            )
        # torch.cat copies what is held at every step (quadratic in total, but simple and
        # small here; production caches preallocate max_len positions instead).
        self.keys[layer] = torch.cat((held, k), dim=2)
        self.values[layer] = torch.cat((held_v, v), dim=2)
        return self.keys[layer], self.values[layer]
