"""The Transformer encoder block built around multi-head attention.

One block = multi-head self-attention and a position-wise feed-forward network (FFN),
each wrapped in a residual connection and a LayerNorm. Two orders exist:

- post-LN (the original Transformer): ``x = norm(x + sublayer(x))``;
- pre-LN (GPT-2 and most models since): ``x = x + sublayer(norm(x))``.

Shapes: x ``(batch, seq_len, d_model)``, weights ``(batch, heads, n_q, n_k)``.
Masks are bool with **True = may attend**.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.attention import MultiHeadAttention
from course_utils.checks import require_positive_int, require_tensor

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class FeedForward(nn.Module):
    """Position-wise FFN: ``linear2(activation(linear1(x)))``, the same MLP at every position.

    x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_ff)`` -> ``(batch, seq_len, d_model)``.
    Tokens do not interact here: that is attention's job.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation should be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
            )
        self.linear1 = nn.Linear(require_positive_int("d_model", d_model),
                                 require_positive_int("d_ff", d_ff))
        self.activation = _ACTIVATIONS[activation]()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.activation(self.linear1(x)))


class EncoderBlock(nn.Module):
    """Self-attention + FFN, each with a residual connection and a LayerNorm.

    Args:
        d_model: width of every token vector.
        num_heads: attention heads; ``d_model`` must divide evenly by it.
        d_ff: hidden width of the FFN (4 * d_model in the original Transformer).
        norm_first: False = post-LN (original), True = pre-LN (GPT-2 style).
        residual, layer_norm: switch the residual connections or the LayerNorms off,
            only to measure what they are for (lesson 07, section 5).
        activation: ``"relu"`` or ``"gelu"`` inside the FFN.
        eps: LayerNorm's epsilon.

    ``forward(x, mask=None)`` takes x ``(batch, seq_len, d_model)`` and an optional bool mask
    broadcastable to ``(batch, heads, seq_len, seq_len)`` and returns ``(output, weights)``:
    output ``(batch, seq_len, d_model)``, weights ``(batch, heads, seq_len, seq_len)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, norm_first: bool = False,
                 residual: bool = True, layer_norm: bool = True, activation: str = "relu",
                 eps: float = 1e-5):
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.residual = residual
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, activation)
        # Identity keeps the forward pass identical in structure when LayerNorm is switched off.
        self.norm1 = nn.LayerNorm(d_model, eps=eps) if layer_norm else nn.Identity()
        self.norm2 = nn.LayerNorm(d_model, eps=eps) if layer_norm else nn.Identity()

    def _add_residual(self, x, sublayer_output):
        return x + sublayer_output if self.residual else sublayer_output

    def forward(self, x, mask=None):
        x = require_tensor("x", x, "(batch, seq_len, d_model)")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x should be (batch, seq_len, d_model) with d_model={self.d_model}, "
                f"got shape {tuple(x.shape)}"
            )
        if self.norm_first:  # pre-LN: x + sublayer(norm(x))
            attended, weights = self.self_attn(self.norm1(x), mask=mask)
            x = self._add_residual(x, attended)
            x = self._add_residual(x, self.ffn(self.norm2(x)))
        else:  # post-LN: norm(x + sublayer(x))
            attended, weights = self.self_attn(x, mask=mask)
            x = self.norm1(self._add_residual(x, attended))
            x = self.norm2(self._add_residual(x, self.ffn(x)))
        return x, weights  # (batch, seq_len, d_model), (batch, heads, seq_len, seq_len)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """A block with the weights of ``torch.nn.TransformerEncoderLayer(batch_first=True)``.

        torch names the FFN ``linear1``/``linear2`` on the layer itself; here they sit in
        ``ffn``. Dropout is not copied: this block has none (compare in ``eval()`` mode or
        with ``dropout=0``).
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"expected a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        if not layer.self_attn.batch_first:
            raise ValueError(
                "expected a layer built with batch_first=True, whose inputs are "
                "(batch, seq_len, d_model); this one takes (seq_len, batch, d_model)"
            )
        activation = {1: "relu", 2: "gelu"}.get(layer.activation_relu_or_gelu)
        if activation is None:
            raise ValueError(
                f"only relu or gelu activations can be copied, got {layer.activation!r}"
            )
        if layer.linear1.bias is None or layer.norm1.bias is None:
            raise ValueError("only layers built with bias=True (the default) can be copied")
        block = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads,
                    layer.linear1.out_features, norm_first=layer.norm_first,
                    activation=activation, eps=layer.norm1.eps)
        block = block.to(device=layer.linear1.weight.device, dtype=layer.linear1.weight.dtype)
        block.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        with torch.no_grad():
            for mine, theirs in ((block.ffn.linear1, layer.linear1),
                                 (block.ffn.linear2, layer.linear2),
                                 (block.norm1, layer.norm1), (block.norm2, layer.norm2)):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
        return block


