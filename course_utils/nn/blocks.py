"""The Transformer blocks built around multi-head attention, and three tiny models made of them.

An encoder block = multi-head self-attention and a position-wise feed-forward network (FFN),
each wrapped in a residual connection and a LayerNorm. A decoder block adds a third sublayer
between the two: cross-attention, whose queries come from the decoder and whose keys and
values come from the encoder's output (the *memory*). Two orders exist:

- post-LN (the original Transformer): ``x = norm(x + sublayer(x))``;
- pre-LN (GPT-2 and most models since): ``x = x + sublayer(norm(x))``.

Shapes: x ``(batch, seq_len, d_model)``, weights ``(batch, num_heads, n_q, n_k)``.
Masks are bool with **True = may attend**.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_bool,
    require_key_padding,
    require_matches_module,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_tensor,
)
from course_utils.language import _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.llama_parts import RMSNorm, SwiGLUFeedForward
from course_utils.nn.masks import causal_mask

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _require_stream(name: str, x, notation: str, module: nn.Module) -> torch.Tensor:
    """``x`` as a block's input: float, 3-D, width ``module.d_model``, the module's dtype and
    device. Checked here, before any LayerNorm sees ``x``, so pre-LN and post-LN blocks answer
    a float64 input to a float32 block with the same message."""
    x = require_tensor(name, x, notation)
    if x.dim() != 3 or x.shape[-1] != module.d_model:
        raise ValueError(_(
            "{name} should be {notation} with d_model={d_model}, got shape {shape}"
        ).format(name=name, notation=notation, d_model=module.d_model, shape=tuple(x.shape)))
    return require_matches_module(name, x, module)


def _layer_norm(d_model: int, eps: float, enabled: bool = True, norm: str = "layer") -> nn.Module:
    # Identity keeps the forward pass identical in structure when LayerNorm is switched off.
    if not enabled:
        return nn.Identity()
    return RMSNorm(d_model, eps=eps) if norm == "rms" else nn.LayerNorm(d_model, eps=eps)


def _copy_parameters(pairs) -> None:
    with torch.no_grad():
        for mine, theirs in pairs:
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)


def _shaped_like(cls, layer):
    """A ``cls`` block with the sizes, norm order, activation, eps, device and dtype of the
    torch layer ``layer``, its self-attention copied; the caller copies the rest."""
    block = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads,
                layer.linear1.out_features, norm_first=layer.norm_first,
                activation=_copyable_activation(layer), eps=layer.norm1.eps)
    block = block.to(device=layer.linear1.weight.device, dtype=layer.linear1.weight.dtype)
    block.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
    return block


def _copyable_activation(layer) -> str:
    if not layer.self_attn.batch_first:
        raise ValueError(_(
            "expected a layer built with batch_first=True, whose inputs are "
            "(batch, seq_len, d_model); this one takes (seq_len, batch, d_model)"
        ))
    act = layer.activation  # F.relu / F.gelu when built from a string, else the module given
    if act is F.relu or type(act) is nn.ReLU:
        activation = "relu"
    elif act is F.gelu or (type(act) is nn.GELU and act.approximate == "none"):
        activation = "gelu"
    else:
        raise ValueError(_("only relu or gelu activations can be copied, got {activation}")
                         .format(activation=repr(layer.activation)))
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError(_("only layers built with bias=True (the default) can be copied"))
    return activation


class FeedForward(nn.Module):
    """Position-wise FFN: ``linear2(activation(linear1(x)))``, the same MLP at every position.

    x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_ff)`` -> ``(batch, seq_len, d_model)``.
    Tokens do not interact here: that is attention's job.

    Used in lessons 07 and 12.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        require_one_of("activation", activation, sorted(_ACTIVATIONS))
        self.linear1 = nn.Linear(require_positive_int("d_model", d_model),
                                 require_positive_int("d_ff", d_ff))
        self.activation = _ACTIVATIONS[activation]()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        x = require_tensor("x", x, "(batch, seq_len, d_model)")
        return self.linear2(self.activation(self.linear1(x)))


