"""Lesson 15's translator: an encoder-decoder from the course's blocks, English number words
in, Chinese numerals out.

The encoder is a stack of lesson 07's :class:`~course_utils.nn.blocks.EncoderBlock` (no
causal mask: every source word reads every other), the decoder a stack of its
:class:`~course_utils.nn.blocks.DecoderBlock` (causal self-attention, then cross-attention
over the encoder's output, then the FFN), pre-LN, with learned positions as in lesson 12.
The decoder's pass is written out here, as lesson 12's GPT writes out its blocks, so that
generating can hand a :class:`~course_utils.nn.kv_cache.KVCache` to the self-attention, read
keys and values of the memory computed once per sentence, and switch the cross-attention's
read off (``cross_reads``) to measure what the decoder can do without it. With the read left
alone, :meth:`Translator.forward` equals the blocks' own ``forward`` (tested).

Token ids: source ``0`` is padding, then :data:`SOURCE_WORDS`; target ``0`` padding, ``1``
the start token, ``2`` the end token, then :data:`TARGET_CHARACTERS`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_generator,
    require_instance,
    require_positive_int,
    require_positive_number,
    require_token_ids,
)
from course_utils.data.number_words import (
    SOURCE_WORDS,
    TARGET_CHARACTERS,
    chinese_numerals,
    english_tokens,
    tokens_of_text,
)
from course_utils.language import _
from course_utils.nn.attention import merge_heads, split_heads
from course_utils.nn.blocks import DecoderBlock, EncoderBlock
from course_utils.nn.cross_attention import cross_attention, memory_keys_values
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.masks import causal_mask
from course_utils.nn.training import fit

PAD, BOS, EOS = 0, 1, 2
SOURCE_VOCAB = ("<pad>", *SOURCE_WORDS)
TARGET_VOCAB = ("<pad>", "<s>", "</s>", *TARGET_CHARACTERS)
_SOURCE_ID = {word: i for i, word in enumerate(SOURCE_VOCAB)}
_TARGET_ID = {char: i for i, char in enumerate(TARGET_VOCAB)}


def source_batch(items) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids ``(batch, n_src)`` and the padding mask ``(batch, n_src)`` (True at real
    tokens) of ``items``: numbers, or typed English number words (strings).

    Used in lesson 15.
    """
    if isinstance(items, (int, str)) or not hasattr(items, "__len__") or not len(items):
        raise TypeError(_(
            "items should be a non-empty list of numbers or English number words, got {kind}"
        ).format(kind=type(items).__name__))
    rows = [tokens_of_text(item) if isinstance(item, str) else english_tokens(item)
            for item in items]
    n_src = max(map(len, rows))
    src = torch.full((len(rows), n_src), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        src[i, :len(row)] = torch.tensor([_SOURCE_ID[w] for w in row])
    return src, src != PAD


def target_batch(numbers) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing's two tensors for ``numbers``: the decoder's input ``(batch, n_tgt)``
    (the start token, then the characters) and the labels ``(batch, n_tgt)`` (the characters,
    then the end token), padded with 0 (ignored by the loss).

    Used in lesson 15.
    """
    if isinstance(numbers, (int, str)) or not hasattr(numbers, "__len__") or not len(numbers):
        raise TypeError(_(
            "numbers should be a non-empty list of ints, got {kind}"
        ).format(kind=type(numbers).__name__))
    rows = [[_TARGET_ID[c] for c in chinese_numerals(n)] for n in numbers]
    n_tgt = max(map(len, rows)) + 1
    tgt_in = torch.full((len(rows), n_tgt), PAD, dtype=torch.long)
    labels = torch.full((len(rows), n_tgt), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tgt_in[i, :len(row) + 1] = torch.tensor([BOS, *row])
        labels[i, :len(row) + 1] = torch.tensor([*row, EOS])
    return tgt_in, labels


def characters(ids) -> str:
    """The Chinese text of target ids, up to the first end token (padding and the start
    token dropped).

    Used in lesson 15.
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)):
        raise TypeError(_(
            "ids should be a 1-D tensor or list of target ids, got {kind}"
        ).format(kind=type(ids).__name__))
    out = []
    for i in ids:
        if i == EOS:
            break
        if i > EOS:
            out.append(TARGET_VOCAB[i])
    return "".join(out)


