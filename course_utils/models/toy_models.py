"""Three tiny models made of lesson 07's blocks: a token model, an encoder-decoder, a ViT.

Shapes: tokens ``(batch, seq_len)``, x ``(batch, seq_len, d_model)``, weights
``(batch, num_layers, num_heads, n_q, n_k)``. Masks are bool with **True = may attend**.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_key_padding,
    require_matches_module,
    require_positive_int,
    require_tensor,
    require_token_ids,
)
from course_utils.language import _
from course_utils.nn.blocks import DecoderBlock, EncoderBlock, _layer_norm
from course_utils.nn.masks import causal_mask


def _check_token_length(tokens, seq_len: int, name: str = "tokens") -> None:
    if tokens.shape[1] > seq_len:
        raise ValueError(
            _(
                "{name} should be (batch, seq_len) with seq_len at most {seq_len} (one learned "
                "position vector each), got shape {tokens_shape}"
            ).format(name=name, seq_len=seq_len, tokens_shape=tuple(tokens.shape))
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

    ``forward(tokens, return_weights=False)`` returns the logits; with ``return_weights=True``
    ``(logits, weights)`` with weights ``(batch, num_layers, num_heads, seq_len, seq_len)``,
    every block's attention (the convention of every model of the course);
    :meth:`hidden_states` returns what the last block hands to the readout.

    Used in lesson 07.
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
            for _layer in range(num_layers)
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

    def forward(self, tokens, return_weights: bool = False):
        require_bool("return_weights", return_weights)
        x, weights = self.hidden_states(tokens)
        logits = self.readout(self.final_norm(x))  # (batch, seq_len, vocab_size)
        return (logits, weights) if return_weights else logits


class TinyEncoderDecoder(nn.Module):
    """The original Transformer's shape in miniature: an encoder stack reads the source, a
    decoder stack writes the target while reading the encoder's output through cross-attention.

    ``forward(src, tgt, src_padding_mask=None, return_weights=False)``: source ids
    ``(batch, n_src)``, target ids ``(batch, n_tgt)`` (the decoder's input, e.g. a start token
    then the target shifted right), and an optional bool ``(batch, n_src)`` or ``(batch, 1,
    n_src)`` mask, True at real source tokens (padding is neither attended to by the encoder
    nor read by the decoder). Returns the logits ``(batch, n_tgt, vocab_size)``; with
    ``return_weights=True``, ``(logits, cross_weights)`` with ``(batch, num_layers,
    num_heads, n_tgt, n_src)``, every decoder block's cross-attention. Pre-LN by default.

    Used in lesson 07.
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
                                     for _layer in range(num_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, norm_first=norm_first)
                                     for _layer in range(num_layers))
        self.encoder_norm = _layer_norm(d_model, 1e-5, norm_first)
        self.decoder_norm = _layer_norm(d_model, 1e-5, norm_first)
        self.readout = nn.Linear(d_model, vocab_size)

    def _embed(self, tokens, positions: nn.Embedding, name: str):
        tokens = require_token_ids(name, tokens, self.vocab_size)
        _check_token_length(tokens, self.max_len, name)
        where = torch.arange(tokens.shape[1], device=tokens.device)
        return self.token_embedding(tokens) + positions(where)  # (batch, len, d_model)

    def forward(self, src, tgt, src_padding_mask=None, return_weights: bool = False):
        require_bool("return_weights", return_weights)
        memory = self._embed(src, self.src_positions, "src")  # (batch, n_src, d_model)
        x = self._embed(tgt, self.tgt_positions, "tgt")  # (batch, n_tgt, d_model)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(_(
                "src and tgt should share the batch size, got {memory_shape} and {shape}"
            ).format(memory_shape=memory.shape[0], shape=x.shape[0]))
        encoder_mask = None
        if src_padding_mask is not None:
            src_padding_mask = require_key_padding("src_padding_mask", src_padding_mask,
                                                    src.shape[:2])
            encoder_mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
        for block in self.encoder:
            memory, _weights = block(memory, mask=encoder_mask)
        memory = self.encoder_norm(memory)
        all_cross = []
        for block in self.decoder:
            x, _self_weights, cross_weights = block(x, memory, memory_padding_mask=src_padding_mask)
            all_cross.append(cross_weights)  # (batch, num_heads, n_tgt, n_src)
        logits = self.readout(self.decoder_norm(x))  # (batch, n_tgt, vocab_size)
        return (logits, torch.stack(all_cross, dim=1)) if return_weights else logits


def _require_images(images) -> torch.Tensor:
    if isinstance(images, torch.Tensor) and not images.is_floating_point():
        raise TypeError(_(
            "images should be a floating-point tensor (batch, channels, height, width), got "
            "dtype {images_dtype}; e.g. images.float() / 255 for 8-bit pixels"
        ).format(images_dtype=images.dtype))
    images = require_tensor("images", images, "(batch, channels, height, width)")
    if images.dim() != 4:
        raise ValueError(_(
            "images should have shape (batch, channels, height, width), got shape {images_shape}"
        ).format(images_shape=tuple(images.shape)))
    return images


def image_patches(images, patch_size: int) -> torch.Tensor:
    """Cut images ``(batch, channels, height, width)`` into non-overlapping square patches,
    one token each: ``(batch, num_patches, channels * patch_size**2)``, patches in reading
    order (left to right, then top to bottom), each flattened channel by channel, row by row.

    Used in lesson 07.
    """
    images = _require_images(images)
    require_positive_int("patch_size", patch_size)
    batch, channels, height, width = images.shape
    if height % patch_size or width % patch_size:
        raise ValueError(_(
            "height and width ({height}, {width}) should be multiples of patch_size={patch_size}"
        ).format(height=height, width=width, patch_size=patch_size))
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
    vectors are averaged and read out as ``num_classes`` logits. ``forward(images,
    return_weights=False)`` returns the logits ``(batch, num_classes)``; with
    ``return_weights=True``, ``(logits, weights)`` with ``(batch, num_layers, num_heads,
    num_patches, num_patches)``.

    Used in lesson 07.
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
            raise ValueError(_(
                "image_size={image_size} should be a multiple of patch_size={patch_size}"
            ).format(image_size=image_size, patch_size=patch_size))
        num_patches = (image_size // patch_size) ** 2
        d_ff = 2 * d_model if d_ff is None else d_ff
        self.patch_embedding = nn.Linear(channels * patch_size * patch_size, d_model)
        self.position_embedding = nn.Parameter(0.02 * torch.randn(num_patches, d_model))
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, norm_first=True)
                                    for _layer in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, num_classes)

    def forward(self, images, return_weights: bool = False):
        require_bool("return_weights", return_weights)
        images = _require_images(images)
        expected = (self.channels, self.image_size, self.image_size)
        if tuple(images.shape[1:]) != expected:
            raise ValueError(_(
                "images should be (batch, channels, height, width) with (channels, height, "
                "width) = {expected}, got shape {images_shape}"
            ).format(expected=expected, images_shape=tuple(images.shape)))
        patches = image_patches(images, self.patch_size)  # (batch, num_patches, patch_dim)
        require_matches_module("images", patches, self)
        x = self.patch_embedding(patches) + self.position_embedding  # (batch, patches, d_model)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x)  # weights (batch, num_heads, num_patches, num_patches)
            all_weights.append(weights)
        logits = self.readout(self.final_norm(x).mean(dim=1))  # (batch, num_classes)
        return (logits, torch.stack(all_weights, dim=1)) if return_weights else logits
