"""What every tokenizer of the course offers, whatever it cuts text into.

Lesson 12's :class:`~course_utils.data.corpus.CharTokenizer` (characters), lesson 10's
WordPiece ``Tokenizer`` (``course_utils.models.minilm``) and lesson 14's byte-level BPE
``SmolLM2Tokenizer`` all follow one protocol, so a view or an experiment can take any of them:
``vocab_size``, ``encode(text) -> ids``, ``decode(ids) -> text`` and ``tokens(text)``, the
pieces ``encode`` numbers, as strings.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class TextTokenizer(Protocol):
    """Text <-> token ids: ``vocab_size``, ``encode``, ``decode`` and ``tokens``.

    Used in lessons 10, 12 and 14.
    """

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids) -> str: ...

    def tokens(self, text: str) -> list[str]: ...