class Translator(nn.Module):
    """Encoder-decoder: ``num_layers`` pre-LN encoder blocks, ``num_layers`` pre-LN decoder
    blocks with cross-attention, learned positions, a linear readout over the characters.

    ``forward(src, tgt, src_padding_mask=None, cross_reads=None)``: source ids ``(batch,
    n_src)``, decoder input ids ``(batch, n_tgt)``; returns logits ``(batch, n_tgt,
    tgt_vocab)`` and every decoder block's cross-attention weights ``(batch, num_layers,
    num_heads, n_tgt, n_src)``. ``cross_reads`` replaces what cross-attention adds to the
    decoder's stream: ``"zero"`` (nothing) or a ``(num_layers, d_model)`` tensor (e.g. its
    mean over many sentences); None leaves it alone.

    Used in lesson 15.
    """

    def __init__(self, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
                 d_ff: int | None = None, max_src_len: int = 24, max_tgt_len: int = 20):
        super().__init__()
        require_positive_int("d_model", d_model)
        self.num_layers = require_positive_int("num_layers", num_layers)
        self.max_src_len = require_positive_int("max_src_len", max_src_len)
        self.max_len = require_positive_int("max_tgt_len", max_tgt_len)
        d_ff = 2 * d_model if d_ff is None else require_positive_int("d_ff", d_ff)
        self.d_model, self.num_heads = d_model, num_heads
        self.src_embedding = nn.Embedding(len(SOURCE_VOCAB), d_model)
        self.tgt_embedding = nn.Embedding(len(TARGET_VOCAB), d_model)
        self.src_positions = nn.Embedding(max_src_len, d_model)
        self.tgt_positions = nn.Embedding(max_tgt_len, d_model)
        for table in (self.src_embedding, self.tgt_embedding, self.src_positions,
                      self.tgt_positions):
            nn.init.normal_(table.weight, std=0.1)
        self.encoder = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, norm_first=True)
                                     for _layer in range(num_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, norm_first=True)
                                     for _layer in range(num_layers))
        self.encoder_norm = nn.LayerNorm(d_model)
        self.decoder_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(TARGET_VOCAB))

    def encode(self, src, src_padding_mask):
        """The memory ``(batch, n_src, d_model)`` and, per decoder block, the keys and values
        ``(batch, heads, n_src, d_k)`` its cross-attention reads: computed once per sentence."""
        src = require_token_ids("src", src, len(SOURCE_VOCAB), "(batch, n_src)")
        if src.shape[1] > self.max_src_len:
            raise ValueError(_(
                "src should be (batch, n_src) with n_src at most max_src_len={max_src_len}, got "
                "shape {src_shape}"
            ).format(max_src_len=self.max_src_len, src_shape=tuple(src.shape)))
        where = torch.arange(src.shape[1])
        memory = self.src_embedding(src) + self.src_positions(where)  # (batch, n_src, d_model)
        mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src): hide the padding
        for block in self.encoder:
            memory, _weights = block(memory, mask=mask)
        memory = self.encoder_norm(memory)
        return memory, [memory_keys_values(block.cross_attn, memory) for block in self.decoder]

    def decode(self, tgt, memory_kv, src_padding_mask, cache=None, cross_reads=None):
        """Logits ``(batch, n_new, tgt_vocab)`` and cross weights ``(batch, num_layers, heads,
        n_new, n_src)`` for decoder input ``tgt`` ``(batch, n_new)``, continuing ``cache``."""
        tgt = require_token_ids("tgt", tgt, len(TARGET_VOCAB), "(batch, n_tgt)")
        past = 0 if cache is None else cache.seq_len
        n_new = tgt.shape[1]
        if past + n_new > self.max_len:
            raise ValueError(_(
                "tgt would reach position {position}, but the model has max_tgt_len={max_len} "
                "learned positions"
            ).format(position=past + n_new - 1, max_len=self.max_len))
        where = torch.arange(past, past + n_new)
        x = self.tgt_embedding(tgt) + self.tgt_positions(where)  # (batch, n_new, d_model)
        self_mask = causal_mask(n_new, past + n_new)  # (n_new, past + n_new)
        all_cross = []
        for layer, block in enumerate(self.decoder):
            # lesson 07's pre-LN DecoderBlock, written out to hand the cache to self-attention
            attended, _weights = block.self_attn(block.norm1(x), mask=self_mask, cache=cache,
                                                 layer=layer)
            x = x + attended
            attn = block.cross_attn
            q = split_heads(attn.w_q(block.norm2(x)), attn.num_heads)  # (batch, heads, n_new, d_k)
            k, v = memory_kv[layer]  # (batch, heads, n_src, d_k), computed once
            heads, weights = cross_attention(q, k, v, src_padding_mask)
            read = attn.w_o(merge_heads(heads))  # (batch, n_new, d_model)
            if isinstance(cross_reads, str) and cross_reads == "zero":
                read = torch.zeros_like(read)
            elif cross_reads is not None:
                read = cross_reads[layer].expand_as(read)
            x = x + read
            x = x + block.ffn(block.norm3(x))
            all_cross.append(weights)  # (batch, heads, n_new, n_src)
        logits = self.readout(self.decoder_norm(x))  # (batch, n_new, tgt_vocab)
        return logits, torch.stack(all_cross, dim=1)

    def _check_reads(self, cross_reads):
        if cross_reads is None or (isinstance(cross_reads, str) and cross_reads == "zero"):
            return cross_reads
        if not isinstance(cross_reads, torch.Tensor) or tuple(cross_reads.shape) != (
                self.num_layers, self.d_model):
            got = (f"shape {tuple(cross_reads.shape)}" if isinstance(cross_reads, torch.Tensor)
                   else repr(cross_reads))
            raise ValueError(_(
                "cross_reads should be None, 'zero' or a (num_layers, d_model) = {expected} "
                "tensor, got {got}"
            ).format(expected=(self.num_layers, self.d_model), got=got))
        return cross_reads

    def forward(self, src, tgt, src_padding_mask=None, cross_reads=None):
        cross_reads = self._check_reads(cross_reads)
        if src_padding_mask is None:
            src_padding_mask = src != PAD
        _memory, memory_kv = self.encode(src, src_padding_mask)
        return self.decode(tgt, memory_kv, src_padding_mask, cross_reads=cross_reads)

    def mean_cross_reads(self, src, tgt, src_padding_mask=None) -> torch.Tensor:
        """What each decoder block's cross-attention adds, averaged over every real target
        position of the batch: ``(num_layers, d_model)``, for a mean ablation."""
        if src_padding_mask is None:
            src_padding_mask = src != PAD
        reads = []
        hook_handles = []

        def keep(module, inputs, output):
            reads.append(output)

        for block in self.decoder:
            hook_handles.append(block.cross_attn.w_o.register_forward_hook(keep))
        try:
            with torch.no_grad():
                self(src, tgt, src_padding_mask)
        finally:
            for handle in hook_handles:
                handle.remove()
        real = (tgt != PAD)[..., None].float()  # (batch, n_tgt, 1)
        return torch.stack([(r * real).sum((0, 1)) / real.sum() for r in reads])

    @torch.no_grad()
    def translate(self, src, src_padding_mask=None, max_new_tokens: int | None = None,
                  cross_reads=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding with a KV cache: target ids ``(batch, n_out)`` (the start token
        first, then one character per step until every row wrote the end token) and the cross
        weights of each step ``(batch, num_layers, heads, n_out - 1, n_src)``. The memory's
        keys and values are computed once; each step feeds only the newest character."""
        cross_reads = self._check_reads(cross_reads)
        if src_padding_mask is None:
            src_padding_mask = src != PAD
        max_new_tokens = self.max_len if max_new_tokens is None else require_positive_int(
            "max_new_tokens", min(max_new_tokens, self.max_len))
        _memory, memory_kv = self.encode(src, src_padding_mask)
        cache = KVCache()
        out = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        weights = []
        for _step in range(max_new_tokens):
            logits, cross = self.decode(out[:, -1:], memory_kv, src_padding_mask, cache,
                                        cross_reads)
            chosen = logits[:, -1].argmax(-1).masked_fill(done, PAD)  # (batch,)
            out = torch.cat((out, chosen[:, None]), dim=1)
            weights.append(cross)
            done |= chosen == EOS
            if done.all():
                break
        return out, torch.cat(weights, dim=3)


def train_translator(model: Translator, numbers, steps: int, generator: torch.Generator,
                     batch_size: int = 64, lr: float = 3e-3) -> list[float]:
    """Train ``model`` with teacher forcing on batches drawn from ``numbers``; return the
    loss of every step. Each step draws ``batch_size`` numbers with ``generator``; the
    decoder reads the start token and the true characters, and is scored (cross-entropy,
    padding ignored) on each next character and the end token.

    Used in lesson 15.
    """
    require_instance("model", model, Translator, _("a course_utils.models.translator.Translator"))
    if isinstance(numbers, (int, str)) or not hasattr(numbers, "__len__") or not len(numbers):
        raise TypeError(_(
            "numbers should be a non-empty list of ints, got {kind}"
        ).format(kind=type(numbers).__name__))
    require_positive_int("steps", steps)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator: batches are drawn with it"))
    require_positive_int("batch_size", batch_size)
    require_positive_number("lr", lr)
    pool = list(numbers)

    def loss_at_step(step: int) -> torch.Tensor:
        picks = torch.randint(0, len(pool), (batch_size,), generator=generator).tolist()
        batch = [pool[i] for i in picks]
        src, src_mask = source_batch(batch)
        tgt_in, labels = target_batch(batch)
        logits, _weights = model(src, tgt_in, src_mask)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=PAD)

    return fit(model, loss_at_step, steps, lr=lr)