def sinusoidal_positions(seq_len: int, d_model: int) -> torch.Tensor:
    """The fixed position encodings of the original Transformer, ``(seq_len, d_model)``.

    Row ``pos``, columns ``2i`` and ``2i+1`` hold ``sin(pos / 10000^(2i/d_model))`` and
    ``cos(pos / 10000^(2i/d_model))``: each pair of columns is a clock at its own speed.
    """
    require_positive_int("seq_len", seq_len)
    require_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model should be even (sin/cos pairs), got {d_model}")
    position = torch.arange(seq_len, dtype=torch.float32)[:, None]  # (seq_len, 1)
    frequency = torch.exp(  # (d_model / 2,) = 1 / 10000^(2i/d_model)
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    encoding = torch.zeros(seq_len, d_model)
    encoding[:, 0::2] = torch.sin(position * frequency)
    encoding[:, 1::2] = torch.cos(position * frequency)
    return encoding


class TinyTransformer(nn.Module):
    """A toy sequence model: embeddings, a stack of :class:`EncoderBlock`, a linear readout.

    Tokens ``(batch, seq_len)`` of ids in ``[0, vocab_size)`` are embedded and given a
    learned position vector each, pass ``depth`` blocks, and are read out as logits
    ``(batch, seq_len, vocab_size)``, one prediction per position. ``norm_first``,
    ``residual`` and ``layer_norm`` go to every block; a pre-LN stack ends with one more
    LayerNorm, as GPT-2 does, because its blocks leave the residual stream unnormalised.

    ``forward(tokens)`` returns ``(logits, weights)`` with weights
    ``(batch, depth, heads, seq_len, seq_len)``, every block's attention.
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, num_heads: int = 1,
                 depth: int = 1, d_ff: int | None = None, norm_first: bool = False,
                 residual: bool = True, layer_norm: bool = True):
        super().__init__()
        self.seq_len = require_positive_int("seq_len", seq_len)
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        require_positive_int("depth", depth)
        d_ff = 2 * d_model if d_ff is None else d_ff
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first, residual=residual,
                         layer_norm=layer_norm)
            for _ in range(depth)
        )
        pre_ln = norm_first and layer_norm
        self.final_norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.dim() != 2:
            got = (f"{tokens.dtype} of shape {tuple(tokens.shape)}"
                   if isinstance(tokens, torch.Tensor) else type(tokens).__name__)
            raise TypeError(f"tokens should be a long tensor of ids (batch, seq_len), got {got}")
        if tokens.shape[1] != self.seq_len:
            raise ValueError(
                f"tokens should be (batch, seq_len) with seq_len={self.seq_len}, "
                f"got shape {tuple(tokens.shape)}"
            )
        positions = torch.arange(self.seq_len, device=tokens.device)
        # (batch, seq_len, d_model): what each token is, plus where it is
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x)  # weights (batch, heads, seq_len, seq_len)
            all_weights.append(weights)
        logits = self.readout(self.final_norm(x))  # (batch, seq_len, vocab_size)
        return logits, torch.stack(all_weights, dim=1)  # (batch, depth, heads, seq_len, seq_len)