class EncoderBlock(nn.Module):
    """Self-attention + FFN, each with a residual connection and a LayerNorm.

    Args:
        d_model: width of every token vector.
        num_heads: attention heads; ``d_model`` must divide evenly by it.
        d_ff: hidden width of the FFN (4 * d_model in the original Transformer).
        norm_first: False = post-LN (original), True = pre-LN (GPT-2 style).
        residual, layer_norm: switch the residual connections or the LayerNorms off,
            only to measure what they are for (lesson 07, section 6).
        activation: ``"relu"`` or ``"gelu"`` inside the FFN.
        eps: LayerNorm's epsilon.
        sink, gate: the attention's learned sink logit per head or sigmoid output gate
            (:class:`~course_utils.nn.attention.MultiHeadAttention`, lesson 17).
        norm: ``"layer"`` (LayerNorm, the default) or ``"rms"``
            (:class:`~course_utils.nn.llama_parts.RMSNorm`, Llama's), lesson 14's ablation.
        activation ``"swiglu"``: the FFN is Llama's
            :class:`~course_utils.nn.llama_parts.SwiGLUFeedForward` (three bias-free
            matrices of hidden width ``d_ff``) instead of the two-layer MLP.
        rope_base: ``None`` (no position information in the block) or RoPE's base: the
            attention rotates its queries and keys by their positions.

    ``forward(x, mask=None, cache=None, layer=0)`` takes x ``(batch, seq_len, d_model)`` and
    an optional bool mask broadcastable to ``(batch, num_heads, seq_len, n_k)`` (no mask:
    every token reads every token, as in BERT; ``causal_mask``: each reads only the past, as
    in GPT) and returns ``(output, weights)``: output ``(batch, seq_len, d_model)``, weights
    ``(batch, num_heads, seq_len, n_k)``. With a :class:`~course_utils.nn.kv_cache.KVCache`
    its attention appends this ``layer``'s keys and values and reads all cached ones
    (``n_k = cache.seq_len + seq_len``), as a decoder that generates does (lesson 12).
    ``need_weights=False`` returns ``(output, None)`` (the fused attention of
    :class:`~course_utils.nn.attention.MultiHeadAttention`); ``window`` makes the cache keep
    only this layer's last ``window`` positions (lesson 17).

    Used in lessons 07, 10, 14 and 17.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, norm_first: bool = False,
                 residual: bool = True, layer_norm: bool = True, activation: str = "relu",
                 eps: float = 1e-5, sink: bool = False, gate: bool = False,
                 norm: str = "layer", rope_base: float | None = None):
        super().__init__()
        eps = require_positive_number("eps", eps)
        require_one_of("norm", norm, ["layer", "rms"])
        self.self_attn = MultiHeadAttention(d_model, num_heads, sink=sink, gate=gate,
                                            rope_base=rope_base)
        self.ffn = (SwiGLUFeedForward(d_model, d_ff) if activation == "swiglu"
                    else FeedForward(d_model, d_ff, activation))
        self.d_model = d_model
        self.norm_first = require_bool("norm_first", norm_first)
        self.residual = require_bool("residual", residual)
        self.norm1 = _layer_norm(d_model, eps, require_bool("layer_norm", layer_norm), norm)
        self.norm2 = _layer_norm(d_model, eps, layer_norm, norm)

    def _add_residual(self, x, sublayer_output):
        return x + sublayer_output if self.residual else sublayer_output

    def forward(self, x, mask=None, cache=None, layer: int = 0, need_weights: bool = True,
                window: int | None = None):
        x = _require_stream("x", x, "(batch, seq_len, d_model)", self)
        attend = {"mask": mask, "cache": cache, "layer": layer, "need_weights": need_weights,
                  "window": window}
        if self.norm_first:  # pre-LN: x + sublayer(norm(x))
            attended, weights = self.self_attn(self.norm1(x), **attend)
            x = self._add_residual(x, attended)
            x = self._add_residual(x, self.ffn(self.norm2(x)))
        else:  # post-LN: norm(x + sublayer(x))
            attended, weights = self.self_attn(x, **attend)
            x = self.norm1(self._add_residual(x, attended))
            x = self.norm2(self._add_residual(x, self.ffn(x)))
        return x, weights  # (batch, seq_len, d_model), (batch, num_heads, seq_len, n_k)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """A block with the weights of ``torch.nn.TransformerEncoderLayer(batch_first=True)``.

        torch names the FFN ``linear1``/``linear2`` on the layer itself; here they sit in
        ``ffn``. Dropout is not copied: this block has none (compare in ``eval()`` mode or
        with ``dropout=0``).
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(_("expected a torch.nn.TransformerEncoderLayer, got {type}")
                            .format(type=type(layer).__name__))
        block = _shaped_like(cls, layer)
        _copy_parameters(((block.ffn.linear1, layer.linear1), (block.ffn.linear2, layer.linear2),
                          (block.norm1, layer.norm1), (block.norm2, layer.norm2)))
        return block


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention over the memory, FFN; each with residual + norm.

    Post-LN (``norm_first=False``, the original Transformer)::

        x = norm1(x + self_attn(x, causal))
        x = norm2(x + cross_attn(x, memory, memory))
        x = norm3(x + ffn(x))

    pre-LN (``norm_first=True``) normalises each sublayer's input instead. ``forward(x,
    memory, memory_padding_mask=None)`` takes the decoder's tokens x ``(batch, n_tgt,
    d_model)``, the encoder's output memory ``(batch, n_src, d_model)`` and an optional bool
    ``(batch, n_src)`` (or ``(batch, 1, n_src)``) mask, True at the real source tokens
    (padding gets no weight). It returns ``(output, self_weights, cross_weights)``:
    ``(batch, n_tgt, d_model)``, ``(batch, num_heads, n_tgt, n_tgt)`` and
    ``(batch, num_heads, n_tgt, n_src)``.

    Used in lesson 07.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, norm_first: bool = False,
                 activation: str = "relu", eps: float = 1e-5):
        super().__init__()
        eps = require_positive_number("eps", eps)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, activation)
        self.d_model = d_model
        self.norm_first = require_bool("norm_first", norm_first)
        self.norm1, self.norm2, self.norm3 = (_layer_norm(d_model, eps) for _norm in range(3))

    def forward(self, x, memory, memory_padding_mask=None):
        x = _require_stream("x", x, "(batch, n_tgt, d_model)", self)
        memory = _require_stream("memory", memory, "(batch, n_src, d_model)", self)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(_("x and memory should share the batch size, got {x_batch} and "
                               "{memory_batch}").format(x_batch=x.shape[0],
                                                        memory_batch=memory.shape[0]))
        cross_mask = None
        if memory_padding_mask is not None:
            keys = require_key_padding("memory_padding_mask", memory_padding_mask,
                                        memory.shape[:2])
            cross_mask = keys[:, None, None, :]  # (batch, 1, 1, n_src): every head and query
        mask = causal_mask(x.shape[1], device=x.device)  # (n_tgt, n_tgt): only the past
        if self.norm_first:  # pre-LN: x + sublayer(norm(x))
            h = self.norm1(x)
            attended, self_weights = self.self_attn(h, mask=mask)
            x = x + attended
            read, cross_weights = self.cross_attn(self.norm2(x), memory, memory, mask=cross_mask)
            x = x + read
            x = x + self.ffn(self.norm3(x))
        else:  # post-LN: norm(x + sublayer(x))
            attended, self_weights = self.self_attn(x, mask=mask)
            x = self.norm1(x + attended)
            read, cross_weights = self.cross_attn(x, memory, memory, mask=cross_mask)
            x = self.norm2(x + read)
            x = self.norm3(x + self.ffn(x))
        # (batch, n_tgt, d_model), (batch, heads, n_tgt, n_tgt), (batch, heads, n_tgt, n_src)
        return x, self_weights, cross_weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A block with the weights of ``torch.nn.TransformerDecoderLayer(batch_first=True)``.

        Compare with ``layer(x, memory, tgt_mask=<causal, True = blocked>, tgt_is_causal=True,
        memory_key_padding_mask=<True = padding>)`` in ``eval()`` mode or with ``dropout=0``.
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(_("expected a torch.nn.TransformerDecoderLayer, got {type}")
                            .format(type=type(layer).__name__))
        block = _shaped_like(cls, layer)
        block.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        _copy_parameters(((block.ffn.linear1, layer.linear1), (block.ffn.linear2, layer.linear2),
                          (block.norm1, layer.norm1), (block.norm2, layer.norm2),
                          (block.norm3, layer.norm3)))
        return block
