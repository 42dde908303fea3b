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

from course_utils.attention import MultiHeadAttention
from course_utils.checks import (
    require_bool,
    require_matches_module,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_tensor,
    require_token_ids,
)
from course_utils.masks import causal_mask

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _require_stream(name: str, x, notation: str, module: nn.Module) -> torch.Tensor:
    """``x`` as a block's input: float, 3-D, width ``module.d_model``, the module's dtype and
    device. Checked here, before any LayerNorm sees ``x``, so pre-LN and post-LN blocks answer
    a float64 input to a float32 block with the same message."""
    x = require_tensor(name, x, notation)
    if x.dim() != 3 or x.shape[-1] != module.d_model:
        raise ValueError(
            f"{name} should be {notation} with d_model={module.d_model}, "
            f"got shape {tuple(x.shape)}"
        )
    return require_matches_module(name, x, module)


def _require_key_padding(name: str, mask, batch_and_n_src) -> torch.Tensor:
    """A padding mask on the memory as ``(batch, n_src)`` (True = real token); ``(batch, 1,
    n_src)``, which broadcasts over the queries, is accepted too."""
    batch, n_src = batch_and_n_src
    if (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
            and tuple(mask.shape) in ((batch, n_src), (batch, 1, n_src))):
        return mask.reshape(batch, n_src)
    got = (f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor)
           else type(mask).__name__)
    raise ValueError(f"{name} should be a bool (batch, n_src) = {(batch, n_src)} "
                     f"tensor (or (batch, 1, n_src)), True at real tokens, got {got}")


def _layer_norm(d_model: int, eps: float, enabled: bool = True) -> nn.Module:
    # Identity keeps the forward pass identical in structure when LayerNorm is switched off.
    return nn.LayerNorm(d_model, eps=eps) if enabled else nn.Identity()


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
        raise ValueError(
            "expected a layer built with batch_first=True, whose inputs are "
            "(batch, seq_len, d_model); this one takes (seq_len, batch, d_model)"
        )
    act = layer.activation  # F.relu / F.gelu when built from a string, else the module given
    if act is F.relu or type(act) is nn.ReLU:
        activation = "relu"
    elif act is F.gelu or (type(act) is nn.GELU and act.approximate == "none"):
        activation = "gelu"
    else:
        raise ValueError(f"only relu or gelu activations can be copied, got {layer.activation!r}")
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("only layers built with bias=True (the default) can be copied")
    return activation


