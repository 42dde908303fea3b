"""SmolLM2's tokenizer and chat template, built from its GGUF file's metadata.

A GGUF file carries no ``tokenizer.json``: it stores the vocabulary (``tokenizer.ggml.tokens``,
49,152 pieces spelled in GPT-2's byte alphabet, where ``Ġ`` is a space), the merges
(``tokenizer.ggml.merges``, best first), which tokens are control tokens
(``tokenizer.ggml.token_type`` 3: ``<|im_start|>``, ``<|im_end|>`` ...) and the chat template
(``tokenizer.chat_template``, Jinja). :class:`SmolLM2Tokenizer` builds the byte-level BPE
from them with the ``tokenizers`` library, so any text, Chinese and emoji included, becomes
tokens (its UTF-8 bytes at worst) and ``decode(encode(text)) == text``.

The file's pre-tokenizer is llama.cpp's ``smollm``: every digit is cut off alone, then GPT-2's
split (words with their leading space, numbers, punctuation runs, spaces). The vocabulary has
no piece with a digit in a longer string, so digits are single tokens either way; the one
place the digit cut shows is a run of two or more spaces or newlines before a digit
(``"a  1"``: ``a``, ``ĠĠ``, ``1``), which transformers' GGUF loader, lacking it, splits as
``a``, ``Ġ``, ``Ġ``, ``1``.
"""

from __future__ import annotations

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as BPEBackend

from course_utils.checks import require_bool, require_instance, require_token_id_list
from course_utils.language import _
from course_utils.models.smollm2.gguf_file import field, open_gguf

# tokenizer.ggml.token_type: 1 a normal piece, 3 a control token (llama.cpp's numbering).
_CONTROL = 3


class SmolLM2Tokenizer:
    """Text <-> token ids for SmolLM2, from the GGUF file at ``path`` (default: the model's).

    ``encode(text)`` gives the ids with no special token added (the chat template writes
    them), ``decode(ids)`` the text back, ``tokens(text)`` the pieces as strings.
    ``chat_prompt(messages)`` formats a conversation as the Instruct model expects.

    Used in lesson 14.
    """

    def __init__(self, path=None):
        file = open_gguf(path)
        model = field(file, "tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(_(
                "the file should hold a byte-level BPE tokenizer ('gpt2'), got {model!r}"
            ).format(model=model))
        pieces = field(file, "tokenizer.ggml.tokens")
        kinds = field(file, "tokenizer.ggml.token_type")
        merges = [tuple(merge.split(" ")) for merge in field(file, "tokenizer.ggml.merges")]
        self._backend = BPEBackend(models.BPE(
            vocab={piece: index for index, piece in enumerate(pieces)}, merges=merges,
            fuse_unk=False))
        self._backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        self._backend.decoder = decoders.ByteLevel()
        # Control tokens match whole wherever they appear in the text, never cut into bytes.
        self._backend.add_special_tokens([
            AddedToken(piece, special=True, normalized=False)
            for piece, kind in zip(pieces, kinds, strict=True) if kind == _CONTROL
        ])
        self.vocab_size = len(pieces)
        self.bos_id = int(field(file, "tokenizer.ggml.bos_token_id"))  # <|im_start|>
        self.eos_id = int(field(file, "tokenizer.ggml.eos_token_id"))  # <|im_end|>
        self.pad_id = int(field(file, "tokenizer.ggml.padding_token_id"))
        self.chat_template = field(file, "tokenizer.chat_template")
        # The settings transformers renders chat templates with (chat_template_utils.py).
        self._template = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True).from_string(self.chat_template)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``; no special token is added."""
        return list(self._backend.encode(_text(text), add_special_tokens=False).ids)

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` as the vocabulary spells them (``Ġ`` a space, ``Ċ`` a newline)."""
        return list(self._backend.encode(_text(text), add_special_tokens=False).tokens)

    def decode(self, ids) -> str:
        """The text of the token ids ``ids`` (a list of ints or a ``(seq_len,)`` long tensor),
        special tokens included."""
        ids = require_token_id_list("ids", ids, self.vocab_size)
        return self._backend.decode(ids, skip_special_tokens=False)

    def chat_prompt(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation ``messages`` as the prompt text the Instruct model was tuned on.

        ``messages`` is a list of ``{"role": ..., "content": ...}`` dicts (roles ``system``,
        ``user``, ``assistant``); the file's template adds its default system message when the
        first is not one. With ``add_generation_prompt`` the text ends where the assistant's
        answer starts. ``encode`` the result to get the ids.
        """
        require_bool("add_generation_prompt", add_generation_prompt)
        require_instance("messages", messages, list, _('a list of {"role", "content"} dicts'))
        if not messages:
            raise ValueError(_("messages should hold at least one message, got an empty list"))
        for index, message in enumerate(messages):
            if (not isinstance(message, dict) or set(message) != {"role", "content"}
                    or not all(isinstance(value, str) for value in message.values())):
                raise TypeError(_('messages[{index}] should be a dict {{"role": str, "content": '
                                  'str}}, got {message}').format(index=index,
                                                                 message=repr(message)[:150]))
            if message["role"] not in CHAT_ROLES:
                # The template renders any role without complaint, and the model has never
                # seen a turn marked with a role it was not tuned on.
                raise ValueError(_(
                    "messages[{index}]['role'] should be one of {CHAT_ROLES}, got {message!r}"
                ).format(index=index, CHAT_ROLES=CHAT_ROLES, message=message['role']))
        return self._template.render(messages=messages,
                                     add_generation_prompt=add_generation_prompt)


# The roles the Instruct model was tuned on (its chat template's turns).
CHAT_ROLES = ("system", "user", "assistant")


def _text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(_("text should be a str, got {kind}").format(kind=type(text).__name__))
    return text