class FeedForward(nn.Module):
    """Position-wise FFN: ``linear2(activation(linear1(x)))``, the same MLP at every position.

    x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_ff)`` -> ``(batch, seq_len, d_model)``.
    Tokens do not interact here: that is attention's job.
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

    ``forward(x, mask=None)`` takes x ``(batch, seq_len, d_model)`` and an optional bool mask
    broadcastable to ``(batch, num_heads, seq_len, seq_len)`` (no mask: every token reads
    every token, as in BERT; ``causal_mask``: each reads only the past, as in GPT) and returns
    ``(output, weights)``: output ``(batch, seq_len, d_model)``, weights
    ``(batch, num_heads, seq_len, seq_len)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, norm_first: bool = False,
                 residual: bool = True, layer_norm: bool = True, activation: str = "relu",
                 eps: float = 1e-5):
        super().__init__()
        eps = require_positive_number("eps", eps)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, activation)
        self.d_model = d_model
        self.norm_first = require_bool("norm_first", norm_first)
        self.residual = require_bool("residual", residual)
        self.norm1 = _layer_norm(d_model, eps, require_bool("layer_norm", layer_norm))
        self.norm2 = _layer_norm(d_model, eps, layer_norm)

    def _add_residual(self, x, sublayer_output):
        return x + sublayer_output if self.residual else sublayer_output

    def forward(self, x, mask=None):
        x = _require_stream("x", x, "(batch, seq_len, d_model)", self)
        if self.norm_first:  # pre-LN: x + sublayer(norm(x))
            attended, weights = self.self_attn(self.norm1(x), mask=mask)
            x = self._add_residual(x, attended)
            x = self._add_residual(x, self.ffn(self.norm2(x)))
        else:  # post-LN: norm(x + sublayer(x))
            attended, weights = self.self_attn(x, mask=mask)
            x = self.norm1(self._add_residual(x, attended))
            x = self.norm2(self._add_residual(x, self.ffn(x)))
        return x, weights  # (batch, seq_len, d_model), (batch, num_heads, seq_len, seq_len)

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
        self.norm1, self.norm2, self.norm3 = (_layer_norm(d_model, eps) for _ in range(3))

    def forward(self, x, memory, memory_padding_mask=None):
        x = _require_stream("x", x, "(batch, n_tgt, d_model)", self)
        memory = _require_stream("memory", memory, "(batch, n_src, d_model)", self)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(f"x and memory should share the batch size, got {x.shape[0]} "
                             f"and {memory.shape[0]}")
        cross_mask = None
        if memory_padding_mask is not None:
            keys = _require_key_padding("memory_padding_mask", memory_padding_mask,
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
            raise TypeError(
                f"expected a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}"
            )
        block = _shaped_like(cls, layer)
        block.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        _copy_parameters(((block.ffn.linear1, layer.linear1), (block.ffn.linear2, layer.linear2),
                          (block.norm1, layer.norm1), (block.norm2, layer.norm2),
                          (block.norm3, layer.norm3)))
        return block


def _check_token_length(tokens, seq_len: int, name: str = "tokens") -> None:
    if tokens.shape[1] > seq_len:
        raise ValueError(
            f"{name} should be (batch, seq_len) with seq_len at most {seq_len} (one learned "
            f"position vector each), got shape {tuple(tokens.shape)}"
        )


class TinyTransformer(nn.Module):
    """A toy sequence model: embeddings, a stack of :class:`EncoderBlock`, a linear readout.

    Tokens ``(batch, seq_len)`` of ids in ``[0, vocab_size)`` are embedded and given a
    learned position vector each, pass ``num_layers`` blocks, and are read out as logits
    ``(batch, seq_len, vocab_size)``, one prediction per position. ``causal=True`` gives every
    block a causal mask (a GPT-style decoder); the default lets every token read every token
    (a BERT-style encoder). ``norm_first``, ``residual`` and ``layer_norm`` go to every block;
    a pre-LN stack ends with one more LayerNorm, as GPT-2 does, because its blocks leave the
    residual stream unnormalised.

    ``forward(tokens)`` returns ``(logits, weights)`` with weights
    ``(batch, num_layers, num_heads, seq_len, seq_len)``, every block's attention;
    :meth:`hidden_states` returns what the last block hands to the readout.
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, num_heads: int = 1,
                 num_layers: int = 1, d_ff: int | None = None, norm_first: bool = False,
                 residual: bool = True, layer_norm: bool = True, causal: bool = False):
        super().__init__()
        self.seq_len = require_positive_int("seq_len", seq_len)
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        require_positive_int("d_model", d_model)
        require_positive_int("num_layers", num_layers)
        d_ff = 2 * d_model if d_ff is None else d_ff
        self.causal = require_bool("causal", causal)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first, residual=residual,
                         layer_norm=layer_norm)
            for _ in range(num_layers)
        )
        self.final_norm = _layer_norm(d_model, 1e-5, norm_first and layer_norm)
        self.readout = nn.Linear(d_model, vocab_size)

    def hidden_states(self, tokens):
        """The last block's output ``(batch, seq_len, d_model)`` (before the final norm and
        the readout) and every block's weights ``(batch, num_layers, num_heads, seq_len,
        seq_len)``. ``seq_len`` may be shorter than the model's."""
        tokens = require_token_ids("tokens", tokens, self.vocab_size)
        _check_token_length(tokens, self.seq_len)
        seq_len = tokens.shape[1]
        positions = torch.arange(seq_len, device=tokens.device)
        # (batch, seq_len, d_model): what each token is, plus where it is
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        mask = causal_mask(seq_len, device=tokens.device) if self.causal else None
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, mask=mask)  # weights (batch, num_heads, seq_len, seq_len)
            all_weights.append(weights)
        return x, torch.stack(all_weights, dim=1)

    def forward(self, tokens):
        x, weights = self.hidden_states(tokens)
        logits = self.readout(self.final_norm(x))  # (batch, seq_len, vocab_size)
        return logits, weights


class TinyEncoderDecoder(nn.Module):
    """The original Transformer's shape in miniature: an encoder stack reads the source, a
    decoder stack writes the target while reading the encoder's output through cross-attention.

    ``forward(src, tgt, src_padding_mask=None)``: source ids ``(batch, n_src)``, target ids
    ``(batch, n_tgt)`` (the decoder's input, e.g. a start token then the target shifted right),
    and an optional bool ``(batch, n_src)`` or ``(batch, 1, n_src)`` mask, True at real source
    tokens (padding is neither attended to by the encoder nor read by the decoder). Returns
    ``(logits, cross_weights)``: ``(batch, n_tgt, vocab_size)`` and ``(batch, num_layers,
    num_heads, n_tgt, n_src)``, every decoder block's cross-attention. Pre-LN by default.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int, num_heads: int = 1,
                 num_layers: int = 1, d_ff: int | None = None, norm_first: bool = True):
        super().__init__()
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        self.max_len = require_positive_int("max_len", max_len)
        require_positive_int("d_model", d_model)
        require_positive_int("num_layers", num_layers)
        d_ff = 2 * d_model if d_ff is None else d_ff
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.src_positions = nn.Embedding(max_len, d_model)
        self.tgt_positions = nn.Embedding(max_len, d_model)
        self.encoder = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first)
                                     for _ in range(num_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, norm_first=norm_first)
                                     for _ in range(num_layers))
        self.encoder_norm = _layer_norm(d_model, 1e-5, norm_first)
        self.decoder_norm = _layer_norm(d_model, 1e-5, norm_first)
        self.readout = nn.Linear(d_model, vocab_size)

    def _embed(self, tokens, positions: nn.Embedding, name: str):
        tokens = require_token_ids(name, tokens, self.vocab_size)
        _check_token_length(tokens, self.max_len, name)
        where = torch.arange(tokens.shape[1], device=tokens.device)
        return self.token_embedding(tokens) + positions(where)  # (batch, len, d_model)

    def forward(self, src, tgt, src_padding_mask=None):
        memory = self._embed(src, self.src_positions, "src")  # (batch, n_src, d_model)
        x = self._embed(tgt, self.tgt_positions, "tgt")  # (batch, n_tgt, d_model)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(f"src and tgt should share the batch size, got {memory.shape[0]} "
                             f"and {x.shape[0]}")
        encoder_mask = None
        if src_padding_mask is not None:
            src_padding_mask = _require_key_padding("src_padding_mask", src_padding_mask,
                                                    src.shape[:2])
            encoder_mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
        for block in self.encoder:
            memory, _ = block(memory, mask=encoder_mask)
        memory = self.encoder_norm(memory)
        all_cross = []
        for block in self.decoder:
            x, _, cross_weights = block(x, memory, memory_padding_mask=src_padding_mask)
            all_cross.append(cross_weights)  # (batch, num_heads, n_tgt, n_src)
        logits = self.readout(self.decoder_norm(x))  # (batch, n_tgt, vocab_size)
        return logits, torch.stack(all_cross, dim=1)


def _require_images(images) -> torch.Tensor:
    if isinstance(images, torch.Tensor) and not images.is_floating_point():
        raise TypeError("images should be a floating-point tensor (batch, channels, height, "
                        f"width), got dtype {images.dtype}; e.g. images.float() / 255 for "
                        "8-bit pixels")
    images = require_tensor("images", images, "(batch, channels, height, width)")
    if images.dim() != 4:
        raise ValueError("images should have shape (batch, channels, height, width), got "
                         f"shape {tuple(images.shape)}")
    return images


def image_patches(images, patch_size: int) -> torch.Tensor:
    """Cut images ``(batch, channels, height, width)`` into non-overlapping square patches,
    one token each: ``(batch, num_patches, channels * patch_size**2)``, patches in reading
    order (left to right, then top to bottom), each flattened channel by channel, row by row.
    """
    images = _require_images(images)
    require_positive_int("patch_size", patch_size)
    batch, channels, height, width = images.shape
    if height % patch_size or width % patch_size:
        raise ValueError(f"height and width ({height}, {width}) should be multiples of "
                         f"patch_size={patch_size}")
    rows, cols = height // patch_size, width // patch_size
    patches = images.reshape(batch, channels, rows, patch_size, cols, patch_size)
    # (batch, rows, cols, channels, patch_size, patch_size): one patch per (row, col)
    patches = patches.permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(batch, rows * cols, channels * patch_size * patch_size)


class TinyViT(nn.Module):
    """A Vision Transformer in miniature: image patches are the tokens.

    Images ``(batch, channels, image_size, image_size)`` are cut into
    ``(image_size / patch_size)**2`` patches (:func:`image_patches`), each mapped by one linear
    layer to a ``d_model`` vector and given a learned position vector; the same
    :class:`EncoderBlock` stack as a text encoder follows (pre-LN, no mask), then the token
    vectors are averaged and read out as ``num_classes`` logits. ``forward(images)`` returns
    ``(logits, weights)``: ``(batch, num_classes)`` and ``(batch, num_layers, num_heads,
    num_patches, num_patches)``.
    """

    def __init__(self, image_size: int, patch_size: int, num_classes: int, d_model: int,
                 num_heads: int = 1, num_layers: int = 1, channels: int = 1,
                 d_ff: int | None = None):
        super().__init__()
        self.image_size = require_positive_int("image_size", image_size)
        self.patch_size = require_positive_int("patch_size", patch_size)
        self.channels = require_positive_int("channels", channels)
        require_positive_int("num_classes", num_classes)
        require_positive_int("d_model", d_model)
        require_positive_int("num_layers", num_layers)
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} should be a multiple of "
                             f"patch_size={patch_size}")
        num_patches = (image_size // patch_size) ** 2
        d_ff = 2 * d_model if d_ff is None else d_ff
        self.patch_embedding = nn.Linear(channels * patch_size * patch_size, d_model)
        self.position_embedding = nn.Parameter(0.02 * torch.randn(num_patches, d_model))
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, norm_first=True)
                                    for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, num_classes)

    def forward(self, images):
        images = _require_images(images)
        expected = (self.channels, self.image_size, self.image_size)
        if tuple(images.shape[1:]) != expected:
            raise ValueError(f"images should be (batch, channels, height, width) with "
                             f"(channels, height, width) = {expected}, got shape "
                             f"{tuple(images.shape)}")
        patches = image_patches(images, self.patch_size)  # (batch, num_patches, patch_dim)
        require_matches_module("images", patches, self)
        x = self.patch_embedding(patches) + self.position_embedding  # (batch, patches, d_model)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x)  # weights (batch, num_heads, num_patches, num_patches)
            all_weights.append(weights)
        logits = self.readout(self.final_norm(x).mean(dim=1))  # (batch, num_classes)
        return logits, torch.stack(all_weights, dim=1)
